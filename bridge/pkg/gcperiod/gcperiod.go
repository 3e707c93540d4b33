// Package gcperiod makes the period of Karpenter core's NodeClaim garbage
// collector configurable, for tests and diagnostics only.
//
// Core's collector (nodeclaim.garbagecollection) lists the cloud provider's
// instances and deletes every Registered NodeClaim whose providerID is not in
// that list and whose Node is not Ready. It runs every two minutes, a period
// core hard-codes. Proving that a faulty List never costs a NodeClaim takes
// several collector passes per fault; at two minutes each, the end-to-end
// fault matrix would run for an hour. KPS_CORE_GC_INTERVAL shortens the
// period; production leaves it unset and keeps core's behaviour exactly.
package gcperiod

import (
	"context"
	"fmt"
	"time"

	"github.com/awslabs/operatorpkg/controller"
	"github.com/awslabs/operatorpkg/reconciler"
	"github.com/awslabs/operatorpkg/singleton"
	"k8s.io/client-go/util/workqueue"
	controllerruntime "sigs.k8s.io/controller-runtime"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/karpenter/pkg/controllers/nodeclaim/garbagecollection"
)

// EnvVar names the environment variable holding the period (a Go duration).
const EnvVar = "KPS_CORE_GC_INTERVAL"

// FromEnv reads the period from getenv. ok is false when the variable is
// unset or empty: core's own period applies.
func FromEnv(getenv func(string) string) (period time.Duration, ok bool, err error) {
	v := getenv(EnvVar)
	if v == "" {
		return 0, false, nil
	}
	period, err = time.ParseDuration(v)
	if err != nil {
		return 0, false, fmt.Errorf("parsing %s=%q: %w", EnvVar, v, err)
	}
	if period <= 0 {
		return 0, false, fmt.Errorf("parsing %s=%q: must be positive", EnvVar, v)
	}
	return period, true, nil
}

// Controller runs core's garbage collector unchanged and only replaces the
// delay before its next pass. A failed pass is retried with
// controller-runtime's exponential backoff, as in core, but capped at the
// period: core's backoff grows to 16 minutes, and a test that holds a List
// fault for a few periods must see a pass at least once per period, during
// the fault and right after it.
type Controller struct {
	core   *garbagecollection.Controller
	period time.Duration
}

// New wraps core's collector.
func New(core *garbagecollection.Controller, period time.Duration) *Controller {
	return &Controller{core: core, period: period}
}

// Name is core's, so that logs and controller_runtime_* metrics keep their
// usual controller label (nodeclaim.garbagecollection).
func (c *Controller) Name() string {
	return c.core.Name()
}

// Period is the delay between two successful passes.
func (c *Controller) Period() time.Duration {
	return c.period
}

// Reconcile is one pass of core's collector.
func (c *Controller) Reconcile(ctx context.Context) (reconciler.Result, error) {
	result, err := c.core.Reconcile(ctx)
	if err != nil {
		return result, err
	}
	// Core answers a fixed RequeueAfter on success; anything else (a future
	// core asking for an immediate retry) is kept as it is.
	if result.RequeueAfter > 0 {
		result.RequeueAfter = c.period
	}
	return result, nil
}

// Register registers the wrapper as core registers its collector: a
// singleton (one request, fed once by singleton.Source) whose controller
// needs leader election, so that only the leader collects; only the error
// backoff differs (see Controller).
func (c *Controller) Register(_ context.Context, m manager.Manager) error {
	return controllerruntime.NewControllerManagedBy(m).
		Named(c.Name()).
		WithOptions(crcontroller.Options{RateLimiter: c.errorBackoff()}).
		WatchesRawSource(singleton.Source()).
		Complete(singleton.AsReconciler(c))
}

// errorBackoff starts where controller-runtime's default does (5 ms,
// doubling) and stops at the period.
func (c *Controller) errorBackoff() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, c.period)
}

// Replace returns controllers with core's garbage collector replaced by a
// Controller of the given period. Exactly one collector must be present: a
// core upgrade that renames or splits it must fail loudly rather than leave
// the knob silently without effect.
func Replace(controllers []controller.Controller, period time.Duration) ([]controller.Controller, error) {
	out := make([]controller.Controller, len(controllers))
	found := 0
	for i, c := range controllers {
		if gc, ok := c.(*garbagecollection.Controller); ok {
			out[i] = New(gc, period)
			found++
			continue
		}
		out[i] = c
	}
	if found != 1 {
		return nil, fmt.Errorf("%s: expected one NodeClaim garbage collector among core's controllers, found %d", EnvVar, found)
	}
	return out, nil
}
