package nodeclass

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	elasticMetal = schema.GroupVersionKind{Group: "karpenter.scaleway.com", Version: "v1alpha1", Kind: "ScalewayElasticMetalNodeClass"}
	instance     = schema.GroupVersionKind{Group: "karpenter.scaleway.com", Version: "v1alpha1", Kind: "ScalewayInstanceNodeClass"}
)

func kindsOf(t *testing.T, s *runtime.Scheme, obj runtime.Object) []schema.GroupVersionKind {
	t.Helper()
	kinds, _, err := s.ObjectKinds(obj)
	if err != nil {
		t.Fatalf("%T: %v", obj, err)
	}
	return kinds
}

func TestRegisterTwoKinds(t *testing.T) {
	s := runtime.NewScheme()
	if err := Register(s, []schema.GroupVersionKind{elasticMetal, instance}); err != nil {
		t.Fatal(err)
	}
	// Each slot type stands for its own kind only, so that object.GVK (one
	// kind per Go type) tells the kinds apart.
	for i, want := range []schema.GroupVersionKind{elasticMetal, instance} {
		if got := kindsOf(t, s, New(i)); !reflect.DeepEqual(got, []schema.GroupVersionKind{want}) {
			t.Errorf("slot %d kinds %v, want %s", i, got, want)
		}
		if got := kindsOf(t, s, slots[i].list()); !reflect.DeepEqual(got, []schema.GroupVersionKind{ListKind(want)}) {
			t.Errorf("slot %d list kinds %v, want %s", i, got, ListKind(want))
		}
		if !s.Recognizes(want.GroupVersion().WithKind(want.Kind + "List")) {
			t.Errorf("list kind of %s not recognized", want)
		}
	}
	// The scheme builds the slot type for each kind, which is how the
	// client decodes a NodeClass it reads.
	if obj, err := s.New(instance); err != nil {
		t.Fatal(err)
	} else if _, ok := obj.(*NodeClassOf[Slot1]); !ok {
		t.Fatalf("scheme builds %T for %s", obj, instance)
	}
	if obj, err := s.New(ListKind(elasticMetal)); err != nil {
		t.Fatal(err)
	} else if _, ok := obj.(*NodeClassListOf[Slot0]); !ok {
		t.Fatalf("scheme builds %T for %s", obj, ListKind(elasticMetal))
	}

	// The same list again, and a shorter list that agrees, change nothing.
	for _, again := range [][]schema.GroupVersionKind{{elasticMetal, instance}, {elasticMetal}} {
		if err := Register(s, again); err != nil {
			t.Fatalf("registering %v again: %v", again, err)
		}
	}
	if got := kindsOf(t, s, New(1)); !reflect.DeepEqual(got, []schema.GroupVersionKind{instance}) {
		t.Fatalf("slot 1 kinds after registering again %v", got)
	}
}

// A one-kind provider (no Instance CRD in the cluster) leaves slot 1 free,
// and a later, longer list that agrees fills it.
func TestRegisterOneKindThenTwo(t *testing.T) {
	s := runtime.NewScheme()
	if err := Register(s, []schema.GroupVersionKind{elasticMetal}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ObjectKinds(New(1)); !runtime.IsNotRegisteredError(err) {
		t.Fatalf("slot 1 after registering one kind: %v", err)
	}
	if err := Register(s, []schema.GroupVersionKind{elasticMetal, instance}); err != nil {
		t.Fatal(err)
	}
	if got := kindsOf(t, s, New(1)); !reflect.DeepEqual(got, []schema.GroupVersionKind{instance}) {
		t.Fatalf("slot 1 kinds %v", got)
	}
}

func TestRegisterRefuses(t *testing.T) {
	third := schema.GroupVersionKind{Group: "karpenter.scaleway.com", Version: "v1alpha1", Kind: "ScalewayThirdNodeClass"}
	cases := map[string]struct {
		gvks    []schema.GroupVersionKind
		wantErr string
	}{
		"no kind":      {nil, "no kind"},
		"three kinds":  {[]schema.GroupVersionKind{elasticMetal, instance, third}, "at most 2 kinds"},
		"no version":   {[]schema.GroupVersionKind{{Group: "a.example.com", Kind: "A"}}, "required"},
		"no group":     {[]schema.GroupVersionKind{{Version: "v1", Kind: "A"}}, "required"},
		"same kind":    {[]schema.GroupVersionKind{elasticMetal, elasticMetal}, "collide"},
		"two versions": {[]schema.GroupVersionKind{elasticMetal, {Group: elasticMetal.Group, Version: "v1", Kind: elasticMetal.Kind}}, "collide"},
		"case only":    {[]schema.GroupVersionKind{elasticMetal, {Group: elasticMetal.Group, Version: "v1alpha1", Kind: strings.ToLower(elasticMetal.Kind)}}, "collide"},
		"list kind":    {[]schema.GroupVersionKind{elasticMetal, ListKind(elasticMetal)}, "collide"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := runtime.NewScheme()
			err := Register(s, tc.gvks)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if _, _, err := s.ObjectKinds(New(0)); !runtime.IsNotRegisteredError(err) {
				t.Fatalf("a refused list registered slot 0: %v", err)
			}
		})
	}
}

func TestRegisterRefusesConflicts(t *testing.T) {
	other := schema.GroupVersionKind{Group: "other.example.com", Version: "v1", Kind: "Other"}
	for name, again := range map[string][]schema.GroupVersionKind{
		"swapped":      {instance, elasticMetal},
		"another kind": {elasticMetal, other},
		"first moved":  {other},
	} {
		t.Run(name, func(t *testing.T) {
			s := runtime.NewScheme()
			if err := Register(s, []schema.GroupVersionKind{elasticMetal, instance}); err != nil {
				t.Fatal(err)
			}
			if err := Register(s, again); err == nil || !strings.Contains(err.Error(), "already") {
				t.Fatalf("registering %v over EM, Instance: %v", again, err)
			}
			for i, want := range []schema.GroupVersionKind{elasticMetal, instance} {
				if got := kindsOf(t, s, New(i)); !reflect.DeepEqual(got, []schema.GroupVersionKind{want}) {
					t.Fatalf("slot %d kinds after a refused list %v", i, got)
				}
			}
		})
	}
}

// A kind some other Go type already holds is refused with an error, not the
// scheme's double-registration panic, and the refused list leaves the earlier
// slots unbound.
func TestRegisterRefusesKindOfAnotherType(t *testing.T) {
	s := runtime.NewScheme()
	s.AddKnownTypeWithName(ListKind(instance), &runtime.Unknown{})
	err := Register(s, []schema.GroupVersionKind{elasticMetal, instance})
	if err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Fatalf("error %v", err)
	}
	if _, _, err := s.ObjectKinds(New(0)); !runtime.IsNotRegisteredError(err) {
		t.Fatalf("slot 0 bound by a refused list: %v", err)
	}
}
