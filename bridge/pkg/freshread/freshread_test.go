package freshread_test

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	cpfake "sigs.k8s.io/karpenter/pkg/cloudprovider/fake"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/controllers/state/informer"
	"sigs.k8s.io/karpenter/pkg/state/cost"

	"github.com/karpenter-provider-scaleway/bridge/pkg/freshread"
)

// lagging is an informer cache that shows only what sync copied into it,
// over an API server (a fake client) that every write goes to. A test moves
// the cache forward exactly when it chooses, so the race it reproduces
// happens every time, not by timing.
type lagging struct {
	client.Client // the API server
	snap          map[types.NamespacedName]*v1.NodeClaim
}

func newLagging(t *testing.T, objs ...client.Object) *lagging {
	t.Helper()
	api := fake.NewClientBuilder().WithScheme(scheme.Scheme).
		WithStatusSubresource(&v1.NodeClaim{}).WithObjects(objs...).Build()
	l := &lagging{Client: api, snap: map[types.NamespacedName]*v1.NodeClaim{}}
	for _, o := range objs {
		l.sync(t, client.ObjectKeyFromObject(o))
	}
	return l
}

// sync lets the cache see the API server's current version of name.
func (l *lagging) sync(t *testing.T, name types.NamespacedName) {
	t.Helper()
	nc := &v1.NodeClaim{}
	if err := l.Client.Get(context.Background(), name, nc); err != nil {
		t.Fatalf("reading %s from the API server: %v", name, err)
	}
	l.snap[name] = nc
}

// deliver puts a given (possibly old) version into the cache, as a late
// watch event does.
func (l *lagging) deliver(nc *v1.NodeClaim) {
	l.snap[client.ObjectKeyFromObject(nc)] = nc.DeepCopy()
}

func (l *lagging) Get(_ context.Context, name client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	nc, ok := l.snap[name]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Group: "karpenter.sh", Resource: "nodeclaims"}, name.Name)
	}
	nc.DeepCopyInto(obj.(*v1.NodeClaim))
	return nil
}

func nodeClaim(name string) *v1.NodeClaim {
	return &v1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.NodeClaimSpec{NodeClassRef: &v1.NodeClassReference{
			Group: "karpenter.test.sh", Kind: "TestNodeClass", Name: "default",
		}},
		Status: v1.NodeClaimStatus{ProviderID: "fake:///" + name},
	}
}

func annotate(t *testing.T, c client.Client, nc *v1.NodeClaim, k, v string) {
	t.Helper()
	stored := nc.DeepCopy()
	if nc.Annotations == nil {
		nc.Annotations = map[string]string{}
	}
	nc.Annotations[k] = v
	if err := c.Patch(context.Background(), nc, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})); err != nil {
		t.Fatalf("patching %s: %v", nc.Name, err)
	}
}

func setRebooting(t *testing.T, c client.Client, nc *v1.NodeClaim) {
	t.Helper()
	stored := nc.DeepCopy()
	nc.StatusConditions().SetTrueWithReason(v1.ConditionTypeRebooting, v1.RebootReasonRequested, "rebooting for Ready/KubeletNotReady")
	if err := c.Status().Patch(context.Background(), nc, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})); err != nil {
		t.Fatalf("patching %s status: %v", nc.Name, err)
	}
}

func get(t *testing.T, c client.Client, name string) *v1.NodeClaim {
	t.Helper()
	nc := &v1.NodeClaim{}
	if err := c.Get(context.Background(), types.NamespacedName{Name: name}, nc); err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	return nc
}

func TestAReadAfterAWriteIsNeverOlderThanTheWrite(t *testing.T) {
	l := newLagging(t, nodeClaim("a"))
	clk := clocktesting.NewFakeClock(time.Now())
	c := freshread.New(l, l.Client, clk, freshread.DefaultWindow)
	before := get(t, c, "a").ResourceVersion
	if c.LiveReads() != 0 {
		t.Fatalf("a read with nothing written went to the API server")
	}

	nc := get(t, c, "a")
	annotate(t, c, nc, "k", "v")
	if nc.ResourceVersion == before {
		t.Fatalf("the fake API server did not move the resourceVersion")
	}
	// The cache still holds the version before the write.
	if got := get(t, l, "a"); got.ResourceVersion != before {
		t.Fatalf("the test's cache moved by itself: %s", got.ResourceVersion)
	}
	got := get(t, c, "a")
	if got.ResourceVersion != nc.ResourceVersion || got.Annotations["k"] != "v" {
		t.Fatalf("read %s %v after writing %s", got.ResourceVersion, got.Annotations, nc.ResourceVersion)
	}
	if c.LiveReads() != 1 {
		t.Fatalf("live reads: %d, want 1", c.LiveReads())
	}

	// Once the cache shows the write, reads are the cache's again.
	l.sync(t, types.NamespacedName{Name: "a"})
	if got := get(t, c, "a"); got.ResourceVersion != nc.ResourceVersion {
		t.Fatalf("read %s from a current cache, want %s", got.ResourceVersion, nc.ResourceVersion)
	}
	if c.LiveReads() != 1 {
		t.Fatalf("a read from a current cache went to the API server")
	}
	// ...and the memory of the write is gone: a stale version delivered
	// later (not this client's business any more) is served as the cache has it.
	old := nc.DeepCopy()
	old.ResourceVersion = before
	l.deliver(old)
	if got := get(t, c, "a"); got.ResourceVersion != before || c.LiveReads() != 1 {
		t.Fatalf("read %s with %d live reads after the write was seen", got.ResourceVersion, c.LiveReads())
	}
}

func TestStatusWritesAreRememberedToo(t *testing.T) {
	l := newLagging(t, nodeClaim("a"))
	c := freshread.New(l, l.Client, clocktesting.NewFakeClock(time.Now()), freshread.DefaultWindow)
	nc := get(t, c, "a")
	setRebooting(t, c, nc)
	got := get(t, c, "a")
	if !got.StatusConditions().Get(v1.ConditionTypeRebooting).IsTrue() {
		t.Fatalf("the Rebooting condition written through Status() was read back without it")
	}
	nc = get(t, c, "a")
	stored := nc.DeepCopy()
	nc.StatusConditions().SetFalse(v1.ConditionTypeRebooting, v1.RebootReasonSucceeded, "back")
	if err := c.SubResource("status").Patch(context.Background(), nc, client.MergeFrom(stored)); err != nil {
		t.Fatal(err)
	}
	if get(t, c, "a").StatusConditions().Get(v1.ConditionTypeRebooting).IsTrue() {
		t.Fatalf("a write through SubResource(\"status\") was read back older")
	}
}

func TestTheMemoryOfAWriteEndsAfterTheWindow(t *testing.T) {
	l := newLagging(t, nodeClaim("a"))
	clk := clocktesting.NewFakeClock(time.Now())
	c := freshread.New(l, l.Client, clk, time.Second)
	before := get(t, c, "a").ResourceVersion
	nc := get(t, c, "a")
	annotate(t, c, nc, "k", "v")
	clk.Step(2 * time.Second)
	if got := get(t, c, "a"); got.ResourceVersion != before || c.LiveReads() != 0 {
		t.Fatalf("after the window: read %s with %d live reads; want the cache's %s", got.ResourceVersion, c.LiveReads(), before)
	}
}

func TestACreatedObjectIsFoundBeforeTheCacheHasIt(t *testing.T) {
	l := newLagging(t)
	c := freshread.New(l, l.Client, clocktesting.NewFakeClock(time.Now()), freshread.DefaultWindow)
	if err := c.Create(context.Background(), nodeClaim("new")); err != nil {
		t.Fatal(err)
	}
	if got := get(t, c, "new"); got.Name != "new" {
		t.Fatalf("read %q", got.Name)
	}
	// Something never written here and absent from the cache stays absent.
	err := c.Get(context.Background(), types.NamespacedName{Name: "other"}, &v1.NodeClaim{})
	if !apierrors.IsNotFound(err) || c.LiveReads() != 1 {
		t.Fatalf("err %v, live reads %d", err, c.LiveReads())
	}
	// Deleted behind the cache's back: the live read's NotFound is the answer.
	nc := nodeClaim("again")
	if err := c.Create(context.Background(), nc); err != nil {
		t.Fatal(err)
	}
	if err := l.Client.Delete(context.Background(), nc); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), types.NamespacedName{Name: "again"}, &v1.NodeClaim{}); !apierrors.IsNotFound(err) {
		t.Fatalf("read a deleted object: %v", err)
	}
}

// The race of core v1.15.0 this package exists for, reproduced
// deterministically with core's own cluster state and its state.nodeclaim
// controller: a reboot committed in two writes, the cluster state given the
// second, then the late event for the first. Through the cache alone, cluster
// state ends with a node that is not rebooting (what let a second reboot past
// a budget of one); through this client, it keeps the reboot. If a core
// release stops losing the reboot, the first half fails and this package can
// go.
func TestCoreClusterStateKeepsACommittedRebootDespiteALateEvent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fresh bool
		want  bool
	}{
		{name: "core's cache alone loses the reboot", fresh: false, want: false},
		{name: "read-your-writes keeps it", fresh: true, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			l := newLagging(t, nodeClaim("a"))
			clk := clocktesting.NewFakeClock(time.Now())
			var kube client.Client = l
			if tc.fresh {
				kube = freshread.New(l, l.Client, clk, freshread.DefaultWindow)
			}
			cp := cpfake.NewCloudProvider()
			cluster := state.NewCluster(clk, kube, cp)
			ctrl := informer.NewNodeClaimController(kube, cp, cluster, cost.NewClusterCost(ctx, cp, kube))
			reconcileOnce := func() {
				t.Helper()
				if _, err := ctrl.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Name: "a"}}); err != nil {
					t.Fatal(err)
				}
			}
			reconcileOnce()

			// commitReboot's two writes, then its direct update of cluster state.
			nc := get(t, kube, "a")
			annotate(t, kube, nc, v1.RebootTerminationGracePeriodAnnotationKey, "5m0s")
			first := nc.DeepCopy()
			setRebooting(t, kube, nc)
			cluster.UpdateNodeClaim(nc)
			if !rebooting(t, cluster) {
				t.Fatalf("cluster state did not take the committed reboot")
			}
			// The watch event for the first write arrives now.
			l.deliver(first)
			reconcileOnce()
			if got := rebooting(t, cluster); got != tc.want {
				t.Fatalf("after the late event, cluster state has the node rebooting=%v, want %v", got, tc.want)
			}
		})
	}
}

func rebooting(t *testing.T, cluster *state.Cluster) bool {
	t.Helper()
	for _, n := range cluster.DeepCopyNodes() {
		if n.ProviderID() == "fake:///a" {
			return n.RebootInProgress()
		}
	}
	t.Fatalf("cluster state has no node fake:///a")
	return false
}
