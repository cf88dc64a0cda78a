// Package wireerr carries the core's *distributed.Error across the API: the
// server encodes it into a pb.ErrorDetail, the client decodes the detail
// back into an equal *distributed.Error (kind and every detail field), so
// errors.Is and errors.As give a remote caller what an in-process caller
// gets. The kind → Connect code table is server/errors.go's registry; this
// package only moves the fields.
package wireerr

import (
	"errors"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Encode returns the ErrorDetail of a core error: its kind name and every
// detail field. The status is sent by name when it is not the zero value
// or the kind reports one (task_not_queued, invalid_transition), so the
// zero status round-trips as the zero value.
func Encode(e *distributed.Error) *pb.ErrorDetail {
	d := &pb.ErrorDetail{
		Kind: e.Kind.String(), Reason: e.Reason,
		Name: e.Name, Operation: e.Operation, Counter: e.Counter,
		TaskId: e.TaskID, WorkerId: e.WorkerID,
		Expected: e.Expected, Actual: e.Actual, Maximum: e.Maximum,
		Limit: e.Limit, Current: e.Current, Proposed: e.Proposed,
	}
	if e.Status != 0 || reportsStatus(e.Kind) {
		d.Status = e.Status.String()
	}
	return d
}

// Decode rebuilds the core error of a detail. ok is false when the detail's
// kind is not a core kind (an FSM or node kind) or its status is not a task
// status name.
func Decode(d *pb.ErrorDetail) (e *distributed.Error, ok bool) {
	k, ok := distributed.ParseErrorKind(d.GetKind())
	if !ok {
		return nil, false
	}
	var st distributed.TaskStatus
	if d.GetStatus() != "" {
		if st, ok = distributed.ParseTaskStatus(d.GetStatus()); !ok {
			return nil, false
		}
	}
	return &distributed.Error{
		Kind: k, Reason: d.GetReason(),
		Name: d.GetName(), Operation: d.GetOperation(), Counter: d.GetCounter(),
		TaskID: d.GetTaskId(), WorkerID: d.GetWorkerId(), Status: st,
		Expected: d.GetExpected(), Actual: d.GetActual(), Maximum: d.GetMaximum(),
		Limit: d.GetLimit(), Current: d.GetCurrent(), Proposed: d.GetProposed(),
	}, true
}

// DetailOf returns the first ErrorDetail of a Connect error (an error a
// client got), if any.
func DetailOf(err error) (*pb.ErrorDetail, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil, false
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if ed, ok := v.(*pb.ErrorDetail); ok {
				return ed, true
			}
		}
	}
	return nil, false
}

// reportsStatus reports whether the kind's Status is meaningful even when
// it is the zero value (TaskQueued).
func reportsStatus(k distributed.ErrorKind) bool {
	return k == distributed.KindTaskNotQueued || k == distributed.KindInvalidTransition
}
