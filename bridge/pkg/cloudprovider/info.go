package cloudprovider

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/log"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
	"github.com/karpenter-provider-scaleway/bridge/pkg/nodeclass"
)

// maxMessageSize allows a List of a few thousand NodeClaims or a large catalog;
// gRPC's default of 4 MiB is within reach of a big cluster.
const maxMessageSize = 64 << 20

// Dial returns a client connection to the provider's Unix socket. It does not
// wait for the provider: calls fail with UNAVAILABLE until it listens.
func Dial(socket string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix:"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize), grpc.MaxCallSendMsgSize(maxMessageSize)),
		// The provider runs in the same pod and may restart at any time:
		// reconnect within a couple of seconds instead of gRPC's default
		// backoff, which grows to two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("creating gRPC client for %s: %w", socket, err)
	}
	return conn, nil
}

// WaitForInfo calls Info until the provider answers or startupTimeout passes.
// The bridge and the provider are two containers of one pod and start in any
// order, so a missing socket at first is normal.
func WaitForInfo(ctx context.Context, client pb.CloudProviderClient, callTimeout, startupTimeout time.Duration) (*pb.InfoResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	var last error
	for attempt := 1; ; attempt++ {
		callCtx, callCancel := context.WithTimeout(ctx, callTimeout)
		// WaitForReady: wait for the socket within the attempt instead of
		// failing at once while the connection is down.
		info, err := client.Info(callCtx, &pb.InfoRequest{}, grpc.WaitForReady(true))
		callCancel()
		if err == nil {
			return info, nil
		}
		last = mapError(methodInfo, err)
		log.FromContext(ctx).Info("waiting for the provider to answer Info", "attempt", attempt, "error", last.Error())
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("provider did not answer Info within %s: %w", startupTimeout, last)
		case <-time.After(time.Second):
		}
	}
}

// Register applies the provider's Info answer to the process-wide state
// Karpenter core reads: the NodeClass kinds go into scheme (core resolves
// NodeClasses through object.GVK and the manager's client, both backed by
// client-go's scheme.Scheme in production), the provider's labels become
// well-known, and their domains restricted, and the reservation id label (if
// the provider serves reserved capacity) becomes core's ReservationIDLabel and
// one of its ReservedCapacityLabels. Call it before the controllers are
// built. It returns the NodeClass kinds in Info order, kind i bound to the
// Go type nodeclass.New(i) returns.
func Register(scheme *runtime.Scheme, info *pb.InfoResponse) ([]schema.GroupVersionKind, error) {
	if info.GetName() == "" {
		return nil, errors.New("provider Info has no name")
	}
	// Each kind needs its own Go type (see package nodeclass), and the
	// bridge has nodeclass.MaxKinds of them.
	n := len(info.GetNodeClasses())
	if n == 0 || n > nodeclass.MaxKinds {
		return nil, fmt.Errorf("provider Info lists %d NodeClass kinds; the bridge supports 1 to %d", n, nodeclass.MaxKinds)
	}
	gvks := make([]schema.GroupVersionKind, 0, n)
	for _, k := range info.GetNodeClasses() {
		gvks = append(gvks, schema.GroupVersionKind{Group: k.GetGroup(), Version: k.GetVersion(), Kind: k.GetKind()})
	}
	for _, label := range info.GetWellKnownLabels() {
		if errs := validation.IsQualifiedName(label); len(errs) > 0 {
			return nil, fmt.Errorf("provider Info well-known label %q: %s", label, strings.Join(errs, "; "))
		}
	}
	if err := checkReservationIDLabel(info); err != nil {
		return nil, err
	}
	if err := nodeclass.Register(scheme, gvks); err != nil {
		return nil, fmt.Errorf("provider Info NodeClass kinds: %w", err)
	}
	for _, label := range info.GetWellKnownLabels() {
		if v1.WellKnownLabels.Has(label) {
			continue
		}
		v1.WellKnownLabels.Insert(label)
		// Restricting the domain makes core reject NodePools that use a
		// label of the provider's domain the provider does not define (it
		// would never appear on a node). Kubernetes' own domains are left
		// alone so that ordinary node labels stay usable.
		if domain := v1.GetLabelDomain(label); domain != "" && !isKubernetesDomain(domain) {
			v1.RestrictedLabelDomains.Insert(domain)
		}
	}
	if label := info.GetReservationIdLabel(); label != "" {
		cloudprovider.ReservationIDLabel = label
		cloudprovider.ReservedCapacityLabels.Insert(label)
	}
	return gvks, nil
}

// checkReservationIDLabel validates the label that identifies the reservation
// of reserved offerings, before Register changes any global. Core reads the
// id of a reserved offering through cloudprovider.ReservationIDLabel and
// counts its remaining capacity per id; left unset, every reservation would
// read as the same empty id. The label must be well-known: core completes the
// NodeClaims it plans into a reservation with a requirement on it, and a
// NodePool may select a reservation with it. Core has one such label per
// process, so a second answer may not name another.
func checkReservationIDLabel(info *pb.InfoResponse) error {
	label := info.GetReservationIdLabel()
	if label == "" {
		return nil
	}
	if errs := validation.IsQualifiedName(label); len(errs) > 0 {
		return fmt.Errorf("provider Info reservation id label %q: %s", label, strings.Join(errs, "; "))
	}
	if !slices.Contains(info.GetWellKnownLabels(), label) {
		return fmt.Errorf("provider Info reservation id label %q is not among its well-known labels %v", label, info.GetWellKnownLabels())
	}
	if current := cloudprovider.ReservationIDLabel; current != "" && current != label {
		return fmt.Errorf("provider Info reservation id label %q: the reservation id label is already registered as %q", label, current)
	}
	return nil
}

func isKubernetesDomain(domain string) bool {
	for _, d := range []string{"kubernetes.io", "k8s.io"} {
		if domain == d || strings.HasSuffix(domain, "."+d) {
			return true
		}
	}
	return false
}
