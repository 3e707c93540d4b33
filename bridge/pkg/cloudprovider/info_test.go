package cloudprovider

import (
	"context"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/object"
	"github.com/awslabs/operatorpkg/status"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
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
	nodeutils "sigs.k8s.io/karpenter/pkg/utils/node"
	nodeclaimutils "sigs.k8s.io/karpenter/pkg/utils/nodeclaim"
	nodepoolutils "sigs.k8s.io/karpenter/pkg/utils/nodepool"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
	"github.com/karpenter-provider-scaleway/bridge/pkg/nodeclass"
)

var (
	scalewayNodeClass         = schema.GroupVersionKind{Group: "karpenter.scaleway.com", Version: "v1alpha1", Kind: "ScalewayElasticMetalNodeClass"}
	scalewayInstanceNodeClass = schema.GroupVersionKind{Group: "karpenter.scaleway.com", Version: "v1alpha1", Kind: kindInstance}
)

// twoKindsInfo is the provider's answer when the cluster has both CRDs:
// Elastic Metal first.
var twoKindsInfo = &pb.InfoResponse{
	Name: "scaleway",
	NodeClasses: []*pb.NodeClassKind{
		{Group: scalewayNodeClass.Group, Version: scalewayNodeClass.Version, Kind: scalewayNodeClass.Kind},
		{Group: scalewayInstanceNodeClass.Group, Version: scalewayInstanceNodeClass.Version, Kind: scalewayInstanceNodeClass.Kind},
	},
	WellKnownLabels: testInfo.WellKnownLabels,
	ProviderVersion: "test",
}

func TestRegisterFromInfo(t *testing.T) {
	s := runtime.NewScheme()
	gvks, err := Register(s, testInfo)
	if err != nil {
		t.Fatal(err)
	}
	if len(gvks) != 1 || gvks[0] != scalewayNodeClass {
		t.Fatalf("registered %v", gvks)
	}
	kinds, _, err := s.ObjectKinds(nodeclass.New(0))
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

func TestRegisterTwoKindsFromInfo(t *testing.T) {
	s := runtime.NewScheme()
	gvks, err := Register(s, twoKindsInfo)
	if err != nil {
		t.Fatal(err)
	}
	want := []schema.GroupVersionKind{scalewayNodeClass, scalewayInstanceNodeClass}
	if len(gvks) != 2 || gvks[0] != want[0] || gvks[1] != want[1] {
		t.Fatalf("registered %v, want %v in Info order", gvks, want)
	}
	for i, gvk := range want {
		kinds, _, err := s.ObjectKinds(nodeclass.New(i))
		if err != nil || len(kinds) != 1 || kinds[0] != gvk {
			t.Errorf("kinds of NodeClass type %d: %v, %v; want %s", i, kinds, err, gvk)
		}
		if !s.Recognizes(gvk.GroupVersion().WithKind(gvk.Kind + "List")) {
			t.Errorf("list kind of %s not registered", gvk)
		}
	}
	if _, err := Register(s, twoKindsInfo); err != nil {
		t.Fatalf("registering the same answer again: %v", err)
	}

	// Core resolves the objects GetSupportedNodeClasses returns through
	// client-go's scheme.
	if _, err := Register(scheme.Scheme, twoKindsInfo); err != nil {
		t.Fatal(err)
	}
	cp := New(nil, testOptions(), twoKindsInfo, nil, nil)
	supported := cp.GetSupportedNodeClasses()
	if len(supported) != 2 {
		t.Fatalf("%d supported NodeClasses", len(supported))
	}
	for i, gvk := range want {
		if got := object.GVK(supported[i]); got != gvk {
			t.Errorf("supported NodeClass %d is %s, want %s", i, got, gvk)
		}
	}
	// Fresh objects each time: core reads NodeClasses into them.
	if again := cp.GetSupportedNodeClasses(); again[0] == supported[0] || again[1] == supported[1] {
		t.Fatal("GetSupportedNodeClasses returned the same objects twice")
	}
	if n := len(New(nil, testOptions(), testInfo, nil, nil).GetSupportedNodeClasses()); n != 1 {
		t.Fatalf("a one-kind provider supports %d NodeClasses", n)
	}
}

func TestRegisterRejects(t *testing.T) {
	threeKinds := &pb.InfoResponse{Name: "x", NodeClasses: []*pb.NodeClassKind{
		{Group: "a.example.com", Version: "v1", Kind: "A"}, {Group: "b.example.com", Version: "v1", Kind: "B"}, {Group: "c.example.com", Version: "v1", Kind: "C"},
	}}
	sameKindTwice := &pb.InfoResponse{Name: "x", NodeClasses: []*pb.NodeClassKind{testInfo.NodeClasses[0], testInfo.NodeClasses[0]}}
	noKind := &pb.InfoResponse{Name: "x"}
	noName := &pb.InfoResponse{NodeClasses: testInfo.NodeClasses}
	badLabel := &pb.InfoResponse{Name: "x", NodeClasses: testInfo.NodeClasses, WellKnownLabels: []string{"not a label"}}
	for name, info := range map[string]*pb.InfoResponse{
		"three kinds": threeKinds, "same kind twice": sameKindTwice, "no kind": noKind, "no name": noName, "bad label": badLabel,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Register(runtime.NewScheme(), info); err == nil {
				t.Fatal("want an error")
			}
		})
	}
	// The first kind's Go type cannot stand for another kind later.
	s := runtime.NewScheme()
	if _, err := Register(s, testInfo); err != nil {
		t.Fatal(err)
	}
	other := &pb.InfoResponse{Name: "x", NodeClasses: []*pb.NodeClassKind{{Group: "other.example.com", Version: "v1", Kind: "Other"}}}
	if _, err := Register(s, other); err == nil {
		t.Fatal("want an error registering another kind on the first Go type")
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
// provider's NodeClasses of both kinds through the bridge's generic types: the
// Ready condition of the NodeClass a NodePool references, by kind and name,
// drives the NodePool's NodeClassReady condition. A NodeClass of the same name
// but the other kind, always of the opposite readiness, is in the cluster too:
// core must not read it instead.
func TestCoreReadsNodeClassReadiness(t *testing.T) {
	if _, err := Register(scheme.Scheme, twoKindsInfo); err != nil {
		t.Fatal(err)
	}
	cp := New(nil, testOptions(), twoKindsInfo, nil, nil)
	kinds := []schema.GroupVersionKind{scalewayNodeClass, scalewayInstanceNodeClass}
	specs := []map[string]any{
		{"zone": "fr-par-2", "offers": []any{"EM-A115X-SSD"}, "talos": map[string]any{"version": "v1.13.9"}},
		{"zone": "fr-par-2", "commercialTypes": []any{"POP2-2C-8G"}},
	}
	wantSpecs := []string{
		`{"offers":["EM-A115X-SSD"],"talos":{"version":"v1.13.9"},"zone":"fr-par-2"}`,
		`{"commercialTypes":["POP2-2C-8G"],"zone":"fr-par-2"}`,
	}

	cases := []struct {
		name       string
		missing    bool
		conditions []any
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		{"ready", false, []any{condition("Ready", "True", "Ready")}, metav1.ConditionTrue, "NodeClassReady"},
		{"not ready", false, []any{condition("Ready", "False", "ImageUnavailable")}, metav1.ConditionFalse, "ImageUnavailable"},
		{"no status yet", false, nil, metav1.ConditionFalse, "NodeClassReadinessUnknown"},
		{"missing", true, nil, metav1.ConditionFalse, "NodeClassNotFound"},
	}
	for i, kind := range kinds {
		other := kinds[1-i]
		for _, tc := range cases {
			t.Run(kind.Kind+"/"+tc.name, func(t *testing.T) {
				// The NodeClasses as the provider writes them: a spec the
				// bridge knows nothing about, and conditions.
				nc := nodeClassObject(kind, "default", specs[i], tc.conditions)
				otherReady := condition("Ready", "True", "Ready")
				if tc.wantStatus == metav1.ConditionTrue {
					otherReady = condition("Ready", "False", "OtherKindNotReady")
				}
				decoy := nodeClassObject(other, "default", specs[1-i], []any{otherReady})
				nodePool := testNodePoolOfKind(kind.Kind, "default")
				objects := []client.Object{nodePool, decoy}
				if !tc.missing {
					objects = append(objects, nc)
				}
				kube := fake.NewClientBuilder().WithScheme(scheme.Scheme).
					WithStatusSubresource(&v1.NodePool{}).
					WithObjects(objects...).
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
				if tc.missing {
					return
				}

				// And the spec survives the trip through the kind's typed object.
				typed := cp.GetSupportedNodeClasses()[i]
				if err := kube.Get(ctx, client.ObjectKey{Name: "default"}, typed); err != nil {
					t.Fatal(err)
				}
				if got := rawSpec(t, typed); got != wantSpecs[i] {
					t.Fatalf("spec %s", got)
				}
			})
		}
	}
}

// Core maps a NodeClass event to the NodePools that reference it by the
// group and kind of the event's object (object.GVK of its Go type) and decides
// which NodePools, NodeClaims and Nodes are its own by the same kinds: with
// two kinds, each NodeClass type reaches only its own NodePools.
func TestCoreTellsNodeClassKindsApart(t *testing.T) {
	if _, err := Register(scheme.Scheme, twoKindsInfo); err != nil {
		t.Fatal(err)
	}
	cp := New(nil, testOptions(), twoKindsInfo, nil, nil)
	em := testNodePoolOfKind(scalewayNodeClass.Kind, "default")
	em.Name = "em"
	inst := testNodePoolOfKind(kindInstance, "default")
	inst.Name = "instance"
	foreign := testNodePool("default")
	foreign.Name = "foreign"
	foreign.Spec.Template.Spec.NodeClassRef.Group = "karpenter.k8s.aws"
	foreign.Spec.Template.Spec.NodeClassRef.Kind = "EC2NodeClass"

	builder := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(em, inst, foreign)
	for field, value := range map[string]func(*v1.NodeClassReference) string{
		"spec.template.spec.nodeClassRef.group": func(r *v1.NodeClassReference) string { return r.Group },
		"spec.template.spec.nodeClassRef.kind":  func(r *v1.NodeClassReference) string { return r.Kind },
		"spec.template.spec.nodeClassRef.name":  func(r *v1.NodeClassReference) string { return r.Name },
	} {
		builder = builder.WithIndex(&v1.NodePool{}, field, func(o client.Object) []string {
			return []string{value(o.(*v1.NodePool).Spec.Template.Spec.NodeClassRef)}
		})
	}
	kube := builder.Build()

	for i, want := range []string{"em", "instance"} {
		nc := cp.GetSupportedNodeClasses()[i]
		nc.SetName("default")
		nps := &v1.NodePoolList{}
		if err := kube.List(context.Background(), nps, nodepoolutils.ForNodeClass(nc)); err != nil {
			t.Fatal(err)
		}
		if len(nps.Items) != 1 || nps.Items[0].Name != want {
			t.Errorf("NodeClass type %d reaches %d NodePools (%v), want only %s", i, len(nps.Items), nps.Items, want)
		}
	}

	for np, want := range map[*v1.NodePool]bool{em: true, inst: true, foreign: false} {
		if got := nodepoolutils.IsManaged(np, cp); got != want {
			t.Errorf("NodePool %s managed = %t", np.Name, got)
		}
		claim := &v1.NodeClaim{Spec: v1.NodeClaimSpec{NodeClassRef: np.Spec.Template.Spec.NodeClassRef}}
		if got := nodeclaimutils.IsManaged(claim, cp); got != want {
			t.Errorf("NodeClaim of NodePool %s managed = %t", np.Name, got)
		}
		ref := np.Spec.Template.Spec.NodeClassRef
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
			v1.NodeClassLabelKey(schema.GroupKind{Group: ref.Group, Kind: ref.Kind}): ref.Name,
		}}}
		if got := nodeutils.IsManaged(node, cp); got != want {
			t.Errorf("Node of NodePool %s managed = %t", np.Name, got)
		}
	}
}

func nodeClassObject(gvk schema.GroupVersionKind, name string, spec map[string]any, conditions []any) *unstructured.Unstructured {
	nc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvk.GroupVersion().String(),
		"kind":       gvk.Kind,
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
	if conditions != nil {
		nc.Object["status"] = map[string]any{"conditions": conditions}
	}
	return nc
}

// rawSpec is the raw spec of a NodeClass of any of the bridge's types.
func rawSpec(t *testing.T, nc status.Object) string {
	t.Helper()
	switch typed := nc.(type) {
	case *nodeclass.NodeClassOf[nodeclass.Slot0]:
		return string(typed.Spec)
	case *nodeclass.NodeClassOf[nodeclass.Slot1]:
		return string(typed.Spec)
	}
	t.Fatalf("not a bridge NodeClass: %T", nc)
	return ""
}

func condition(typ, status, reason string) map[string]any {
	return map[string]any{
		"type": typ, "status": status, "reason": reason, "message": "",
		"lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": int64(1),
	}
}
