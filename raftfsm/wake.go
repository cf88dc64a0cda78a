package raftfsm

import (
	"errors"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/notify"
)

// tenantWake is what one applied entry may have made leasable in one
// tenant (Options.WakeFunc).
type tenantWake struct {
	tenant *Tenant
	added  int  // tasks enqueued
	freed  int  // completions and failures: slots freed, tasks requeued
	all    bool // a command that cannot say how many (notify.All)
}

// notify records the wake-up of a successful notifying command, or calls
// NotifyFunc (the broadcast) at once when no WakeFunc is set.
func (f *FSM) notify(t *Tenant, cmd *pb.Command) {
	if f.opts.WakeFunc == nil {
		if f.opts.NotifyFunc != nil {
			f.opts.NotifyFunc(t.name)
		}
		return
	}
	w := f.pendingWake(t)
	switch op := cmd.GetOp().(type) {
	case *pb.Command_Enqueue:
		w.added += len(op.Enqueue.GetTasks())
	case *pb.Command_CompleteTask, *pb.Command_FailTask:
		w.freed++
	default: // recoveries, cancellations, scan and time changes
		w.all = true
	}
}

// pendingWake returns t's entry in f.wakes, adding it (a batch names few
// tenants: a linear search).
func (f *FSM) pendingWake(t *Tenant) *tenantWake {
	for i := range f.wakes {
		if f.wakes[i].tenant == t {
			return &f.wakes[i]
		}
	}
	f.wakes = append(f.wakes, tenantWake{tenant: t})
	return &f.wakes[len(f.wakes)-1]
}

// deliverWakes calls WakeFunc once per tenant for the applied entry and
// clears f.wakes. Summing a batch's commands matters: a CompleteMany of
// 128 items is 128 CompleteTask commands in one entry, and 128 calls of
// one task each woke 128 Acquires (each asking for up to 128 tasks),
// where one call of 128 wakes one (issue 15: 1 024 workers).
func (f *FSM) deliverWakes() {
	for _, w := range f.wakes {
		if n := w.count(); n != 0 {
			f.opts.WakeFunc(w.tenant.name, n)
		}
	}
	clear(f.wakes)
	f.wakes = f.wakes[:0]
}

// count is how many tasks the entry may have made leasable: none when no
// task is leasable after it — an Acquire woken then would look, find
// nothing and wait again (with 1 024 idle workers: one wasted wake-up per
// completed task, and all of them on every tick's AdvanceTime);
// otherwise notify.All when a command could not say, else the enqueued
// tasks plus the freed slots and requeued tasks.
func (w tenantWake) count() int {
	if _, ok := w.tenant.pool.PeekNext(); !ok {
		return 0
	}
	if w.all {
		return notify.All
	}
	return w.added + w.freed
}

// AcquireRefused is the Value of an AcquireTasks refused with
// ErrNoQueuedTask (Response.Err): Leasable reports whether a task was
// leasable when it was refused — leasable, but not to this worker (tags)
// — rather than taken by others first. An Acquire long-poll refused with
// Leasable wakes the waiters a broadcast would have (server/worker.go
// acquireOrWait); one refused without it lost a race and looks again.
type AcquireRefused struct{ Leasable bool }

// refusal is the Response of an AcquireTasks whose first assignment
// failed with err.
func refusal(t *Tenant, err error) Response {
	if !errors.Is(err, distributed.ErrNoQueuedTask) {
		return Response{Err: err}
	}
	_, ok := t.pool.PeekNext()
	return Response{Err: err, Value: AcquireRefused{Leasable: ok}}
}

// RefusedLeasable reports whether r is an AcquireTasks refused while a
// task was leasable to another worker (AcquireRefused).
func RefusedLeasable(r Response) bool {
	a, ok := r.Value.(AcquireRefused)
	return ok && a.Leasable
}
