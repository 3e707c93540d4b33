package cloudprovider

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/uuid"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
	coreScheduling "sigs.k8s.io/karpenter/pkg/scheduling"
	"sigs.k8s.io/karpenter/pkg/test"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
)

const reservationLabel = "karpenter.scaleway.com/reservation-id"

// reservationInfo is testInfo from a provider that serves reserved capacity.
func reservationInfo() *pb.InfoResponse {
	info := proto.Clone(testInfo).(*pb.InfoResponse)
	info.WellKnownLabels = append(info.WellKnownLabels, reservationLabel)
	info.ReservationIdLabel = reservationLabel
	return info
}

// isolateReservationGlobals gives the test core's reservation globals as a
// bridge process has them before Register (this test binary links core's
// fake CloudProvider, whose init registers a label of its own), on copies of
// the label sets Register extends, and puts the originals back when the test
// ends.
func isolateReservationGlobals(t *testing.T) {
	t.Helper()
	id, reserved := cloudprovider.ReservationIDLabel, cloudprovider.ReservedCapacityLabels
	wellKnown, restricted := v1.WellKnownLabels, v1.RestrictedLabelDomains
	cloudprovider.ReservationIDLabel = ""
	cloudprovider.ReservedCapacityLabels = sets.New[string]()
	v1.WellKnownLabels = wellKnown.Clone().Delete(id)
	v1.RestrictedLabelDomains = restricted.Clone()
	t.Cleanup(func() {
		cloudprovider.ReservationIDLabel, cloudprovider.ReservedCapacityLabels = id, reserved
		v1.WellKnownLabels, v1.RestrictedLabelDomains = wellKnown, restricted
	})
}

func TestRegisterReservationIDLabel(t *testing.T) {
	isolateReservationGlobals(t)
	if _, err := Register(runtime.NewScheme(), testInfo); err != nil {
		t.Fatal(err)
	}
	if cloudprovider.ReservationIDLabel != "" || cloudprovider.ReservedCapacityLabels.Len() != 0 {
		t.Fatalf("a provider without reserved capacity set ReservationIDLabel %q, ReservedCapacityLabels %v",
			cloudprovider.ReservationIDLabel, cloudprovider.ReservedCapacityLabels.UnsortedList())
	}

	if _, err := Register(runtime.NewScheme(), reservationInfo()); err != nil {
		t.Fatal(err)
	}
	if cloudprovider.ReservationIDLabel != reservationLabel {
		t.Fatalf("ReservationIDLabel %q, want %q", cloudprovider.ReservationIDLabel, reservationLabel)
	}
	if !cloudprovider.ReservedCapacityLabels.Equal(sets.New(reservationLabel)) {
		t.Fatalf("ReservedCapacityLabels %v", cloudprovider.ReservedCapacityLabels.UnsortedList())
	}
	if !v1.WellKnownLabels.Has(reservationLabel) {
		t.Fatal("reservation label not well-known")
	}
	// The same answer again is harmless, as for the other registrations.
	if _, err := Register(runtime.NewScheme(), reservationInfo()); err != nil {
		t.Fatalf("registering the same answer again: %v", err)
	}

	// Core has one reservation label per process: another one is refused,
	// not swapped in under the offerings core already tracks.
	other := reservationInfo()
	other.WellKnownLabels = append(other.WellKnownLabels, "karpenter.scaleway.com/other-reservation")
	other.ReservationIdLabel = "karpenter.scaleway.com/other-reservation"
	_, err := Register(runtime.NewScheme(), other)
	if err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Fatalf("registering another reservation label: %v", err)
	}
	if cloudprovider.ReservationIDLabel != reservationLabel || cloudprovider.ReservedCapacityLabels.Len() != 1 {
		t.Fatalf("the refused answer changed ReservationIDLabel to %q, ReservedCapacityLabels to %v",
			cloudprovider.ReservationIDLabel, cloudprovider.ReservedCapacityLabels.UnsortedList())
	}
	if v1.WellKnownLabels.Has("karpenter.scaleway.com/other-reservation") {
		t.Fatal("the refused answer's labels were registered")
	}
}

func TestRegisterRejectsReservationIDLabel(t *testing.T) {
	// probe is a well-known label of each refused answer: Register checks
	// the whole answer before it changes anything.
	const probe = "karpenter.scaleway.com/refused-probe"
	for name, tc := range map[string]struct {
		label   string
		listed  bool
		wantErr string
	}{
		"not well-known":       {label: reservationLabel, wantErr: "not among its well-known labels"},
		"not a qualified name": {label: "reservation id"},
	} {
		t.Run(name, func(t *testing.T) {
			isolateReservationGlobals(t)
			info := proto.Clone(testInfo).(*pb.InfoResponse)
			info.WellKnownLabels = append(info.WellKnownLabels, probe)
			info.ReservationIdLabel = tc.label
			_, err := Register(runtime.NewScheme(), info)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
			}
			if cloudprovider.ReservationIDLabel != "" || cloudprovider.ReservedCapacityLabels.Len() != 0 || v1.WellKnownLabels.Has(probe) {
				t.Fatal("a refused answer changed core's globals")
			}
		})
	}
}

// reservedInstanceType is testInstanceType sold in fr-par-1 on demand and
// from reservation r1, with room for capacity more nodes, at a price that
// makes core prefer it (as the provider prices a reservation it already
// pays for).
func reservedInstanceType(capacity int32, available bool) *pb.InstanceType {
	it := proto.Clone(testInstanceType()).(*pb.InstanceType)
	for _, r := range it.GetRequirements() {
		switch r.GetKey() {
		case corev1.LabelTopologyZone:
			r.Values = []string{"fr-par-1"}
		case v1.CapacityTypeLabelKey:
			r.Values = []string{v1.CapacityTypeOnDemand, v1.CapacityTypeReserved}
		}
	}
	const onDemandPrice = 0.25
	it.Offerings = []*pb.Offering{
		{
			Requirements: []*pb.Requirement{
				req(v1.CapacityTypeLabelKey, pb.Requirement_IN, v1.CapacityTypeOnDemand),
				req(corev1.LabelTopologyZone, pb.Requirement_IN, "fr-par-1"),
				req(reservationLabel, pb.Requirement_DOES_NOT_EXIST),
			},
			Price:     onDemandPrice,
			Available: true,
		},
		{
			Requirements: []*pb.Requirement{
				req(v1.CapacityTypeLabelKey, pb.Requirement_IN, v1.CapacityTypeReserved),
				req(corev1.LabelTopologyZone, pb.Requirement_IN, "fr-par-1"),
				req(reservationLabel, pb.Requirement_IN, "r1"),
			},
			Price:               onDemandPrice / 10_000_000,
			Available:           available,
			ReservationCapacity: capacity,
		},
	}
	return it
}

// A reserved offering crosses the bridge as core reads one: its reservation
// id through ReservationIDLabel, its capacity type, its remaining capacity;
// and a NodeClaim that core pinned to reserved capacity is compatible with it
// alone.
func TestReservedOfferingConversion(t *testing.T) {
	isolateReservationGlobals(t)
	if _, err := Register(runtime.NewScheme(), reservationInfo()); err != nil {
		t.Fatal(err)
	}
	cp, _ := serveInstanceTypes(t, reservedInstanceType(2, true))
	its, err := cp.GetInstanceTypes(context.Background(), testNodePool("default"))
	if err != nil {
		t.Fatal(err)
	}
	if len(its) != 1 || len(its[0].Offerings) != 2 {
		t.Fatalf("got %v", its)
	}
	onDemand, reserved := its[0].Offerings[0], its[0].Offerings[1]
	if reserved.ReservationID() != "r1" || reserved.CapacityType() != v1.CapacityTypeReserved ||
		reserved.ReservationCapacity != 2 || !reserved.Available || reserved.Zone() != "fr-par-1" {
		t.Fatalf("reserved offering: id %q, type %s, capacity %d, available %t, zone %s",
			reserved.ReservationID(), reserved.CapacityType(), reserved.ReservationCapacity, reserved.Available, reserved.Zone())
	}
	if onDemand.ReservationID() != "" || onDemand.CapacityType() != v1.CapacityTypeOnDemand || onDemand.ReservationCapacity != 0 {
		t.Fatalf("on-demand offering: id %q, type %s, capacity %d",
			onDemand.ReservationID(), onDemand.CapacityType(), onDemand.ReservationCapacity)
	}

	for _, tc := range []struct {
		capacityType string
		want         *cloudprovider.Offering
	}{
		{v1.CapacityTypeReserved, reserved},
		{v1.CapacityTypeOnDemand, onDemand},
	} {
		nodeClaim := coreScheduling.NewRequirements(
			coreScheduling.NewRequirement(v1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, tc.capacityType),
			coreScheduling.NewRequirement(v1.NodePoolLabelKey, corev1.NodeSelectorOpIn, "default"),
		)
		if got := its[0].Offerings.Compatible(nodeClaim); len(got) != 1 || got[0] != tc.want {
			t.Fatalf("%s NodeClaim: compatible offerings %v", tc.capacityType, got)
		}
	}
	r1 := coreScheduling.NewRequirements(coreScheduling.NewRequirement(reservationLabel, corev1.NodeSelectorOpIn, "r1"))
	if got := its[0].Offerings.Compatible(r1); len(got) != 1 || got[0] != reserved {
		t.Fatalf("NodeClaim in reservation r1: compatible offerings %v", got)
	}
}

// Core v1.15's Offering.Launchable, which its scheduler, pricing and
// disruption use instead of Available: a reserved offering is launchable only
// while it is available and its reservation has room. The provider reports
// reservation_capacity = the idle standby servers, and 0 with available =
// false once none is idle; core must read both "none idle" forms as full,
// and a reservation with room as launchable. On-demand offerings carry
// capacity 0 and stay launchable while available.
func TestReservedOfferingLaunchable(t *testing.T) {
	isolateReservationGlobals(t)
	if _, err := Register(runtime.NewScheme(), reservationInfo()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		capacity   int32
		available  bool
		launchable bool
	}{
		{capacity: 0, available: false, launchable: false}, // what the provider sends when no standby is idle
		{capacity: 0, available: true, launchable: false},  // full but healthy: core v1.15 reads it as full too
		{capacity: 1, available: true, launchable: true},
		{capacity: 3, available: true, launchable: true},
		{capacity: 2, available: false, launchable: false}, // marked unavailable (e.g. after a refused Create)
	} {
		its, err := convertInstanceTypes([]*pb.InstanceType{reservedInstanceType(tc.capacity, tc.available)})
		if err != nil {
			t.Fatal(err)
		}
		onDemand, reserved := its[0].Offerings[0], its[0].Offerings[1]
		if reserved.CapacityType() != v1.CapacityTypeReserved || reserved.ReservationCapacity != int(tc.capacity) || reserved.Available != tc.available {
			t.Fatalf("capacity %d, available %t: converted to type %s, capacity %d, available %t",
				tc.capacity, tc.available, reserved.CapacityType(), reserved.ReservationCapacity, reserved.Available)
		}
		if got := reserved.Launchable(); got != tc.launchable {
			t.Errorf("reserved offering with capacity %d, available %t: Launchable %t, want %t", tc.capacity, tc.available, got, tc.launchable)
		}
		if !onDemand.Launchable() {
			t.Errorf("on-demand offering beside a reservation with capacity %d: not Launchable", tc.capacity)
		}
		want := 1
		if tc.launchable {
			want = 2
		}
		if got := len(its[0].Offerings.Launchable()); got != want {
			t.Errorf("capacity %d, available %t: %d launchable offerings, want %d", tc.capacity, tc.available, got, want)
		}
	}
}

// Core's scheduler, through the bridge, plans no more nodes into a
// reservation than its capacity: two pods that each need a whole node, one
// reserved node left. With fallback (the scheduler's default, which core's
// disruption simulations use) one round plans a node pinned to the
// reservation and one that names none. The provisioner disables fallback: it
// plans the reserved node and defers the other pod, which goes on demand in a
// later round once the provider reports the reservation used up: capacity 0,
// whether still available (core v1.15 reads a reservation with no room as
// full, Offering.Launchable; v1.14 kept deferring the pod) or unavailable, as
// the provider reports it.
func TestSchedulerRespectsReservationCapacity(t *testing.T) {
	isolateReservationGlobals(t)
	if _, err := Register(runtime.NewScheme(), reservationInfo()); err != nil {
		t.Fatal(err)
	}
	next := make(chan *pb.WatchInstanceTypesResponse, 1)
	revision := uint64(1)
	publish := func(capacity int32, available bool) {
		t.Helper()
		next <- &pb.WatchInstanceTypesResponse{Revision: revision, DefaultCatalog: []*pb.InstanceType{reservedInstanceType(capacity, available)}}
		revision++
	}
	publish(1, true)
	cp := startProvider(t, &fakeProvider{watch: streamCatalogs(next)}, testOptions())
	pool := reservationPool()
	ctx := benchCtx()
	// waitForCatalog waits for the bridge to serve the reservation's new
	// state.
	waitForCatalog := func(capacity int, available bool) {
		t.Helper()
		if err := pollUntil(10*time.Second, "the published catalog", func() (bool, error) {
			its, err := cp.GetInstanceTypes(ctx, pool)
			if err != nil || len(its) != 1 {
				return false, nil
			}
			o := its[0].Offerings[1]
			return o.ReservationCapacity == capacity && o.Available == available, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitForCatalog(1, true)
	pods := []*corev1.Pod{wholeNodePod(), wholeNodePod()}

	t.Run("fallback", func(t *testing.T) {
		res, err := solve(ctx, cp, []*v1.NodePool{pool}, pods)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.PodErrors) != 0 {
			t.Fatalf("pod errors: %v", res.PodErrors)
		}
		// The second NodeClaim names no reservation: core reserved none for
		// it, and the provider's Create may put it in a reservation only if
		// its own count leaves room.
		got := nodeClaimKinds(t, res)
		if len(got) != 2 || got[0] != "on-demand,reserved" || got[1] != "reserved in r1" {
			t.Fatalf("NodeClaims %v, want one in reservation r1 and one in none", got)
		}
	})

	t.Run("provisioner", func(t *testing.T) {
		res, err := solve(ctx, cp, []*v1.NodePool{pool}, pods, scheduling.DisableReservedCapacityFallback)
		if err != nil {
			t.Fatal(err)
		}
		if got := nodeClaimKinds(t, res); len(got) != 1 || got[0] != "reserved in r1" {
			t.Fatalf("NodeClaims %v, want one in reservation r1", got)
		}
		if len(res.PodErrors) != 1 || len(res.ReservedOfferingErrors()) != 1 {
			t.Fatalf("pod errors %v, want one pod deferred for the reservation", res.PodErrors)
		}
		deferred := []*corev1.Pod{}
		for p := range res.PodErrors {
			deferred = append(deferred, p)
		}

		// The reserved node launched; the provider reports the
		// reservation used up, still available (core v1.15's "full but
		// healthy") and then unavailable (what it sends): either way the
		// pod goes on demand.
		for _, available := range []bool{true, false} {
			publish(0, available)
			waitForCatalog(0, available)
			res, err = solve(ctx, cp, []*v1.NodePool{pool}, deferred, scheduling.DisableReservedCapacityFallback)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.PodErrors) != 0 {
				t.Fatalf("used-up reservation (available %t): pod errors %v", available, res.PodErrors)
			}
			if got := nodeClaimKinds(t, res); len(got) != 1 || got[0] != "on-demand" {
				t.Fatalf("used-up reservation (available %t): NodeClaims %v, want one on demand", available, got)
			}
		}
	})
}

// A pod may select a reservation, or avoid reservations, by the reservation
// label: the bridge leaves that label undefined on a type sold from a
// reservation (see completeWellKnownLabels), so both reach the offering that
// fits.
func TestPodsSelectOrAvoidReservations(t *testing.T) {
	isolateReservationGlobals(t)
	if _, err := Register(runtime.NewScheme(), reservationInfo()); err != nil {
		t.Fatal(err)
	}
	cp, _ := serveInstanceTypes(t, reservedInstanceType(1, true))
	selecting := wholeNodePod()
	selecting.Spec.NodeSelector = map[string]string{reservationLabel: "r1"}
	avoiding := wholeNodePod()
	avoiding.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: reservationLabel, Operator: corev1.NodeSelectorOpDoesNotExist}},
		}}},
	}}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"selecting r1", selecting, "reserved in r1"},
		{"avoiding reservations", avoiding, "on-demand outside reservations"},
	} {
		res, err := solve(benchCtx(), cp, []*v1.NodePool{reservationPool()}, []*corev1.Pod{tc.pod}, scheduling.DisableReservedCapacityFallback)
		if err != nil {
			t.Fatal(err)
		}
		for _, err := range res.PodErrors {
			t.Fatalf("pod %s: %v", tc.name, err)
		}
		if got := nodeClaimKinds(t, res); len(got) != 1 || got[0] != tc.want {
			t.Fatalf("pod %s: NodeClaims %v, want %s", tc.name, got, tc.want)
		}
	}

	// A type with no reserved offering still defines the label, as
	// DoesNotExist: its nodes never carry it.
	its, err := convertInstanceTypes([]*pb.InstanceType{testInstanceType()})
	if err != nil {
		t.Fatal(err)
	}
	if got := its[0].Requirements.Get(reservationLabel); got.Operator() != corev1.NodeSelectorOpDoesNotExist {
		t.Fatalf("type without reserved offerings: %s", got)
	}
}

// reservationPool is an Elastic Metal NodePool open to reserved and
// on-demand capacity.
func reservationPool() *v1.NodePool {
	pool := benchPool(kindElasticMetal, 0)
	pool.Spec.Template.Spec.Requirements = []v1.NodeSelectorRequirementWithMinValues{{
		Key: v1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{v1.CapacityTypeOnDemand, v1.CapacityTypeReserved},
	}}
	return pool
}

// wholeNodePod needs more than half of the test type's 16 CPUs.
func wholeNodePod() *corev1.Pod {
	return test.UnschedulablePod(test.PodOptions{
		ObjectMeta: metav1.ObjectMeta{UID: uuid.NewUUID()},
		ResourceRequirements: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10"),
		}},
	})
}

// nodeClaimKinds describes each NodeClaim a round would create by the
// capacity types its requirements allow and, when core pinned it to
// reservations, their ids: "on-demand", "reserved in r1",
// "on-demand,reserved" (sorted).
func nodeClaimKinds(t *testing.T, res scheduling.Results) []string {
	t.Helper()
	var kinds []string
	for _, nc := range res.NewNodeClaims {
		reqs := coreScheduling.NewNodeSelectorRequirementsWithMinValues(nc.ToNodeClaim().Spec.Requirements...)
		capacityTypes := reqs.Get(v1.CapacityTypeLabelKey).Values()
		slices.Sort(capacityTypes)
		kind := strings.Join(capacityTypes, ",")
		if reqs.Has(reservationLabel) {
			switch reservation := reqs.Get(reservationLabel); reservation.Operator() {
			case corev1.NodeSelectorOpIn:
				kind += " in " + strings.Join(reservation.Values(), ",")
			case corev1.NodeSelectorOpDoesNotExist:
				kind += " outside reservations"
			default:
				t.Fatalf("NodeClaim requirement %s", reservation)
			}
		}
		kinds = append(kinds, kind)
	}
	slices.Sort(kinds)
	return kinds
}

// New room in a reservation (a standby server became idle) calls the hook
// main wires to core's MarkUnconsolidated; the same room again, less room,
// or the first snapshot do not.
func TestReservedCapacityGrowthCallsTheHook(t *testing.T) {
	isolateReservationGlobals(t)
	if _, err := Register(runtime.NewScheme(), reservationInfo()); err != nil {
		t.Fatal(err)
	}
	c := newCatalog(time.Minute)
	calls := 0
	c.onMoreReserved = func() { calls++ }
	snapshot := func(capacity int32, available bool) *catalogSnapshot {
		snap, err := convertSnapshot(&pb.WatchInstanceTypesResponse{
			DefaultCatalog: []*pb.InstanceType{reservedInstanceType(capacity, available)},
		})
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	for i, step := range []struct {
		capacity  int32
		available bool
		calls     int
	}{
		{0, false, 0}, // the first snapshot: nothing to compare with
		{1, true, 1},  // a standby became idle
		{1, true, 1},  // unchanged
		{0, false, 1}, // adopted: less room
		{2, true, 2},  // two idle now
		{3, false, 2}, // not available: no room
	} {
		c.store(snapshot(step.capacity, step.available))
		if calls != step.calls {
			t.Fatalf("step %d (capacity %d, available %v): %d calls, want %d", i, step.capacity, step.available, calls, step.calls)
		}
	}
}
