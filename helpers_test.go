package distributed

// Test support shared by the core's tests: a harness that runs commands at
// the current revision and checks that every failure is error-atomic (the
// exported state, which contains every record and counter, is byte-identical
// before and after) and that every success keeps all invariants.

import (
	"bytes"
	"errors"
	"testing"
)

type harness struct {
	t   testing.TB
	p   *WorkerPool
	now uint64
}

func newHarness(t testing.TB, l Limits) *harness {
	t.Helper()
	p, err := NewWorkerPoolWithLimits(l)
	if err != nil {
		t.Fatalf("NewWorkerPoolWithLimits: %v", err)
	}
	return &harness{t: t, p: p, now: 1000}
}

func smallLimits() Limits {
	l := DefaultLimits()
	l.MaxTaskRecords, l.MaxActiveTasks, l.MaxQueuedTasks, l.MaxTerminalTasks, l.MaxWorkers = 8, 4, 4, 8, 4
	return l
}

func (h *harness) rev() uint64 { return h.p.Snapshot().Revision }

func (h *harness) export() []byte {
	h.t.Helper()
	b, err := h.p.ExportState()
	if err != nil {
		h.t.Fatalf("ExportState: %v", err)
	}
	return b
}

// ok runs f at the current revision and now, requires success, exactly one
// new revision, logical time = now, and intact invariants.
func (h *harness) ok(name string, f func(rev, now uint64) error) {
	h.t.Helper()
	before := h.p.Snapshot()
	if err := f(before.Revision, h.now); err != nil {
		h.t.Fatalf("%s: unexpected error %v", name, err)
	}
	after := h.p.Snapshot()
	if after.Revision != before.Revision+1 || after.LogicalTime != h.now {
		h.t.Fatalf("%s: revision %d→%d, logical time %d (now %d); want +1 and now", name, before.Revision, after.Revision, after.LogicalTime, h.now)
	}
	if err := h.p.CheckInvariants(); err != nil {
		h.t.Fatalf("%s: invariants: %v", name, err)
	}
}

// fail runs f at the current revision and now, requires an *Error of kind,
// and requires that nothing changed at all.
func (h *harness) fail(kind ErrorKind, f func(rev, now uint64) error) *Error {
	h.t.Helper()
	return h.failAt(h.rev(), h.now, kind, f)
}

func (h *harness) failAt(rev, now uint64, kind ErrorKind, f func(rev, now uint64) error) *Error {
	h.t.Helper()
	beforeSnap, beforeState := h.p.Snapshot(), h.export()
	err := f(rev, now)
	var e *Error
	if !errors.As(err, &e) {
		h.t.Fatalf("got %v (%T), want *Error of kind %v", err, err, kind)
	}
	if e.Kind != kind || !errors.Is(err, kind.sentinelForTest()) {
		h.t.Fatalf("got %v (kind %v), want kind %v", err, e.Kind, kind)
	}
	if h.p.Snapshot() != beforeSnap || !bytes.Equal(h.export(), beforeState) {
		h.t.Fatalf("failed %v command changed the state", kind)
	}
	return e
}

// replay runs f, requires success at the unchanged current revision and no
// change at all (an exact terminal replay).
func (h *harness) replay(f func(rev, now uint64) (uint64, error)) {
	h.t.Helper()
	beforeSnap, beforeState := h.p.Snapshot(), h.export()
	gotRev, err := f(beforeSnap.Revision, h.now)
	if err != nil {
		h.t.Fatalf("replay: %v", err)
	}
	if gotRev != beforeSnap.Revision {
		h.t.Fatalf("replay returned revision %d, want current %d", gotRev, beforeSnap.Revision)
	}
	if h.p.Snapshot() != beforeSnap || !bytes.Equal(h.export(), beforeState) {
		h.t.Fatal("replay changed the state")
	}
}

func (k ErrorKind) sentinelForTest() error {
	for _, s := range allSentinels() {
		if s.Kind == k {
			return s
		}
	}
	return nil
}

func allSentinels() []*Error {
	return []*Error{
		ErrInvalidLimit, ErrInvalidLimitRelationship, ErrCountLimitExceedsMaximum, ErrTimeLimitExceedsMaximum,
		ErrRetryLimitExceedsMaximum, ErrInvalidTask, ErrInvalidWorker, ErrRevisionConflict, ErrLogicalTimeRegression,
		ErrCounterExhausted, ErrTaskAlreadyExists, ErrTaskNotFound, ErrWorkerAlreadyExists, ErrWorkerNotFound,
		ErrWorkerGenerationConflict, ErrTaskRecordCapacityReached, ErrActiveTaskCapacityReached,
		ErrQueuedTaskCapacityReached, ErrTerminalCapacityReserved, ErrWorkerCapacityReached, ErrNoQueuedTask,
		ErrNoAvailableWorker, ErrWorkerUnavailable, ErrWorkerAtCapacity, ErrTaskNotQueued, ErrInvalidTransition,
		ErrStaleOwnership, ErrLeaseExpired, ErrLeaseTTLOutOfRange, ErrConflictingResult, ErrMismatchedResultReceipt,
		ErrResultCapacityReached, ErrResultTooLarge, ErrTotalResultBytesExceeded, ErrAggregateItemLimitExceeded,
		ErrDuplicateAggregateTask, ErrMissingResult, ErrAggregateBytesExceeded, ErrStateInvariant, ErrInvalidState,
		ErrTaskPurged,
		ErrFailureReasonTooLong, ErrAttemptTimedOut,
		ErrTaskNotLeasable, ErrScanCapacityReached,
	}
}

func (h *harness) register(id string, capacity uint32) WorkerNode {
	h.t.Helper()
	var w WorkerNode
	h.ok("register "+id, func(rev, now uint64) error {
		tr, err := h.p.RegisterWorker(rev, now, WorkerSpec{WorkerID: id, Capacity: capacity})
		w = tr.Value
		return err
	})
	return w
}

func (h *harness) enqueue(id string, prio TaskPriority) ScanTask {
	h.t.Helper()
	var task ScanTask
	h.ok("enqueue "+id, func(rev, now uint64) error {
		tr, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: id, ScanID: "scan", TargetRef: "target-" + id, Priority: prio})
		task = tr.Value
		return err
	})
	return task
}

func (h *harness) assign(taskID, workerID string, ttl uint64) TaskLease {
	h.t.Helper()
	var l TaskLease
	h.ok("assign "+taskID, func(rev, now uint64) error {
		tr, err := h.p.AssignTask(rev, now, taskID, workerID, ttl)
		l = tr.Value
		return err
	})
	return l
}

func (h *harness) start(l TaskLease) {
	h.t.Helper()
	h.ok("start "+l.TaskID(), func(rev, now uint64) error {
		_, err := h.p.StartTask(rev, now, l)
		return err
	})
}

// running enqueues, assigns and starts a task on worker.
func (h *harness) running(taskID, workerID string, ttl uint64) TaskLease {
	h.t.Helper()
	h.enqueue(taskID, PriorityNormal)
	l := h.assign(taskID, workerID, ttl)
	h.start(l)
	return l
}

func (h *harness) task(id string) ScanTask {
	h.t.Helper()
	task, ok, err := h.p.GetTask(id)
	if err != nil || !ok {
		h.t.Fatalf("GetTask(%q) = %v, %v", id, ok, err)
	}
	return task
}

func (h *harness) worker(id string) WorkerNode {
	h.t.Helper()
	w, ok, err := h.p.GetWorker(id)
	if err != nil || !ok {
		h.t.Fatalf("GetWorker(%q) = %v, %v", id, ok, err)
	}
	return w
}
