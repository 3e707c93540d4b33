package nodeclass

import (
	"encoding/json"
	"testing"

	"github.com/awslabs/operatorpkg/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// An Instance NodeClass as the provider writes it, read as the slot 1 type
// the way the client decodes it: from JSON, and from unstructured through the
// scheme's converter.
func TestSecondKindFromJSON(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": instance.GroupVersion().String(),
		"kind":       instance.Kind,
		"metadata":   map[string]any{"name": "pop2", "generation": int64(3)},
		"spec":       map[string]any{"zone": "fr-par-2", "commercialTypes": []any{"POP2-2C-8G"}},
		"status": map[string]any{"conditions": []any{
			map[string]any{"type": "Ready", "status": "False", "reason": "ImageUnavailable", "message": "no image in fr-par-2",
				"lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": int64(3)},
			map[string]any{"type": "ImageResolved", "status": "False", "reason": "ImageUnavailable", "message": "",
				"lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": int64(3)},
		}},
	}}
	raw, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	fromJSON := &NodeClassOf[Slot1]{}
	if err := json.Unmarshal(raw, fromJSON); err != nil {
		t.Fatal(err)
	}
	fromUnstructured := &NodeClassOf[Slot1]{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, fromUnstructured); err != nil {
		t.Fatal(err)
	}
	for name, nc := range map[string]*NodeClassOf[Slot1]{"json": fromJSON, "unstructured": fromUnstructured} {
		t.Run(name, func(t *testing.T) {
			if nc.Kind != instance.Kind || nc.APIVersion != "karpenter.scaleway.com/v1alpha1" || nc.Name != "pop2" || nc.Generation != 3 {
				t.Fatalf("meta %+v %+v", nc.TypeMeta, nc.ObjectMeta)
			}
			if string(nc.Spec) != `{"commercialTypes":["POP2-2C-8G"],"zone":"fr-par-2"}` {
				t.Fatalf("spec %s", nc.Spec)
			}
			ready := nc.StatusConditions().Get(status.ConditionReady)
			if ready == nil || !ready.IsFalse() || ready.Reason != "ImageUnavailable" || ready.Message != "no image in fr-par-2" || ready.ObservedGeneration != 3 {
				t.Fatalf("Ready %+v", ready)
			}
			if len(nc.GetConditions()) != 2 || nc.GetConditions()[1].Type != "ImageResolved" {
				t.Fatalf("conditions %+v", nc.GetConditions())
			}

			// Back to JSON: spec and conditions as the provider wrote them.
			out, err := json.Marshal(nc)
			if err != nil {
				t.Fatal(err)
			}
			var back, want map[string]any
			if err := json.Unmarshal(out, &back); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			for _, field := range []string{"apiVersion", "kind", "spec", "status"} {
				if got, _ := json.Marshal(back[field]); string(got) != string(mustMarshal(t, want[field])) {
					t.Errorf("%s after the round trip %s, want %s", field, got, mustMarshal(t, want[field]))
				}
			}
		})
	}
}

// Ready is the root condition and nothing else: the provider's other
// conditions do not make the bridge's view of Ready any different.
func TestReadyIsRoot(t *testing.T) {
	nc := &NodeClassOf[Slot1]{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	if !nc.StatusConditions().Get(status.ConditionReady).IsUnknown() {
		t.Fatal("Ready without conditions should be Unknown")
	}
	nc.SetConditions([]status.Condition{
		{Type: status.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", ObservedGeneration: 1},
		{Type: "ImageResolved", Status: metav1.ConditionFalse, Reason: "Stale", ObservedGeneration: 1},
	})
	if !nc.StatusConditions().Root().IsTrue() || nc.StatusConditions().Root().Type != status.ConditionReady {
		t.Fatalf("root %+v", nc.StatusConditions().Root())
	}
}

func TestDeepCopyIsIndependent(t *testing.T) {
	in := &NodeClassListOf[Slot1]{Items: []NodeClassOf[Slot1]{{
		ObjectMeta: metav1.ObjectMeta{Name: "pop2", Labels: map[string]string{"a": "b"}},
		Spec:       json.RawMessage(`{"zone":"fr-par-2"}`),
		Status:     Status{Conditions: []status.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}},
	}}}
	out, ok := in.DeepCopyObject().(*NodeClassListOf[Slot1])
	if !ok {
		t.Fatalf("DeepCopyObject gives %T", in.DeepCopyObject())
	}
	out.Items[0].Labels["a"] = "changed"
	out.Items[0].Spec[2] = 'Z'
	out.Items[0].Status.Conditions[0].Status = metav1.ConditionFalse
	got := in.Items[0]
	if got.Labels["a"] != "b" || string(got.Spec) != `{"zone":"fr-par-2"}` || got.Status.Conditions[0].Status != metav1.ConditionTrue {
		t.Fatalf("the copy shares memory with the original: %+v", got)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
