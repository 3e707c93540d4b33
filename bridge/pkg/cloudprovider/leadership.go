package cloudprovider

import (
	"context"
	"fmt"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
)

// Leadership tells the provider that this replica holds Karpenter's leader
// lease, so that exactly one provider replica acts. Karpenter core never gives
// leadership back while running (losing the lease ends the process), so there
// is only ever a "true" to send. It is sent again whenever the provider says
// it does not know (NotLeaderDetail), and every heartbeat: a provider that
// restarted next to a running bridge may get no call at all for minutes (no
// pending pods, installs in flight), yet it must learn it leads to resume those
// installs. SetLeadership is idempotent on the provider side.
type Leadership struct {
	client   pb.CloudProviderClient
	identity string
	timeout  time.Duration
	// retry is the pause between failed attempts.
	retry time.Duration
	// heartbeat is the pause between two announcements that succeeded.
	heartbeat time.Duration
	// resend is poked (without blocking) when the provider refused a call
	// because it does not consider us the leader.
	resend chan struct{}
	// acked is closed once the provider has acknowledged leadership.
	acked   chan struct{}
	ackOnce sync.Once
}

func NewLeadership(client pb.CloudProviderClient, identity string, callTimeout time.Duration) *Leadership {
	return &Leadership{
		client:    client,
		identity:  identity,
		timeout:   callTimeout,
		retry:     time.Second,
		heartbeat: 5 * time.Second,
		resend:    make(chan struct{}, 1),
		acked:     make(chan struct{}),
	}
}

// awaitAcknowledged waits until the provider has acknowledged leadership once.
// Core's controllers start the moment the lease is won, racing the first
// SetLeadership; without this wait their first mutating calls would be
// refused and show up as failed launches. A nil Leadership never waits.
func (l *Leadership) awaitAcknowledged(ctx context.Context) error {
	if l == nil {
		return nil
	}
	select {
	case <-l.acked:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the provider to acknowledge leadership: %w", ctx.Err())
	}
}

// providerForgot asks Run to tell the provider again.
func (l *Leadership) providerForgot() {
	if l == nil {
		return
	}
	select {
	case l.resend <- struct{}{}:
	default:
	}
}

// Run waits until elected is closed (the manager's Elected() channel, or an
// already closed channel when leader election is disabled), then tells the
// provider, retrying until it acknowledges, again after every refusal with
// NotLeaderDetail, and every heartbeat. It returns when ctx ends.
func (l *Leadership) Run(ctx context.Context, elected <-chan struct{}) {
	select {
	case <-elected:
	case <-ctx.Done():
		return
	}
	ticker := time.NewTicker(l.heartbeat)
	defer ticker.Stop()
	for {
		l.announce(ctx)
		select {
		case <-l.resend:
		case <-ticker.C:
		case <-ctx.Done():
			return
		}
	}
}

func (l *Leadership) announce(ctx context.Context) {
	logger := log.FromContext(ctx).WithValues("identity", l.identity)
	for attempt := 1; ; attempt++ {
		callCtx, cancel := context.WithTimeout(ctx, l.timeout)
		_, err := l.client.SetLeadership(callCtx, &pb.SetLeadershipRequest{Leader: true, Identity: l.identity})
		cancel()
		if err == nil {
			first := false
			l.ackOnce.Do(func() { first = true; close(l.acked) })
			if first || attempt > 1 {
				logger.Info("provider acknowledged leadership", "attempts", attempt)
			}
			return
		}
		logger.Error(mapError(methodSetLeadership, err), "telling the provider this replica leads", "attempt", attempt)
		select {
		case <-ctx.Done():
			return
		case <-time.After(l.retry):
		}
	}
}
