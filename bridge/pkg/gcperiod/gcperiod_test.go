package gcperiod

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/awslabs/operatorpkg/controller"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	clock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kubefake "sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/fake"
	"sigs.k8s.io/karpenter/pkg/controllers/nodeclaim/garbagecollection"
	"sigs.k8s.io/karpenter/pkg/test/v1alpha1"
)

func TestFromEnv(t *testing.T) {
	cases := []struct {
		value   string
		want    time.Duration
		ok      bool
		wantErr string
	}{
		{"", 0, false, ""},
		{"10s", 10 * time.Second, true, ""},
		{"1m30s", 90 * time.Second, true, ""},
		{"0s", 0, false, "must be positive"},
		{"-5s", 0, false, "must be positive"},
		{"ten seconds", 0, false, "KPS_CORE_GC_INTERVAL"},
	}
	for _, tc := range cases {
		got, ok, err := FromEnv(func(k string) string {
			if k == EnvVar {
				return tc.value
			}
			return ""
		})
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want one containing %q", tc.value, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want || ok != tc.ok {
			t.Errorf("%q: got (%v, %v, %v), want (%v, %v, nil)", tc.value, got, ok, err, tc.want, tc.ok)
		}
	}
}

// other stands for any core controller that is not the collector.
type other struct{ name string }

func (o *other) Register(context.Context, manager.Manager) error { return nil }

func TestReplaceSwapsOnlyTheCollector(t *testing.T) {
	cp := fake.NewCloudProvider()
	gc := garbagecollection.NewController(clock.NewFakeClock(time.Now()), nil, cp)
	a, b := &other{"a"}, &other{"b"}
	out, err := Replace([]controller.Controller{a, gc, b}, 7*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3 || out[0] != a || out[2] != b {
		t.Fatalf("the other controllers moved: %v", out)
	}
	wrapped, ok := out[1].(*Controller)
	if !ok {
		t.Fatalf("collector not replaced: %T", out[1])
	}
	if wrapped.core != gc || wrapped.Period() != 7*time.Second || wrapped.Name() != "nodeclaim.garbagecollection" {
		t.Fatalf("wrapper %+v, name %q", wrapped, wrapped.Name())
	}
}

func TestReplaceRefusesWithoutExactlyOneCollector(t *testing.T) {
	cp := fake.NewCloudProvider()
	gc := func() controller.Controller {
		return garbagecollection.NewController(clock.NewFakeClock(time.Now()), nil, cp)
	}
	for name, list := range map[string][]controller.Controller{
		"none": {&other{"a"}},
		"two":  {gc(), gc()},
	} {
		if _, err := Replace(list, time.Second); err == nil || !strings.Contains(err.Error(), EnvVar) {
			t.Errorf("%s: error %v, want one naming %s", name, err, EnvVar)
		}
	}
}

// failingList is a cloud provider whose List fails, as ours does when it
// cannot prove the list complete.
type failingList struct {
	*fake.CloudProvider
	err error
}

func (f *failingList) List(context.Context) ([]*v1.NodeClaim, error) { return nil, f.err }

func registeredClaim(name, providerID string) *v1.NodeClaim {
	nc := &v1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.NodeClaimSpec{NodeClassRef: &v1.NodeClassReference{
			Group: v1alpha1.Group, Kind: "TestNodeClass", Name: "default",
		}},
		Status: v1.NodeClaimStatus{ProviderID: providerID},
	}
	nc.StatusConditions().SetTrue(v1.ConditionTypeRegistered)
	return nc
}

func kubeWith(objs ...client.Object) client.Client {
	return kubefake.NewClientBuilder().WithScheme(scheme.Scheme).
		WithIndex(&corev1.Node{}, "spec.providerID", func(o client.Object) []string {
			return []string{o.(*corev1.Node).Spec.ProviderID}
		}).
		WithObjects(objs...).
		Build()
}

// A pass runs core's logic unchanged (a Registered NodeClaim whose instance
// is not listed and that has no Node is collected, a listed one is kept) and
// asks for the next pass after the configured period.
func TestReconcileRunsCoreAndRequeuesAfterThePeriod(t *testing.T) {
	ctx := context.Background()
	live := registeredClaim("live", "fake:///live")
	gone := registeredClaim("gone", "fake:///gone")
	kube := kubeWith(live, gone)
	cp := fake.NewCloudProvider()
	cp.CreatedNodeClaims[live.Status.ProviderID] = live.DeepCopy()
	c := New(garbagecollection.NewController(clock.NewFakeClock(time.Now()), kube, cp), 10*time.Second)

	result, err := c.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if result.RequeueAfter != 10*time.Second {
		t.Fatalf("RequeueAfter %v, want 10s", result.RequeueAfter)
	}
	if err := kube.Get(ctx, client.ObjectKeyFromObject(live), &v1.NodeClaim{}); err != nil {
		t.Fatalf("listed NodeClaim: %v", err)
	}
	if err := kube.Get(ctx, client.ObjectKeyFromObject(gone), &v1.NodeClaim{}); !apierrors.IsNotFound(err) {
		t.Fatalf("unlisted NodeClaim not collected: %v", err)
	}
}

// What the wrapper relies on in core's collector (checked against each core
// upgrade, v1.15.0 last): a successful pass asks for the next one after a
// fixed RequeueAfter (2 minutes), which is what the wrapper replaces.
func TestCoreCollectorRequeuesAfterAFixedPeriod(t *testing.T) {
	ctx := context.Background()
	kube := kubeWith(registeredClaim("live", "fake:///live"))
	cp := fake.NewCloudProvider()
	cp.CreatedNodeClaims["fake:///live"] = registeredClaim("live", "fake:///live")
	core := garbagecollection.NewController(clock.NewFakeClock(time.Now()), kube, cp)
	if core.Name() != "nodeclaim.garbagecollection" {
		t.Fatalf("core's collector is now named %q", core.Name())
	}
	result, err := core.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if result.RequeueAfter != 2*time.Minute {
		t.Fatalf("core's collector requeues after %v, want 2m", result.RequeueAfter)
	}
}

// A failed List is core's error, unchanged: nothing is deleted and the
// controller's backoff (not the period) decides when to try again.
func TestReconcileKeepsCoreErrors(t *testing.T) {
	ctx := context.Background()
	claim := registeredClaim("in-flight", "fake:///in-flight")
	kube := kubeWith(claim)
	listErr := errors.New("list inconsistent")
	cp := &failingList{CloudProvider: fake.NewCloudProvider(), err: listErr}
	c := New(garbagecollection.NewController(clock.NewFakeClock(time.Now()), kube, cp), 10*time.Second)

	result, err := c.Reconcile(ctx)
	if !errors.Is(err, listErr) {
		t.Fatalf("error %v, want the List error", err)
	}
	if result.RequeueAfter != 0 {
		t.Fatalf("RequeueAfter %v after an error, want 0 (backoff)", result.RequeueAfter)
	}
	if err := kube.Get(ctx, client.ObjectKeyFromObject(claim), &v1.NodeClaim{}); err != nil {
		t.Fatalf("NodeClaim deleted although List failed: %v", err)
	}
}

// Failed passes back off as controller-runtime's do, but never wait longer
// than the period.
func TestErrorBackoffIsCappedAtThePeriod(t *testing.T) {
	c := New(nil, 10*time.Second)
	limiter := c.errorBackoff()
	var delays []time.Duration
	for range 20 {
		delays = append(delays, limiter.When(reconcile.Request{}))
	}
	if delays[0] != 5*time.Millisecond || delays[1] != 10*time.Millisecond {
		t.Fatalf("first delays %v, want 5ms then 10ms", delays[:2])
	}
	for i, d := range delays {
		if d > 10*time.Second {
			t.Fatalf("delay #%d is %v, above the 10s period", i, d)
		}
	}
	if last := delays[len(delays)-1]; last != 10*time.Second {
		t.Fatalf("after 20 failures the delay is %v, want the 10s period", last)
	}
	limiter.Forget(reconcile.Request{})
	if d := limiter.When(reconcile.Request{}); d != 5*time.Millisecond {
		t.Fatalf("after a success the backoff starts again at %v, want 5ms", d)
	}
}
