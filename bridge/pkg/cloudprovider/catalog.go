package cloudprovider

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc"
	"sigs.k8s.io/controller-runtime/pkg/log"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
)

// catalog holds the provider's instance types as last received on the
// WatchInstanceTypes stream, already converted to Karpenter's types, so that
// GetInstanceTypes (called per NodePool on every scheduling batch, every
// disruption poll and every simulation) answers from memory.
//
// Contract when the stream cannot deliver (see docs/architecture.md):
//   - before the first snapshot, GetInstanceTypes waits up to one call
//     timeout for it, then fails: core skips the NodePool this round and
//     blocks disruption of its nodes, which is safe, whereas an empty list
//     would make every instance type look gone;
//   - while the stream is down it keeps serving the last snapshot for up to
//     maxStaleness (a provider restart takes seconds), then fails the same
//     way rather than decide on a catalog that may be arbitrarily old.
type catalog struct {
	maxStaleness time.Duration
	now          func() time.Time

	mu   sync.Mutex
	snap *catalogSnapshot
	// downSince is when the stream was last lost; zero while connected.
	downSince time.Time
	// changed is closed and replaced whenever a snapshot arrives.
	changed chan struct{}
	// onMoreReserved is called (outside mu) when a snapshot has more room
	// in some reservation than the one before: see OnReservedCapacityGrew.
	onMoreReserved func()
}

// kindElasticMetal is the NodeClass kind of a catalog whose node_class_kind
// is empty (as the provider sent before there were two kinds), and of a
// NodePool whose nodeClassRef names no kind or one the provider did not list.
const kindElasticMetal = "ScalewayElasticMetalNodeClass"

// classKey identifies a NodeClass's catalog: two kinds may use one name.
type classKey struct {
	kind, name string
}

type catalogSnapshot struct {
	revision uint64
	perClass map[classKey][]*cloudprovider.InstanceType
	// defaults is Elastic Metal's default catalog.
	defaults []*cloudprovider.InstanceType
	// kindDefaults holds the default of every other kind listed in
	// kind_defaults or catalogs (possibly empty: a NodePool of that kind
	// never gets Elastic Metal's).
	kindDefaults map[string][]*cloudprovider.InstanceType
	offersReadAt time.Time
}

// wireKind reads a node_class_kind: empty is Elastic Metal.
func wireKind(kind string) string {
	if kind == "" {
		return kindElasticMetal
	}
	return kind
}

// lookup is the catalog of a NodePool whose nodeClassRef is (kind, name): its
// NodeClass's, else its kind's default. A kind the snapshot does not list
// (or none) is Elastic Metal, as before there were two kinds.
func (s *catalogSnapshot) lookup(kind, name string) []*cloudprovider.InstanceType {
	if _, listed := s.kindDefaults[kind]; !listed {
		kind = kindElasticMetal
	}
	if its, ok := s.perClass[classKey{kind, name}]; ok {
		return its
	}
	if kind == kindElasticMetal {
		return s.defaults
	}
	return s.kindDefaults[kind]
}

func newCatalog(maxStaleness time.Duration) *catalog {
	return &catalog{maxStaleness: maxStaleness, now: time.Now, changed: make(chan struct{})}
}

// convertSnapshot builds Karpenter's instance types from one stream message.
func convertSnapshot(msg *pb.WatchInstanceTypesResponse) (*catalogSnapshot, error) {
	defaults, err := convertInstanceTypes(msg.GetDefaultCatalog())
	if err != nil {
		return nil, fmt.Errorf("default catalog: %w", err)
	}
	snap := &catalogSnapshot{
		revision:     msg.GetRevision(),
		perClass:     make(map[classKey][]*cloudprovider.InstanceType, len(msg.GetCatalogs())),
		defaults:     defaults,
		kindDefaults: make(map[string][]*cloudprovider.InstanceType, len(msg.GetKindDefaults())),
	}
	if s := msg.GetOffersReadAtUnix(); s > 0 {
		snap.offersReadAt = time.Unix(s, 0)
	}
	for _, c := range msg.GetKindDefaults() {
		kind := wireKind(c.GetNodeClassKind())
		if kind == kindElasticMetal {
			return nil, fmt.Errorf("kind default of %s: its default is default_catalog", kind)
		}
		its, err := convertInstanceTypes(c.GetInstanceTypes())
		if err != nil {
			return nil, fmt.Errorf("default catalog of kind %s: %w", kind, err)
		}
		if its == nil {
			its = []*cloudprovider.InstanceType{}
		}
		snap.kindDefaults[kind] = its
	}
	for _, c := range msg.GetCatalogs() {
		key := classKey{wireKind(c.GetNodeClassKind()), c.GetNodeClassName()}
		its, err := convertInstanceTypes(c.GetInstanceTypes())
		if err != nil {
			return nil, fmt.Errorf("catalog of NodeClass %s (%s): %w", key.name, key.kind, err)
		}
		snap.perClass[key] = its
		if _, listed := snap.kindDefaults[key.kind]; !listed && key.kind != kindElasticMetal {
			// A kind with NodeClasses is served even without a default:
			// its unlisted NodeClasses get none, never Elastic Metal's.
			snap.kindDefaults[key.kind] = []*cloudprovider.InstanceType{}
		}
	}
	return snap, nil
}

func (c *catalog) store(snap *catalogSnapshot) {
	c.mu.Lock()
	grew := c.snap != nil && reservedGrew(c.snap.reserved(), snap.reserved())
	hook := c.onMoreReserved
	c.snap = snap
	c.downSince = time.Time{}
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	if grew && hook != nil {
		hook()
	}
}

// reserved is the room left in every reserved offering of the snapshot that
// core can launch into (Offering.Launchable: available, with room left), by
// instance type, zone and reservation id.
func (s *catalogSnapshot) reserved() map[string]int {
	out := map[string]int{}
	add := func(its []*cloudprovider.InstanceType) {
		for _, it := range its {
			for _, o := range it.Offerings {
				if o.CapacityType() == v1.CapacityTypeReserved && o.Launchable() {
					out[it.Name+"/"+o.Zone()+"/"+o.ReservationID()] += o.ReservationCapacity
				}
			}
		}
	}
	add(s.defaults)
	for _, its := range s.perClass {
		add(its)
	}
	for _, its := range s.kindDefaults {
		add(its)
	}
	return out
}

// reservedGrew: some reservation has more room in after than in before.
func reservedGrew(before, after map[string]int) bool {
	for k, n := range after {
		if n > before[k] {
			return true
		}
	}
	return false
}

func (c *catalog) streamDown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.downSince.IsZero() {
		c.downSince = c.now()
	}
}

// instanceTypes answers GetInstanceTypes for a NodePool whose nodeClassRef
// is (kind, name) ("" when it names none), waiting up to ctx for the first
// snapshot.
func (c *catalog) instanceTypes(ctx context.Context, kind, name string) ([]*cloudprovider.InstanceType, error) {
	for {
		c.mu.Lock()
		snap, downSince, changed := c.snap, c.downSince, c.changed
		c.mu.Unlock()
		if snap != nil {
			if !downSince.IsZero() {
				if down := c.now().Sub(downSince); down > c.maxStaleness {
					return nil, fmt.Errorf("provider catalog stream down for %s (longer than %s); not deciding on catalog revision %d",
						down.Round(time.Second), c.maxStaleness, snap.revision)
				}
			}
			return snap.lookup(kind, name), nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("no instance-type catalog received from the provider yet: %w", ctx.Err())
		}
	}
}

// waitForRevision returns once a snapshot of at least revision has arrived,
// or when ctx ends.
func (c *catalog) waitForRevision(ctx context.Context, revision uint64) error {
	for {
		c.mu.Lock()
		snap, changed := c.snap, c.changed
		c.mu.Unlock()
		if snap != nil && snap.revision >= revision {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// revision is the revision of the snapshot served now (0 before the first).
func (c *catalog) revision() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.snap == nil {
		return 0
	}
	return c.snap.revision
}

// Backoff of the watch stream's reconnection: the provider runs in the same
// pod, so reconnect fast, but do not spin while it is down.
const (
	watchBackoffBase = 100 * time.Millisecond
	watchBackoffMax  = 5 * time.Second
)

// watch keeps the catalog current until ctx ends: it opens the
// WatchInstanceTypes stream, stores every snapshot, and reconnects with a
// jittered exponential backoff whenever the stream breaks.
func (c *catalog) watch(ctx context.Context, client pb.CloudProviderClient) {
	logger := log.FromContext(ctx).WithName("catalog")
	backoff := watchBackoffBase
	for ctx.Err() == nil {
		received, err := c.follow(ctx, client)
		if ctx.Err() != nil {
			return
		}
		c.streamDown()
		if received {
			backoff = watchBackoffBase
		}
		logger.Info("instance-type stream ended; reconnecting", "error", err, "retryIn", backoff.String(),
			"servingRevision", c.revision())
		// Full jitter over [backoff/2, backoff].
		sleep := backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(sleep):
		}
		backoff = min(backoff*2, watchBackoffMax)
	}
}

// follow reads one stream until it breaks; it reports whether any snapshot
// arrived (which resets the backoff).
func (c *catalog) follow(ctx context.Context, client pb.CloudProviderClient) (bool, error) {
	logger := log.FromContext(ctx).WithName("catalog")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// WaitForReady: a provider that is (re)starting is waited for inside
	// the attempt instead of failing it at once.
	stream, err := client.WatchInstanceTypes(ctx, &pb.WatchInstanceTypesRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return false, mapError(methodWatchInstanceTypes, err)
	}
	received := false
	for {
		msg, err := stream.Recv()
		if err != nil {
			return received, mapError(methodWatchInstanceTypes, err)
		}
		snap, err := convertSnapshot(msg)
		if err != nil {
			// Keep serving the previous snapshot: a malformed catalog must
			// not replace a good one. The provider sends the next one on
			// its next change.
			logger.Error(err, "ignoring a malformed instance-type catalog", "revision", msg.GetRevision())
			continue
		}
		received = true
		c.store(snap)
		logger.V(1).Info("instance-type catalog updated", "revision", snap.revision,
			"instanceTypes", len(snap.defaults), "nodeClasses", len(snap.perClass), "otherKinds", len(snap.kindDefaults),
			"offersAge", offersAge(snap, c.now()))
	}
}

func offersAge(s *catalogSnapshot, now time.Time) string {
	if s.offersReadAt.IsZero() {
		return "unknown"
	}
	return now.Sub(s.offersReadAt).Round(time.Second).String()
}
