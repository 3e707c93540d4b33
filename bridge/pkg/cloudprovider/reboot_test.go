package cloudprovider

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
)

// Reboot sends the NodeClaim as Kubernetes JSON and core's operation id, and
// an OK answer is core's "accepted".
func TestRebootSendsNodeClaimAndOperationID(t *testing.T) {
	var got atomic.Pointer[pb.RebootRequest]
	fake := &fakeProvider{reboot: func(_ context.Context, r *pb.RebootRequest) (*pb.RebootResponse, error) {
		got.Store(r)
		return &pb.RebootResponse{}, nil
	}}
	cp := startProvider(t, fake, testOptions())
	nodeClaim := testNodeClaim()
	nodeClaim.Status.ProviderID = "scaleway://elasticmetal/fr-par-2/11111111-2222-3333-4444-555555555555"
	// The shape of core's id: UID, reboot request time, pre-reboot bootID.
	const operationID = "0b6f3c52-5d4e-4c55-9d8c-6c5b3c1f0a11-1760000000000000000-6a0b1c2d"

	if err := cp.Reboot(context.Background(), nodeClaim, operationID); err != nil {
		t.Fatal(err)
	}
	req := got.Load()
	if req == nil {
		t.Fatal("the provider was not called")
	}
	if req.GetOperationId() != operationID {
		t.Fatalf("operation id %q, want %q", req.GetOperationId(), operationID)
	}
	var sent v1.NodeClaim
	if err := json.Unmarshal(req.GetNodeClaimJson(), &sent); err != nil {
		t.Fatalf("node_claim_json: %v", err)
	}
	if sent.Name != nodeClaim.Name || sent.UID != nodeClaim.UID || sent.Status.ProviderID != nodeClaim.Status.ProviderID {
		t.Fatalf("sent NodeClaim %s/%s/%s, want %s/%s/%s", sent.Name, sent.UID, sent.Status.ProviderID,
			nodeClaim.Name, nodeClaim.UID, nodeClaim.Status.ProviderID)
	}
	if sent.Kind != "NodeClaim" || sent.APIVersion != "karpenter.sh/v1" {
		t.Fatalf("sent kind %q apiVersion %q", sent.Kind, sent.APIVersion)
	}
}

// One row per Reboot line of the error table in cloudprovider.proto (and the
// rows for any call), each through a real gRPC call. Core's reboot
// controller fails the reboot at once on NodeRebootNotImplementedError and
// NodeRebootFailedError, and retries any other error until its issuance
// timeout.
func TestRebootErrorTable(t *testing.T) {
	plain := func(code codes.Code) func(*testing.T) error {
		return func(*testing.T) error { return grpcstatus.Error(code, "refused") }
	}
	cases := []struct {
		name string
		err  func(*testing.T) error
		want string
	}{
		{"UNIMPLEMENTED", plain(codes.Unimplemented), "NodeRebootNotImplemented"},
		{"NOT_FOUND", plain(codes.NotFound), "NodeRebootFailed"},
		{"PERMISSION_DENIED", plain(codes.PermissionDenied), "NodeRebootFailed"},
		{"UNAUTHENTICATED", plain(codes.Unauthenticated), "NodeRebootFailed"},
		{"FAILED_PRECONDITION", plain(codes.FailedPrecondition), "NodeRebootFailed"},
		{"FAILED_PRECONDITION + NotLeaderDetail", func(t *testing.T) error {
			return statusWithDetails(t, codes.FailedPrecondition, "not leader", &pb.NotLeaderDetail{})
		}, "plain"},
		{"ABORTED", plain(codes.Aborted), "plain"},
		{"UNAVAILABLE", plain(codes.Unavailable), "plain"},
		{"DEADLINE_EXCEEDED", plain(codes.DeadlineExceeded), "plain"},
		{"RESOURCE_EXHAUSTED", plain(codes.ResourceExhausted), "plain"},
		{"INTERNAL", plain(codes.Internal), "plain"},
		{"UNKNOWN", plain(codes.Unknown), "plain"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wireErr := tc.err(t)
			var calls atomic.Int32
			fake := &fakeProvider{reboot: func(context.Context, *pb.RebootRequest) (*pb.RebootResponse, error) {
				calls.Add(1)
				return nil, wireErr
			}}
			cp := startProvider(t, fake, testOptions())
			err := cp.Reboot(context.Background(), testNodeClaim(), "op-1")
			if err == nil {
				t.Fatal("want an error")
			}
			if got := karpenterKind(err); got != tc.want {
				t.Fatalf("got %s (%v), want %s", got, err, tc.want)
			}
			// Core's own predicates, as its reboot controller reads them.
			if got, want := cloudprovider.IsNodeRebootNotImplementedError(err), tc.want == "NodeRebootNotImplemented"; got != want {
				t.Fatalf("IsNodeRebootNotImplementedError %t, want %t", got, want)
			}
			if got, want := cloudprovider.IsNodeRebootFailedError(err), tc.want == "NodeRebootFailed"; got != want {
				t.Fatalf("IsNodeRebootFailedError %t, want %t", got, want)
			}
			if cloudprovider.IsNodeClaimNotFoundError(err) {
				t.Fatal("a Reboot error must not read as NodeClaimNotFound")
			}
			// The gRPC status stays reachable for logs.
			if got, want := grpcstatus.Code(err), grpcstatus.Code(wireErr); got != want {
				t.Fatalf("wrapped code %s, want %s", got, want)
			}
			if n := calls.Load(); n != 1 {
				t.Fatalf("%d provider calls, want 1 (the bridge does not retry)", n)
			}
		})
	}
}

// Reboot is a mutating call: it waits for the provider to acknowledge this
// replica's leadership, and a NotLeaderDetail refusal makes the bridge
// announce it again.
func TestRebootWaitsForLeadership(t *testing.T) {
	var mu sync.Mutex
	acks := 0
	var rebootCalls atomic.Int32
	fake := &fakeProvider{
		setLeadership: func(context.Context, *pb.SetLeadershipRequest) (*pb.SetLeadershipResponse, error) {
			mu.Lock()
			acks++
			mu.Unlock()
			return &pb.SetLeadershipResponse{}, nil
		},
		reboot: func(context.Context, *pb.RebootRequest) (*pb.RebootResponse, error) {
			rebootCalls.Add(1)
			return nil, statusWithDetails(t, codes.FailedPrecondition, "not leader", &pb.NotLeaderDetail{})
		},
	}
	socket := socketPath(t)
	serve(t, socket, fake)
	client := dial(t, socket)
	leadership := NewLeadership(client, "bridge-0", time.Second)
	leadership.heartbeat = time.Hour // only refusals re-announce in this test
	opts := testOptions()
	opts.CallTimeout = 5 * time.Second
	cp := New(client, opts, testInfo, nil, leadership)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	elected := make(chan struct{})
	go leadership.Run(ctx, elected)

	early, cancelEarly := context.WithTimeout(ctx, 200*time.Millisecond)
	err := cp.Reboot(early, testNodeClaim(), "op-1")
	cancelEarly()
	if err == nil || karpenterKind(err) != "plain" {
		t.Fatalf("Reboot before leadership: %v (%s), want a plain error", err, karpenterKind(err))
	}
	if n := rebootCalls.Load(); n != 0 {
		t.Fatalf("Reboot reached the provider %d times before leadership was acknowledged", n)
	}

	close(elected)
	waitFor(t, "acknowledged leadership", func() bool { mu.Lock(); defer mu.Unlock(); return acks == 1 })
	if err := cp.Reboot(ctx, testNodeClaim(), "op-1"); karpenterKind(err) != "plain" || rebootCalls.Load() != 1 {
		t.Fatalf("NotLeader on Reboot must be a plain error, got %s: %v (%d calls)", karpenterKind(err), err, rebootCalls.Load())
	}
	waitFor(t, "leadership re-announced", func() bool { mu.Lock(); defer mu.Unlock(); return acks == 2 })
}

// A stuck provider costs core one call timeout, then a plain error that it
// retries.
func TestRebootTimesOut(t *testing.T) {
	release := hang(t)
	fake := &fakeProvider{reboot: func(context.Context, *pb.RebootRequest) (*pb.RebootResponse, error) {
		<-release
		return nil, grpcstatus.Error(codes.Internal, "released")
	}}
	opts := testOptions()
	opts.CallTimeout = 100 * time.Millisecond
	cp := startProvider(t, fake, opts)
	done := make(chan error, 1)
	go func() { done <- cp.Reboot(context.Background(), testNodeClaim(), "op-1") }()
	select {
	case err := <-done:
		if grpcstatus.Code(err) != codes.DeadlineExceeded || karpenterKind(err) != "plain" {
			t.Fatalf("got %s %v, want a plain DEADLINE_EXCEEDED", karpenterKind(err), err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Reboot did not honour its deadline")
	}
}
