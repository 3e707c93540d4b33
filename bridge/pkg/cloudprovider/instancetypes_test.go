package cloudprovider

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/scheduling"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
)

const familyLabel = "karpenter.scaleway.com/offer-family"

func req(key string, op pb.Requirement_Operator, values ...string) *pb.Requirement {
	return &pb.Requirement{Key: key, Operator: op, Values: values}
}

func offering(zone string, price float64, available bool) *pb.Offering {
	return &pb.Offering{
		Requirements: []*pb.Requirement{
			req(v1.CapacityTypeLabelKey, pb.Requirement_IN, v1.CapacityTypeOnDemand),
			req(corev1.LabelTopologyZone, pb.Requirement_IN, zone),
		},
		Price:     price,
		Available: available,
	}
}

// testInstanceType is shaped like an Elastic Metal offer.
func testInstanceType() *pb.InstanceType {
	return &pb.InstanceType{
		Name: "EM-A115X-SSD",
		Requirements: []*pb.Requirement{
			{Key: corev1.LabelInstanceTypeStable, Operator: pb.Requirement_IN, Values: []string{"EM-A115X-SSD"}, MinValues: proto.Int32(1)},
			req(corev1.LabelArchStable, pb.Requirement_IN, "amd64"),
			req(corev1.LabelOSStable, pb.Requirement_IN, "linux"),
			req(corev1.LabelTopologyZone, pb.Requirement_IN, "fr-par-1", "fr-par-2"),
			req(v1.CapacityTypeLabelKey, pb.Requirement_IN, v1.CapacityTypeOnDemand),
			req(familyLabel, pb.Requirement_NOT_IN, "GPU"),
			req("karpenter.scaleway.com/cpu-count", pb.Requirement_GT, "8"),
			req("karpenter.scaleway.com/memory-gib", pb.Requirement_LT, "100"),
			req("karpenter.scaleway.com/ssd", pb.Requirement_EXISTS),
			req("karpenter.scaleway.com/gpu", pb.Requirement_DOES_NOT_EXIST),
		},
		Offerings: []*pb.Offering{offering("fr-par-1", 0.25, true), offering("fr-par-2", 0.25, false)},
		Capacity:  map[string]string{"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "1Ti"},
		Overhead: &pb.Overhead{
			KubeReserved:      map[string]string{"cpu": "100m", "memory": "1Gi"},
			SystemReserved:    map[string]string{"memory": "512Mi"},
			EvictionThreshold: map[string]string{"memory": "100Mi"},
		},
	}
}

// streamCatalogs is a WatchInstanceTypes that sends each message of next as it
// arrives and then holds the stream open until the client goes away.
func streamCatalogs(next <-chan *pb.WatchInstanceTypesResponse) func(*pb.WatchInstanceTypesRequest, pb.CloudProvider_WatchInstanceTypesServer) error {
	return func(_ *pb.WatchInstanceTypesRequest, s pb.CloudProvider_WatchInstanceTypesServer) error {
		for {
			select {
			case msg := <-next:
				if err := s.Send(msg); err != nil {
					return err
				}
			case <-s.Context().Done():
				return s.Context().Err()
			}
		}
	}
}

// serveInstanceTypes serves its as the default catalog on the watch stream.
func serveInstanceTypes(t *testing.T, its ...*pb.InstanceType) (*CloudProvider, *fakeProvider) {
	t.Helper()
	next := make(chan *pb.WatchInstanceTypesResponse, 1)
	next <- &pb.WatchInstanceTypesResponse{Revision: 1, DefaultCatalog: its}
	fake := &fakeProvider{watch: streamCatalogs(next)}
	return startProvider(t, fake, testOptions()), fake
}

func TestInstanceTypeConversion(t *testing.T) {
	cp, _ := serveInstanceTypes(t, testInstanceType())
	its, err := cp.GetInstanceTypes(context.Background(), testNodePool("default"))
	if err != nil {
		t.Fatal(err)
	}
	if len(its) != 1 || its[0].Name != "EM-A115X-SSD" {
		t.Fatalf("got %v", its)
	}
	it := its[0]
	r := it.Requirements

	if got := r.Get(corev1.LabelInstanceTypeStable); !got.Has("EM-A115X-SSD") || got.MinValues() == nil || *got.MinValues() != 1 {
		t.Fatalf("instance-type requirement %v", got)
	}
	if got := r.Get(corev1.LabelTopologyZone); !got.Has("fr-par-1") || !got.Has("fr-par-2") || got.Has("nl-ams-1") {
		t.Fatalf("zone requirement %v", got)
	}
	if got := r.Get(familyLabel); got.Operator() != corev1.NodeSelectorOpNotIn || got.Has("GPU") || !got.Has("GENERAL") {
		t.Fatalf("NotIn requirement %v", got)
	}
	if got := r.Get("karpenter.scaleway.com/cpu-count"); got.Has("8") || !got.Has("9") {
		t.Fatalf("Gt requirement %v", got)
	}
	if got := r.Get("karpenter.scaleway.com/memory-gib"); got.Has("100") || !got.Has("99") {
		t.Fatalf("Lt requirement %v", got)
	}
	if got := r.Get("karpenter.scaleway.com/ssd"); got.Operator() != corev1.NodeSelectorOpExists {
		t.Fatalf("Exists requirement %v", got)
	}
	if got := r.Get("karpenter.scaleway.com/gpu"); got.Operator() != corev1.NodeSelectorOpDoesNotExist {
		t.Fatalf("DoesNotExist requirement %v", got)
	}

	// Well-known labels the provider did not define are completed with
	// DoesNotExist; the NodePool label is left to the NodePool.
	for _, key := range []string{corev1.LabelTopologyRegion, corev1.LabelWindowsBuild} {
		if !r.Has(key) || r.Get(key).Operator() != corev1.NodeSelectorOpDoesNotExist {
			t.Fatalf("well-known %s: %v", key, r.Get(key))
		}
	}
	for key := range v1.WellKnownLabels {
		if key != v1.NodePoolLabelKey && !r.Has(key) {
			t.Fatalf("well-known label %s left undefined", key)
		}
	}
	if r.Has(v1.NodePoolLabelKey) {
		t.Fatalf("NodePool label must not be defined by the instance type: %v", r.Get(v1.NodePoolLabelKey))
	}

	if len(it.Offerings) != 2 {
		t.Fatalf("offerings %v", it.Offerings)
	}
	o := it.Offerings[0]
	if o.Zone() != "fr-par-1" || o.CapacityType() != v1.CapacityTypeOnDemand || o.Price != 0.25 || !o.Available {
		t.Fatalf("offering 0: zone %s type %s price %v available %v", o.Zone(), o.CapacityType(), o.Price, o.Available)
	}
	if it.Offerings[1].Available || len(it.Offerings.Available()) != 1 {
		t.Fatal("the sold-out offering must stay listed as unavailable")
	}

	if q := it.Capacity[corev1.ResourcePods]; q.Value() != 110 {
		t.Fatalf("pods capacity %s", q.String())
	}
	if q := it.Capacity[corev1.ResourceEphemeralStorage]; q.Cmp(resource.MustParse("1Ti")) != 0 {
		t.Fatalf("ephemeral-storage capacity %s", q.String())
	}
	// Allocatable = capacity - (kube reserved + system reserved + eviction).
	alloc := it.Allocatable()
	if q := alloc[corev1.ResourceCPU]; q.Cmp(resource.MustParse("15900m")) != 0 {
		t.Fatalf("allocatable cpu %s", q.String())
	}
	wantMem := resource.MustParse("64Gi")
	wantMem.Sub(resource.MustParse("1Gi"))
	wantMem.Sub(resource.MustParse("512Mi"))
	wantMem.Sub(resource.MustParse("100Mi"))
	if q := alloc[corev1.ResourceMemory]; q.Cmp(wantMem) != 0 {
		t.Fatalf("allocatable memory %s, want %s", q.String(), wantMem.String())
	}
}

// The converted type must be usable the way core's scheduler uses it: the
// requirements of a NodeClaim built from a NodePool (which carry the NodePool
// label) intersect the instance type's, and a pod asking for a region the
// provider never sets does not.
func TestConvertedInstanceTypeSchedulesWithNodePool(t *testing.T) {
	cp, _ := serveInstanceTypes(t, testInstanceType())
	nodePool := testNodePool("default")
	its, err := cp.GetInstanceTypes(context.Background(), nodePool)
	if err != nil {
		t.Fatal(err)
	}
	nodeClaimReqs := scheduling.NewNodeSelectorRequirementsWithMinValues(nodePool.Spec.Template.Spec.Requirements...)
	nodeClaimReqs.Add(scheduling.NewRequirement(v1.NodePoolLabelKey, corev1.NodeSelectorOpIn, nodePool.Name))
	if err := its[0].Requirements.Intersects(nodeClaimReqs); err != nil {
		t.Fatalf("instance type incompatible with its NodePool: %v", err)
	}
	if !its[0].Offerings.Available().HasCompatible(nodeClaimReqs) {
		t.Fatal("no available offering compatible with the NodePool")
	}
	regionPod := scheduling.NewRequirements(scheduling.NewRequirement(corev1.LabelTopologyRegion, corev1.NodeSelectorOpIn, "fr-par"))
	if its[0].Requirements.IsCompatible(regionPod, scheduling.AllowUndefinedWellKnownLabels) {
		t.Fatal("a pod selecting a region the provider never sets must not fit")
	}
}

func TestInstanceTypeConversionErrors(t *testing.T) {
	cases := map[string]func(*pb.InstanceType){
		"bad capacity quantity": func(it *pb.InstanceType) { it.Capacity["memory"] = "64 gigs" },
		"bad overhead quantity": func(it *pb.InstanceType) { it.Overhead.KubeReserved["cpu"] = "lots" },
		"capacity without pods": func(it *pb.InstanceType) { delete(it.Capacity, "pods") },
		"Gt not an integer":     func(it *pb.InstanceType) { it.Requirements[6].Values = []string{"eight"} },
		"Lt with two values":    func(it *pb.InstanceType) { it.Requirements[7].Values = []string{"1", "2"} },
		"Exists with values":    func(it *pb.InstanceType) { it.Requirements[8].Values = []string{"yes"} },
		"unspecified operator":  func(it *pb.InstanceType) { it.Requirements[5].Operator = pb.Requirement_OPERATOR_UNSPECIFIED },
		"minValues zero":        func(it *pb.InstanceType) { it.Requirements[0].MinValues = proto.Int32(0) },
		"offering without zone": func(it *pb.InstanceType) { it.Offerings[0].Requirements = it.Offerings[0].Requirements[:1] },
		"no name":               func(it *pb.InstanceType) { it.Name = "" },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			it := testInstanceType()
			mutate(it)
			its, err := convertInstanceTypes([]*pb.InstanceType{it})
			if err == nil || its != nil {
				t.Fatalf("got %d types and %v; want an error", len(its), err)
			}
		})
	}
}

func TestDuplicateInstanceTypesRejected(t *testing.T) {
	_, err := convertSnapshot(&pb.WatchInstanceTypesResponse{DefaultCatalog: []*pb.InstanceType{testInstanceType(), testInstanceType()}})
	if err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("got %v", err)
	}
}

// GetInstanceTypes answers from the streamed catalog, per NodeClass, without
// calling the provider's unary GetInstanceTypes.
func TestInstanceTypesServedFromTheWatchStream(t *testing.T) {
	par := testInstanceType()
	monthly := testInstanceType()
	monthly.Offerings[0].Price = 0.045
	next := make(chan *pb.WatchInstanceTypesResponse, 2)
	next <- &pb.WatchInstanceTypesResponse{
		Revision:         1,
		DefaultCatalog:   []*pb.InstanceType{par},
		Catalogs:         []*pb.NodeClassCatalog{{NodeClassName: "monthly", InstanceTypes: []*pb.InstanceType{monthly}}},
		OffersReadAtUnix: time.Now().Unix(),
	}
	fake := &fakeProvider{watch: streamCatalogs(next)}
	cp := startProvider(t, fake, testOptions())
	ctx := context.Background()

	price := func(nodeClass string) float64 {
		t.Helper()
		its, err := cp.GetInstanceTypes(ctx, testNodePool(nodeClass))
		if err != nil {
			t.Fatal(err)
		}
		return its[0].Offerings[0].Price
	}
	if got := price("monthly"); got != 0.045 {
		t.Fatalf("NodeClass catalog price %v", got)
	}
	if got := price("unknown"); got != 0.25 {
		t.Fatalf("default catalog price %v", got)
	}
	for range 100 {
		price("monthly")
	}
	if n := fake.instanceTypeCalls.Load(); n != 0 {
		t.Fatalf("unary GetInstanceTypes called %d times", n)
	}

	// A new snapshot replaces the old one.
	sold := testInstanceType()
	sold.Offerings[0].Available = false
	next <- &pb.WatchInstanceTypesResponse{Revision: 2, DefaultCatalog: []*pb.InstanceType{sold}}
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := cp.catalog.waitForRevision(waitCtx, 2); err != nil {
		t.Fatal(err)
	}
	its, err := cp.GetInstanceTypes(ctx, testNodePool("monthly"))
	if err != nil {
		t.Fatal(err)
	}
	if its[0].Offerings[0].Available {
		t.Fatal("revision 2 dropped the monthly catalog and sold the offering out")
	}
}

// A Create refused for lack of capacity returns only once the catalog holds
// the provider's mark, so core's next scheduling round cannot pick the
// sold-out offering from the previous snapshot.
func TestInsufficientCapacityWaitsForTheMarkedCatalog(t *testing.T) {
	next := make(chan *pb.WatchInstanceTypesResponse, 2)
	next <- &pb.WatchInstanceTypesResponse{Revision: 1, DefaultCatalog: []*pb.InstanceType{testInstanceType()}}
	fake := &fakeProvider{
		watch: streamCatalogs(next),
		create: func(context.Context, *pb.CreateRequest) (*pb.CreateResponse, error) {
			sold := testInstanceType()
			sold.Offerings[0].Available = false
			// The stream delivers the mark a little after the answer.
			go func() {
				time.Sleep(200 * time.Millisecond)
				next <- &pb.WatchInstanceTypesResponse{Revision: 2, DefaultCatalog: []*pb.InstanceType{sold}}
			}()
			return nil, statusWithDetails(t, codes.ResourceExhausted, "EM-A115X-SSD out of stock",
				&pb.InsufficientCapacityDetail{CatalogRevision: 2})
		},
	}
	cp := startProvider(t, fake, testOptions())
	ctx := context.Background()
	if _, err := cp.GetInstanceTypes(ctx, testNodePool("default")); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Create(ctx, testNodeClaim()); !cloudprovider.IsInsufficientCapacityError(err) {
		t.Fatalf("got %v", err)
	}
	its, err := cp.GetInstanceTypes(ctx, testNodePool("default"))
	if err != nil {
		t.Fatal(err)
	}
	if its[0].Offerings[0].Available {
		t.Fatal("GetInstanceTypes right after the refusal still offers the sold-out offering")
	}
}

// Before the first snapshot GetInstanceTypes fails after one call timeout
// (core skips the NodePool); while the stream is down the last snapshot is
// served for CatalogMaxStaleness, then GetInstanceTypes fails until the
// stream is back; a malformed snapshot never replaces a good one.
func TestCatalogWhenTheStreamCannotDeliver(t *testing.T) {
	var mu sync.Mutex
	broken := true
	next := make(chan *pb.WatchInstanceTypesResponse, 4)
	follow := streamCatalogs(next)
	fake := &fakeProvider{watch: func(r *pb.WatchInstanceTypesRequest, s pb.CloudProvider_WatchInstanceTypesServer) error {
		mu.Lock()
		b := broken
		mu.Unlock()
		if b {
			return grpcstatus.Error(codes.Unavailable, "offers not read yet")
		}
		return follow(r, s)
	}}
	opts := testOptions()
	opts.CallTimeout = 300 * time.Millisecond
	opts.CatalogMaxStaleness = time.Minute
	cp := startProvider(t, fake, opts)
	ctx := context.Background()
	start := time.Now()
	if _, err := cp.GetInstanceTypes(ctx, testNodePool("default")); err == nil || !strings.Contains(err.Error(), "no instance-type catalog") {
		t.Fatalf("before the first snapshot: %v", err)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Fatalf("gave up after %s, before the call timeout", waited)
	}
	// The retry runs on its own backoff, not inside this call: wait for it
	// rather than expect it within the call timeout.
	waitFor(t, "the watch retried", func() bool { return fake.watchCalls.Load() >= 2 })

	mu.Lock()
	broken = false
	mu.Unlock()
	bad := testInstanceType()
	bad.Capacity["memory"] = "lots"
	next <- &pb.WatchInstanceTypesResponse{Revision: 1, DefaultCatalog: []*pb.InstanceType{testInstanceType()}}
	next <- &pb.WatchInstanceTypesResponse{Revision: 2, DefaultCatalog: []*pb.InstanceType{bad}}
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cp.WaitForCatalog(waitCtx); err != nil {
		t.Fatal(err)
	}
	shortCtx, shortCancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer shortCancel()
	if err := cp.catalog.waitForRevision(shortCtx, 2); err == nil {
		t.Fatal("the malformed revision 2 replaced revision 1")
	}
	next <- &pb.WatchInstanceTypesResponse{Revision: 3, DefaultCatalog: []*pb.InstanceType{testInstanceType()}}
	if err := cp.catalog.waitForRevision(waitCtx, 3); err != nil {
		t.Fatal(err)
	}

	// The stream goes down: the snapshot is served until it is too old.
	now := time.Now()
	cp.catalog.now = func() time.Time { return now }
	cp.catalog.streamDown()
	if _, err := cp.GetInstanceTypes(ctx, testNodePool("default")); err != nil {
		t.Fatalf("within the staleness bound: %v", err)
	}
	now = now.Add(2 * time.Minute)
	if _, err := cp.GetInstanceTypes(ctx, testNodePool("default")); err == nil || !strings.Contains(err.Error(), "stream down") {
		t.Fatalf("past the staleness bound: %v", err)
	}
	// A new snapshot makes it current again.
	next <- &pb.WatchInstanceTypesResponse{Revision: 4, DefaultCatalog: []*pb.InstanceType{testInstanceType()}}
	if err := cp.catalog.waitForRevision(waitCtx, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.GetInstanceTypes(ctx, testNodePool("default")); err != nil {
		t.Fatalf("after the stream came back: %v", err)
	}
}

func TestMalformedSnapshotIsRejected(t *testing.T) {
	bad := testInstanceType()
	bad.Capacity["memory"] = "lots"
	if _, err := convertSnapshot(&pb.WatchInstanceTypesResponse{
		Catalogs: []*pb.NodeClassCatalog{{NodeClassName: "x", InstanceTypes: []*pb.InstanceType{bad}}},
	}); err == nil || !strings.Contains(err.Error(), "NodeClass x") {
		t.Fatalf("got %v", err)
	}
}
