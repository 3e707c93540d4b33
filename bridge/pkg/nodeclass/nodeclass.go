// Package nodeclass holds the one Go type the bridge uses for the provider's
// NodeClass custom resource.
//
// The bridge knows nothing about the provider's NodeClass schema: the CRD, the
// spec and the reconciliation of its status all belong to the provider. Karpenter
// core only needs to read the `Ready` condition (NodePool readiness) and to know
// the GroupVersionKind (labels, watches). So the type keeps the spec as raw JSON
// and decodes only status.conditions. Core never writes NodeClasses, and neither
// does the bridge, so nothing is lost by not decoding the rest.
package nodeclass

import (
	"encoding/json"
	"fmt"

	"github.com/awslabs/operatorpkg/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// NodeClass is a provider NodeClass seen through the bridge: metadata, the raw
// spec and the status conditions. It satisfies status.Object with `Ready` as the
// root condition, which is what Karpenter core reads.
type NodeClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   json.RawMessage `json:"spec,omitempty"`
	Status Status          `json:"status,omitempty"`
}

// Status is the part of the NodeClass status the bridge understands.
type Status struct {
	Conditions []status.Condition `json:"conditions,omitempty"`
}

// NodeClassList is the list type the controller-runtime cache needs to list
// and watch the kind.
type NodeClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []NodeClass `json:"items"`
}

var _ status.Object = (*NodeClass)(nil)

// StatusConditions uses Ready as the root condition with no dependents: the
// provider computes Ready itself, the bridge only reads it.
func (in *NodeClass) StatusConditions(opts ...status.ForOption) status.ConditionSet {
	return status.NewReadyConditions().For(in, opts...)
}

func (in *NodeClass) GetConditions() []status.Condition {
	return in.Status.Conditions
}

func (in *NodeClass) SetConditions(conditions []status.Condition) {
	in.Status.Conditions = conditions
}

func (in *NodeClass) DeepCopyInto(out *NodeClass) {
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

func (in *NodeClass) DeepCopy() *NodeClass {
	if in == nil {
		return nil
	}
	out := new(NodeClass)
	in.DeepCopyInto(out)
	return out
}

func (in *NodeClass) DeepCopyObject() runtime.Object {
	return in.DeepCopy()
}

func (in *NodeClassList) DeepCopyInto(out *NodeClassList) {
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]NodeClass, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

func (in *NodeClassList) DeepCopy() *NodeClassList {
	if in == nil {
		return nil
	}
	out := new(NodeClassList)
	in.DeepCopyInto(out)
	return out
}

func (in *NodeClassList) DeepCopyObject() runtime.Object {
	return in.DeepCopy()
}

// Register adds the NodeClass kind (and its List kind) to the scheme under gvk.
//
// The Go type can stand for one kind only: controller-runtime derives an
// object's GVK from its Go type, and a type registered under two kinds makes
// that lookup fail. Registering the same gvk again is a no-op.
func Register(scheme *runtime.Scheme, gvk schema.GroupVersionKind) error {
	if gvk.Group == "" || gvk.Version == "" || gvk.Kind == "" {
		return fmt.Errorf("registering NodeClass kind %q: group, version and kind are required", gvk)
	}
	known, _, err := scheme.ObjectKinds(&NodeClass{})
	if err == nil {
		for _, k := range known {
			if k != gvk {
				return fmt.Errorf("registering NodeClass kind %s: the bridge's NodeClass type is already registered as %s", gvk, k)
			}
		}
		return nil
	}
	scheme.AddKnownTypeWithName(gvk, &NodeClass{})
	scheme.AddKnownTypeWithName(gvk.GroupVersion().WithKind(gvk.Kind+"List"), &NodeClassList{})
	metav1.AddToGroupVersion(scheme, gvk.GroupVersion())
	return nil
}
