package cloudprovider

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	pb "github.com/karpenter-provider-scaleway/bridge/gen/cloudprovider/v1"
)

// Method names as they appear in errors and in the error table of
// cloudprovider.proto.
const (
	methodCreate             = "Create"
	methodDelete             = "Delete"
	methodGet                = "Get"
	methodList               = "List"
	methodGetInstanceTypes   = "GetInstanceTypes"
	methodWatchInstanceTypes = "WatchInstanceTypes"
	methodIsDrifted          = "IsDrifted"
	methodRepairPolicies     = "RepairPolicies"
	methodReboot             = "Reboot"
	methodInfo               = "Info"
	methodSetLeadership      = "SetLeadership"
)

// mapError turns a failed call into the error Karpenter core expects, following
// the table at the top of cloudprovider.proto. Only the status code and the
// typed details are read, never the message. Precedence:
//
//  1. FAILED_PRECONDITION with a NotLeaderDetail: plain error (this replica
//     is out of step with the provider; core retries).
//  2. Create with a CreateErrorDetail: CreateError with its reason and message,
//     whatever the code (the detail is the provider's explicit choice).
//  3. The code rows of the table (Reboot: ABORTED, UNAVAILABLE,
//     DEADLINE_EXCEEDED and every code not listed stay plain errors, which
//     core retries until its issuance timeout).
func mapError(method string, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("calling provider %s: %w", method, err)
	}
	wrapped := fmt.Errorf("calling provider %s: %w", method, err)
	if isNotLeader(st) {
		return wrapped
	}
	switch method {
	case methodCreate:
		if detail := createErrorDetail(st); detail != nil {
			return cloudprovider.NewCreateError(wrapped, detail.GetConditionReason(), detail.GetConditionMessage())
		}
		switch st.Code() {
		case codes.ResourceExhausted:
			return cloudprovider.NewInsufficientCapacityError(wrapped)
		case codes.FailedPrecondition:
			return cloudprovider.NewNodeClassNotReadyError(wrapped)
		}
	case methodGet, methodDelete:
		if st.Code() == codes.NotFound {
			return cloudprovider.NewNodeClaimNotFoundError(wrapped)
		}
	case methodReboot:
		switch st.Code() {
		case codes.Unimplemented:
			// Core's error carries no cause; joined so that the gRPC
			// status stays reachable (errors.As finds both).
			return fmt.Errorf("%w: %w", cloudprovider.NewNodeRebootNotImplementedError(), wrapped)
		case codes.NotFound, codes.PermissionDenied, codes.Unauthenticated, codes.FailedPrecondition:
			// Retrying cannot help: core fails the reboot at once (and
			// node repair replaces the node) instead of retrying until
			// its issuance timeout.
			return cloudprovider.NewNodeRebootFailedError(wrapped)
		}
	}
	return wrapped
}

// isNotLeader reports whether the provider refused the call because it does
// not consider this replica the leader.
func isNotLeader(st *status.Status) bool {
	if st.Code() != codes.FailedPrecondition {
		return false
	}
	for _, d := range st.Details() {
		if _, ok := d.(*pb.NotLeaderDetail); ok {
			return true
		}
	}
	return false
}

// insufficientCapacityRevision is the catalog revision carried by an
// InsufficientCapacityDetail, if err has one.
func insufficientCapacityRevision(err error) (uint64, bool) {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return 0, false
	}
	for _, d := range st.Details() {
		if detail, ok := d.(*pb.InsufficientCapacityDetail); ok {
			return detail.GetCatalogRevision(), true
		}
	}
	return 0, false
}

func createErrorDetail(st *status.Status) *pb.CreateErrorDetail {
	for _, d := range st.Details() {
		if detail, ok := d.(*pb.CreateErrorDetail); ok {
			return detail
		}
	}
	return nil
}

// notLeaderError reports whether err is the provider saying this replica is
// not the leader.
func notLeaderError(err error) bool {
	st, ok := status.FromError(err)
	return ok && isNotLeader(st)
}
