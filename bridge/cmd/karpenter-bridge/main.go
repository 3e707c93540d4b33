// Command karpenter-bridge runs upstream Karpenter core with a CloudProvider
// that forwards every call over gRPC to an out-of-process provider listening
// on a Unix socket.
//
//	karpenter-bridge             run Karpenter (configured by environment)
//	karpenter-bridge crds DIR    write Karpenter's own CRDs into DIR and exit
//	karpenter-bridge --version   print this bridge's and Karpenter core's versions
//
// Karpenter core parses its own flags and environment (METRICS_PORT,
// DISABLE_LEADER_ELECTION, FEATURE_GATES, ...); the bridge adds only
// environment variables (see cloudprovider.OptionsFromEnv), because core
// rejects flags it does not know.
package main

import (
	"context"
	"fmt"
	"os"

	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/metrics"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	"sigs.k8s.io/karpenter/pkg/controllers"
	"sigs.k8s.io/karpenter/pkg/controllers/node/health"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/operator"
	"sigs.k8s.io/karpenter/pkg/operator/options"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
	"github.com/karpenter-provider-scaleway/bridge/pkg/cloudprovider"
	"github.com/karpenter-provider-scaleway/bridge/pkg/freshread"
	"github.com/karpenter-provider-scaleway/bridge/pkg/gcperiod"
)

func main() {
	// Handled before NewOperator, which parses os.Args as Karpenter flags.
	if isVersionFlag(os.Args[1:]) {
		fmt.Println(versionLine())
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "crds" {
		if len(os.Args) != 3 {
			fmt.Fprintln(os.Stderr, "usage: karpenter-bridge crds DIR")
			os.Exit(2)
		}
		if err := writeCRDs(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}

	opts, err := cloudprovider.OptionsFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	gcPeriod, gcPeriodSet, err := gcperiod.FromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}

	// NewOperator parses core's options, sets up logging and builds the
	// manager; nothing runs until Start, so the NodeClass kinds can still be
	// registered below, once the provider has told us what they are.
	ctx, op := operator.NewOperator()
	logger := log.FromContext(ctx).WithName("bridge")
	fail := func(err error, msg string, keysAndValues ...any) {
		logger.Error(err, msg, keysAndValues...)
		os.Exit(1)
	}

	conn, err := cloudprovider.Dial(opts.Socket)
	if err != nil {
		fail(err, "connecting to the provider")
	}
	client := pb.NewCloudProviderClient(conn)

	info, err := cloudprovider.WaitForInfo(ctx, client, opts.CallTimeout, opts.StartupTimeout)
	if err != nil {
		fail(err, "reading provider Info", "socket", opts.Socket)
	}
	gvks, err := cloudprovider.Register(scheme.Scheme, info)
	if err != nil {
		fail(err, "registering the provider's NodeClass kinds and labels")
	}
	nodeClasses := make([]string, 0, len(gvks))
	for _, gvk := range gvks {
		nodeClasses = append(nodeClasses, gvk.String())
	}
	repairPolicies, err := cloudprovider.FetchRepairPolicies(ctx, client, opts.CallTimeout)
	if err != nil {
		fail(err, "reading provider repair policies")
	}
	logger.Info("provider ready", "provider", info.GetName(), "providerVersion", info.GetProviderVersion(),
		"nodeClasses", nodeClasses, "wellKnownLabels", info.GetWellKnownLabels(), "reservationIDLabel", info.GetReservationIdLabel(),
		"repairPolicies", len(repairPolicies), "socket", opts.Socket)

	leadership := cloudprovider.NewLeadership(client, opts.Identity, opts.CallTimeout)
	cp := cloudprovider.New(client, opts, info, repairPolicies, leadership)
	// Core's own metrics of every call (karpenter_cloudprovider_duration_seconds,
	// karpenter_cloudprovider_errors_total), as the upstream providers wire them.
	metered := metrics.Decorate(cp)
	// Core's controllers read their own writes (see package freshread: core
	// v1.15.0's cluster state can lose a committed reboot to a late watch
	// event, and a budget of one then lets a second reboot through).
	kube := freshread.New(op.GetClient(), op.GetAPIReader(), op.Clock, freshread.DefaultWindow)
	decorated := overlay.Decorate(metered, kube, op.InstanceTypeStore)
	// Core's own validation of the repair policies (v1.15): with the
	// NodeRepair gate on (and not --legacy-node-repair), the set must hold
	// exactly one default fallback (empty reason regex) whose action is
	// ReplaceNode, every policy an action. nil when node repair is off.
	repairPolicyMatcher, err := health.NewRepairPolicyMatcher(ctx, decorated)
	if err != nil {
		fail(err, "validating the provider's repair policies")
	}
	cluster := state.NewCluster(op.Clock, kube, decorated, state.WithRepairPolicyMatcher(repairPolicyMatcher))
	// Staged reserved capacity is news to consolidation (see
	// OnReservedCapacityGrew); then GetInstanceTypes answers from the
	// catalog this stream keeps current.
	cp.OnReservedCapacityGrew(func() { cluster.MarkUnconsolidated() })
	go cp.WatchCatalog(ctx)

	go leadership.Run(ctx, elected(ctx, op))

	coreControllers := controllers.NewControllers(
		ctx,
		op.Manager,
		op.Clock,
		kube,
		op.EventRecorder,
		decorated,
		metered,
		cluster,
		op.InstanceTypeStore,
		op.PredictionStore,
	)
	if gcPeriodSet {
		// Test and diagnostic knob only (see bridge/README.md).
		coreControllers, err = gcperiod.Replace(coreControllers, gcPeriod)
		if err != nil {
			fail(err, "replacing core's NodeClaim garbage collector")
		}
		logger.Info("NodeClaim garbage collection period overridden (test/diagnostic setting)",
			"env", gcperiod.EnvVar, "period", gcPeriod.String())
	}
	op.WithControllers(ctx, coreControllers...).Start(ctx)
}

// elected is closed when this replica may act: at once when leader election
// is disabled (one replica by construction), otherwise when the manager wins
// the lease.
func elected(ctx context.Context, op *operator.Operator) <-chan struct{} {
	if options.FromContext(ctx).DisableLeaderElection {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return op.Elected()
}
