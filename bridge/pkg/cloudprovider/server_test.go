package cloudprovider

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
)

// fakeProvider is a provider with canned behaviour: each RPC runs the matching
// function, or answers UNIMPLEMENTED when it is nil. Counters record calls.
type fakeProvider struct {
	pb.UnimplementedCloudProviderServer

	create           func(context.Context, *pb.CreateRequest) (*pb.CreateResponse, error)
	delete           func(context.Context, *pb.DeleteRequest) (*pb.DeleteResponse, error)
	get              func(context.Context, *pb.GetRequest) (*pb.GetResponse, error)
	list             func(context.Context, *pb.ListRequest) (*pb.ListResponse, error)
	getInstanceTypes func(context.Context, *pb.GetInstanceTypesRequest) (*pb.GetInstanceTypesResponse, error)
	isDrifted        func(context.Context, *pb.IsDriftedRequest) (*pb.IsDriftedResponse, error)
	repairPolicies   func(context.Context, *pb.RepairPoliciesRequest) (*pb.RepairPoliciesResponse, error)
	reboot           func(context.Context, *pb.RebootRequest) (*pb.RebootResponse, error)
	info             func(context.Context, *pb.InfoRequest) (*pb.InfoResponse, error)
	setLeadership    func(context.Context, *pb.SetLeadershipRequest) (*pb.SetLeadershipResponse, error)
	watch            func(*pb.WatchInstanceTypesRequest, pb.CloudProvider_WatchInstanceTypesServer) error

	instanceTypeCalls atomic.Int32
	leadershipCalls   atomic.Int32
	watchCalls        atomic.Int32
}

func (f *fakeProvider) WatchInstanceTypes(r *pb.WatchInstanceTypesRequest, s pb.CloudProvider_WatchInstanceTypesServer) error {
	f.watchCalls.Add(1)
	if f.watch == nil {
		return unimplemented("WatchInstanceTypes")
	}
	return f.watch(r, s)
}

func unimplemented(method string) error {
	return grpcstatus.Errorf(codes.Unimplemented, "%s not set in this test", method)
}

func (f *fakeProvider) Create(ctx context.Context, r *pb.CreateRequest) (*pb.CreateResponse, error) {
	if f.create == nil {
		return nil, unimplemented("Create")
	}
	return f.create(ctx, r)
}

func (f *fakeProvider) Delete(ctx context.Context, r *pb.DeleteRequest) (*pb.DeleteResponse, error) {
	if f.delete == nil {
		return nil, unimplemented("Delete")
	}
	return f.delete(ctx, r)
}

func (f *fakeProvider) Get(ctx context.Context, r *pb.GetRequest) (*pb.GetResponse, error) {
	if f.get == nil {
		return nil, unimplemented("Get")
	}
	return f.get(ctx, r)
}

func (f *fakeProvider) List(ctx context.Context, r *pb.ListRequest) (*pb.ListResponse, error) {
	if f.list == nil {
		return nil, unimplemented("List")
	}
	return f.list(ctx, r)
}

func (f *fakeProvider) GetInstanceTypes(ctx context.Context, r *pb.GetInstanceTypesRequest) (*pb.GetInstanceTypesResponse, error) {
	f.instanceTypeCalls.Add(1)
	if f.getInstanceTypes == nil {
		return nil, unimplemented("GetInstanceTypes")
	}
	return f.getInstanceTypes(ctx, r)
}

func (f *fakeProvider) IsDrifted(ctx context.Context, r *pb.IsDriftedRequest) (*pb.IsDriftedResponse, error) {
	if f.isDrifted == nil {
		return nil, unimplemented("IsDrifted")
	}
	return f.isDrifted(ctx, r)
}

func (f *fakeProvider) RepairPolicies(ctx context.Context, r *pb.RepairPoliciesRequest) (*pb.RepairPoliciesResponse, error) {
	if f.repairPolicies == nil {
		return nil, unimplemented("RepairPolicies")
	}
	return f.repairPolicies(ctx, r)
}

func (f *fakeProvider) Reboot(ctx context.Context, r *pb.RebootRequest) (*pb.RebootResponse, error) {
	if f.reboot == nil {
		return nil, unimplemented("Reboot")
	}
	return f.reboot(ctx, r)
}

func (f *fakeProvider) Info(ctx context.Context, r *pb.InfoRequest) (*pb.InfoResponse, error) {
	if f.info == nil {
		return nil, unimplemented("Info")
	}
	return f.info(ctx, r)
}

func (f *fakeProvider) SetLeadership(ctx context.Context, r *pb.SetLeadershipRequest) (*pb.SetLeadershipResponse, error) {
	f.leadershipCalls.Add(1)
	if f.setLeadership == nil {
		return nil, unimplemented("SetLeadership")
	}
	return f.setLeadership(ctx, r)
}

// socketPath returns a fresh socket path short enough for sun_path (108
// bytes), which t.TempDir() paths named after long test names can exceed.
func socketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return filepath.Join(dir, "provider.sock")
}

// serve runs fake on a Unix socket until the test ends.
func serve(t *testing.T, socket string, fake *fakeProvider) {
	t.Helper()
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatalf("listening on %s: %v", socket, err)
	}
	srv := grpc.NewServer()
	pb.RegisterCloudProviderServer(srv, fake)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
}

// dial connects the bridge's client to socket the way main does.
func dial(t *testing.T, socket string) pb.CloudProviderClient {
	t.Helper()
	conn, err := Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pb.NewCloudProviderClient(conn)
}

func testOptions() Options {
	return Options{
		Socket:              "unused",
		CallTimeout:         2 * time.Second,
		CreateTimeout:       2 * time.Second,
		ListTimeout:         2 * time.Second,
		StartupTimeout:      5 * time.Second,
		CatalogMaxStaleness: time.Minute,
		Identity:            "bridge-0",
	}
}

var testInfo = &pb.InfoResponse{
	Name: "scaleway",
	NodeClasses: []*pb.NodeClassKind{{
		Group: "karpenter.scaleway.com", Version: "v1alpha1", Kind: "ScalewayElasticMetalNodeClass",
	}},
	WellKnownLabels: []string{"karpenter.scaleway.com/offer-family"},
	ProviderVersion: "test",
}

// startProvider serves fake and returns a bridge CloudProvider talking to it,
// with its catalog watch running for the test's lifetime.
func startProvider(t *testing.T, fake *fakeProvider, opts Options) *CloudProvider {
	t.Helper()
	socket := socketPath(t)
	serve(t, socket, fake)
	cp := New(dial(t, socket), opts, testInfo, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { cp.WatchCatalog(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return cp
}

// statusWithDetails builds a gRPC status error carrying typed details.
func statusWithDetails(t *testing.T, code codes.Code, msg string, details ...protoadapt.MessageV1) error {
	t.Helper()
	st, err := grpcstatus.New(code, msg).WithDetails(details...)
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// karpenterKind names the Karpenter error type err matches with errors.As, as
// core checks it, or "plain".
func karpenterKind(err error) string {
	var ice *cloudprovider.InsufficientCapacityError
	var notReady *cloudprovider.NodeClassNotReadyError
	var createErr *cloudprovider.CreateError
	var notFound *cloudprovider.NodeClaimNotFoundError
	var rebootNotImplemented *cloudprovider.NodeRebootNotImplementedError
	var rebootFailed *cloudprovider.NodeRebootFailedError
	switch {
	case err == nil:
		return "nil"
	case errors.As(err, &rebootNotImplemented):
		return "NodeRebootNotImplemented"
	case errors.As(err, &rebootFailed):
		return "NodeRebootFailed"
	case errors.As(err, &createErr):
		return "CreateError"
	case errors.As(err, &ice):
		return "InsufficientCapacity"
	case errors.As(err, &notReady):
		return "NodeClassNotReady"
	case errors.As(err, &notFound):
		return "NodeClaimNotFound"
	default:
		return "plain"
	}
}
