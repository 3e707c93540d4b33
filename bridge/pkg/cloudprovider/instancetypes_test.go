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

func serveInstanceTypes(t *testing.T, its ...*pb.InstanceType) (*CloudProvider, *fakeProvider) {
	t.Helper()
	fake := &fakeProvider{getInstanceTypes: func(context.Context, *pb.GetInstanceTypesRequest) (*pb.GetInstanceTypesResponse, error) {
		return &pb.GetInstanceTypesResponse{InstanceTypes: its}, nil
	}}
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

	if got := r.Get(corev1.LabelInstanceTypeStable); !got.Has("EM-A115X-SSD") || got.MinValues == nil || *got.MinValues != 1 {
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
			cp, _ := serveInstanceTypes(t, it)
			its, err := cp.GetInstanceTypes(context.Background(), testNodePool("default"))
			if err == nil || its != nil {
				t.Fatalf("got %d types and %v; want an error", len(its), err)
			}
		})
	}
}

func TestDuplicateInstanceTypesRejected(t *testing.T) {
	cp, _ := serveInstanceTypes(t, testInstanceType(), testInstanceType())
	if _, err := cp.GetInstanceTypes(context.Background(), testNodePool("default")); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("got %v", err)
	}
}

func TestInstanceTypesCachedPerNodeClass(t *testing.T) {
	var mu sync.Mutex
	var seenNodePools []string
	fake := &fakeProvider{getInstanceTypes: func(_ context.Context, r *pb.GetInstanceTypesRequest) (*pb.GetInstanceTypesResponse, error) {
		mu.Lock()
		seenNodePools = append(seenNodePools, string(r.GetNodePoolJson()))
		mu.Unlock()
		return &pb.GetInstanceTypesResponse{InstanceTypes: []*pb.InstanceType{testInstanceType()}}, nil
	}}
	opts := testOptions()
	opts.InstanceTypesTTL = time.Minute
	cp := startProvider(t, fake, opts)
	now := time.Unix(1_000_000, 0)
	cp.instanceTypes.now = func() time.Time { return now }
	ctx := context.Background()

	get := func(nodeClass string) []*cloudprovider.InstanceType {
		t.Helper()
		its, err := cp.GetInstanceTypes(ctx, testNodePool(nodeClass))
		if err != nil {
			t.Fatal(err)
		}
		return its
	}
	first := get("default")
	if again := get("default"); again[0] != first[0] || fake.instanceTypeCalls.Load() != 1 {
		t.Fatalf("second call within the TTL reached the provider (%d calls)", fake.instanceTypeCalls.Load())
	}
	get("other")
	if fake.instanceTypeCalls.Load() != 2 {
		t.Fatalf("another NodeClass must have its own entry (%d calls)", fake.instanceTypeCalls.Load())
	}
	now = now.Add(2 * time.Minute)
	get("default")
	if fake.instanceTypeCalls.Load() != 3 {
		t.Fatalf("an expired entry must be refetched (%d calls)", fake.instanceTypeCalls.Load())
	}
	// The provider receives the NodePool as Kubernetes JSON.
	if !strings.Contains(seenNodePools[0], `"kind":"NodePool"`) || !strings.Contains(seenNodePools[0], `"name":"default"`) {
		t.Fatalf("NodePool JSON %s", seenNodePools[0])
	}
}

// After an insufficient-capacity error the provider has marked an offering
// unavailable; the next GetInstanceTypes must see that, not the cached copy.
func TestInsufficientCapacityInvalidatesInstanceTypes(t *testing.T) {
	fake := &fakeProvider{
		getInstanceTypes: func(context.Context, *pb.GetInstanceTypesRequest) (*pb.GetInstanceTypesResponse, error) {
			return &pb.GetInstanceTypesResponse{InstanceTypes: []*pb.InstanceType{testInstanceType()}}, nil
		},
		create: func(context.Context, *pb.CreateRequest) (*pb.CreateResponse, error) {
			return nil, grpcstatus.Error(codes.ResourceExhausted, "sold out")
		},
	}
	opts := testOptions()
	opts.InstanceTypesTTL = time.Hour
	cp := startProvider(t, fake, opts)
	ctx := context.Background()
	if _, err := cp.GetInstanceTypes(ctx, testNodePool("default")); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Create(ctx, testNodeClaim()); !cloudprovider.IsInsufficientCapacityError(err) {
		t.Fatalf("got %v", err)
	}
	if _, err := cp.GetInstanceTypes(ctx, testNodePool("default")); err != nil {
		t.Fatal(err)
	}
	if fake.instanceTypeCalls.Load() != 2 {
		t.Fatalf("provider saw %d GetInstanceTypes calls, want 2", fake.instanceTypeCalls.Load())
	}
}
