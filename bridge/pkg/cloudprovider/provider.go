// Package cloudprovider implements Karpenter's cloudprovider.CloudProvider by
// forwarding every call over gRPC to an out-of-process provider (the contract
// is proto/karpenter/cloudprovider/v1/cloudprovider.proto).
//
// Every call has a deadline, errors are mapped once (errors.go) into the types
// core checks with errors.As, and Kubernetes objects cross the wire as their
// Kubernetes JSON.
package cloudprovider

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/awslabs/operatorpkg/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
	"github.com/karpenter-provider-scaleway/bridge/pkg/nodeclass"
)

// CloudProvider is the bridge's cloudprovider.CloudProvider.
type CloudProvider struct {
	client         pb.CloudProviderClient
	opts           Options
	name           string
	repairPolicies []cloudprovider.RepairPolicy
	catalog        *catalog
	// nodeClasses is how many NodeClass kinds the provider listed in Info;
	// Register bound kind i to the Go type of nodeclass.New(i).
	nodeClasses int
	// leadership gates mutating calls until the provider knows this replica
	// leads, and is told again when the provider refuses a call because it
	// forgot (e.g. it restarted). Nil in tests that do not care.
	leadership *Leadership
}

var _ cloudprovider.CloudProvider = (*CloudProvider)(nil)

// New builds the CloudProvider from the provider's Info answer (see Register)
// and its repair policies, both read once at startup.
func New(client pb.CloudProviderClient, opts Options, info *pb.InfoResponse, repairPolicies []cloudprovider.RepairPolicy, leadership *Leadership) *CloudProvider {
	return &CloudProvider{
		client:         client,
		opts:           opts,
		name:           info.GetName(),
		nodeClasses:    min(len(info.GetNodeClasses()), nodeclass.MaxKinds),
		repairPolicies: repairPolicies,
		catalog:        newCatalog(opts.CatalogMaxStaleness),
		leadership:     leadership,
	}
}

// OnReservedCapacityGrew sets what to call when a catalog snapshot arrives
// with more room in some reservation than the one before (a standby server
// became idle). main wires it to core's Cluster.MarkUnconsolidated: core
// re-evaluates consolidation only when the cluster's objects change, or
// every 5 minutes otherwise, and new reserved capacity changes no object;
// without the call, VMs would wait up to 5 minutes for metal that is ready.
// Call it before WatchCatalog.
func (c *CloudProvider) OnReservedCapacityGrew(hook func()) {
	c.catalog.mu.Lock()
	defer c.catalog.mu.Unlock()
	c.catalog.onMoreReserved = hook
}

// WatchCatalog keeps the instance-type catalog current from the provider's
// WatchInstanceTypes stream until ctx ends (run it in its own goroutine).
// GetInstanceTypes serves that catalog from memory.
func (c *CloudProvider) WatchCatalog(ctx context.Context) {
	c.catalog.watch(ctx, c.client)
}

// WaitForCatalog returns once the first catalog has arrived, or when ctx ends.
func (c *CloudProvider) WaitForCatalog(ctx context.Context) error {
	return c.catalog.waitForRevision(ctx, 1)
}

// call runs one RPC under its own deadline and maps its error.
func call[Req, Resp any](ctx context.Context, c *CloudProvider, method string, timeout time.Duration,
	rpc func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := rpc(ctx, req)
	if err != nil {
		if notLeaderError(err) {
			c.leadership.providerForgot()
		}
		var zero Resp
		return zero, mapError(method, err)
	}
	return resp, nil
}

func (c *CloudProvider) Create(ctx context.Context, nodeClaim *v1.NodeClaim) (*v1.NodeClaim, error) {
	raw, err := encodeNodeClaim(nodeClaim)
	if err != nil {
		return nil, err
	}
	if err := c.awaitLeadership(ctx); err != nil {
		return nil, err
	}
	callCtx, cancel := context.WithTimeout(ctx, c.opts.CreateTimeout)
	resp, err := c.client.Create(callCtx, &pb.CreateRequest{NodeClaimJson: raw})
	cancel()
	if err != nil {
		if notLeaderError(err) {
			c.leadership.providerForgot()
		}
		if revision, ok := insufficientCapacityRevision(err); ok {
			c.awaitCatalogRevision(ctx, revision)
		}
		return nil, mapError(methodCreate, err)
	}
	created, err := decodeNodeClaim(resp.GetNodeClaimJson())
	if err != nil {
		return nil, fmt.Errorf("decoding provider Create answer: %w", err)
	}
	// Core matches Nodes to NodeClaims by providerID and holds all
	// provisioning while any NodeClaim lacks one.
	if created.Status.ProviderID == "" {
		return nil, errors.New("provider Create answered a NodeClaim without status.providerID")
	}
	return created, nil
}

func (c *CloudProvider) Delete(ctx context.Context, nodeClaim *v1.NodeClaim) error {
	raw, err := encodeNodeClaim(nodeClaim)
	if err != nil {
		return err
	}
	if err := c.awaitLeadership(ctx); err != nil {
		return err
	}
	_, err = call(ctx, c, methodDelete, c.opts.CallTimeout, c.client.Delete, &pb.DeleteRequest{NodeClaimJson: raw})
	return err
}

// Reboot asks the provider to restart the machine of nodeClaim in place. Core
// (nodeclaim.reboot) calls it once the node is drained, with an operationID
// that stays the same across its retries and restarts for one reboot; the
// provider restarts the machine once per operationID. nil means the request
// was accepted: core then watches the Node's bootID change.
func (c *CloudProvider) Reboot(ctx context.Context, nodeClaim *v1.NodeClaim, operationID string) error {
	raw, err := encodeNodeClaim(nodeClaim)
	if err != nil {
		return err
	}
	if err := c.awaitLeadership(ctx); err != nil {
		return err
	}
	logger := log.FromContext(ctx).WithValues("NodeClaim", nodeClaim.Name, "provider-id", nodeClaim.Status.ProviderID, "operation-id", operationID)
	logger.Info("asking the provider to reboot the node")
	_, err = call(ctx, c, methodReboot, c.opts.CallTimeout, c.client.Reboot, &pb.RebootRequest{NodeClaimJson: raw, OperationId: operationID})
	if err != nil {
		logger.Info("provider refused or did not answer the reboot", "error", err.Error())
		return err
	}
	logger.Info("provider accepted the reboot")
	return nil
}

// awaitCatalogRevision holds an insufficient-capacity answer, for at most one
// call timeout, until the catalog holds the provider's mark of the refused
// offering: core deletes the NodeClaim and schedules again at once, and must
// not pick the same offering from the previous snapshot.
func (c *CloudProvider) awaitCatalogRevision(ctx context.Context, revision uint64) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.CallTimeout)
	defer cancel()
	if err := c.catalog.waitForRevision(ctx, revision); err != nil {
		log.FromContext(ctx).Info("catalog did not reach the revision of an insufficient-capacity answer",
			"revision", revision, "serving", c.catalog.revision(), "error", err.Error())
	}
}

// awaitLeadership holds a mutating call, for at most one call timeout, until
// the provider has acknowledged this replica's leadership.
func (c *CloudProvider) awaitLeadership(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.CallTimeout)
	defer cancel()
	return c.leadership.awaitAcknowledged(ctx)
}

func (c *CloudProvider) Get(ctx context.Context, providerID string) (*v1.NodeClaim, error) {
	resp, err := call(ctx, c, methodGet, c.opts.CallTimeout, c.client.Get, &pb.GetRequest{ProviderId: providerID})
	if err != nil {
		return nil, err
	}
	nc, err := decodeNodeClaim(resp.GetNodeClaimJson())
	if err != nil {
		return nil, fmt.Errorf("decoding provider Get answer for %s: %w", providerID, err)
	}
	return nc, nil
}

// List returns every machine or an error, never a partial list: core's garbage
// collection deletes NodeClaims whose providerID is missing.
func (c *CloudProvider) List(ctx context.Context) ([]*v1.NodeClaim, error) {
	resp, err := call(ctx, c, methodList, c.opts.ListTimeout, c.client.List, &pb.ListRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]*v1.NodeClaim, 0, len(resp.GetNodeClaimsJson()))
	for i, raw := range resp.GetNodeClaimsJson() {
		nc, err := decodeNodeClaim(raw)
		if err != nil {
			return nil, fmt.Errorf("decoding provider List answer, entry %d: %w", i, err)
		}
		out = append(out, nc)
	}
	return out, nil
}

// GetInstanceTypes answers from the catalog kept by WatchCatalog, without a
// call to the provider. The NodePool's NodeClass, by kind and name, selects
// the catalog (zones and billing are per NodeClass); a NodeClass the provider
// has not listed yet gets its kind's default one, and a kind the provider has
// not listed (or none) is Elastic Metal.
func (c *CloudProvider) GetInstanceTypes(ctx context.Context, nodePool *v1.NodePool) ([]*cloudprovider.InstanceType, error) {
	if nodePool == nil {
		return nil, errors.New("GetInstanceTypes needs a NodePool")
	}
	kind, name := "", ""
	if ref := nodePool.Spec.Template.Spec.NodeClassRef; ref != nil {
		kind, name = ref.Kind, ref.Name
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.CallTimeout)
	defer cancel()
	its, err := c.catalog.instanceTypes(ctx, kind, name)
	if err != nil {
		return nil, fmt.Errorf("instance types for NodePool %s: %w", nodePool.Name, err)
	}
	return its, nil
}

// driftReason is the pattern of a Kubernetes condition reason; core writes the
// drift reason into the NodeClaim's Drifted condition.
var driftReason = regexp.MustCompile(`^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?|)$`)

func (c *CloudProvider) IsDrifted(ctx context.Context, nodeClaim *v1.NodeClaim) (cloudprovider.DriftReason, error) {
	raw, err := encodeNodeClaim(nodeClaim)
	if err != nil {
		return "", err
	}
	resp, err := call(ctx, c, methodIsDrifted, c.opts.CallTimeout, c.client.IsDrifted, &pb.IsDriftedRequest{NodeClaimJson: raw})
	if err != nil {
		return "", err
	}
	if !driftReason.MatchString(resp.GetReason()) {
		return "", fmt.Errorf("provider IsDrifted answered an invalid reason %q", resp.GetReason())
	}
	return cloudprovider.DriftReason(resp.GetReason()), nil
}

// RepairPolicies were read once at startup (FetchRepairPolicies): core asks for
// them while building its controllers and on every Node health reconcile,
// through a method that can return no error.
func (c *CloudProvider) RepairPolicies() []cloudprovider.RepairPolicy {
	return c.repairPolicies
}

func (c *CloudProvider) Name() string {
	return c.name
}

// GetSupportedNodeClasses returns one fresh zero object per NodeClass kind, in
// Info order, each time: core reads NodeClasses into the returned objects and
// tells the kinds apart by their Go types' GVKs (see package nodeclass).
func (c *CloudProvider) GetSupportedNodeClasses() []status.Object {
	out := make([]status.Object, c.nodeClasses)
	for i := range out {
		out[i] = nodeclass.New(i)
	}
	return out
}

// FetchRepairPolicies asks the provider for its repair policies.
// UNIMPLEMENTED means none. A policy core could not act on (no condition, a
// negative duration, no action or one this bridge does not know) fails the
// call: main refuses to start rather than run with a set core would
// misread. Whether the set as a whole is valid (exactly one default fallback,
// whose action is ReplaceNode; priorities within 0-100; reason regexes that
// compile) is core's own check, health.NewRepairPolicyMatcher, which main
// runs when the NodeRepair gate is on.
func FetchRepairPolicies(ctx context.Context, client pb.CloudProviderClient, timeout time.Duration) ([]cloudprovider.RepairPolicy, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := client.RepairPolicies(ctx, &pb.RepairPoliciesRequest{})
	if err != nil {
		if grpcstatus.Code(err) == codes.Unimplemented {
			return nil, nil
		}
		return nil, mapError(methodRepairPolicies, err)
	}
	out := make([]cloudprovider.RepairPolicy, 0, len(resp.GetPolicies()))
	for i, p := range resp.GetPolicies() {
		policy, err := convertRepairPolicy(p)
		if err != nil {
			return nil, fmt.Errorf("provider RepairPolicies answered an invalid policy [%d] {%v}: %w", i, p, err)
		}
		out = append(out, policy)
	}
	log.FromContext(ctx).V(1).Info("read provider repair policies", "count", len(out))
	return out, nil
}

// repairActions maps the proto's actions to core's.
var repairActions = map[pb.RepairPolicy_Action]cloudprovider.RepairAction{
	pb.RepairPolicy_REPLACE_NODE: cloudprovider.ReplaceNode,
	pb.RepairPolicy_REBOOT_NODE:  cloudprovider.RebootNode,
}

func convertRepairPolicy(p *pb.RepairPolicy) (cloudprovider.RepairPolicy, error) {
	if p.GetConditionType() == "" || p.GetConditionStatus() == "" {
		return cloudprovider.RepairPolicy{}, errors.New("condition type and status are required")
	}
	if p.GetTolerationSeconds() < 0 {
		return cloudprovider.RepairPolicy{}, errors.New("negative toleration_seconds")
	}
	action, ok := repairActions[p.GetAction()]
	if !ok {
		// ACTION_UNSPECIFIED is what a provider built for core v1.14
		// (no action field) sends.
		return cloudprovider.RepairPolicy{}, fmt.Errorf("action %s: every policy needs REPLACE_NODE or REBOOT_NODE", p.GetAction())
	}
	policy := cloudprovider.RepairPolicy{
		ConditionType:      corev1.NodeConditionType(p.GetConditionType()),
		ConditionStatus:    corev1.ConditionStatus(p.GetConditionStatus()),
		ReasonRegex:        p.GetReasonRegex(),
		TolerationDuration: time.Duration(p.GetTolerationSeconds()) * time.Second,
		Priority:           int(p.GetPriority()),
		Action:             action,
	}
	if p.TerminationGracePeriodSeconds != nil {
		seconds := p.GetTerminationGracePeriodSeconds()
		if seconds < 0 {
			return cloudprovider.RepairPolicy{}, errors.New("negative termination_grace_period_seconds")
		}
		tgp := time.Duration(seconds) * time.Second
		policy.TerminationGracePeriod = &tgp
	}
	return policy, nil
}
