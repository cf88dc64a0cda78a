package server

import (
	"cmp"
	"context"
	"errors"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/token"
	"github.com/termivar/distributed/internal/wireerr"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/raftfsm"
)

// kindCodes is the error registry: every kind the API puts in
// ErrorDetail.kind, mapped to its one Connect code. It holds the core's
// kinds (distributed.ErrorKind.String()), the FSM's (raftfsm.ErrorKind.String())
// and the node's own (the Kind constants of this package); where the FSM and
// the node name the same failure (permission_denied, unknown_tenant) they
// share one entry. testdata/kind_codes.golden pins every value
// (TestKindCodes_Golden) and TestKindCodes_Complete fails when a kind exists
// in code but not here, or here but not in code.
var kindCodes = map[string]connect.Code{
	// Core: configuration and input.
	"invalid_limit":               connect.CodeInvalidArgument,
	"invalid_limit_relationship":  connect.CodeInvalidArgument,
	"count_limit_exceeds_maximum": connect.CodeInvalidArgument,
	"time_limit_exceeds_maximum":  connect.CodeInvalidArgument,
	"retry_limit_exceeds_maximum": connect.CodeInvalidArgument,
	"invalid_task":                connect.CodeInvalidArgument,
	"invalid_worker":              connect.CodeInvalidArgument,
	"lease_ttl_out_of_range":      connect.CodeInvalidArgument,
	"duplicate_aggregate_task":    connect.CodeInvalidArgument,
	// Core: concurrency.
	"revision_conflict":          connect.CodeAborted,
	"worker_generation_conflict": connect.CodeAborted,
	"logical_time_regression":    connect.CodeFailedPrecondition,
	// Core: existence.
	"task_already_exists":   connect.CodeAlreadyExists,
	"task_not_found":        connect.CodeNotFound,
	"worker_already_exists": connect.CodeAlreadyExists,
	"worker_not_found":      connect.CodeNotFound,
	"missing_result":        connect.CodeNotFound,
	// Core: capacity and result bounds.
	"counter_exhausted":             connect.CodeResourceExhausted,
	"task_record_capacity_reached":  connect.CodeResourceExhausted,
	"active_task_capacity_reached":  connect.CodeResourceExhausted,
	"queued_task_capacity_reached":  connect.CodeResourceExhausted,
	"terminal_capacity_reserved":    connect.CodeResourceExhausted,
	"worker_capacity_reached":       connect.CodeResourceExhausted,
	"worker_at_capacity":            connect.CodeResourceExhausted,
	"result_capacity_reached":       connect.CodeResourceExhausted,
	"result_too_large":              connect.CodeResourceExhausted,
	"total_result_bytes_exceeded":   connect.CodeResourceExhausted,
	"aggregate_item_limit_exceeded": connect.CodeResourceExhausted,
	"aggregate_bytes_exceeded":      connect.CodeResourceExhausted,
	// Core: scheduling and ownership.
	"no_queued_task":            connect.CodeFailedPrecondition,
	"no_available_worker":       connect.CodeFailedPrecondition,
	"worker_unavailable":        connect.CodeFailedPrecondition,
	"task_not_queued":           connect.CodeFailedPrecondition,
	"invalid_transition":        connect.CodeFailedPrecondition,
	"stale_ownership":           connect.CodeFailedPrecondition,
	"lease_expired":             connect.CodeFailedPrecondition,
	"conflicting_result":        connect.CodeAlreadyExists,
	"mismatched_result_receipt": connect.CodeFailedPrecondition,
	"task_purged":               connect.CodeNotFound, // Part F: the task's record was purged
	"attempt_timed_out":         connect.CodeFailedPrecondition,
	"failure_reason_too_long":   connect.CodeInvalidArgument,
	// Core: scheduling (contract Part F).
	"task_not_leasable":     connect.CodeFailedPrecondition,
	"scan_capacity_reached": connect.CodeResourceExhausted,
	// Core: integrity.
	"state_invariant": connect.CodeInternal,
	"invalid_state":   connect.CodeDataLoss,
	// FSM (raftfsm.ErrorKind).
	"invalid_command":     connect.CodeInvalidArgument,
	"unknown_tenant":      connect.CodeNotFound, // also the node's KindUnknownTenant
	"tenant_exists":       connect.CodeAlreadyExists,
	"key_exists":          connect.CodeAlreadyExists,
	"permission_denied":   connect.CodePermissionDenied, // also the node's KindPermissionDenied
	"already_initialized": connect.CodeFailedPrecondition,
	"key_not_found":       connect.CodeNotFound,
	"last_admin_key":      connect.CodeFailedPrecondition,
	"key_limit":           connect.CodeResourceExhausted,
	"scan_not_found":      connect.CodeNotFound,
	"cluster_version":     connect.CodeFailedPrecondition,
	// Node (the Kind constants of this package).
	KindInvalidToken:     connect.CodePermissionDenied,
	KindUnauthenticated:  connect.CodeUnauthenticated,
	KindInvalidArgument:  connect.CodeInvalidArgument,
	KindNotLeader:        connect.CodeUnavailable,
	KindUnavailable:      connect.CodeUnavailable,
	KindCanceled:         connect.CodeCanceled,
	KindDeadlineExceeded: connect.CodeDeadlineExceeded,
	KindInternal:         connect.CodeInternal,
	KindBusy:             connect.CodeUnavailable,
	KindSessionLimit:     connect.CodeResourceExhausted,
	KindMessageTooLarge:  connect.CodeResourceExhausted,
	KindAuthThrottled:    connect.CodeResourceExhausted,
	KindJoinUnverified:   connect.CodeFailedPrecondition,
	KindNotAMember:       connect.CodeFailedPrecondition,
	KindNoSuchMember:     connect.CodeNotFound,
	KindSoleVoter:        connect.CodeFailedPrecondition,
	KindTransferFailed:   connect.CodeAborted,
}

// codeOf returns the registry's code of kind; a kind missing from the
// registry (which TestKindCodes_Complete forbids) is Internal.
func codeOf(kind string) connect.Code {
	return cmp.Or(kindCodes[kind], connect.CodeInternal) // NB: no code is 0
}

// Node-level error kinds carried in ErrorDetail.kind (the registry's node
// section; KindBusy and KindAuthThrottled are in preauth.go,
// KindJoinUnverified and KindTransferFailed in cluster.go).
const (
	KindInvalidToken     = "invalid_token"
	KindUnauthenticated  = "unauthenticated"
	KindPermissionDenied = "permission_denied"
	KindInvalidArgument  = "invalid_argument"
	KindUnknownTenant    = "unknown_tenant"
	KindNotLeader        = "not_leader"
	KindUnavailable      = "unavailable"
	KindCanceled         = "canceled"
	KindDeadlineExceeded = "deadline_exceeded"
	KindInternal         = "internal"
	// KindNotAMember: Cluster.Join without a raft address for a node ID
	// that is not a member, or without an API URL.
	KindNotAMember = "not_a_member"
	// KindNoSuchMember: Cluster.Remove or TransferLeadership names no
	// member (or no voter).
	KindNoSuchMember = "no_such_member"
	// KindSoleVoter: TransferLeadership in a cluster with no other voter.
	KindSoleVoter = "sole_voter"
)

// apiError is a node-level failure: a kind of the registry and a message.
type apiError struct {
	kind string
	msg  string
}

func (e *apiError) Error() string { return e.msg }

func errUnauthenticated(msg string) error { return &apiError{KindUnauthenticated, msg} }

func errDenied(msg string) error { return &apiError{KindPermissionDenied, msg} }

func errInvalid(msg string) error { return &apiError{KindInvalidArgument, msg} }

// classify returns the Connect code and the ErrorDetail of err: a core
// error with every detail field (internal/wireerr), an FSM or node error
// with its kind and reason; the code is the registry's.
func classify(err error) (connect.Code, *pb.ErrorDetail) {
	d := detailOf(err)
	return codeOf(d.GetKind()), d
}

func detailOf(err error) *pb.ErrorDetail {
	var de *distributed.Error
	var fe *raftfsm.Error
	var ae *apiError
	switch {
	case errors.As(err, &de):
		return wireerr.Encode(de)
	case errors.As(err, &fe):
		return &pb.ErrorDetail{Kind: fe.Kind.String(), Reason: fe.Reason}
	case errors.Is(err, token.ErrInvalidToken):
		return &pb.ErrorDetail{Kind: KindInvalidToken, Reason: err.Error()}
	case errors.As(err, &ae):
		return &pb.ErrorDetail{Kind: ae.kind, Reason: ae.msg}
	case errors.Is(err, node.ErrNotLeader):
		return &pb.ErrorDetail{Kind: KindNotLeader}
	case errors.Is(err, node.ErrClosed):
		return &pb.ErrorDetail{Kind: KindUnavailable}
	case errors.Is(err, context.Canceled):
		return &pb.ErrorDetail{Kind: KindCanceled}
	case errors.Is(err, context.DeadlineExceeded):
		return &pb.ErrorDetail{Kind: KindDeadlineExceeded}
	case errors.Is(err, node.ErrOutcomeUnknown):
		return &pb.ErrorDetail{Kind: KindUnavailable, Reason: reasonOutcomeUnknown}
	}
	return &pb.ErrorDetail{Kind: KindInternal}
}

// kindOf names err for the audit log ("ok" for nil).
func kindOf(err error) string {
	if err == nil {
		return "ok"
	}
	return detailOf(err).GetKind()
}

// reasonOutcomeUnknown is the message of an infrastructure failure (other
// than not_leader and a closed node) after which the command may still be
// applied.
const reasonOutcomeUnknown = "the node failed after the command reached the log; it may still be applied"

// toConnect converts err into a *connect.Error with an ErrorDetail. Messages
// come from the core or the node and never contain targets, results, tokens
// or keys. A failure after which the command may still be applied
// (node.ErrOutcomeUnknown: leadership lost with the entry appended) is
// Unavailable and carries OutcomeHeader: OutcomeUnknown, as a forward that
// got no answer does, so that the client re-sends only calls that are safe
// to replay.
func toConnect(err error) error {
	if err == nil {
		return nil
	}
	if ce, ok := errors.AsType[*connect.Error](err); ok {
		return ce
	}
	code, detail := classify(err)
	msg := err.Error()
	switch {
	case detail.GetKind() == KindInternal:
		msg = "internal error"
	case detail.GetReason() == reasonOutcomeUnknown:
		msg = reasonOutcomeUnknown // NB: not the raft or disk error's text
	}
	out := connect.NewError(code, errors.New(msg))
	if d, derr := connect.NewErrorDetail(detail); derr == nil {
		out.AddDetail(d)
	}
	if errors.Is(err, node.ErrOutcomeUnknown) {
		out.Meta().Set(OutcomeHeader, OutcomeUnknown)
	}
	return out
}
