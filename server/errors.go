package server

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/token"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/raftfsm"
)

// coreCodes maps every core ErrorKind to exactly one Connect code. It is the
// single table the API uses; TestCoreCodes_Complete checks it covers every
// kind.
var coreCodes = map[distributed.ErrorKind]connect.Code{
	distributed.KindInvalidLimit:               connect.CodeInvalidArgument,
	distributed.KindInvalidLimitRelationship:   connect.CodeInvalidArgument,
	distributed.KindCountLimitExceedsMaximum:   connect.CodeInvalidArgument,
	distributed.KindTimeLimitExceedsMaximum:    connect.CodeInvalidArgument,
	distributed.KindRetryLimitExceedsMaximum:   connect.CodeInvalidArgument,
	distributed.KindInvalidTask:                connect.CodeInvalidArgument,
	distributed.KindInvalidWorker:              connect.CodeInvalidArgument,
	distributed.KindRevisionConflict:           connect.CodeAborted,
	distributed.KindLogicalTimeRegression:      connect.CodeFailedPrecondition,
	distributed.KindCounterExhausted:           connect.CodeResourceExhausted,
	distributed.KindTaskAlreadyExists:          connect.CodeAlreadyExists,
	distributed.KindTaskNotFound:               connect.CodeNotFound,
	distributed.KindWorkerAlreadyExists:        connect.CodeAlreadyExists,
	distributed.KindWorkerNotFound:             connect.CodeNotFound,
	distributed.KindWorkerGenerationConflict:   connect.CodeAborted,
	distributed.KindTaskRecordCapacityReached:  connect.CodeResourceExhausted,
	distributed.KindActiveTaskCapacityReached:  connect.CodeResourceExhausted,
	distributed.KindQueuedTaskCapacityReached:  connect.CodeResourceExhausted,
	distributed.KindTerminalCapacityReserved:   connect.CodeResourceExhausted,
	distributed.KindWorkerCapacityReached:      connect.CodeResourceExhausted,
	distributed.KindNoQueuedTask:               connect.CodeFailedPrecondition,
	distributed.KindNoAvailableWorker:          connect.CodeFailedPrecondition,
	distributed.KindWorkerUnavailable:          connect.CodeFailedPrecondition,
	distributed.KindWorkerAtCapacity:           connect.CodeResourceExhausted,
	distributed.KindTaskNotQueued:              connect.CodeFailedPrecondition,
	distributed.KindInvalidTransition:          connect.CodeFailedPrecondition,
	distributed.KindStaleOwnership:             connect.CodeFailedPrecondition,
	distributed.KindLeaseExpired:               connect.CodeFailedPrecondition,
	distributed.KindLeaseTTLOutOfRange:         connect.CodeInvalidArgument,
	distributed.KindConflictingResult:          connect.CodeAlreadyExists,
	distributed.KindMismatchedResultReceipt:    connect.CodeFailedPrecondition,
	distributed.KindResultCapacityReached:      connect.CodeResourceExhausted,
	distributed.KindResultTooLarge:             connect.CodeResourceExhausted,
	distributed.KindTotalResultBytesExceeded:   connect.CodeResourceExhausted,
	distributed.KindAggregateItemLimitExceeded: connect.CodeResourceExhausted,
	distributed.KindDuplicateAggregateTask:     connect.CodeInvalidArgument,
	distributed.KindMissingResult:              connect.CodeNotFound,
	distributed.KindAggregateBytesExceeded:     connect.CodeResourceExhausted,
	distributed.KindStateInvariant:             connect.CodeInternal,
	distributed.KindInvalidState:               connect.CodeDataLoss,
}

// fsmCodes maps the FSM's own kinds.
var fsmCodes = map[raftfsm.ErrorKind]connect.Code{
	raftfsm.KindInvalidCommand:     connect.CodeInvalidArgument,
	raftfsm.KindUnknownTenant:      connect.CodeNotFound,
	raftfsm.KindTenantExists:       connect.CodeAlreadyExists,
	raftfsm.KindKeyExists:          connect.CodeAlreadyExists,
	raftfsm.KindPermissionDenied:   connect.CodePermissionDenied,
	raftfsm.KindAlreadyInitialized: connect.CodeFailedPrecondition,
	raftfsm.KindKeyNotFound:        connect.CodeNotFound,
	raftfsm.KindLastAdminKey:       connect.CodeFailedPrecondition,
	raftfsm.KindKeyLimit:           connect.CodeResourceExhausted,
}

// Node-level error kinds carried in ErrorDetail.kind.
const (
	KindInvalidToken     = "invalid_token"
	KindUnauthenticated  = "unauthenticated"
	KindPermissionDenied = "permission_denied"
	KindInvalidArgument  = "invalid_argument"
	KindUnknownTenant    = "unknown_tenant"
	KindNotLeader        = "not_leader"
	KindUnavailable      = "unavailable"
	KindCanceled         = "canceled"
	KindInternal         = "internal"
)

// apiError is a node-level failure with its kind.
type apiError struct {
	code connect.Code
	kind string
	msg  string
}

func (e *apiError) Error() string { return e.msg }

func errUnauthenticated(msg string) error {
	return &apiError{connect.CodeUnauthenticated, KindUnauthenticated, msg}
}

func errDenied(msg string) error {
	return &apiError{connect.CodePermissionDenied, KindPermissionDenied, msg}
}

func errInvalid(msg string) error {
	return &apiError{connect.CodeInvalidArgument, KindInvalidArgument, msg}
}

// classify returns the Connect code, the kind name and the detail of err.
func classify(err error) (connect.Code, *pb.ErrorDetail) {
	var de *distributed.Error
	var fe *raftfsm.Error
	var ae *apiError
	switch {
	case errors.As(err, &de):
		code, ok := coreCodes[de.Kind]
		if !ok {
			code = connect.CodeInternal
		}
		return code, &pb.ErrorDetail{Kind: de.Kind.String(), Reason: de.Reason, Expected: de.Expected, Actual: de.Actual, Limit: de.Limit}
	case errors.As(err, &fe):
		code, ok := fsmCodes[fe.Kind]
		if !ok {
			code = connect.CodeInternal
		}
		return code, &pb.ErrorDetail{Kind: fe.Kind.String(), Reason: fe.Reason}
	case errors.Is(err, token.ErrInvalidToken):
		return connect.CodePermissionDenied, &pb.ErrorDetail{Kind: KindInvalidToken, Reason: err.Error()}
	case errors.As(err, &ae):
		return ae.code, &pb.ErrorDetail{Kind: ae.kind, Reason: ae.msg}
	case errors.Is(err, node.ErrNotLeader):
		return connect.CodeUnavailable, &pb.ErrorDetail{Kind: KindNotLeader}
	case errors.Is(err, node.ErrClosed):
		return connect.CodeUnavailable, &pb.ErrorDetail{Kind: KindUnavailable}
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled, &pb.ErrorDetail{Kind: KindCanceled}
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded, &pb.ErrorDetail{Kind: KindCanceled}
	}
	return connect.CodeInternal, &pb.ErrorDetail{Kind: KindInternal}
}

// kindOf names err for the audit log ("ok" for nil).
func kindOf(err error) string {
	if err == nil {
		return "ok"
	}
	_, d := classify(err)
	return d.GetKind()
}

// toConnect converts err into a *connect.Error with an ErrorDetail. Messages
// come from the core or the node and never contain targets, results, tokens
// or keys.
func toConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	code, detail := classify(err)
	msg := err.Error()
	if detail.GetKind() == KindInternal {
		msg = "internal error"
	}
	out := connect.NewError(code, errors.New(msg))
	if d, derr := connect.NewErrorDetail(detail); derr == nil {
		out.AddDetail(d)
	}
	return out
}

// DetailOf extracts the ErrorDetail of an error returned by a client, if any.
func DetailOf(err error) (*pb.ErrorDetail, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil, false
	}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			continue
		}
		if ed, ok := v.(*pb.ErrorDetail); ok {
			return ed, true
		}
	}
	return nil, false
}
