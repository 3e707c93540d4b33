package cloudprovider

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
)

// instanceTypeCache keeps GetInstanceTypes answers for a few seconds, keyed by
// NodeClass name (the catalog depends on the NodeClass, not on the NodePool).
// Core asks for instance types on every scheduling batch, disruption poll and
// simulation, so going to the provider each time would put a socket round
// trip and a full catalog decode on every one of them.
//
// TODO(watch): replace this with a catalog kept current by the
// WatchInstanceTypes stream, so that GetInstanceTypes never waits on the
// provider and sees sold-out offers at once. Until then answers may be up to
// one TTL old.
type instanceTypeCache struct {
	ttl   time.Duration
	now   func() time.Time
	group singleflight.Group

	mu      sync.Mutex
	entries map[string]cachedInstanceTypes
}

type cachedInstanceTypes struct {
	fetched       time.Time
	instanceTypes []*cloudprovider.InstanceType
}

func newInstanceTypeCache(ttl time.Duration) *instanceTypeCache {
	return &instanceTypeCache{ttl: ttl, now: time.Now, entries: map[string]cachedInstanceTypes{}}
}

// get returns the cached answer for key, or calls fetch once for all
// concurrent callers and caches a successful answer. Errors are not cached.
func (c *instanceTypeCache) get(ctx context.Context, key string, fetch func(context.Context) ([]*cloudprovider.InstanceType, error)) ([]*cloudprovider.InstanceType, error) {
	if c.ttl > 0 {
		c.mu.Lock()
		e, ok := c.entries[key]
		c.mu.Unlock()
		if ok && c.now().Sub(e.fetched) < c.ttl {
			return e.instanceTypes, nil
		}
	}
	ch := c.group.DoChan(key, func() (any, error) {
		its, err := fetch(ctx)
		if err != nil {
			return nil, err
		}
		if c.ttl > 0 {
			c.mu.Lock()
			c.entries[key] = cachedInstanceTypes{fetched: c.now(), instanceTypes: its}
			c.mu.Unlock()
		}
		return its, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, res.Err
		}
		return res.Val.([]*cloudprovider.InstanceType), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// invalidate drops every entry, so that the next call sees offers the
// provider has just marked unavailable.
func (c *instanceTypeCache) invalidate() {
	c.mu.Lock()
	clear(c.entries)
	c.mu.Unlock()
}
