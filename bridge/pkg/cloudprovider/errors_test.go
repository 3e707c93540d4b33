package cloudprovider

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
)

// One row per line of the error table in cloudprovider.proto, each exercised
// through a real gRPC call.
func TestErrorTable(t *testing.T) {
	nodeClaim := testNodeClaim()
	notLeader := func(t *testing.T) error {
		return statusWithDetails(t, codes.FailedPrecondition, "not leader", &pb.NotLeaderDetail{})
	}

	type call func(context.Context, *CloudProvider) error
	create := func(ctx context.Context, cp *CloudProvider) error { _, err := cp.Create(ctx, nodeClaim); return err }
	del := func(ctx context.Context, cp *CloudProvider) error { return cp.Delete(ctx, nodeClaim) }
	get := func(ctx context.Context, cp *CloudProvider) error {
		_, err := cp.Get(ctx, "scaleway://fr-par-2/x")
		return err
	}
	list := func(ctx context.Context, cp *CloudProvider) error { _, err := cp.List(ctx); return err }
	drift := func(ctx context.Context, cp *CloudProvider) error { _, err := cp.IsDrifted(ctx, nodeClaim); return err }

	// fail makes every RPC of the fake answer err.
	fail := func(err error) *fakeProvider {
		return &fakeProvider{
			create:    func(context.Context, *pb.CreateRequest) (*pb.CreateResponse, error) { return nil, err },
			delete:    func(context.Context, *pb.DeleteRequest) (*pb.DeleteResponse, error) { return nil, err },
			get:       func(context.Context, *pb.GetRequest) (*pb.GetResponse, error) { return nil, err },
			list:      func(context.Context, *pb.ListRequest) (*pb.ListResponse, error) { return nil, err },
			isDrifted: func(context.Context, *pb.IsDriftedRequest) (*pb.IsDriftedResponse, error) { return nil, err },
		}
	}

	cases := []struct {
		name string
		err  func(*testing.T) error
		call call
		want string
	}{
		{"Create RESOURCE_EXHAUSTED", func(*testing.T) error { return grpcstatus.Error(codes.ResourceExhausted, "sold out") }, create, "InsufficientCapacity"},
		{"Create RESOURCE_EXHAUSTED + InsufficientCapacityDetail", func(t *testing.T) error {
			return statusWithDetails(t, codes.ResourceExhausted, "sold out", &pb.InsufficientCapacityDetail{CatalogRevision: 0})
		}, create, "InsufficientCapacity"},
		{"Create FAILED_PRECONDITION", func(*testing.T) error { return grpcstatus.Error(codes.FailedPrecondition, "nodeclass") }, create, "NodeClassNotReady"},
		{"Create FAILED_PRECONDITION + NotLeaderDetail", notLeader, create, "plain"},
		{"Create UNAVAILABLE + CreateErrorDetail", func(t *testing.T) error {
			return statusWithDetails(t, codes.Unavailable, "api down", &pb.CreateErrorDetail{ConditionReason: "ApiUnavailable", ConditionMessage: "m"})
		}, create, "CreateError"},
		{"Create INTERNAL", func(*testing.T) error { return grpcstatus.Error(codes.Internal, "bug") }, create, "plain"},
		{"Create NOT_FOUND is not a NodeClaimNotFound", func(*testing.T) error { return grpcstatus.Error(codes.NotFound, "x") }, create, "plain"},
		{"Delete NOT_FOUND", func(*testing.T) error { return grpcstatus.Error(codes.NotFound, "gone") }, del, "NodeClaimNotFound"},
		{"Delete UNAVAILABLE", func(*testing.T) error { return grpcstatus.Error(codes.Unavailable, "x") }, del, "plain"},
		{"Delete FAILED_PRECONDITION + NotLeaderDetail", notLeader, del, "plain"},
		{"Get NOT_FOUND", func(*testing.T) error { return grpcstatus.Error(codes.NotFound, "gone") }, get, "NodeClaimNotFound"},
		{"Get DEADLINE_EXCEEDED", func(*testing.T) error { return grpcstatus.Error(codes.DeadlineExceeded, "slow") }, get, "plain"},
		{"List NOT_FOUND", func(*testing.T) error { return grpcstatus.Error(codes.NotFound, "x") }, list, "plain"},
		{"List UNAVAILABLE", func(*testing.T) error { return grpcstatus.Error(codes.Unavailable, "x") }, list, "plain"},
		{"IsDrifted FAILED_PRECONDITION", func(*testing.T) error { return grpcstatus.Error(codes.FailedPrecondition, "x") }, drift, "plain"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wireErr := tc.err(t)
			cp := startProvider(t, fail(wireErr), testOptions())
			err := tc.call(context.Background(), cp)
			if got := karpenterKind(err); got != tc.want {
				t.Fatalf("got %s (%v), want %s", got, err, tc.want)
			}
			// The gRPC status stays reachable for logs and for callers
			// that care about the code.
			if got, want := grpcstatus.Code(err), grpcstatus.Code(wireErr); got != want {
				t.Fatalf("wrapped code %s, want %s", got, want)
			}
		})
	}
}

func TestCreateErrorDetailRoundTrip(t *testing.T) {
	detail := &pb.CreateErrorDetail{ConditionReason: "OfferOutOfStock", ConditionMessage: "offer EM-A115X-SSD sold out in fr-par-2"}
	fake := &fakeProvider{create: func(context.Context, *pb.CreateRequest) (*pb.CreateResponse, error) {
		return nil, statusWithDetails(t, codes.Aborted, "ordering server", detail)
	}}
	cp := startProvider(t, fake, testOptions())

	_, err := cp.Create(context.Background(), testNodeClaim())
	var createErr *cloudprovider.CreateError
	if !errors.As(err, &createErr) {
		t.Fatalf("want CreateError, got %T %v", err, err)
	}
	if createErr.ConditionReason != detail.ConditionReason || createErr.ConditionMessage != detail.ConditionMessage {
		t.Fatalf("got reason %q message %q, want %q %q", createErr.ConditionReason, createErr.ConditionMessage, detail.ConditionReason, detail.ConditionMessage)
	}
}

// The detail is the provider's explicit choice and wins over the code.
func TestCreateErrorDetailWinsOverCode(t *testing.T) {
	fake := &fakeProvider{create: func(context.Context, *pb.CreateRequest) (*pb.CreateResponse, error) {
		return nil, statusWithDetails(t, codes.ResourceExhausted, "quota", &pb.CreateErrorDetail{ConditionReason: "QuotaExceeded"})
	}}
	cp := startProvider(t, fake, testOptions())
	_, err := cp.Create(context.Background(), testNodeClaim())
	if got := karpenterKind(err); got != "CreateError" {
		t.Fatalf("got %s (%v), want CreateError", got, err)
	}
}

func TestRepairPoliciesUnimplementedMeansNone(t *testing.T) {
	socket := socketPath(t)
	serve(t, socket, &fakeProvider{})
	policies, err := FetchRepairPolicies(context.Background(), dial(t, socket), testOptions().CallTimeout)
	if err != nil || policies != nil {
		t.Fatalf("got %v, %v; want no policies and no error", policies, err)
	}
}

func TestRepairPoliciesOtherErrorsFail(t *testing.T) {
	socket := socketPath(t)
	serve(t, socket, &fakeProvider{repairPolicies: func(context.Context, *pb.RepairPoliciesRequest) (*pb.RepairPoliciesResponse, error) {
		return nil, grpcstatus.Error(codes.Internal, "x")
	}})
	if _, err := FetchRepairPolicies(context.Background(), dial(t, socket), testOptions().CallTimeout); err == nil {
		t.Fatal("want an error")
	}
}
