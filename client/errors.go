package client

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Error is every failure a Client method returns for a request that reached
// the server or tried to: the RPC name, the Connect code and, when the server
// attached an ErrorDetail, its kind and numbers.
//
// Is maps Kind to the core's sentinels, so errors.Is(err,
// distributed.ErrStaleOwnership) works through any %w chain; Unwrap returns
// the underlying *connect.Error.
type Error struct {
	// Op is the RPC, e.g. "Worker.RenewLease".
	Op string
	// Code is the Connect code (connect.CodeUnavailable for a server that
	// cannot be reached).
	Code connect.Code
	// Kind is the ErrorDetail kind: a core kind name such as
	// "stale_ownership" or a node kind such as "unauthenticated"; empty when
	// the server sent no detail (e.g. connection errors).
	Kind string
	// CoreKind is Kind parsed as a core ErrorKind, 0 if it is not one.
	CoreKind distributed.ErrorKind
	// Reason is the server's human-readable reason, if any.
	Reason string
	// Expected, Actual and Limit are the detail's numbers (e.g. the current
	// worker generation of a worker_generation_conflict).
	Expected, Actual, Limit uint64

	err error
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

// Unwrap returns the underlying Connect error.
func (e *Error) Unwrap() error { return e.err }

// Is reports whether target is the core sentinel of e's kind.
func (e *Error) Is(target error) bool {
	if e.CoreKind == 0 {
		return false
	}
	return errors.Is(&distributed.Error{Kind: e.CoreKind}, target)
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
	var e *Error
	if errors.As(err, &e) {
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
	e := &Error{Op: op, Code: connect.CodeOf(err), err: err}
	var ce *connect.Error
	if errors.As(err, &ce) {
		for _, d := range ce.Details() {
			v, derr := d.Value()
			if derr != nil {
				continue
			}
			if det, ok := v.(*pb.ErrorDetail); ok {
				e.Kind = det.GetKind()
				e.Reason = det.GetReason()
				e.Expected, e.Actual, e.Limit = det.GetExpected(), det.GetActual(), det.GetLimit()
				if k, ok := distributed.ParseErrorKind(e.Kind); ok {
					e.CoreKind = k
				}
				break
			}
		}
	}
	return e
}

// connectMessage is the message of a Connect error without the code prefix.
func connectMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return fmt.Sprint(err)
}
