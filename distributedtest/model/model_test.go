// Goal: check the reference model itself on hand-written scenarios of the contract
// Part A and ADR 0001, so that a divergence found by the simulator can be
// blamed on the core or the model with some confidence. Method: drive one
// model through short command sequences and compare every value, revision and
// error kind with what the contract says.
package model

import (
	"errors"
	"testing"

	distributed "github.com/termivar/distributed"
)

type env struct {
	t *testing.T
	m *Model
}

func newEnv(t *testing.T, edit func(*distributed.Limits)) *env {
	t.Helper()
	l := distributed.DefaultLimits()
	if edit != nil {
		edit(&l)
	}
	m, err := New(l)
	if err != nil {
		t.Fatalf("New(%+v) = %v", l, err)
	}
	return &env{t: t, m: m}
}

func (e *env) rev() uint64 { return e.m.Revision() }

func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("unexpected error: %v", err)
	}
	if err := e.m.CheckInvariants(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) wantKind(err error, k distributed.ErrorKind) *distributed.Error {
	e.t.Helper()
	var de *distributed.Error
	if !errors.As(err, &de) || de.Kind != k {
		e.t.Fatalf("error = %v, want kind %v", err, k)
	}
	return de
}

func (e *env) enqueue(id string, p distributed.TaskPriority, now uint64) Task {
	e.t.Helper()
	t, _, err := e.m.Enqueue(e.rev(), now, distributed.TaskSpec{TaskID: id, ScanID: "s", TargetRef: "x", Priority: p})
	e.must(err)
	return t
}

func (e *env) register(id string, capacity uint32, now uint64) Worker {
	e.t.Helper()
	w, _, err := e.m.RegisterWorker(e.rev(), now, distributed.WorkerSpec{WorkerID: id, Capacity: capacity})
	e.must(err)
	return w
}

func (e *env) assign(now, ttl uint64) Lease {
	e.t.Helper()
	l, _, err := e.m.AssignNextAvailable(e.rev(), now, ttl)
	e.must(err)
	return l
}

func (e *env) start(l Lease, now uint64) {
	e.t.Helper()
	_, _, err := e.m.StartTask(e.rev(), now, l)
	e.must(err)
}

func TestHappyPathAndCompletionReplay(t *testing.T) {
	e := newEnv(t, nil)
	e.register("w1", 2, 0)
	e.enqueue("t1", distributed.PriorityNormal, 1)
	l := e.assign(2, 10)
	want := Lease{TaskID: "t1", WorkerID: "w1", WorkerGeneration: 1, Attempt: 1, LeaseID: 1, AcquiredAt: 2, ExpiresAt: 12}
	if l != want {
		t.Fatalf("AssignNextAvailable = %+v, want %+v", l, want)
	}
	_, _, err := e.m.CompleteTask(e.rev(), 3, l)
	if de := e.wantKind(err, distributed.KindInvalidTransition); de.Operation != "complete" || de.Status != distributed.TaskLeased {
		t.Fatalf("complete before start = %+v", de)
	}
	e.start(l, 3)
	c, r, err := e.m.CompleteTask(e.rev(), 4, l)
	e.must(err)
	if c.Kind != distributed.Completed || r != 5 || c.Receipt.RecordVersion != 4 || c.Receipt.LeaseID != 1 {
		t.Fatalf("CompleteTask = %+v rev %d", c, r)
	}
	snap := e.m.Snapshot()
	c2, r2, err := e.m.CompleteTask(e.rev(), 100, l)
	e.must(err)
	if c2.Kind != distributed.AlreadyCompleted || c2.Receipt != c.Receipt || r2 != 5 || e.m.Snapshot() != snap {
		t.Fatalf("replay = %+v rev %d, snapshot %+v want %+v", c2, r2, e.m.Snapshot(), snap)
	}
	w, _, _ := e.m.GetWorker("w1")
	if w.CurrentTasks != 0 || w.CompletedTasks != 1 {
		t.Fatalf("worker after completion = %+v", w)
	}
	// A stale revision and a regressing clock change nothing.
	_, _, err = e.m.Enqueue(e.rev()-1, 10, distributed.TaskSpec{TaskID: "t2", ScanID: "s", TargetRef: "x"})
	if de := e.wantKind(err, distributed.KindRevisionConflict); de.Expected != 4 || de.Actual != 5 {
		t.Fatalf("conflict = %+v", de)
	}
	_, _, err = e.m.Enqueue(e.rev(), 3, distributed.TaskSpec{TaskID: "t2", ScanID: "s", TargetRef: "x"})
	if de := e.wantKind(err, distributed.KindLogicalTimeRegression); de.Current != 4 || de.Proposed != 3 {
		t.Fatalf("regression = %+v", de)
	}
	if e.m.Snapshot() != snap {
		t.Fatalf("rejections changed the snapshot")
	}
}

func TestRetryThenExhaustionAndReplay(t *testing.T) {
	e := newEnv(t, func(l *distributed.Limits) { l.MaxRetries = 1 })
	e.register("w1", 1, 0)
	e.enqueue("t1", distributed.PriorityNormal, 0)
	l1 := e.assign(1, 10)
	e.start(l1, 1)
	out, _, err := e.m.FailTask(e.rev(), 2, l1)
	e.must(err)
	if out != (distributed.FailureOutcome{Kind: distributed.Requeued, TaskGeneration: 1, RetryCount: 1}) {
		t.Fatalf("first failure = %+v", out)
	}
	_, _, err = e.m.FailTask(e.rev(), 2, l1)
	e.wantKind(err, distributed.KindStaleOwnership)
	l2 := e.assign(3, 10)
	if l2.Attempt != 2 || l2.TaskGeneration != 1 || l2.LeaseID != 2 {
		t.Fatalf("second lease = %+v", l2)
	}
	e.start(l2, 3)
	out, _, err = e.m.FailTask(e.rev(), 4, l2)
	e.must(err)
	want := distributed.FailureOutcome{Kind: distributed.RetryExhausted, TaskGeneration: 1, RetryCount: 1}
	if out != want {
		t.Fatalf("exhausting failure = %+v, want %+v", out, want)
	}
	rev := e.rev()
	out, r, err := e.m.FailTask(rev, 9, l2)
	e.must(err)
	if out != want || r != rev || e.m.LogicalTime() != 4 {
		t.Fatalf("replay = %+v rev %d time %d", out, r, e.m.LogicalTime())
	}
}

func TestQueueOrderAndSelection(t *testing.T) {
	e := newEnv(t, nil)
	e.enqueue("b", distributed.PriorityNormal, 0)
	e.enqueue("a", distributed.PriorityNormal, 0)
	e.enqueue("c", distributed.PriorityCritical, 0)
	e.register("w2", 3, 0)
	e.register("w1", 3, 0)
	var got []string
	for range 3 {
		l := e.assign(1, 10)
		got = append(got, l.TaskID+"@"+l.WorkerID)
	}
	want := []string{"c@w1", "b@w2", "a@w1"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("assignments = %v, want %v", got, want)
		}
	}
	_, _, err := e.m.AssignNextAvailable(e.rev(), 1, 10)
	e.wantKind(err, distributed.KindNoQueuedTask)
	_, _, err = e.m.AssignNextAvailable(e.rev(), 1, 3601)
	e.wantKind(err, distributed.KindLeaseTTLOutOfRange)
}

func TestWorkerLossRecoveryAndQueueBound(t *testing.T) {
	e := newEnv(t, func(l *distributed.Limits) { l.MaxQueuedTasks = 2 })
	e.register("w1", 4, 0)
	e.enqueue("t1", distributed.PriorityNormal, 0)
	e.enqueue("t2", distributed.PriorityNormal, 0)
	l1 := e.assign(0, 100)
	e.assign(0, 100)
	e.enqueue("t3", distributed.PriorityNormal, 0)
	e.enqueue("t4", distributed.PriorityNormal, 0)
	snap := e.m.Snapshot()
	// Two leases to recover but the queue is full: the whole command fails.
	_, _, err := e.m.DeregisterWorker(e.rev(), 1, "w1", 1)
	e.wantKind(err, distributed.KindQueuedTaskCapacityReached)
	if e.m.Snapshot() != snap {
		t.Fatalf("failed deregister changed the snapshot")
	}
	f, _ := e.m.PeekNext()
	own, _ := f.Ownership()
	_, _, err = e.m.CancelTask(e.rev(), 1, own)
	e.must(err)
	_, _, err = e.m.CancelTask(e.rev(), 1, own)
	e.must(err)
	f, _ = e.m.PeekNext()
	own2, _ := f.Ownership()
	_, _, err = e.m.CancelTask(e.rev(), 1, own2)
	e.must(err)
	sum, _, err := e.m.DeregisterWorker(e.rev(), 2, "w1", 1)
	e.must(err)
	if sum != (distributed.RecoverySummary{WorkersAffected: 1, TasksRequeued: 2}) {
		t.Fatalf("deregister summary = %+v", sum)
	}
	_, _, err = e.m.StartTask(e.rev(), 2, l1)
	e.wantKind(err, distributed.KindStaleOwnership)
	w, _, _ := e.m.GetWorker("w1")
	if w.Status != distributed.WorkerOffline || w.Generation != 2 || w.CurrentTasks != 0 {
		t.Fatalf("worker after deregister = %+v", w)
	}
	_, _, err = e.m.ReactivateWorker(e.rev(), 3, 2, distributed.WorkerSpec{WorkerID: "w1", Capacity: 1})
	e.must(err)
	// Heartbeat timeout: prune at exactly 60 s after the last heartbeat.
	sum, _, err = e.m.PruneDeadWorkers(e.rev(), 62)
	e.must(err)
	if sum.WorkersAffected != 0 {
		t.Fatalf("early prune = %+v", sum)
	}
	sum, _, err = e.m.PruneDeadWorkers(e.rev(), 63)
	e.must(err)
	if sum.WorkersAffected != 1 {
		t.Fatalf("prune = %+v", sum)
	}
}

func TestRenewExpiryAndTTL(t *testing.T) {
	e := newEnv(t, nil)
	e.register("w1", 1, 0)
	e.enqueue("t1", distributed.PriorityNormal, 0)
	l := e.assign(0, 10)
	l2, _, err := e.m.RenewLease(e.rev(), 5, l, 10)
	e.must(err)
	if l2.LeaseID != 2 || l2.ExpiresAt != 15 || l2.AcquiredAt != 0 {
		t.Fatalf("renewed = %+v", l2)
	}
	_, _, err = e.m.StartTask(e.rev(), 5, l)
	e.wantKind(err, distributed.KindStaleOwnership)
	_, _, err = e.m.StartTask(e.rev(), 15, l2)
	e.wantKind(err, distributed.KindLeaseExpired)
	sum, _, err := e.m.RecoverExpiredLeases(e.rev(), 15)
	e.must(err)
	if sum != (distributed.RecoverySummary{WorkersAffected: 1, TasksRequeued: 1}) {
		t.Fatalf("recovery = %+v", sum)
	}
	n, _, err := e.m.ExpireOldTasks(e.rev(), 20, 20)
	e.must(err)
	if n != 1 {
		t.Fatalf("expired %d tasks", n)
	}
	_, _, err = e.m.ExpireOldTasks(e.rev(), 20, 0)
	e.wantKind(err, distributed.KindInvalidLimit)
}

func TestAdmissionLimits(t *testing.T) {
	e := newEnv(t, func(l *distributed.Limits) {
		l.MaxTaskRecords, l.MaxActiveTasks, l.MaxQueuedTasks, l.MaxTerminalTasks = 3, 2, 1, 3
	})
	e.enqueue("t1", distributed.PriorityNormal, 0)
	_, _, err := e.m.Enqueue(e.rev(), 0, distributed.TaskSpec{TaskID: "t1", ScanID: "s", TargetRef: "x"})
	e.wantKind(err, distributed.KindTaskAlreadyExists)
	_, _, err = e.m.Enqueue(e.rev(), 0, distributed.TaskSpec{TaskID: "t2", ScanID: "s", TargetRef: "x"})
	e.wantKind(err, distributed.KindQueuedTaskCapacityReached)
	_, _, err = e.m.Enqueue(e.rev(), 0, distributed.TaskSpec{TaskID: "t 2", ScanID: "s", TargetRef: "x"})
	if de := e.wantKind(err, distributed.KindInvalidTask); de.Reason != "task_id contains unsafe characters" {
		t.Fatalf("reason = %q", de.Reason)
	}
}
