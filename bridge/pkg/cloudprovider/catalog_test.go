package cloudprovider

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
)

const kindInstance = "ScalewayInstanceNodeClass"

// namedInstanceType is testInstanceType renamed and repriced: a VM type when
// name is an Instance commercial type.
func namedInstanceType(name string, price float64) *pb.InstanceType {
	it := proto.Clone(testInstanceType()).(*pb.InstanceType)
	it.Name = name
	for _, r := range it.GetRequirements() {
		if r.GetKey() == corev1.LabelInstanceTypeStable {
			r.Values = []string{name}
		}
	}
	for _, o := range it.GetOfferings() {
		o.Price = price
	}
	return it
}

func testNodePoolOfKind(kind, name string) *v1.NodePool {
	np := testNodePool(name)
	np.Spec.Template.Spec.NodeClassRef.Kind = kind
	return np
}

// Both kinds in one snapshot: a NodePool gets its nodeClassRef's (kind,
// name) catalog, else its kind's default; Elastic Metal answers as before,
// also for a NodePool naming no kind or a kind the provider does not list.
func TestInstanceTypesKeyedByKind(t *testing.T) {
	next := make(chan *pb.WatchInstanceTypesResponse, 1)
	next <- &pb.WatchInstanceTypesResponse{
		Revision:       1,
		DefaultCatalog: []*pb.InstanceType{namedInstanceType("EM-A115X-SSD", 0.25)},
		Catalogs: []*pb.NodeClassCatalog{
			{NodeClassName: "shared", InstanceTypes: []*pb.InstanceType{namedInstanceType("EM-A115X-SSD", 0.1)}},
			{NodeClassName: "shared", NodeClassKind: kindInstance, InstanceTypes: []*pb.InstanceType{namedInstanceType("POP2-2C-8G", 0.2)}},
		},
		KindDefaults: []*pb.NodeClassCatalog{
			{NodeClassKind: kindInstance, InstanceTypes: []*pb.InstanceType{namedInstanceType("POP2-2C-8G", 0.3)}},
		},
		OffersReadAtUnix: time.Now().Unix(),
	}
	cp := startProvider(t, &fakeProvider{watch: streamCatalogs(next)}, testOptions())
	ctx := context.Background()

	for _, tc := range []struct {
		kind, name string
		wantType   string
		wantPrice  float64
	}{
		{kindElasticMetal, "shared", "EM-A115X-SSD", 0.1},
		{kindInstance, "shared", "POP2-2C-8G", 0.2},
		{kindInstance, "unlisted", "POP2-2C-8G", 0.3},
		{kindElasticMetal, "unlisted", "EM-A115X-SSD", 0.25},
		{"", "shared", "EM-A115X-SSD", 0.1},
		{"OtherNodeClass", "shared", "EM-A115X-SSD", 0.1},
		{"OtherNodeClass", "unlisted", "EM-A115X-SSD", 0.25},
	} {
		its, err := cp.GetInstanceTypes(ctx, testNodePoolOfKind(tc.kind, tc.name))
		if err != nil {
			t.Fatalf("%s/%s: %v", tc.kind, tc.name, err)
		}
		if len(its) != 1 || its[0].Name != tc.wantType || its[0].Offerings[0].Price != tc.wantPrice {
			t.Fatalf("%s/%s: got %d types, first %s at %v; want %s at %v", tc.kind, tc.name,
				len(its), its[0].Name, its[0].Offerings[0].Price, tc.wantType, tc.wantPrice)
		}
	}
}

// An Instance NodePool whose NodeClass is not listed gets the Instance
// default, empty while the provider has no Instance types, never Elastic
// Metal's; a kind with NodeClasses but no kind default is served the same.
func TestInstanceKindNeverGetsElasticMetalTypes(t *testing.T) {
	em := []*pb.InstanceType{testInstanceType()}
	for name, msg := range map[string]*pb.WatchInstanceTypesResponse{
		"empty kind default": {
			DefaultCatalog: em,
			KindDefaults:   []*pb.NodeClassCatalog{{NodeClassKind: kindInstance}},
		},
		"NodeClasses without a kind default": {
			DefaultCatalog: em,
			Catalogs: []*pb.NodeClassCatalog{
				{NodeClassName: "vms", NodeClassKind: kindInstance, InstanceTypes: []*pb.InstanceType{namedInstanceType("POP2-2C-8G", 0.2)}},
			},
		},
	} {
		snap, err := convertSnapshot(msg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if its := snap.lookup(kindInstance, "unlisted"); its == nil || len(its) != 0 {
			t.Fatalf("%s: an unlisted Instance NodeClass got %v, want an empty list", name, its)
		}
		if its := snap.lookup(kindElasticMetal, "unlisted"); len(its) != 1 || its[0].Name != "EM-A115X-SSD" {
			t.Fatalf("%s: Elastic Metal default changed: %v", name, its)
		}
	}
}

func TestElasticMetalKindDefaultIsRejected(t *testing.T) {
	for _, kind := range []string{"", kindElasticMetal} {
		_, err := convertSnapshot(&pb.WatchInstanceTypesResponse{
			KindDefaults: []*pb.NodeClassCatalog{{NodeClassKind: kind}},
		})
		if err == nil || !strings.Contains(err.Error(), "default_catalog") {
			t.Fatalf("kind %q: got %v", kind, err)
		}
	}
}
