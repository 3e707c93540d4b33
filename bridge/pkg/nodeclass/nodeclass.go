// Package nodeclass holds the Go types the bridge uses for the provider's
// NodeClass custom resources.
//
// The bridge knows nothing about the provider's NodeClass schemas: the CRDs,
// the specs and the reconciliation of their status all belong to the
// provider. Karpenter core only needs to read the `Ready` condition (NodePool
// readiness) and to know each GroupVersionKind (labels, watches). So the types
// keep the spec as raw JSON and decode only status.conditions. Core never
// writes NodeClasses, and neither does the bridge, so nothing is lost by not
// decoding the rest.
//
// A provider may have several NodeClass kinds (Scaleway has one for Elastic
// Metal and one for Instances), and each needs its own Go type: a
// runtime.Scheme maps a Go type to its kinds, controller-runtime and
// operatorpkg's object.GVK derive an object's GVK from its Go type alone (and
// fail when the type has more than one kind), and core tells the kinds apart
// only through the GVKs of the objects GetSupportedNodeClasses returns. The
// types are therefore one generic type, NodeClassOf[S], instantiated once per
// slot marker S: the behaviour is written once, and each instantiation is a
// distinct type the scheme can bind to one kind. Register binds the
// provider's kind i to slot i.
package nodeclass

import (
	"encoding/json"

	"github.com/awslabs/operatorpkg/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Slot0 and Slot1 mark the Go type of the provider's first and second
// NodeClass kind. More kinds need one more marker here and one more row in
// slots (register.go).
type (
	Slot0 struct{}
	Slot1 struct{}
)

// Slot is the set of slot markers NodeClassOf can be instantiated with.
type Slot interface{ Slot0 | Slot1 }

// NodeClassOf is a provider NodeClass seen through the bridge: metadata, the
// raw spec and the status conditions. It satisfies status.Object with `Ready`
// as the root condition, which is what Karpenter core reads. S only makes the
// type distinct per slot; it holds no data.
type NodeClassOf[S Slot] struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   json.RawMessage `json:"spec,omitempty"`
	Status Status          `json:"status,omitempty"`
}

// Status is the part of the NodeClass status the bridge understands.
type Status struct {
	Conditions []status.Condition `json:"conditions,omitempty"`
}

// NodeClassListOf is the list type the controller-runtime cache needs to list
// and watch the kind of slot S.
type NodeClassListOf[S Slot] struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []NodeClassOf[S] `json:"items"`
}

var (
	_ status.Object = (*NodeClassOf[Slot0])(nil)
	_ status.Object = (*NodeClassOf[Slot1])(nil)
)

// StatusConditions uses Ready as the root condition with no dependents: the
// provider computes Ready itself, the bridge only reads it.
func (in *NodeClassOf[S]) StatusConditions(opts ...status.ForOption) status.ConditionSet {
	return status.NewReadyConditions().For(in, opts...)
}

func (in *NodeClassOf[S]) GetConditions() []status.Condition {
	return in.Status.Conditions
}

func (in *NodeClassOf[S]) SetConditions(conditions []status.Condition) {
	in.Status.Conditions = conditions
}

func (in *NodeClassOf[S]) DeepCopyInto(out *NodeClassOf[S]) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if in.Spec != nil {
		out.Spec = append(json.RawMessage(nil), in.Spec...)
	}
	if in.Status.Conditions != nil {
		out.Status.Conditions = make([]status.Condition, len(in.Status.Conditions))
		for i := range in.Status.Conditions {
			in.Status.Conditions[i].DeepCopyInto(&out.Status.Conditions[i])
		}
	}
}

func (in *NodeClassOf[S]) DeepCopy() *NodeClassOf[S] {
	if in == nil {
		return nil
	}
	out := new(NodeClassOf[S])
	in.DeepCopyInto(out)
	return out
}

func (in *NodeClassOf[S]) DeepCopyObject() runtime.Object {
	return in.DeepCopy()
}

func (in *NodeClassListOf[S]) DeepCopyInto(out *NodeClassListOf[S]) {
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]NodeClassOf[S], len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

func (in *NodeClassListOf[S]) DeepCopy() *NodeClassListOf[S] {
	if in == nil {
		return nil
	}
	out := new(NodeClassListOf[S])
	in.DeepCopyInto(out)
	return out
}

func (in *NodeClassListOf[S]) DeepCopyObject() runtime.Object {
	return in.DeepCopy()
}
