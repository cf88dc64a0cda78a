package client

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wireerr"
)

// Error is every failure a Client method returns for a request that reached
// the server or tried to: the RPC name, the Connect code and, when the server
// attached an ErrorDetail, its kind and reason.
//
// When the kind is a core kind, the server's *distributed.Error is rebuilt
// with every detail field (internal/wireerr) and is reachable through
// Unwrap, as is the underlying *connect.Error: errors.Is(err,
// distributed.ErrStaleOwnership) and errors.As(err, &de) with a
// *distributed.Error de give a remote caller what an in-process caller
// gets, through any %w chain.
type Error struct {
	// Op is the RPC, e.g. "Worker.RenewLease".
	Op string
	// Code is the Connect code (connect.CodeUnavailable for a server that
	// cannot be reached).
	Code connect.Code
	// Kind is the ErrorDetail kind, one name of the server's error
	// registry: a core kind name such as "stale_ownership", an FSM kind
	// such as "key_not_found" or a node kind such as "unauthenticated";
	// empty when the server sent no detail (e.g. connection errors).
	Kind string
	// Reason is the server's human-readable reason, if any.
	Reason string

	core *distributed.Error // nil unless Kind is a core kind
	err  error
}

// Error implements error.
func (e *Error) Error() string {
	msg := "termivar: " + e.Op + ": " + e.Code.String()
	if e.Kind != "" {
		msg += " (" + e.Kind + ")"
	}
	if e.Reason != "" {
		msg += ": " + e.Reason
	} else if e.err != nil && e.Kind == "" {
		msg += ": " + connectMessage(e.err)
	}
	return msg
}

// Unwrap returns the core error the server reported (when Kind is a core
// kind) and the underlying Connect error (none for an ItemError).
func (e *Error) Unwrap() []error {
	var out []error
	if e.core != nil {
		out = append(out, e.core)
	}
	if e.err != nil {
		out = append(out, e.err)
	}
	return out
}

// Unreachable reports whether the request never got an answer from a server
// that could handle it: a connection error or code Unavailable (which is
// also what a node that is not the leader or is shutting down returns).
func (e *Error) Unreachable() bool { return e.Code == connect.CodeUnavailable }

// IsUnreachable reports whether err is an *Error for which Unreachable is
// true.
func IsUnreachable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Unreachable()
}

// KindOf returns the server's error kind of err ("" if err is not an *Error
// or carries no detail).
func KindOf(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Kind
	}
	return ""
}

// wrapErr converts an error from a generated client into an *Error. A nil
// error stays nil.
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	det, _ := wireerr.DetailOf(err)
	return newError(op, connect.CodeOf(err), det, err)
}

// newError is an *Error with det's kind and reason (none for a nil det)
// and, for a core kind, the core error rebuilt from det.
func newError(op string, code connect.Code, det *pb.ErrorDetail, err error) *Error {
	core, _ := wireerr.Decode(det)
	return &Error{Op: op, Code: code, Kind: det.GetKind(), Reason: det.GetReason(), core: core, err: err}
}

// ItemError returns the error of one CompleteMany item (or of one item of
// AcquireResponse.Completed), nil when the item succeeded: an *Error for Worker.CompleteMany with the item's kind and
// reason that, like a call's error, unwraps to the core's
// *distributed.Error for a core kind. Its Code is connect.CodeUnknown: the
// response carries a Connect code only for the whole call.
func ItemError(item *pb.CompleteItemResult) error {
	if item.GetError() == nil {
		return nil
	}
	return newError("Worker.CompleteMany", connect.CodeUnknown, item.GetError(), nil)
}

// connectMessage is the message of a Connect error without the code prefix.
func connectMessage(err error) string {
	if ce, ok := errors.AsType[*connect.Error](err); ok {
		return ce.Message()
	}
	return fmt.Sprint(err)
}
