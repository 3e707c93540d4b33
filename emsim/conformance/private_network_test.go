package conformance

import (
	"errors"
	"net"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	baremetalv3 "github.com/scaleway/scaleway-sdk-go/api/baremetal/v3"
	"github.com/scaleway/scaleway-sdk-go/api/instance/v1"
	ipam "github.com/scaleway/scaleway-sdk-go/api/ipam/v1"
	vpc "github.com/scaleway/scaleway-sdk-go/api/vpc/v2"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

const region = scw.RegionFrPar

// seedNetworks adds two Private Networks through emsim's admin API (the
// public API never creates them) and returns their ids by name.
func seedNetworks(t *testing.T, base string, api *vpc.API) map[string]string {
	t.Helper()
	admin(t, "POST", base+"/_emsim/private-networks",
		`{"name": "prod", "region": "fr-par", "subnets": ["127.80.0.0/24"], "tags": ["k8s"]}`)
	admin(t, "POST", base+"/_emsim/private-networks",
		`{"name": "dev", "region": "fr-par", "subnets": ["127.81.0.0/24"], "tags": ["dev"]}`)
	list, err := api.ListPrivateNetworks(&vpc.ListPrivateNetworksRequest{
		Region: region, PageSize: scw.Uint32Ptr(1),
	}, scw.WithAllPages())
	if err != nil {
		t.Fatal(err)
	}
	if list.TotalCount != 2 || len(list.PrivateNetworks) != 2 {
		t.Fatalf("every page: %d of %d", len(list.PrivateNetworks), list.TotalCount)
	}
	ids := map[string]string{}
	for _, pn := range list.PrivateNetworks {
		ids[pn.Name] = pn.ID
	}
	return ids
}

func TestPrivateNetworksThroughTheSDK(t *testing.T) {
	base := startEmsim(t)
	client := newClient(t, base, secretKey)
	vpcAPI := vpc.NewAPI(client)
	ids := seedNetworks(t, base, vpcAPI)

	tagged, err := vpcAPI.ListPrivateNetworks(&vpc.ListPrivateNetworksRequest{
		Region: region, Tags: []string{"k8s"}, ProjectID: scw.StringPtr(projectID),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(tagged.PrivateNetworks) != 1 || tagged.PrivateNetworks[0].ID != ids["prod"] {
		t.Fatalf("by tag: %+v", tagged.PrivateNetworks)
	}
	byID, err := vpcAPI.ListPrivateNetworks(&vpc.ListPrivateNetworksRequest{
		Region: region, PrivateNetworkIDs: []string{ids["dev"]}, Name: scw.StringPtr("de"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if byID.TotalCount != 1 || byID.PrivateNetworks[0].Name != "dev" {
		t.Fatalf("by id and name: %+v", byID.PrivateNetworks)
	}
	prod, err := vpcAPI.GetPrivateNetwork(&vpc.GetPrivateNetworkRequest{Region: region, PrivateNetworkID: ids["prod"]})
	if err != nil {
		t.Fatal(err)
	}
	if len(prod.Subnets) != 1 || prod.Subnets[0].Subnet.String() != "127.80.0.0/24" || prod.VpcID == "" {
		t.Fatalf("network %+v", prod)
	}
	_, err = vpcAPI.GetPrivateNetwork(&vpc.GetPrivateNetworkRequest{Region: region, PrivateNetworkID: unknownID})
	var notFound *scw.ResourceNotFoundError
	if !errors.As(err, &notFound) {
		t.Fatalf("unknown network: %T %v", err, err)
	}
}

func TestElasticMetalPrivateNetworksThroughTheSDK(t *testing.T) {
	base := startEmsim(t)
	client := newClient(t, base, secretKey)
	ids := seedNetworks(t, base, vpc.NewAPI(client))
	api := baremetal.NewAPI(client)
	pnAPI := baremetalv3.NewPrivateNetworkAPI(client)
	ipamAPI := ipam.NewAPI(client)

	offer := hourlyOffer(t, api, "EM-A115X-SSD")
	var option *baremetal.OfferOptionOffer
	for _, o := range offer.Options {
		if o.PrivateNetwork != nil {
			option = o
		}
	}
	if option == nil || option.Price == nil || option.Enabled || !option.Manageable ||
		option.PrivateNetwork.BandwidthInBps == 0 {
		t.Fatalf("the offer's private_network option: %+v", offer.Options)
	}
	created, err := api.CreateServer(&baremetal.CreateServerRequest{OfferID: offer.ID, Name: "pn-node"})
	if err != nil {
		t.Fatal(err)
	}
	server := wait(t, api, created.ID)

	// Without the option first, the attachment is refused.
	_, err = pnAPI.AddServerPrivateNetwork(&baremetalv3.PrivateNetworkAPIAddServerPrivateNetworkRequest{
		ServerID: server.ID, PrivateNetworkID: ids["prod"],
	})
	var precondition *scw.PreconditionFailedError
	if !errors.As(err, &precondition) {
		t.Fatalf("attach without the option: %T %v", err, err)
	}
	server, err = api.AddOptionServer(&baremetal.AddOptionServerRequest{ServerID: server.ID, OptionID: option.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(server.Options) != 1 || server.Options[0].PrivateNetwork == nil ||
		server.Options[0].Status != baremetal.ServerOptionOptionStatusOptionStatusEnable {
		t.Fatalf("server options %+v", server.Options)
	}
	_, err = api.AddOptionServer(&baremetal.AddOptionServerRequest{ServerID: server.ID, OptionID: option.ID})
	var responseErr *scw.ResponseError
	if !errors.As(err, &responseErr) || responseErr.StatusCode != 400 {
		t.Fatalf("the option twice: %T %v", err, err)
	}
	_, err = api.AddOptionServer(&baremetal.AddOptionServerRequest{ServerID: server.ID, OptionID: unknownID})
	var notFound *scw.ResourceNotFoundError
	if !errors.As(err, &notFound) {
		t.Fatalf("unknown option: %T %v", err, err)
	}

	// A booked address for dev, an allocated one for prod.
	booked, err := ipamAPI.BookIP(&ipam.BookIPRequest{
		Region: region, ProjectID: projectID, Address: ipPtr("127.81.0.40"),
		Source: &ipam.Source{PrivateNetworkID: scw.StringPtr(ids["dev"])}, Tags: []string{"node"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if booked.Address.String() != "127.81.0.40/24" || booked.Resource != nil || booked.Source.SubnetID == nil {
		t.Fatalf("booked %+v", booked)
	}
	spn, err := pnAPI.AddServerPrivateNetwork(&baremetalv3.PrivateNetworkAPIAddServerPrivateNetworkRequest{
		ServerID: server.ID, PrivateNetworkID: ids["prod"],
	})
	if err != nil {
		t.Fatal(err)
	}
	if spn.Status != baremetalv3.ServerPrivateNetworkStatusAttaching || spn.Vlan != nil || len(spn.IpamIPIDs) != 1 {
		t.Fatalf("attachment %+v", spn)
	}
	if _, err := pnAPI.AddServerPrivateNetwork(&baremetalv3.PrivateNetworkAPIAddServerPrivateNetworkRequest{
		ServerID: server.ID, PrivateNetworkID: ids["dev"], IpamIPIDs: []string{booked.ID},
	}); err != nil {
		t.Fatal(err)
	}
	timeout, interval := 20*time.Second, 20*time.Millisecond
	settled, err := pnAPI.WaitForServerPrivateNetworks(&baremetalv3.WaitForServerPrivateNetworksRequest{
		ServerID: server.ID, Timeout: &timeout, RetryInterval: &interval,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(settled) != 2 {
		t.Fatalf("settled %+v", settled)
	}
	for _, s := range settled {
		if s.Status != baremetalv3.ServerPrivateNetworkStatusAttached || s.Vlan == nil {
			t.Fatalf("settled %+v", s)
		}
	}
	if *settled[0].Vlan == *settled[1].Vlan {
		t.Fatalf("one VLAN for two networks: %d", *settled[0].Vlan)
	}
	all, err := pnAPI.ListServerPrivateNetworks(&baremetalv3.PrivateNetworkAPIListServerPrivateNetworksRequest{
		PageSize: scw.Uint32Ptr(1), OrderBy: baremetalv3.ListServerPrivateNetworksRequestOrderByCreatedAtDesc,
	}, scw.WithAllPages())
	if err != nil {
		t.Fatal(err)
	}
	if all.TotalCount != 2 || len(all.ServerPrivateNetworks) != 2 {
		t.Fatalf("every page: %d of %d", len(all.ServerPrivateNetworks), all.TotalCount)
	}

	ips, err := ipamAPI.ListIPs(&ipam.ListIPsRequest{
		Region: region, ResourceID: scw.StringPtr(server.ID), ResourceType: ipam.ResourceTypeBaremetalPrivateNic,
		PrivateNetworkID: scw.StringPtr(ids["prod"]),
	})
	if err != nil {
		t.Fatal(err)
	}
	if ips.TotalCount != 1 || ips.IPs[0].Address.String() != "127.80.0.2/24" ||
		ips.IPs[0].Resource.MacAddress == nil || ips.IPs[0].ID != spn.IpamIPIDs[0] {
		t.Fatalf("the attachment's address %+v", ips.IPs)
	}
	err = ipamAPI.ReleaseIP(&ipam.ReleaseIPRequest{Region: region, IPID: booked.ID})
	if !errors.As(err, &precondition) || precondition.Precondition != "resource_still_in_use" {
		t.Fatalf("release while attached: %T %v", err, err)
	}

	// PUT keeps dev only; then delete dev; both detach until gone.
	set, err := pnAPI.SetServerPrivateNetworks(&baremetalv3.PrivateNetworkAPISetServerPrivateNetworksRequest{
		ServerID: server.ID, PerPrivateNetworkIpamIPIDs: map[string]*[]string{ids["dev"]: {booked.ID}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(set.ServerPrivateNetworks) != 1 || set.ServerPrivateNetworks[0].PrivateNetworkID != ids["dev"] {
		t.Fatalf("set %+v", set.ServerPrivateNetworks)
	}
	if err := pnAPI.DeleteServerPrivateNetwork(&baremetalv3.PrivateNetworkAPIDeleteServerPrivateNetworkRequest{
		ServerID: server.ID, PrivateNetworkID: ids["dev"],
	}); err != nil {
		t.Fatal(err)
	}
	left, err := pnAPI.WaitForServerPrivateNetworks(&baremetalv3.WaitForServerPrivateNetworksRequest{
		ServerID: server.ID, Timeout: &timeout, RetryInterval: &interval,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("after detaching: %+v", left)
	}
	_, err = ipamAPI.GetIP(&ipam.GetIPRequest{Region: region, IPID: spn.IpamIPIDs[0]})
	if !errors.As(err, &notFound) {
		t.Fatalf("the allocated address after detaching: %T %v", err, err)
	}
	kept, err := ipamAPI.GetIP(&ipam.GetIPRequest{Region: region, IPID: booked.ID})
	if err != nil || kept.Resource != nil {
		t.Fatalf("the booked address after detaching: %+v %v", kept, err)
	}
	if err := ipamAPI.ReleaseIP(&ipam.ReleaseIPRequest{Region: region, IPID: booked.ID}); err != nil {
		t.Fatal(err)
	}

	// A fault: the attachment ends in error, which the waiter returns.
	admin(t, "POST", base+"/_emsim/faults", `{"kind": "private_network_attach_error", "count": 1}`)
	if _, err := pnAPI.AddServerPrivateNetwork(&baremetalv3.PrivateNetworkAPIAddServerPrivateNetworkRequest{
		ServerID: server.ID, PrivateNetworkID: ids["prod"],
	}); err != nil {
		t.Fatal(err)
	}
	failed, err := pnAPI.WaitForServerPrivateNetworks(&baremetalv3.WaitForServerPrivateNetworksRequest{
		ServerID: server.ID, Timeout: &timeout, RetryInterval: &interval,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 1 || failed[0].Status != baremetalv3.ServerPrivateNetworkStatusError {
		t.Fatalf("faulted attachment %+v", failed)
	}
}

func TestPrivateNICsThroughTheSDK(t *testing.T) {
	base := startEmsim(t)
	client := newClient(t, base, secretKey)
	ids := seedNetworks(t, base, vpc.NewAPI(client))
	api := instance.NewAPI(client)
	ipamAPI := ipam.NewAPI(client)
	image := talosImage(t, api)
	created, err := api.CreateServer(&instance.CreateServerRequest{
		Name: "vm-pn", CommercialType: "POP2-2C-8G", Image: &image,
	})
	if err != nil {
		t.Fatal(err)
	}
	vm := created.Server.ID
	var nics []*instance.PrivateNIC
	for _, name := range []string{"prod", "dev"} {
		nic, err := api.CreatePrivateNIC(&instance.CreatePrivateNICRequest{
			ServerID: vm, PrivateNetworkID: ids[name], Tags: []string{name},
		})
		if err != nil {
			t.Fatal(err)
		}
		if nic.PrivateNic.State != instance.PrivateNICStateSyncing || nic.PrivateNic.MacAddress == "" ||
			len(nic.PrivateNic.IpamIPIDs) != 1 || nic.PrivateNic.CreationDate == nil {
			t.Fatalf("new NIC %+v", nic.PrivateNic)
		}
		nics = append(nics, nic.PrivateNic)
	}
	list, err := api.ListPrivateNICs(&instance.ListPrivateNICsRequest{
		ServerID: vm, PerPage: scw.Uint32Ptr(1),
	}, scw.WithAllPages())
	if err != nil {
		t.Fatal(err)
	}
	if list.TotalCount != 2 || len(list.PrivateNics) != 2 {
		t.Fatalf("every page: %d of %d", len(list.PrivateNics), list.TotalCount)
	}
	tagged, err := api.ListPrivateNICs(&instance.ListPrivateNICsRequest{ServerID: vm, Tags: []string{"dev"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(tagged.PrivateNics) != 1 || tagged.PrivateNics[0].ID != nics[1].ID {
		t.Fatalf("by tag %+v", tagged.PrivateNics)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := api.GetPrivateNIC(&instance.GetPrivateNICRequest{ServerID: vm, PrivateNicID: nics[0].ID})
		if err != nil {
			t.Fatal(err)
		}
		if got.PrivateNic.State == instance.PrivateNICStateAvailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("NIC still %s", got.PrivateNic.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
	server, err := api.GetServer(&instance.GetServerRequest{ServerID: vm})
	if err != nil {
		t.Fatal(err)
	}
	if len(server.Server.PrivateNics) != 2 || server.Server.PrivateNics[0].ID != nics[0].ID {
		t.Fatalf("the server's private_nics %+v", server.Server.PrivateNics)
	}
	ips, err := ipamAPI.ListIPs(&ipam.ListIPsRequest{
		Region: region, ResourceType: ipam.ResourceTypeInstancePrivateNic, ResourceID: scw.StringPtr(nics[0].ID),
	})
	if err != nil {
		t.Fatal(err)
	}
	if ips.TotalCount != 1 || ips.IPs[0].Address.String() != "127.80.0.2/24" ||
		*ips.IPs[0].Resource.MacAddress != nics[0].MacAddress {
		t.Fatalf("the NIC's address %+v", ips.IPs)
	}
	if err := api.DeletePrivateNIC(&instance.DeletePrivateNICRequest{ServerID: vm, PrivateNicID: nics[0].ID}); err != nil {
		t.Fatal(err)
	}
	_, err = api.GetPrivateNIC(&instance.GetPrivateNICRequest{ServerID: vm, PrivateNicID: nics[0].ID})
	var notFound *scw.ResourceNotFoundError
	if !errors.As(err, &notFound) {
		t.Fatalf("deleted NIC: %T %v", err, err)
	}
	_, err = api.CreatePrivateNIC(&instance.CreatePrivateNICRequest{ServerID: vm, PrivateNetworkID: unknownID})
	if !errors.As(err, &notFound) {
		t.Fatalf("unknown network: %T %v", err, err)
	}
}

func ipPtr(s string) *net.IP {
	ip := net.ParseIP(s)
	return &ip
}
