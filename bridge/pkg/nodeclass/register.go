package nodeclass

import (
	"errors"
	"fmt"
	"strings"

	"github.com/awslabs/operatorpkg/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// slot is the pair of Go types that stands for one of the provider's kinds.
type slot struct {
	object func() status.Object
	list   func() runtime.Object
}

var slots = [...]slot{
	{func() status.Object { return &NodeClassOf[Slot0]{} }, func() runtime.Object { return &NodeClassListOf[Slot0]{} }},
	{func() status.Object { return &NodeClassOf[Slot1]{} }, func() runtime.Object { return &NodeClassListOf[Slot1]{} }},
}

// MaxKinds is how many NodeClass kinds the bridge can register: one per slot.
const MaxKinds = len(slots)

// New returns a fresh zero object of slot i, the Go type Register binds to the
// provider's kind i. i must be below MaxKinds.
func New(i int) status.Object {
	return slots[i].object()
}

// ListKind is the kind of the list type registered next to gvk.
func ListKind(gvk schema.GroupVersionKind) schema.GroupVersionKind {
	return gvk.GroupVersion().WithKind(gvk.Kind + "List")
}

// Register binds the provider's NodeClass kinds to the slot types, kind i
// (and its List kind) to slot i, in scheme.
//
// A slot that is already bound must be bound to the same kind: registering
// the same list again is a no-op, and so is registering a shorter list that
// agrees with it; a list that would move a slot to another kind is refused.
// Nothing is changed in scheme when the list is refused.
func Register(scheme *runtime.Scheme, gvks []schema.GroupVersionKind) error {
	if len(gvks) == 0 {
		return errors.New("registering NodeClass kinds: no kind given")
	}
	if len(gvks) > MaxKinds {
		return fmt.Errorf("registering NodeClass kinds %v: the bridge has Go types for at most %d kinds", gvks, MaxKinds)
	}
	if err := distinct(gvks); err != nil {
		return fmt.Errorf("registering NodeClass kinds: %w", err)
	}

	var unbound []int
	for i, gvk := range gvks {
		kinds, _, err := scheme.ObjectKinds(slots[i].object())
		switch {
		case runtime.IsNotRegisteredError(err):
			// Neither the kind nor its list may already belong to another
			// type: the scheme would panic on the double registration.
			for _, k := range []schema.GroupVersionKind{gvk, ListKind(gvk)} {
				if t, ok := scheme.AllKnownTypes()[k]; ok {
					return fmt.Errorf("registering NodeClass kind %s on slot %d: %s is already registered for Go type %s", gvk, i, k, t)
				}
			}
			unbound = append(unbound, i)
		case err != nil:
			return fmt.Errorf("registering NodeClass kind %s on slot %d: %w", gvk, i, err)
		case len(kinds) != 1 || kinds[0] != gvk:
			return fmt.Errorf("registering NodeClass kind %s on slot %d: the slot is already bound to %v", gvk, i, kinds)
		}
	}
	for _, i := range unbound {
		gvk := gvks[i]
		scheme.AddKnownTypeWithName(gvk, slots[i].object())
		scheme.AddKnownTypeWithName(ListKind(gvk), slots[i].list())
		metav1.AddToGroupVersion(scheme, gvk.GroupVersion())
	}
	return nil
}

// distinct checks that the kinds are complete and that core can tell them
// apart: it finds a NodePool's NodeClass by group and kind (not version), and
// labels nodes with the group and the lower-cased kind. Their list kinds must
// not collide with any of them either.
func distinct(gvks []schema.GroupVersionKind) error {
	type key struct{ group, kind string }
	seen := map[key]schema.GroupVersionKind{}
	for _, gvk := range gvks {
		if gvk.Group == "" || gvk.Version == "" || gvk.Kind == "" {
			return fmt.Errorf("kind %q: group, version and kind are required", gvk)
		}
		for _, k := range []schema.GroupVersionKind{gvk, ListKind(gvk)} {
			id := key{k.Group, strings.ToLower(k.Kind)}
			if other, ok := seen[id]; ok {
				return fmt.Errorf("kinds %s and %s collide on group %s, kind %s (core tells kinds apart by group and lower-cased kind, and each kind also has a List kind)", other, gvk, id.group, id.kind)
			}
			seen[id] = gvk
		}
	}
	return nil
}
