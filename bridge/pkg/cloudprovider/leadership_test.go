package cloudprovider

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
)

// waitFor polls cond until it holds or the test's patience runs out.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLeadershipAnnouncedOnElectionAndRetried(t *testing.T) {
	var mu sync.Mutex
	var acked []*pb.SetLeadershipRequest
	fake := &fakeProvider{}
	fake.setLeadership = func(_ context.Context, r *pb.SetLeadershipRequest) (*pb.SetLeadershipResponse, error) {
		// The first two attempts fail, as when the provider is still
		// starting.
		if fake.leadershipCalls.Load() <= 2 {
			return nil, grpcstatus.Error(codes.Unavailable, "starting")
		}
		mu.Lock()
		acked = append(acked, r)
		mu.Unlock()
		return &pb.SetLeadershipResponse{}, nil
	}
	var createCalls atomic.Int32
	fake.create = func(context.Context, *pb.CreateRequest) (*pb.CreateResponse, error) {
		createCalls.Add(1)
		return nil, statusWithDetails(t, codes.FailedPrecondition, "not leader", &pb.NotLeaderDetail{})
	}
	socket := socketPath(t)
	serve(t, socket, fake)
	client := dial(t, socket)

	leadership := NewLeadership(client, "bridge-0", time.Second)
	leadership.retry = 10 * time.Millisecond
	opts := testOptions()
	// Roomy for the calls after the election on a loaded machine.
	opts.CallTimeout = 5 * time.Second
	cp := New(client, opts, testInfo, nil, leadership)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	elected := make(chan struct{})
	go leadership.Run(ctx, elected)

	// Not elected yet: mutating calls wait for the acknowledgement and give
	// up when their context ends, and the provider hears nothing.
	early, cancelEarly := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := cp.Create(early, testNodeClaim())
	cancelEarly()
	if err == nil || karpenterKind(err) != "plain" {
		t.Fatalf("Create before leadership: %v", err)
	}
	if n := createCalls.Load(); n != 0 {
		t.Fatalf("Create reached the provider %d times before leadership was acknowledged", n)
	}
	if n := fake.leadershipCalls.Load(); n != 0 {
		t.Fatalf("SetLeadership called %d times before election", n)
	}

	close(elected)
	waitFor(t, "acknowledged leadership", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) == 1 })
	mu.Lock()
	if !acked[0].GetLeader() || acked[0].GetIdentity() != "bridge-0" {
		t.Fatalf("request %v", acked[0])
	}
	mu.Unlock()
	if n := fake.leadershipCalls.Load(); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}

	// The provider forgot (e.g. restarted): a refused call makes the bridge
	// say it again, and the refusal itself is a plain error for core.
	if _, err := cp.Create(ctx, testNodeClaim()); karpenterKind(err) != "plain" || createCalls.Load() != 1 {
		t.Fatalf("NotLeader on Create must be a plain error, got %s: %v (%d calls)", karpenterKind(err), err, createCalls.Load())
	}
	waitFor(t, "leadership re-announced", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) == 2 })
}

// A provider restarted next to a running bridge may receive no call for a long
// time; the heartbeat is how it learns it leads and resumes installs in flight.
func TestLeadershipReannouncedEveryHeartbeat(t *testing.T) {
	var acks atomic.Int32
	fake := &fakeProvider{}
	fake.setLeadership = func(_ context.Context, r *pb.SetLeadershipRequest) (*pb.SetLeadershipResponse, error) {
		if !r.GetLeader() {
			t.Errorf("announced leader=false")
		}
		acks.Add(1)
		return &pb.SetLeadershipResponse{}, nil
	}
	socket := socketPath(t)
	serve(t, socket, fake)
	client := dial(t, socket)

	leadership := NewLeadership(client, "bridge-0", time.Second)
	leadership.heartbeat = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	elected := make(chan struct{})
	close(elected)
	go leadership.Run(ctx, elected)

	waitFor(t, "three announcements without any refusal", func() bool { return acks.Load() >= 3 })
}
