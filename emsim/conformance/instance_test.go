package conformance

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	block "github.com/scaleway/scaleway-sdk-go/api/block/v1"
	instance "github.com/scaleway/scaleway-sdk-go/api/instance/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

func waitInstance(t *testing.T, api *instance.API, id string) *instance.Server {
	t.Helper()
	timeout, interval := 20*time.Second, 10*time.Millisecond
	server, err := api.WaitForServer(&instance.WaitForServerRequest{
		ServerID: id, Timeout: &timeout, RetryInterval: &interval,
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", id, err)
	}
	return server
}

func talosImage(t *testing.T, api *instance.API) string {
	t.Helper()
	images, err := api.ListImages(&instance.ListImagesRequest{
		Name: scw.StringPtr("talos-v1.11.5-amd64"),
	}, scw.WithAllPages())
	if err != nil {
		t.Fatal(err)
	}
	if len(images.Images) != 1 {
		t.Fatalf("talos image: got %d", len(images.Images))
	}
	return images.Images[0].ID
}

// The catalog through the SDK's pager, which reads the total from the
// X-Total-Count header (the bodies have none).
func TestInstanceCatalogThroughTheSDK(t *testing.T) {
	base := startEmsim(t)
	api := instance.NewAPI(newClient(t, base, secretKey))

	types, err := api.ListServersTypes(&instance.ListServersTypesRequest{
		PerPage: scw.Uint32Ptr(5),
	}, scw.WithAllPages())
	if err != nil {
		t.Fatal(err)
	}
	if len(types.Servers) != 12 || types.TotalCount != 12 {
		t.Fatalf("all pages: %d types, total %d", len(types.Servers), types.TotalCount)
	}
	pop2 := types.Servers["POP2-2C-8G"]
	if pop2 == nil || pop2.HourlyPrice != 0.0735 || pop2.Ncpus != 2 || pop2.Arch != instance.ArchX86_64 {
		t.Fatalf("POP2-2C-8G: %+v", pop2)
	}
	h100 := types.Servers["H100-1-80G"]
	if h100.Gpu == nil || *h100.Gpu != 1 || h100.GpuInfo == nil || h100.GpuInfo.GpuName != "H100" {
		t.Fatalf("H100-1-80G GPU: %+v", h100)
	}
	if !types.Servers["GP1-XS"].EndOfService {
		t.Fatal("GP1-XS is end of service")
	}
	if types.Servers["BASIC2-A2C-4G"].Arch != instance.ArchArm64 {
		t.Fatal("BASIC2-A2C-4G is arm64")
	}
	if bw := types.Servers["L4-1-24G"].Network.SumInternetBandwidth; bw == nil || *bw != 2_500_000_000 {
		t.Fatalf("L4 bandwidth: %v", bw)
	}

	par3, err := api.ListServersTypes(&instance.ListServersTypesRequest{Zone: scw.ZoneFrPar3}, scw.WithAllPages())
	if err != nil {
		t.Fatal(err)
	}
	if p := par3.Servers["POP2-2C-8G"].HourlyPrice; p < 0.1102 || p > 0.1103 {
		t.Fatalf("fr-par-3 price %v, want 1.5x", p)
	}

	avail, err := api.GetServerTypesAvailability(&instance.GetServerTypesAvailabilityRequest{
		PerPage: scw.Uint32Ptr(5),
	}, scw.WithAllPages())
	if err != nil {
		t.Fatal(err)
	}
	if len(avail.Servers) != 12 {
		t.Fatalf("availability pages: %d", len(avail.Servers))
	}
	if a := avail.Servers["H100-1-80G"].Availability; a != instance.ServerTypesAvailabilityShortage {
		t.Fatalf("H100-1-80G: %s", a)
	}
}

// What the provider does: create, set user data, poweron, list by tag,
// read back, terminate, then delete the detached SBS volume.
func TestInstanceLifecycleThroughTheSDK(t *testing.T) {
	base := startEmsim(t)
	client := newClient(t, base, secretKey)
	api := instance.NewAPI(client)
	blockAPI := block.NewAPI(client)
	image := talosImage(t, api)

	size := scw.Size(20_000_000_000)
	var ids []string
	for _, name := range []string{"node-a", "node-b", "node-c"} {
		created, err := api.CreateServer(&instance.CreateServerRequest{
			Name:           name,
			CommercialType: "POP2-2C-8G",
			Image:          &image,
			Volumes: map[string]*instance.VolumeServerTemplate{
				"0": {Size: &size, VolumeType: instance.VolumeVolumeTypeSbsVolume},
			},
			Tags: []string{"karpenter.scaleway.com/nodeclaim=" + name, "owner=conformance"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if created.Server.State != instance.ServerStateStopped {
			t.Fatalf("new server %s", created.Server.State)
		}
		if !slices.Contains(created.Server.AllowedActions, instance.ServerActionPoweron) {
			t.Fatalf("allowed actions %v", created.Server.AllowedActions)
		}
		ids = append(ids, created.Server.ID)
	}
	id := ids[0]

	config := []byte("version: v1alpha1\nmachine:\n  token: conformance\n")
	if err := api.SetServerUserData(&instance.SetServerUserDataRequest{
		ServerID: id, Key: "cloud-init", Content: bytes.NewReader(config),
	}); err != nil {
		t.Fatal(err)
	}
	got, err := api.GetServerUserData(&instance.GetServerUserDataRequest{ServerID: id, Key: "cloud-init"})
	if err != nil {
		t.Fatal(err)
	}
	if read, _ := io.ReadAll(got); !bytes.Equal(read, config) {
		t.Fatalf("user data %q", read)
	}
	all, err := api.GetAllServerUserData(&instance.GetAllServerUserDataRequest{ServerID: id})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.UserData) != 1 || all.UserData["cloud-init"] == nil {
		t.Fatalf("all user data: %v", all.UserData)
	}

	if _, err := api.ServerAction(&instance.ServerActionRequest{
		ServerID: id, Action: instance.ServerActionPoweron,
	}); err != nil {
		t.Fatal(err)
	}
	running := waitInstance(t, api, id)
	if running.State != instance.ServerStateRunning || running.PublicIP == nil || !running.PublicIP.Dynamic {
		t.Fatalf("after poweron: %s, public ip %+v", running.State, running.PublicIP)
	}

	listed, err := api.ListServers(&instance.ListServersRequest{
		Tags:    []string{"owner=conformance", "karpenter.scaleway.com/nodeclaim=node-b"},
		PerPage: scw.Uint32Ptr(1),
	}, scw.WithAllPages())
	if err != nil {
		t.Fatal(err)
	}
	if len(listed.Servers) != 1 || listed.Servers[0].ID != ids[1] {
		t.Fatalf("tag filter: %d servers", len(listed.Servers))
	}
	every, err := api.ListServers(&instance.ListServersRequest{PerPage: scw.Uint32Ptr(1)}, scw.WithAllPages())
	if err != nil {
		t.Fatal(err)
	}
	if len(every.Servers) != 3 || every.TotalCount != 3 {
		t.Fatalf("all pages of one: %d servers, total %d", len(every.Servers), every.TotalCount)
	}

	tags := []string{"updated"}
	updated, err := api.UpdateServer(&instance.UpdateServerRequest{ServerID: ids[2], Tags: &tags})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(updated.Server.Tags, tags) {
		t.Fatalf("tags %v", updated.Server.Tags)
	}

	if err := api.DeleteServerUserData(&instance.DeleteServerUserDataRequest{ServerID: id, Key: "cloud-init"}); err != nil {
		t.Fatal(err)
	}
	volumeID := running.Volumes["0"].ID
	listVolumesAndPatchTags(t, blockAPI, volumeID)
	if _, err := api.ServerAction(&instance.ServerActionRequest{
		ServerID: id, Action: instance.ServerActionTerminate,
	}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := api.GetServer(&instance.GetServerRequest{ServerID: id})
		var notFound *scw.ResourceNotFoundError
		if errors.As(err, &notFound) {
			if notFound.Resource != "instance_server" {
				t.Fatalf("not found resource %q", notFound.Resource)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("terminated server still there")
		}
		time.Sleep(10 * time.Millisecond)
	}

	volume, err := blockAPI.GetVolume(&block.GetVolumeRequest{VolumeID: volumeID})
	if err != nil {
		t.Fatal(err)
	}
	if volume.Status != block.VolumeStatusAvailable || len(volume.References) != 0 || volume.Size != size {
		t.Fatalf("detached volume: %s, %d references, %d bytes", volume.Status, len(volume.References), volume.Size)
	}
	if err := blockAPI.DeleteVolume(&block.DeleteVolumeRequest{VolumeID: volumeID}); err != nil {
		t.Fatal(err)
	}
	_, err = blockAPI.GetVolume(&block.GetVolumeRequest{VolumeID: volumeID})
	var notFound *scw.ResourceNotFoundError
	if !errors.As(err, &notFound) {
		t.Fatalf("deleted volume: %v", err)
	}

	ip, err := api.CreateIP(&instance.CreateIPRequest{Type: instance.IPTypeRoutedIPv4})
	if err != nil {
		t.Fatal(err)
	}
	if err := api.DeleteIP(&instance.DeleteIPRequest{IP: ip.IP.ID}); err != nil {
		t.Fatal(err)
	}
}

// The SDK's typed errors from emsim's Instance answers.
func TestInstanceTypedErrors(t *testing.T) {
	base := startEmsim(t)
	api := instance.NewAPI(newClient(t, base, secretKey))
	image := talosImage(t, api)

	_, err := api.CreateServer(&instance.CreateServerRequest{
		CommercialType: "POP2-2C-8G", Image: scw.StringPtr(unknownID),
	})
	var notFound *scw.ResourceNotFoundError
	if !errors.As(err, &notFound) || notFound.Resource != "instance_image" {
		t.Fatalf("unknown image: %v", err)
	}

	created, err := api.CreateServer(&instance.CreateServerRequest{CommercialType: "H100-1-80G", Image: &image})
	if err != nil {
		t.Fatal(err)
	}
	_, err = api.CreateServer(&instance.CreateServerRequest{CommercialType: "H100-1-80G", Image: &image})
	var quota *scw.QuotasExceededError
	if !errors.As(err, &quota) {
		t.Fatalf("over quota: %T %v", err, err)
	}

	_, err = api.ServerAction(&instance.ServerActionRequest{
		ServerID: created.Server.ID, Action: instance.ServerActionTerminate,
	})
	// The SDK has no error type for a plain invalid_request_error: a
	// *scw.ResponseError carries its type and message.
	var invalid *scw.ResponseError
	if !errors.As(err, &invalid) || invalid.Type != "invalid_request_error" ||
		invalid.Message != "server should be running" || invalid.StatusCode != 400 {
		t.Fatalf("terminate a stopped server: %T %v", err, err)
	}

	// H100-1-80G is in shortage in fr-par-2: the poweron is accepted and the
	// server falls back to stopped.
	if _, err := api.ServerAction(&instance.ServerActionRequest{
		ServerID: created.Server.ID, Action: instance.ServerActionPoweron,
	}); err != nil {
		t.Fatal(err)
	}
	if s := waitInstance(t, api, created.Server.ID); s.State != instance.ServerStateStopped {
		t.Fatalf("out of stock: %s", s.State)
	}

	denied := instance.NewAPI(newClient(t, base, unknownID))
	_, err = denied.ListServers(&instance.ListServersRequest{})
	var auth *scw.DeniedAuthenticationError
	if !errors.As(err, &auth) {
		t.Fatalf("unknown key: %T %v", err, err)
	}
}

// What Create and the orphan sweeper do with SBS volumes: tag a root with
// the ownership tags (PATCH), then list by tag through the SDK's pager,
// which reads the body's total_count. The Block API's tags filter matches
// a volume carrying one or more of the tags.
func listVolumesAndPatchTags(t *testing.T, api *block.API, rootID string) {
	t.Helper()
	owned := []string{"karpenter.scaleway.com/cluster=conformance", "karpenter.sh/nodeclaim=node-a"}
	patched, err := api.UpdateVolume(&block.UpdateVolumeRequest{VolumeID: rootID, Tags: &owned})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(patched.Tags, owned) || patched.Status != block.VolumeStatusInUse {
		t.Fatalf("patched volume: tags %v, status %s", patched.Tags, patched.Status)
	}
	if len(patched.References) != 1 || patched.References[0].ProductResourceType != "instance_server" {
		t.Fatalf("patched volume references: %+v", patched.References)
	}
	name := "node-a-root"
	renamed, err := api.UpdateVolume(&block.UpdateVolumeRequest{VolumeID: rootID, Name: &name})
	if err != nil {
		t.Fatal(err)
	}
	if renamed.Name != name || !slices.Equal(renamed.Tags, owned) {
		t.Fatalf("renamed volume: %q, tags %v", renamed.Name, renamed.Tags)
	}

	every, err := api.ListVolumes(&block.ListVolumesRequest{PageSize: scw.Uint32Ptr(1)}, scw.WithAllPages())
	if err != nil {
		t.Fatal(err)
	}
	if len(every.Volumes) != 3 || every.TotalCount != 3 {
		t.Fatalf("all pages of one: %d volumes, total %d", len(every.Volumes), every.TotalCount)
	}
	tagged, err := api.ListVolumes(&block.ListVolumesRequest{
		Tags:      owned[:1],
		ProjectID: scw.StringPtr(projectID),
		PageSize:  scw.Uint32Ptr(1),
	}, scw.WithAllPages())
	if err != nil {
		t.Fatal(err)
	}
	if len(tagged.Volumes) != 1 || tagged.Volumes[0].ID != rootID || tagged.TotalCount != 1 {
		t.Fatalf("tag filter: %d volumes, total %d", len(tagged.Volumes), tagged.TotalCount)
	}
	anyOf, err := api.ListVolumes(&block.ListVolumesRequest{
		Tags: []string{"karpenter.sh/nodeclaim=node-a", "no-such-tag"},
	}, scw.WithAllPages())
	if err != nil {
		t.Fatal(err)
	}
	if len(anyOf.Volumes) != 1 {
		t.Fatalf("one or more matching tags: %d volumes", len(anyOf.Volumes))
	}
	other, err := api.ListVolumes(&block.ListVolumesRequest{ProjectID: scw.StringPtr(unknownID)}, scw.WithAllPages())
	if err != nil {
		t.Fatal(err)
	}
	if len(other.Volumes) != 0 {
		t.Fatalf("another project: %d volumes", len(other.Volumes))
	}
}
