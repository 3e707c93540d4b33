package cloudprovider

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/metrics"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	"sigs.k8s.io/karpenter/pkg/controllers/node/health"
	"sigs.k8s.io/karpenter/pkg/controllers/nodeoverlay"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/test"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
)

// rustProviderPolicies is the set the Rust provider sends today
// (controller/src/provider/repair.rs, repair_policies with the default
// settings): reboot a node whose kubelet reports Ready=False, draining for at
// most 5 minutes; reboot without drain a node whose kubelet went silent after
// it had joined (NodeStatusUnknown); replace, as the one default fallback, a
// Ready=Unknown node for any other reason (NodeStatusNeverUpdated: an install
// that never finished) after the longest install plus a margin.
func rustProviderPolicies() []*pb.RepairPolicy {
	return []*pb.RepairPolicy{
		{
			ConditionType: "Ready", ConditionStatus: "False", ReasonRegex: ".*",
			TolerationSeconds: 600, TerminationGracePeriodSeconds: proto.Int64(300),
			Action: pb.RepairPolicy_REBOOT_NODE,
		},
		{
			ConditionType: "Ready", ConditionStatus: "Unknown", ReasonRegex: "^NodeStatusUnknown$",
			TolerationSeconds: 600, TerminationGracePeriodSeconds: proto.Int64(0),
			Action: pb.RepairPolicy_REBOOT_NODE,
		},
		{
			ConditionType: "Ready", ConditionStatus: "Unknown", ReasonRegex: "",
			TolerationSeconds: 11220, TerminationGracePeriodSeconds: proto.Int64(0),
			Action: pb.RepairPolicy_REPLACE_NODE,
		},
	}
}

func durationPtr(d time.Duration) *time.Duration { return &d }

// fetchPolicies serves policies and reads them back as main does at startup.
func fetchPolicies(t *testing.T, policies []*pb.RepairPolicy) ([]cloudprovider.RepairPolicy, error) {
	t.Helper()
	socket := socketPath(t)
	serve(t, socket, &fakeProvider{repairPolicies: func(context.Context, *pb.RepairPoliciesRequest) (*pb.RepairPoliciesResponse, error) {
		return &pb.RepairPoliciesResponse{Policies: policies}, nil
	}})
	return FetchRepairPolicies(context.Background(), dial(t, socket), testOptions().CallTimeout)
}

// nodeRepairCtx is a context whose core options turn node repair on (not the
// legacy controller), as FEATURE_GATES=NodeRepair=true does.
func nodeRepairCtx() context.Context {
	nodeRepair := true
	return options.ToContext(context.Background(), test.Options(test.OptionsFields{
		FeatureGates: test.FeatureGates{NodeRepair: &nodeRepair},
	}))
}

func TestRepairPoliciesConverted(t *testing.T) {
	wire := append(rustProviderPolicies(), &pb.RepairPolicy{
		// No termination_grace_period_seconds: the NodeClaim's own applies.
		ConditionType: "KernelDeadlock", ConditionStatus: "True", ReasonRegex: "^Oops$",
		TolerationSeconds: 60, Priority: 80, Action: pb.RepairPolicy_REPLACE_NODE,
	})
	policies, err := fetchPolicies(t, wire)
	if err != nil {
		t.Fatal(err)
	}
	want := []cloudprovider.RepairPolicy{
		{ConditionType: "Ready", ConditionStatus: "False", ReasonRegex: ".*", TolerationDuration: 10 * time.Minute,
			TerminationGracePeriod: durationPtr(5 * time.Minute), Action: cloudprovider.RebootNode},
		{ConditionType: "Ready", ConditionStatus: "Unknown", ReasonRegex: "^NodeStatusUnknown$", TolerationDuration: 10 * time.Minute,
			TerminationGracePeriod: durationPtr(0), Action: cloudprovider.RebootNode},
		{ConditionType: "Ready", ConditionStatus: "Unknown", ReasonRegex: "", TolerationDuration: 11220 * time.Second,
			TerminationGracePeriod: durationPtr(0), Action: cloudprovider.ReplaceNode},
		{ConditionType: "KernelDeadlock", ConditionStatus: "True", ReasonRegex: "^Oops$", TolerationDuration: time.Minute,
			Priority: 80, Action: cloudprovider.ReplaceNode},
	}
	if len(policies) != len(want) {
		t.Fatalf("got %d policies, want %d: %+v", len(policies), len(want), policies)
	}
	for i := range want {
		got, w := policies[i], want[i]
		if got.ConditionType != w.ConditionType || got.ConditionStatus != w.ConditionStatus || got.ReasonRegex != w.ReasonRegex ||
			got.TolerationDuration != w.TolerationDuration || got.Priority != w.Priority || got.Action != w.Action {
			t.Errorf("policy %d: got %+v, want %+v", i, got, w)
		}
		// nil (inherit the NodeClaim's) and 0 (no drain) differ.
		switch {
		case (got.TerminationGracePeriod == nil) != (w.TerminationGracePeriod == nil):
			t.Errorf("policy %d: termination grace period %v, want %v", i, got.TerminationGracePeriod, w.TerminationGracePeriod)
		case got.TerminationGracePeriod != nil && *got.TerminationGracePeriod != *w.TerminationGracePeriod:
			t.Errorf("policy %d: termination grace period %s, want %s", i, *got.TerminationGracePeriod, *w.TerminationGracePeriod)
		}
	}
}

// A policy core could not act on is refused at startup (main exits), not
// passed on: above all one without an action, which is what a provider built
// for core v1.14 sends.
func TestRepairPoliciesRefused(t *testing.T) {
	valid := func() *pb.RepairPolicy {
		return &pb.RepairPolicy{ConditionType: "Ready", ConditionStatus: "Unknown", TolerationSeconds: 600, Action: pb.RepairPolicy_REPLACE_NODE}
	}
	for name, tc := range map[string]struct {
		edit    func(*pb.RepairPolicy)
		wantErr string
	}{
		"ACTION_UNSPECIFIED (a v1.14 provider)": {func(p *pb.RepairPolicy) { p.Action = pb.RepairPolicy_ACTION_UNSPECIFIED }, "ACTION_UNSPECIFIED"},
		"an action this bridge does not know":   {func(p *pb.RepairPolicy) { p.Action = pb.RepairPolicy_Action(7) }, "action 7"},
		"negative termination grace period":     {func(p *pb.RepairPolicy) { p.TerminationGracePeriodSeconds = proto.Int64(-1) }, "termination_grace_period_seconds"},
		"negative toleration":                   {func(p *pb.RepairPolicy) { p.TolerationSeconds = -1 }, "toleration_seconds"},
		"no condition type":                     {func(p *pb.RepairPolicy) { p.ConditionType = "" }, "condition type"},
	} {
		t.Run(name, func(t *testing.T) {
			bad := valid()
			tc.edit(bad)
			policies, err := fetchPolicies(t, []*pb.RepairPolicy{valid(), bad})
			if err == nil {
				t.Fatalf("accepted %+v", policies)
			}
			if !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "policy [1]") {
				t.Fatalf("error %q does not name policy [1] and %q", err, tc.wantErr)
			}
		})
	}
}

// The set the Rust provider sends passes core's own start-up validation
// (health.NewRepairPolicyMatcher, which main runs on the decorated provider as
// kwok does) with node repair on, and core reads it as intended: reboot first,
// replace as the fallback.
func TestRustProviderPoliciesPassCoreValidation(t *testing.T) {
	policies, err := fetchPolicies(t, rustProviderPolicies())
	if err != nil {
		t.Fatal(err)
	}
	cp := New(nil, testOptions(), testInfo, policies, nil)
	decorated := overlay.Decorate(metrics.Decorate(cp), nil, nodeoverlay.NewInstanceTypeStore())
	matcher, err := health.NewRepairPolicyMatcher(nodeRepairCtx(), decorated)
	if err != nil {
		t.Fatalf("core refuses the provider's repair policies: %v", err)
	}
	if matcher == nil {
		t.Fatal("no matcher with NodeRepair on")
	}

	created := time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC)
	node := func(status corev1.ConditionStatus, reason string, since time.Duration) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n", CreationTimestamp: metav1.NewTime(created)},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: status, Reason: reason,
				LastTransitionTime: metav1.NewTime(created.Add(since)),
			}}},
		}
	}
	at := func(d time.Duration) time.Time { return created.Add(d) }
	for _, tc := range []struct {
		name       string
		node       *corev1.Node
		now        time.Time
		action     cloudprovider.RepairAction
		tgp        *time.Duration
		isFallback bool
	}{
		{"kubelet NotReady, within toleration", node(corev1.ConditionFalse, "KubeletNotReady", time.Hour), at(time.Hour + 9*time.Minute), "", nil, false},
		{"kubelet NotReady, past toleration", node(corev1.ConditionFalse, "KubeletNotReady", time.Hour), at(time.Hour + 11*time.Minute),
			cloudprovider.RebootNode, durationPtr(5 * time.Minute), false},
		{"kubelet went silent", node(corev1.ConditionUnknown, "NodeStatusUnknown", time.Hour), at(time.Hour + 11*time.Minute),
			cloudprovider.RebootNode, durationPtr(0), false},
		{"install never finished, 2 h", node(corev1.ConditionUnknown, "NodeStatusNeverUpdated", 0), at(2 * time.Hour), "", nil, false},
		{"install never finished, 3 h 8 min", node(corev1.ConditionUnknown, "NodeStatusNeverUpdated", 0), at(3*time.Hour + 8*time.Minute),
			cloudprovider.ReplaceNode, durationPtr(0), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := health.Resolve(matcher.Match(tc.node), tc.now, time.Time{})
			if got.Action != tc.action {
				t.Fatalf("action %q, want %q (%v)", got.Action, tc.action, got.LogValues())
			}
			if tc.action == "" {
				return
			}
			if got.Fallback != tc.isFallback {
				t.Fatalf("fallback %t, want %t", got.Fallback, tc.isFallback)
			}
			if got.TerminationGracePeriod == nil || *got.TerminationGracePeriod != *tc.tgp {
				t.Fatalf("termination grace period %v, want %s", got.TerminationGracePeriod, *tc.tgp)
			}
		})
	}
}

// What a provider built for core v1.14 sends (no action, no reason regex) is
// what core v1.15 refuses: the bridge refuses it first (no action), and a set
// that reached core anyway would fail core's own validation.
func TestV114StylePoliciesRefused(t *testing.T) {
	v114 := []*pb.RepairPolicy{
		{ConditionType: "Ready", ConditionStatus: "False", TolerationSeconds: 1800},
		{ConditionType: "Ready", ConditionStatus: "Unknown", TolerationSeconds: 1800},
	}
	if _, err := fetchPolicies(t, v114); err == nil || !strings.Contains(err.Error(), "ACTION_UNSPECIFIED") {
		t.Fatalf("the bridge accepted a v1.14-style set: %v", err)
	}

	cp := New(nil, testOptions(), testInfo, []cloudprovider.RepairPolicy{
		{ConditionType: "Ready", ConditionStatus: "False", TolerationDuration: 30 * time.Minute},
		{ConditionType: "Ready", ConditionStatus: "Unknown", TolerationDuration: 30 * time.Minute},
	}, nil)
	if _, err := health.NewRepairPolicyMatcher(nodeRepairCtx(), cp); err == nil {
		t.Fatal("core accepted a v1.14-style set")
	} else if !strings.Contains(err.Error(), "unsupported action") {
		t.Fatalf("core refused it, but not for its actions: %v", err)
	}

	// Actions but no fallback that replaces: refused too.
	cp = New(nil, testOptions(), testInfo, []cloudprovider.RepairPolicy{
		{ConditionType: "Ready", ConditionStatus: "False", ReasonRegex: ".*", TolerationDuration: 10 * time.Minute, Action: cloudprovider.RebootNode},
		{ConditionType: "Ready", ConditionStatus: "Unknown", ReasonRegex: "", TolerationDuration: 10 * time.Minute, Action: cloudprovider.RebootNode},
	}, nil)
	if _, err := health.NewRepairPolicyMatcher(nodeRepairCtx(), cp); err == nil || !strings.Contains(err.Error(), "default fallback") {
		t.Fatalf("core accepted a fallback that reboots: %v", err)
	}

	// With node repair off, core validates nothing and builds no matcher
	// (main then runs without repair, as before).
	off := options.ToContext(context.Background(), test.Options())
	if m, err := health.NewRepairPolicyMatcher(off, cp); m != nil || err != nil {
		t.Fatalf("NodeRepair off: matcher %v, error %v", m, err)
	}
}
