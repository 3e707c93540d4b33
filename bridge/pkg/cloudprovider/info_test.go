package cloudprovider

import (
	"context"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/object"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	clock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/controllers/nodepool/readiness"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
	"github.com/karpenter-provider-scaleway/bridge/pkg/nodeclass"
)

var scalewayNodeClass = schema.GroupVersionKind{Group: "karpenter.scaleway.com", Version: "v1alpha1", Kind: "ScalewayElasticMetalNodeClass"}

func TestRegisterFromInfo(t *testing.T) {
	s := runtime.NewScheme()
	gvk, err := Register(s, testInfo)
	if err != nil {
		t.Fatal(err)
	}
	if gvk != scalewayNodeClass {
		t.Fatalf("registered %s", gvk)
	}
	kinds, _, err := s.ObjectKinds(&nodeclass.NodeClass{})
	if err != nil || len(kinds) != 1 || kinds[0] != scalewayNodeClass {
		t.Fatalf("NodeClass kinds %v, %v", kinds, err)
	}
	if !s.Recognizes(scalewayNodeClass.GroupVersion().WithKind("ScalewayElasticMetalNodeClassList")) {
		t.Fatal("list kind not registered")
	}
	if !v1.WellKnownLabels.Has("karpenter.scaleway.com/offer-family") {
		t.Fatal("provider label not well-known")
	}
	if !v1.RestrictedLabelDomains.Has("karpenter.scaleway.com") {
		t.Fatal("provider label domain not restricted")
	}
	// Registering the same answer again (e.g. a second start in one process)
	// is harmless.
	if _, err := Register(s, testInfo); err != nil {
		t.Fatal(err)
	}
}

func TestRegisterRejects(t *testing.T) {
	twoKinds := &pb.InfoResponse{Name: "x", NodeClasses: []*pb.NodeClassKind{
		{Group: "a.example.com", Version: "v1", Kind: "A"}, {Group: "b.example.com", Version: "v1", Kind: "B"},
	}}
	noKind := &pb.InfoResponse{Name: "x"}
	noName := &pb.InfoResponse{NodeClasses: testInfo.NodeClasses}
	badLabel := &pb.InfoResponse{Name: "x", NodeClasses: testInfo.NodeClasses, WellKnownLabels: []string{"not a label"}}
	for name, info := range map[string]*pb.InfoResponse{"two kinds": twoKinds, "no kind": noKind, "no name": noName, "bad label": badLabel} {
		t.Run(name, func(t *testing.T) {
			if _, err := Register(runtime.NewScheme(), info); err == nil {
				t.Fatal("want an error")
			}
		})
	}
	// One Go type cannot stand for two kinds.
	s := runtime.NewScheme()
	if _, err := Register(s, testInfo); err != nil {
		t.Fatal(err)
	}
	other := &pb.InfoResponse{Name: "x", NodeClasses: []*pb.NodeClassKind{{Group: "other.example.com", Version: "v1", Kind: "Other"}}}
	if _, err := Register(s, other); err == nil {
		t.Fatal("want an error registering a second kind")
	}
}

// The provider may start after the bridge: WaitForInfo keeps asking until the
// socket answers.
func TestWaitForInfoWaitsForTheSocket(t *testing.T) {
	socket := socketPath(t)
	client := dial(t, socket)
	go func() {
		time.Sleep(300 * time.Millisecond)
		serve(t, socket, &fakeProvider{info: func(context.Context, *pb.InfoRequest) (*pb.InfoResponse, error) { return testInfo, nil }})
	}()
	info, err := WaitForInfo(context.Background(), client, time.Second, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if info.GetName() != "scaleway" || len(info.GetNodeClasses()) != 1 {
		t.Fatalf("info %v", info)
	}
}

func TestWaitForInfoGivesUp(t *testing.T) {
	socket := socketPath(t)
	serve(t, socket, &fakeProvider{info: func(context.Context, *pb.InfoRequest) (*pb.InfoResponse, error) {
		return nil, grpcstatus.Error(codes.Unavailable, "still starting")
	}})
	if _, err := WaitForInfo(context.Background(), dial(t, socket), 100*time.Millisecond, 500*time.Millisecond); err == nil {
		t.Fatal("want an error once the startup timeout passes")
	}
}

// Karpenter core's NodePool readiness controller, unchanged, reads the
// provider's NodeClass through the bridge's generic type: NodeClass Ready
// drives the NodePool's NodeClassReady condition.
func TestCoreReadsNodeClassReadiness(t *testing.T) {
	if _, err := Register(scheme.Scheme, testInfo); err != nil {
		t.Fatal(err)
	}
	cp := New(nil, testOptions(), testInfo, nil, nil)
	if got := object.GVK(cp.GetSupportedNodeClasses()[0]); got != scalewayNodeClass {
		t.Fatalf("core sees the NodeClass as %s", got)
	}

	cases := []struct {
		name       string
		conditions []any
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		{"ready", []any{condition("Ready", "True", "Ready")}, metav1.ConditionTrue, "NodeClassReady"},
		{"not ready", []any{condition("Ready", "False", "ImageUnavailable")}, metav1.ConditionFalse, "ImageUnavailable"},
		{"no status yet", nil, metav1.ConditionFalse, "NodeClassReadinessUnknown"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The NodeClass as the provider writes it: a spec the bridge
			// knows nothing about, and conditions.
			nc := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": scalewayNodeClass.GroupVersion().String(),
				"kind":       scalewayNodeClass.Kind,
				"metadata":   map[string]any{"name": "default"},
				"spec":       map[string]any{"zone": "fr-par-2", "offers": []any{"EM-A115X-SSD"}, "talos": map[string]any{"version": "v1.13.9"}},
			}}
			if tc.conditions != nil {
				nc.Object["status"] = map[string]any{"conditions": tc.conditions}
			}
			nodePool := testNodePool("default")
			kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).
				WithStatusSubresource(&v1.NodePool{}).
				WithObjects(nodePool, nc).
				Build()
			ctx := context.Background()
			if err := kube.Get(ctx, client.ObjectKeyFromObject(nodePool), nodePool); err != nil {
				t.Fatal(err)
			}

			controller := readiness.NewController(clock.NewFakeClock(time.Now()), kube, cp)
			if _, err := controller.Reconcile(ctx, nodePool); err != nil {
				t.Fatal(err)
			}

			got := &v1.NodePool{}
			if err := kube.Get(ctx, client.ObjectKeyFromObject(nodePool), got); err != nil {
				t.Fatal(err)
			}
			cond := got.StatusConditions().Get(v1.ConditionTypeNodeClassReady)
			if cond == nil || cond.Status != tc.wantStatus || cond.Reason != tc.wantReason {
				t.Fatalf("NodeClassReady = %+v, want %s/%s", cond, tc.wantStatus, tc.wantReason)
			}

			// And the spec survives the trip through the typed object.
			typed := &nodeclass.NodeClass{}
			if err := kube.Get(ctx, client.ObjectKey{Name: "default"}, typed); err != nil {
				t.Fatal(err)
			}
			if string(typed.Spec) != `{"offers":["EM-A115X-SSD"],"talos":{"version":"v1.13.9"},"zone":"fr-par-2"}` {
				t.Fatalf("spec %s", typed.Spec)
			}
		})
	}
}

func condition(typ, status, reason string) map[string]any {
	return map[string]any{
		"type": typ, "status": status, "reason": reason, "message": "",
		"lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": int64(1),
	}
}
