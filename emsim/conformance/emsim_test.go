// Package conformance drives emsim with the official Scaleway Go SDK, an
// independent client: if emsim's paths, JSON or error bodies drift from the
// real API's, the SDK's typed decoding fails here.
//
// EMSIM_BIN names the emsim binary (default: ../../target/debug/emsim).
package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	iam "github.com/scaleway/scaleway-sdk-go/api/iam/v1alpha1"
	"github.com/scaleway/scaleway-sdk-go/scw"
)

const (
	accessKey = "SCWXXXXXXXXXXXXXXXXX"
	secretKey = "11111111-1111-4111-8111-111111111111"
	projectID = "22222222-2222-4222-8222-222222222222"
	zone      = scw.ZoneFrPar2
	// A well-formed id that names nothing.
	unknownID = "6a0bd2f6-5bb7-4a62-8f6b-6a5b4c5e2b11"
	publicKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICJEoOOgQBLJPs4g/XcPTKT82NywNPpxeuA20FlOPlpO conformance"
)

// startEmsim runs the binary on a free loopback port, 1000x faster than real
// time, and returns its base URL; the process dies with the test.
func startEmsim(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("EMSIM_BIN")
	if bin == "" {
		bin = filepath.Join("..", "..", "target", "debug", "emsim")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("emsim binary %s: %v (build it with `cargo build -p emsim --bins` or set EMSIM_BIN)", bin, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--listen", addr, "--time-scale", "0.001", "--seed", "7")
	cmd.Stdout = &logs
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("emsim output:\n%s", logs.String())
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/_emsim/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("emsim not healthy at %s: %v", base, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func newClient(t *testing.T, base, secret string) *scw.Client {
	t.Helper()
	client, err := scw.NewClient(
		scw.WithAPIURL(base),
		scw.WithAuth(accessKey, secret),
		scw.WithDefaultZone(zone),
		scw.WithDefaultProjectID(projectID),
	)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func admin(t *testing.T, method, url, body string) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %s", method, url, resp.Status)
	}
}

func hourlyOffer(t *testing.T, api *baremetal.API, name string) *baremetal.Offer {
	t.Helper()
	offers, err := api.ListOffers(&baremetal.ListOffersRequest{Name: scw.StringPtr(name)}, scw.WithAllPages())
	if err != nil {
		t.Fatal(err)
	}
	if len(offers.Offers) != 1 {
		t.Fatalf("offer %s: got %d offers", name, len(offers.Offers))
	}
	return offers.Offers[0]
}

func wait(t *testing.T, api *baremetal.API, id string) *baremetal.Server {
	t.Helper()
	timeout, interval := 20*time.Second, 20*time.Millisecond
	server, err := api.WaitForServer(&baremetal.WaitForServerRequest{
		ServerID: id, Timeout: &timeout, RetryInterval: &interval,
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", id, err)
	}
	return server
}

// The lifecycle the issue names: create, wait, list all pages with a tag
// filter, reboot into rescue, update tags, delete.
func TestLifecycleThroughTheSDK(t *testing.T) {
	base := startEmsim(t)
	client := newClient(t, base, secretKey)
	api := baremetal.NewAPI(client)
	iamAPI := iam.NewAPI(client)

	offer := hourlyOffer(t, api, "EM-A115X-SSD")
	if offer.PricePerHour == nil || offer.PricePerHour.CurrencyCode != "EUR" || offer.MonthlyOfferID == nil {
		t.Fatalf("offer money or monthly twin not decoded: %+v", offer)
	}

	var ids []string
	for i := range 3 {
		server, err := api.CreateServer(&baremetal.CreateServerRequest{
			OfferID: offer.ID,
			Name:    fmt.Sprintf("conformance-%d", i),
			Tags:    []string{"conformance", fmt.Sprintf("index=%d", i)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if server.Status != baremetal.ServerStatusDelivering {
			t.Fatalf("new server status %s", server.Status)
		}
		ids = append(ids, server.ID)
	}
	if _, err := api.CreateServer(&baremetal.CreateServerRequest{OfferID: offer.ID, Name: "other", Tags: []string{"other"}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		ready := wait(t, api, id)
		if ready.Status != baremetal.ServerStatusReady || len(ready.IPs) == 0 {
			t.Fatalf("server %s after wait: %s with %d IPs", id, ready.Status, len(ready.IPs))
		}
	}

	// One server per page, so the SDK's all-pages helper has to walk three.
	listed, err := api.ListServers(&baremetal.ListServersRequest{
		Tags:     []string{"conformance"},
		PageSize: scw.Uint32Ptr(1),
	}, scw.WithAllPages())
	if err != nil {
		t.Fatal(err)
	}
	if listed.TotalCount != 3 || len(listed.Servers) != 3 {
		t.Fatalf("tag filter over all pages: total %d, got %d", listed.TotalCount, len(listed.Servers))
	}
	for _, s := range listed.Servers {
		if !slices.Contains(s.Tags, "conformance") {
			t.Fatalf("server %s without the tag listed: %v", s.ID, s.Tags)
		}
	}

	key, err := iamAPI.CreateSSHKey(&iam.CreateSSHKeyRequest{Name: "conformance", PublicKey: publicKey, ProjectID: projectID})
	if err != nil {
		t.Fatal(err)
	}
	target := ids[0]
	rebooting, err := api.RebootServer(&baremetal.RebootServerRequest{
		ServerID: target, BootType: baremetal.ServerBootTypeRescue, SSHKeyIDs: []string{key.ID},
	})
	if err != nil {
		t.Fatal(err)
	}
	if rebooting.Status != baremetal.ServerStatusStopping {
		t.Fatalf("reboot answered status %s", rebooting.Status)
	}
	rescued := wait(t, api, target)
	if rescued.BootType != baremetal.ServerBootTypeRescue || rescued.RescueServer == nil || rescued.RescueServer.Password == "" {
		t.Fatalf("after rescue reboot: boot_type %s, rescue_server %+v", rescued.BootType, rescued.RescueServer)
	}

	// A second power call while the first runs is a typed transient-state error.
	if _, err := api.RebootServer(&baremetal.RebootServerRequest{ServerID: ids[1], BootType: baremetal.ServerBootTypeNormal}); err != nil {
		t.Fatal(err)
	}
	_, err = api.StopServer(&baremetal.StopServerRequest{ServerID: ids[1]})
	var transient *scw.TransientStateError
	if !errors.As(err, &transient) || transient.CurrentState != "stopping" {
		t.Fatalf("stop during reboot: want *scw.TransientStateError, got %T %v", err, err)
	}

	tags := []string{"conformance", "updated=yes"}
	updated, err := api.UpdateServer(&baremetal.UpdateServerRequest{ServerID: target, Tags: &tags})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(updated.Tags, tags) {
		t.Fatalf("tags after update: %v", updated.Tags)
	}
	byNewTag, err := api.ListServers(&baremetal.ListServersRequest{Tags: []string{"updated=yes"}}, scw.WithAllPages())
	if err != nil || len(byNewTag.Servers) != 1 || byNewTag.Servers[0].ID != target {
		t.Fatalf("list by the new tag: %v %+v", err, byNewTag)
	}

	deleting, err := api.DeleteServer(&baremetal.DeleteServerRequest{ServerID: target})
	if err != nil {
		t.Fatal(err)
	}
	if deleting.Status != baremetal.ServerStatusDeleting {
		t.Fatalf("delete answered status %s", deleting.Status)
	}
	// The real API answers a gone server with an untyped 404 {"message":"Not Found"}.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := api.GetServer(&baremetal.GetServerRequest{ServerID: target})
		var resp *scw.ResponseError
		if errors.As(err, &resp) && resp.StatusCode == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server still there after delete: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The refusals a client must handle, decoded into the SDK's error types.
func TestTypedErrors(t *testing.T) {
	base := startEmsim(t)
	api := baremetal.NewAPI(newClient(t, base, secretKey))
	iamAPI := iam.NewAPI(newClient(t, base, secretKey))

	var notFound *scw.ResourceNotFoundError
	_, err := api.GetOffer(&baremetal.GetOfferRequest{OfferID: unknownID})
	if !errors.As(err, &notFound) || notFound.Resource != "baremetal_offer" || notFound.ResourceID != unknownID {
		t.Fatalf("unknown offer: want *scw.ResourceNotFoundError, got %T %v", err, err)
	}
	_, err = iamAPI.GetSSHKey(&iam.GetSSHKeyRequest{SSHKeyID: unknownID})
	if !errors.As(err, &notFound) || notFound.Resource != "ssh_key" {
		t.Fatalf("unknown SSH key: want *scw.ResourceNotFoundError, got %T %v", err, err)
	}
	_, err = api.GetOS(&baremetal.GetOSRequest{OsID: unknownID})
	if !errors.As(err, &notFound) {
		t.Fatalf("unknown OS: want *scw.ResourceNotFoundError, got %T %v", err, err)
	}

	gpu := hourlyOffer(t, api, "EM-T620E-H100")
	if gpu.Stock != baremetal.OfferStockEmpty {
		t.Fatalf("GPU offer stock %s", gpu.Stock)
	}
	_, err = api.CreateServer(&baremetal.CreateServerRequest{OfferID: gpu.ID, Name: "gpu"})
	var outOfStock *scw.OutOfStockError
	if !errors.As(err, &outOfStock) || outOfStock.Resource != "EM-T620E-H100" {
		t.Fatalf("empty stock: want *scw.OutOfStockError, got %T %v", err, err)
	}

	offer := hourlyOffer(t, api, "EM-B112X-SSD")
	admin(t, http.MethodPut, base+"/_emsim/quota", `{"offer":"EM-B112X-SSD","quota":1}`)
	first, err := api.CreateServer(&baremetal.CreateServerRequest{OfferID: offer.ID, Name: "within-quota"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = api.CreateServer(&baremetal.CreateServerRequest{OfferID: offer.ID, Name: "over-quota"})
	var quota *scw.QuotasExceededError
	if !errors.As(err, &quota) || len(quota.Details) != 1 || quota.Details[0].Quota != 1 || quota.Details[0].Current != 1 {
		t.Fatalf("over quota: want *scw.QuotasExceededError{quota 1, current 1}, got %T %v", err, err)
	}

	// Power calls during delivery: the recorded untyped 400.
	admin(t, http.MethodPost, base+"/_emsim/faults", `{"kind":"stuck_delivery","offer":"EM-A115X-SSD","count":1}`)
	stuck, err := api.CreateServer(&baremetal.CreateServerRequest{OfferID: hourlyOffer(t, api, "EM-A115X-SSD").ID, Name: "stuck"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = api.RebootServer(&baremetal.RebootServerRequest{ServerID: stuck.ID, BootType: baremetal.ServerBootTypeRescue})
	var resp *scw.ResponseError
	if !errors.As(err, &resp) || resp.StatusCode != http.StatusBadRequest || resp.Message != "Server is not delivered" {
		t.Fatalf("reboot while delivering: want 400 Server is not delivered, got %T %v", err, err)
	}

	_, err = api.GetServer(&baremetal.GetServerRequest{ServerID: first.ID}, scw.WithAuthRequest(accessKey, unknownID))
	var denied *scw.DeniedAuthenticationError
	if !errors.As(err, &denied) {
		t.Fatalf("unknown secret key: want *scw.DeniedAuthenticationError, got %T %v", err, err)
	}

	_, err = api.CreateServer(&baremetal.CreateServerRequest{OfferID: "not-a-uuid", Name: "bad"})
	var invalid *scw.InvalidArgumentsError
	if !errors.As(err, &invalid) || invalid.Details[0].ArgumentName != "offer_id" {
		t.Fatalf("bad offer id: want *scw.InvalidArgumentsError on offer_id, got %T %v", err, err)
	}
}

// A rate-limited call: the SDK sees a 429 with the typed body.
func TestRateLimitFault(t *testing.T) {
	base := startEmsim(t)
	api := baremetal.NewAPI(newClient(t, base, secretKey))
	admin(t, http.MethodPost, base+"/_emsim/faults",
		`{"endpoint":"GET /baremetal/v1/zones/{zone}/offers","status":429,"body":{"message":"too many requests","type":"too_many_requests"},"count":1}`)
	_, err := api.ListOffers(&baremetal.ListOffersRequest{})
	var resp *scw.ResponseError
	if !errors.As(err, &resp) || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("injected 429: got %T %v", err, err)
	}
	if _, err := api.ListOffers(&baremetal.ListOffersRequest{}); err != nil {
		t.Fatalf("after the fault is spent: %v", err)
	}
}
