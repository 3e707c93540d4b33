package cloudprovider

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
)

func testNodeClaim() *v1.NodeClaim {
	return &v1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:   "default-abcde",
			UID:    types.UID("0b6f3c52-5d4e-4c55-9d8c-6c5b3c1f0a11"),
			Labels: map[string]string{v1.NodePoolLabelKey: "default"},
		},
		Spec: v1.NodeClaimSpec{
			Requirements: []v1.NodeSelectorRequirementWithMinValues{{
				Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"EM-A115X-SSD"},
			}},
			Resources:    v1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("3")}},
			NodeClassRef: &v1.NodeClassReference{Group: "karpenter.scaleway.com", Kind: "ScalewayElasticMetalNodeClass", Name: "default"},
		},
	}
}

func testNodePool(nodeClass string) *v1.NodePool {
	return &v1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: v1.NodePoolSpec{Template: v1.NodeClaimTemplate{Spec: v1.NodeClaimTemplateSpec{
			NodeClassRef: &v1.NodeClassReference{Group: "karpenter.scaleway.com", Kind: "ScalewayElasticMetalNodeClass", Name: nodeClass},
			Requirements: []v1.NodeSelectorRequirementWithMinValues{{
				Key: v1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{v1.CapacityTypeOnDemand},
			}},
		}}},
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestCreateNodeClaimJSONRoundTrip(t *testing.T) {
	var sent map[string]any
	fake := &fakeProvider{create: func(_ context.Context, r *pb.CreateRequest) (*pb.CreateResponse, error) {
		if err := json.Unmarshal(r.GetNodeClaimJson(), &sent); err != nil {
			return nil, grpcstatus.Error(codes.InvalidArgument, err.Error())
		}
		var nc v1.NodeClaim
		if err := json.Unmarshal(r.GetNodeClaimJson(), &nc); err != nil {
			return nil, grpcstatus.Error(codes.InvalidArgument, err.Error())
		}
		nc.Labels[corev1.LabelInstanceTypeStable] = "EM-A115X-SSD"
		nc.Labels[corev1.LabelTopologyZone] = "fr-par-2"
		nc.Status.ProviderID = "scaleway://fr-par-2/11111111-2222-3333-4444-555555555555"
		nc.Status.ImageID = "talos-v1.13.9"
		nc.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("192Gi")}
		nc.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("31"), corev1.ResourceMemory: resource.MustParse("190Gi")}
		return &pb.CreateResponse{NodeClaimJson: mustJSON(t, &nc)}, nil
	}}
	cp := startProvider(t, fake, testOptions())

	in := testNodeClaim()
	got, err := cp.Create(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	// What the provider received is complete Kubernetes JSON.
	if sent["apiVersion"] != "karpenter.sh/v1" || sent["kind"] != "NodeClaim" {
		t.Fatalf("sent apiVersion %v kind %v", sent["apiVersion"], sent["kind"])
	}
	if in.APIVersion != "" || in.Kind != "" {
		t.Fatal("Create mutated core's NodeClaim")
	}
	// What came back is decoded in full.
	if got.Name != in.Name || got.UID != in.UID {
		t.Fatalf("identity lost: %s %s", got.Name, got.UID)
	}
	if got.Status.ProviderID != "scaleway://fr-par-2/11111111-2222-3333-4444-555555555555" || got.Status.ImageID != "talos-v1.13.9" {
		t.Fatalf("status: %+v", got.Status)
	}
	if got.Labels[corev1.LabelTopologyZone] != "fr-par-2" || got.Labels[v1.NodePoolLabelKey] != "default" {
		t.Fatalf("labels: %v", got.Labels)
	}
	if q := got.Status.Allocatable[corev1.ResourceMemory]; q.Cmp(resource.MustParse("190Gi")) != 0 {
		t.Fatalf("allocatable memory %s", q.String())
	}
	if q := got.Spec.Resources.Requests[corev1.ResourcePods]; q.Value() != 3 {
		t.Fatalf("requests lost: %v", got.Spec.Resources.Requests)
	}
	if len(got.Spec.Requirements) != 1 || got.Spec.Requirements[0].Values[0] != "EM-A115X-SSD" {
		t.Fatalf("requirements lost: %v", got.Spec.Requirements)
	}
}

func TestCreateWithoutProviderIDFails(t *testing.T) {
	fake := &fakeProvider{create: func(_ context.Context, r *pb.CreateRequest) (*pb.CreateResponse, error) {
		return &pb.CreateResponse{NodeClaimJson: r.GetNodeClaimJson()}, nil
	}}
	cp := startProvider(t, fake, testOptions())
	if _, err := cp.Create(context.Background(), testNodeClaim()); err == nil {
		t.Fatal("want an error for a NodeClaim without providerID")
	}
}

func TestGetDeleteList(t *testing.T) {
	stored := testNodeClaim()
	stored.Status.ProviderID = "scaleway://fr-par-2/a"
	var deleted atomic.Value
	fake := &fakeProvider{
		get: func(_ context.Context, r *pb.GetRequest) (*pb.GetResponse, error) {
			if r.GetProviderId() != stored.Status.ProviderID {
				return nil, grpcstatus.Error(codes.NotFound, "no such server")
			}
			return &pb.GetResponse{NodeClaimJson: mustJSON(t, stored)}, nil
		},
		delete: func(_ context.Context, r *pb.DeleteRequest) (*pb.DeleteResponse, error) {
			var nc v1.NodeClaim
			if err := json.Unmarshal(r.GetNodeClaimJson(), &nc); err != nil {
				return nil, grpcstatus.Error(codes.InvalidArgument, err.Error())
			}
			deleted.Store(nc.Status.ProviderID)
			return &pb.DeleteResponse{}, nil
		},
		list: func(context.Context, *pb.ListRequest) (*pb.ListResponse, error) {
			return &pb.ListResponse{NodeClaimsJson: [][]byte{mustJSON(t, stored)}}, nil
		},
	}
	cp := startProvider(t, fake, testOptions())
	ctx := context.Background()

	got, err := cp.Get(ctx, stored.Status.ProviderID)
	if err != nil || got.Status.ProviderID != stored.Status.ProviderID || got.Name != stored.Name {
		t.Fatalf("Get: %v %v", got, err)
	}
	if _, err := cp.Get(ctx, "scaleway://fr-par-2/other"); karpenterKind(err) != "NodeClaimNotFound" {
		t.Fatalf("Get unknown: %v", err)
	}
	if err := cp.Delete(ctx, stored); err != nil {
		t.Fatal(err)
	}
	if deleted.Load() != stored.Status.ProviderID {
		t.Fatalf("provider deleted %v", deleted.Load())
	}
	list, err := cp.List(ctx)
	if err != nil || len(list) != 1 || list[0].Status.ProviderID != stored.Status.ProviderID {
		t.Fatalf("List: %v %v", list, err)
	}
}

// One undecodable entry fails the whole List: core's garbage collection
// deletes NodeClaims missing from a list, so a partial one is dangerous.
func TestListNeverPartial(t *testing.T) {
	good := testNodeClaim()
	good.Status.ProviderID = "scaleway://fr-par-2/a"
	fake := &fakeProvider{list: func(context.Context, *pb.ListRequest) (*pb.ListResponse, error) {
		return &pb.ListResponse{NodeClaimsJson: [][]byte{mustJSON(t, good), []byte(`{"metadata":`)}}, nil
	}}
	cp := startProvider(t, fake, testOptions())
	list, err := cp.List(context.Background())
	if err == nil || list != nil {
		t.Fatalf("got %v, %v; want nil and an error", list, err)
	}
}

func TestIsDrifted(t *testing.T) {
	reason := "NodeClassDrift"
	fake := &fakeProvider{isDrifted: func(context.Context, *pb.IsDriftedRequest) (*pb.IsDriftedResponse, error) {
		return &pb.IsDriftedResponse{Reason: reason}, nil
	}}
	cp := startProvider(t, fake, testOptions())
	got, err := cp.IsDrifted(context.Background(), testNodeClaim())
	if err != nil || got != "NodeClassDrift" {
		t.Fatalf("got %q, %v", got, err)
	}
	reason = "not a reason!"
	if _, err := cp.IsDrifted(context.Background(), testNodeClaim()); err == nil {
		t.Fatal("want an error for an invalid reason")
	}
}

// hang answers only when the test ends, whatever the caller's deadline: a
// provider that is stuck.
func hang(t *testing.T) <-chan struct{} {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	return release
}

func TestCallsTimeOut(t *testing.T) {
	release := hang(t)
	fake := &fakeProvider{
		create: func(context.Context, *pb.CreateRequest) (*pb.CreateResponse, error) {
			<-release
			return nil, grpcstatus.Error(codes.Internal, "released")
		},
		list: func(context.Context, *pb.ListRequest) (*pb.ListResponse, error) {
			<-release
			return nil, grpcstatus.Error(codes.Internal, "released")
		},
	}
	opts := testOptions()
	opts.CallTimeout = 100 * time.Millisecond
	opts.CreateTimeout = 150 * time.Millisecond
	opts.ListTimeout = 200 * time.Millisecond
	cp := startProvider(t, fake, opts)

	calls := map[string]func() error{
		"Create": func() error { _, err := cp.Create(context.Background(), testNodeClaim()); return err },
		"List":   func() error { _, err := cp.List(context.Background()); return err },
	}
	for name, do := range calls {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- do() }()
			select {
			case err := <-done:
				if grpcstatus.Code(err) != codes.DeadlineExceeded {
					t.Fatalf("got %v, want DEADLINE_EXCEEDED", err)
				}
				if kind := karpenterKind(err); kind != "plain" {
					t.Fatalf("a timeout must be a plain error, got %s", kind)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("call did not honour its deadline")
			}
		})
	}
}
