// A try's deadline: a node's deadline_exceeded at the try's own deadline
// is the try expiring even when the client's timer has not fired yet (it
// is re-issued), while one well before it, or at the caller's deadline,
// is the call's answer.
package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/termivar/distributed/client"
)

// lateTimer is a context whose deadline is d but whose timer has not
// fired: Err is nil (a timer late under load).
type lateTimer struct {
	context.Context
	d time.Time
}

func (c lateTimer) Deadline() (time.Time, bool) { return c.d, true }

func TestAttemptExpired_NodeDeadlineBeforeOwnTimer(t *testing.T) {
	deadline := connect.NewError(connect.CodeDeadlineExceeded, context.DeadlineExceeded)
	caller := context.Background()
	now := time.Now()
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		try    time.Time
		err    error
		expiry bool
	}{
		{"passed, timer late", caller, now.Add(-time.Millisecond / 2), deadline, true},
		{"node's deadline rounded down", caller, now.Add(900 * time.Microsecond), deadline, true},
		{"node's own timeout", caller, now.Add(5 * time.Second), deadline, false},
		{"another code", caller, now.Add(-time.Millisecond), connect.NewError(connect.CodeInternal, errors.New("x")), false},
		{"caller's deadline", lateTimer{caller, now.Add(-time.Millisecond)}, now.Add(-time.Millisecond), deadline, false},
		{"no error", caller, now.Add(-time.Millisecond), nil, false},
	} {
		actx := lateTimer{tc.ctx, tc.try}
		if got := client.AttemptExpired(tc.ctx, actx, tc.err); got != tc.expiry {
			t.Errorf("%s: attemptExpired = %v, want %v", tc.name, got, tc.expiry)
		}
	}
}
