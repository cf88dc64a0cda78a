package distributed

// Goal: every enqueue, queue-order, cancellation and expiry rule of contract A.7,
// A.9 (cancel) and A.10 (ExpireOldTasks), including exact limits; every
// failure is checked to leave the state byte-identical (harness.fail).

import (
	"errors"
	"strings"
	"testing"
)

func TestTaskQueue_EnqueueSpecErrors(t *testing.T) {
	long := strings.Repeat("a", MaxIdentifierBytes+1)
	tests := []struct {
		name   string
		spec   TaskSpec
		reason string
	}{
		{"empty task id", TaskSpec{ScanID: "s", TargetRef: "x"}, "task_id is empty"},
		{"long task id", TaskSpec{TaskID: long, ScanID: "s", TargetRef: "x"}, "task_id is too long"},
		{"unsafe task id", TaskSpec{TaskID: "a/b", ScanID: "s", TargetRef: "x"}, "task_id contains unsafe characters"},
		{"non-ascii task id", TaskSpec{TaskID: "tâche", ScanID: "s", TargetRef: "x"}, "task_id contains unsafe characters"},
		{"empty scan id", TaskSpec{TaskID: "t", TargetRef: "x"}, "scan_id is empty"},
		{"long scan id", TaskSpec{TaskID: "t", ScanID: long, TargetRef: "x"}, "scan_id is too long"},
		{"unsafe scan id", TaskSpec{TaskID: "t", ScanID: "s s", TargetRef: "x"}, "scan_id contains unsafe characters"},
		{"empty target", TaskSpec{TaskID: "t", ScanID: "s"}, "target_ref is empty"},
		{"long target", TaskSpec{TaskID: "t", ScanID: "s", TargetRef: strings.Repeat("x", MaxTargetRefBytes+1)}, "target_ref is too long"},
		{"too many phases", TaskSpec{TaskID: "t", ScanID: "s", TargetRef: "x", Phases: make([]uint8, MaxTaskPhases+1)}, "too many phases"},
		{"bad priority", TaskSpec{TaskID: "t", ScanID: "s", TargetRef: "x", Priority: 4}, "priority is invalid"},
		{"task id checked before scan id", TaskSpec{TaskID: "", ScanID: ""}, "task_id is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, DefaultLimits())
			e := h.fail(KindInvalidTask, func(rev, now uint64) error {
				_, err := h.p.Enqueue(rev, now, tt.spec)
				return err
			})
			if e.Reason != tt.reason {
				t.Fatalf("reason = %q, want %q", e.Reason, tt.reason)
			}
			if strings.Contains(e.Error(), "a/b") || strings.Contains(e.Error(), long) {
				t.Fatalf("error echoes an invalid identifier: %v", e)
			}
			// Validation comes before the revision check.
			h.failAt(h.rev()+7, h.now, KindInvalidTask, func(rev, now uint64) error {
				_, err := h.p.Enqueue(rev, now, tt.spec)
				return err
			})
		})
	}
	t.Run("limits are inclusive", func(t *testing.T) {
		h := newHarness(t, DefaultLimits())
		h.ok("max sizes", func(rev, now uint64) error {
			_, err := h.p.Enqueue(rev, now, TaskSpec{
				TaskID: strings.Repeat("a", MaxIdentifierBytes), ScanID: strings.Repeat("s", MaxIdentifierBytes),
				TargetRef: strings.Repeat("x", MaxTargetRefBytes), Phases: make([]uint8, MaxTaskPhases), Priority: PriorityCritical,
			})
			return err
		})
		h.ok("safe punctuation", func(rev, now uint64) error {
			_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: "A-z_0.9:x", ScanID: "s", TargetRef: "x"})
			return err
		})
	})
}

func TestTaskQueue_EnqueueNewTask(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.now = 77
	phases := []uint8{1, 2}
	var got ScanTask
	h.ok("enqueue", func(rev, now uint64) error {
		tr, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: "t1", ScanID: "s1", TargetRef: "10.0.0.1", Phases: phases, Priority: PriorityHigh})
		got = tr.Value
		return err
	})
	phases[0] = 9 // the record must not alias the caller's slice
	if got.Status() != TaskQueued || got.CreatedAt() != 77 || got.Attempt() != 0 || got.TaskGeneration() != 0 ||
		got.RetryCount() != 0 || got.RecordVersion() != 1 || got.TargetRef() != "10.0.0.1" || got.Priority() != PriorityHigh {
		t.Fatalf("new task = %+v", got)
	}
	if p := h.task("t1").Phases(); len(p) != 2 || p[0] != 1 {
		t.Fatalf("phases = %v, want [1 2]", p)
	}
	if _, ok := got.StartedAt(); ok {
		t.Fatal("new task has a start time")
	}
	if _, ok := got.Lease(); ok {
		t.Fatal("new task has a lease")
	}
	own, ok := got.Ownership()
	if f, isFence := own.Fence(); !ok || !isFence || f.TaskID() != "t1" || f.RecordVersion() != 1 {
		t.Fatalf("ownership = %v %v", own, ok)
	}
	returned := h.task("t1").Phases()
	returned[1] = 42
	if h.task("t1").Phases()[1] != 2 {
		t.Fatal("Phases() aliases the record")
	}
}

func TestTaskQueue_EnqueueCommandChecks(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.enqueue("t1", PriorityNormal)
	spec := TaskSpec{TaskID: "t2", ScanID: "s", TargetRef: "x"}
	e := h.failAt(h.rev()-1, h.now, KindRevisionConflict, func(rev, now uint64) error {
		_, err := h.p.Enqueue(rev, now, spec)
		return err
	})
	if e.Expected != h.rev()-1 || e.Actual != h.rev() {
		t.Fatalf("conflict details = %+v", e)
	}
	h.failAt(h.rev()+1, h.now, KindRevisionConflict, func(rev, now uint64) error {
		_, err := h.p.Enqueue(rev, now, spec)
		return err
	})
	e = h.failAt(h.rev(), h.now-1, KindLogicalTimeRegression, func(rev, now uint64) error {
		_, err := h.p.Enqueue(rev, now, spec)
		return err
	})
	if e.Current != h.now || e.Proposed != h.now-1 {
		t.Fatalf("regression details = %+v", e)
	}
	// The revision check comes before the time check.
	h.failAt(h.rev()+1, h.now-1, KindRevisionConflict, func(rev, now uint64) error {
		_, err := h.p.Enqueue(rev, now, spec)
		return err
	})
	e = h.fail(KindTaskAlreadyExists, func(rev, now uint64) error {
		_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: "t1", ScanID: "other", TargetRef: "y"})
		return err
	})
	if e.TaskID != "t1" {
		t.Fatalf("TaskAlreadyExists names %q", e.TaskID)
	}
	h.ok("same time is fine", func(rev, now uint64) error { _, err := h.p.Enqueue(rev, now, spec); return err })
}

func TestTaskQueue_AdmissionLimits(t *testing.T) {
	t.Run("queued limit and limit+1", func(t *testing.T) {
		l := smallLimits() // records 8, active 4, queued 4, terminal 8
		l.MaxQueuedTasks = 2
		h := newHarness(t, l)
		h.enqueue("a", 0)
		h.enqueue("b", 0)
		e := h.fail(KindQueuedTaskCapacityReached, func(rev, now uint64) error {
			_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: "c", ScanID: "s", TargetRef: "x"})
			return err
		})
		if e.Limit != 2 {
			t.Fatalf("limit = %d", e.Limit)
		}
	})
	t.Run("active limit", func(t *testing.T) {
		h := newHarness(t, smallLimits())
		h.register("w", 8)
		for _, id := range []string{"a", "b", "c", "d"} {
			h.enqueue(id, 0)
		}
		// Lease two so the queue has room but active is at 4.
		h.assign("a", "w", 10)
		h.assign("b", "w", 10)
		e := h.fail(KindActiveTaskCapacityReached, func(rev, now uint64) error {
			_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: "e", ScanID: "s", TargetRef: "x"})
			return err
		})
		if e.Limit != 4 {
			t.Fatalf("limit = %d", e.Limit)
		}
	})
	t.Run("records limit before active", func(t *testing.T) {
		l := smallLimits()
		l.MaxTaskRecords, l.MaxTerminalTasks, l.MaxActiveTasks, l.MaxQueuedTasks = 3, 3, 3, 3
		h := newHarness(t, l)
		h.enqueue("a", 0)
		h.enqueue("b", 0)
		h.enqueue("c", 0)
		e := h.fail(KindTaskRecordCapacityReached, func(rev, now uint64) error {
			_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: "d", ScanID: "s", TargetRef: "x"})
			return err
		})
		if e.Limit != 3 {
			t.Fatalf("limit = %d", e.Limit)
		}
		h.fail(KindTaskAlreadyExists, func(rev, now uint64) error {
			_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: "a", ScanID: "s", TargetRef: "x"})
			return err
		})
	})
	t.Run("terminal reservation", func(t *testing.T) {
		l := smallLimits()
		l.MaxTaskRecords, l.MaxTerminalTasks, l.MaxActiveTasks, l.MaxQueuedTasks = 8, 3, 2, 2
		h := newHarness(t, l)
		h.enqueue("a", 0)
		h.enqueue("b", 0)
		cancel := func(id string) {
			own, _ := h.task(id).Ownership()
			h.ok("cancel "+id, func(rev, now uint64) error { _, err := h.p.CancelTask(rev, now, own); return err })
		}
		cancel("a")
		cancel("b")
		h.enqueue("c", 0) // terminal 2 + active 0 + 1 = 3 ≤ 3
		e := h.fail(KindTerminalCapacityReserved, func(rev, now uint64) error {
			_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: "d", ScanID: "s", TargetRef: "x"})
			return err
		})
		if e.Limit != 3 {
			t.Fatalf("limit = %d", e.Limit)
		}
	})
}

func TestTaskQueue_Order(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.enqueue("n1", PriorityNormal)
	h.enqueue("l1", PriorityLow)
	h.enqueue("c1", PriorityCritical)
	h.enqueue("n2", PriorityNormal)
	h.enqueue("h1", PriorityHigh)
	h.enqueue("c2", PriorityCritical)
	var got []string
	for _, task := range h.p.TaskQueue().QueuedTasks() {
		got = append(got, task.TaskID())
	}
	want := "c1 c2 h1 n1 n2 l1"
	if strings.Join(got, " ") != want {
		t.Fatalf("queue order = %v, want %v", got, want)
	}
	next, ok := h.p.TaskQueue().PeekNext()
	if !ok || next.TaskID() != "c1" {
		t.Fatalf("PeekNext = %v %v", next, ok)
	}
	// Tasks() is in task-ID order.
	var ids []string
	for _, task := range h.p.Tasks() {
		ids = append(ids, task.TaskID())
	}
	if strings.Join(ids, " ") != "c1 c2 h1 l1 n1 n2" {
		t.Fatalf("Tasks() order = %v", ids)
	}
	// A requeued task goes behind tasks of its priority enqueued earlier.
	h.register("w", 4)
	l := h.assign("n1", "w", 60)
	h.start(l)
	h.ok("fail", func(rev, now uint64) error { _, err := h.p.FailTask(rev, now, l); return err })
	got = got[:0]
	for _, task := range h.p.TaskQueue().QueuedTasks() {
		got = append(got, task.TaskID())
	}
	if strings.Join(got, " ") != "c1 c2 h1 n2 n1 l1" {
		t.Fatalf("order after requeue = %v", got)
	}
}

func TestTaskQueue_Reads(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	q := h.p.TaskQueue()
	if _, ok := q.PeekNext(); ok {
		t.Fatal("PeekNext on an empty queue")
	}
	if _, ok, err := q.GetTask("missing"); ok || err != nil {
		t.Fatalf("GetTask(missing) = %v %v", ok, err)
	}
	_, _, err := q.GetTask("bad id")
	if e, ok := err.(*Error); !ok || e.Kind != KindInvalidTask || e.Reason != "task command identifier is invalid" || strings.Contains(e.Error(), "bad id") {
		t.Fatalf("GetTask(invalid) = %v", err)
	}
	_, _, err = h.p.GetWorker("")
	if e, ok := err.(*Error); !ok || e.Kind != KindInvalidWorker || e.Reason != "worker command identifier is invalid" {
		t.Fatalf("GetWorker(invalid) = %v", err)
	}
	// A standalone queue is independent of any pool.
	sq := NewTaskQueue()
	if _, err := sq.Enqueue(0, 1, TaskSpec{TaskID: "t", ScanID: "s", TargetRef: "x"}); err != nil {
		t.Fatal(err)
	}
	if sq.Snapshot().QueuedTasks != 1 || h.p.Snapshot().QueuedTasks != 0 {
		t.Fatal("standalone queue shares state")
	}
	// The facade shares state and revision with its pool.
	if _, err := q.Enqueue(0, 1, TaskSpec{TaskID: "t", ScanID: "s", TargetRef: "x"}); err != nil {
		t.Fatal(err)
	}
	if h.p.Snapshot().Revision != 1 || q.Snapshot() != h.p.Snapshot() {
		t.Fatal("facade does not share the pool's state")
	}
}

func TestTaskQueue_CancelQueued(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	task := h.enqueue("t1", PriorityNormal)
	own, _ := task.Ownership()
	fence, _ := own.Fence()
	stale := OwnershipFromFence(QueuedTaskFence{taskID: "t1", taskGeneration: 0, recordVersion: 2})
	h.fail(KindStaleOwnership, func(rev, now uint64) error { _, err := h.p.CancelTask(rev, now, stale); return err })
	h.fail(KindStaleOwnership, func(rev, now uint64) error {
		_, err := h.p.CancelTask(rev, now, OwnershipFromFence(QueuedTaskFence{taskID: "t1", taskGeneration: 1, recordVersion: 1}))
		return err
	})
	h.fail(KindTaskNotFound, func(rev, now uint64) error {
		_, err := h.p.CancelTask(rev, now, OwnershipFromFence(QueuedTaskFence{taskID: "t9", recordVersion: 1}))
		return err
	})
	e := h.fail(KindInvalidTask, func(rev, now uint64) error { _, err := h.p.CancelTask(rev, now, TaskOwnership{}); return err })
	if e.Reason != reasonTaskCommandID {
		t.Fatalf("zero ownership reason = %q", e.Reason)
	}
	h.fail(KindInvalidTask, func(rev, now uint64) error {
		_, err := h.p.CancelTask(rev, now, OwnershipFromLease(TaskLease{}))
		return err
	})
	h.ok("cancel", func(rev, now uint64) error {
		tr, err := h.p.CancelTask(rev, now, own)
		if err == nil && tr.Value.Kind != Cancelled {
			t.Fatalf("outcome = %v", tr.Value.Kind)
		}
		return err
	})
	got := h.task("t1")
	if got.Status() != TaskCancelled || got.RecordVersion() != 2 || h.p.Snapshot().QueuedTasks != 0 {
		t.Fatalf("cancelled task = %v", got)
	}
	if _, ok := got.Ownership(); ok {
		t.Fatal("terminal task has an ownership")
	}
	h.now++
	h.replay(func(rev, now uint64) (uint64, error) {
		tr, err := h.p.CancelTask(rev, now, OwnershipFromFence(fence))
		if err == nil && tr.Value.Kind != AlreadyCancelled {
			t.Fatalf("replay outcome = %v", tr.Value.Kind)
		}
		return tr.Revision, err
	})
	// A replay still needs the current revision and monotonic time.
	h.failAt(h.rev()-1, h.now, KindRevisionConflict, func(rev, now uint64) error { _, err := h.p.CancelTask(rev, now, own); return err })
	h.failAt(h.rev(), h.now-2, KindLogicalTimeRegression, func(rev, now uint64) error { _, err := h.p.CancelTask(rev, now, own); return err })
	// Another proof for the cancelled task is stale.
	h.fail(KindStaleOwnership, func(rev, now uint64) error {
		_, err := h.p.CancelTask(rev, now, OwnershipFromFence(QueuedTaskFence{taskID: "t1", recordVersion: 2}))
		return err
	})
}

func TestTaskQueue_CancelLeased(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 2)
	h.enqueue("t1", PriorityNormal)
	l := h.assign("t1", "w", 30)
	// The queued fence no longer owns the task.
	h.fail(KindStaleOwnership, func(rev, now uint64) error {
		_, err := h.p.CancelTask(rev, now, OwnershipFromFence(QueuedTaskFence{taskID: "t1", recordVersion: 1}))
		return err
	})
	h.failAt(h.rev(), l.ExpiresAt(), KindLeaseExpired, func(rev, now uint64) error {
		_, err := h.p.CancelTask(rev, now, OwnershipFromLease(l))
		return err
	})
	h.ok("cancel", func(rev, now uint64) error { _, err := h.p.CancelTask(rev, now, OwnershipFromLease(l)); return err })
	if w := h.worker("w"); w.CurrentTasks() != 0 || w.CompletedTasks() != 0 {
		t.Fatalf("worker after cancel = %+v", w)
	}
	h.replay(func(rev, now uint64) (uint64, error) {
		tr, err := h.p.CancelTask(rev, now, OwnershipFromLease(l))
		if err == nil && tr.Value.Kind != AlreadyCancelled {
			t.Fatalf("replay outcome = %v", tr.Value.Kind)
		}
		return tr.Revision, err
	})
	// Completing a cancelled task is stale.
	h.fail(KindStaleOwnership, func(rev, now uint64) error { _, err := h.p.CompleteTask(rev, now, l); return err })
}

func TestTaskQueue_ExpireOldTasks(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.now = 100
	h.register("w", 4)
	h.enqueue("old-queued", 0)
	h.enqueue("old-leased", 0)
	h.assign("old-leased", "w", 3600)
	h.now = 101
	h.enqueue("young", 0)

	h.fail(KindInvalidLimit, func(rev, now uint64) error { _, err := h.p.ExpireOldTasks(rev, now, 0); return err })
	e := h.fail(KindTimeLimitExceedsMaximum, func(rev, now uint64) error {
		_, err := h.p.ExpireOldTasks(rev, now, DefaultLimits().MaxTaskTTLSecs+1)
		return err
	})
	if e.Name != "max_age_secs" || e.Actual != 86401 || e.Maximum != 86400 {
		t.Fatalf("details = %+v", e)
	}
	// now − CreatedAt = 49 < 50: nothing expires, but the command commits.
	h.now = 149
	h.ok("nothing", func(rev, now uint64) error {
		tr, err := h.p.ExpireOldTasks(rev, now, 50)
		if err == nil && tr.Value != 0 {
			t.Fatalf("expired %d", tr.Value)
		}
		return err
	})
	// now − CreatedAt = 50: the two old tasks expire, young (49) stays.
	h.now = 150
	h.ok("edge", func(rev, now uint64) error {
		tr, err := h.p.ExpireOldTasks(rev, now, 50)
		if err == nil && tr.Value != 2 {
			t.Fatalf("expired %d, want 2", tr.Value)
		}
		return err
	})
	if h.task("old-queued").Status() != TaskExpired || h.task("old-leased").Status() != TaskExpired || h.task("young").Status() != TaskQueued {
		t.Fatal("wrong tasks expired")
	}
	if h.worker("w").CurrentTasks() != 0 {
		t.Fatal("expired lease not released")
	}
	h.now = 151
	h.ok("young", func(rev, now uint64) error {
		tr, err := h.p.ExpireOldTasks(rev, now, 50)
		if err == nil && tr.Value != 1 {
			t.Fatalf("expired %d, want 1", tr.Value)
		}
		return err
	})
	// Terminal tasks never expire again.
	h.ok("again", func(rev, now uint64) error {
		tr, err := h.p.ExpireOldTasks(rev, now, 1)
		if err == nil && tr.Value != 0 {
			t.Fatalf("expired %d, want 0", tr.Value)
		}
		return err
	})
}

func TestTaskQueue_EnqueueBatch(t *testing.T) {
	spec := func(id string, prio TaskPriority) TaskSpec {
		return TaskSpec{TaskID: id, ScanID: "s", TargetRef: "x-" + id, Priority: prio}
	}
	l := smallLimits()
	l.MaxActiveTasks = 6 // records 8, active 6, queued 4, terminal 8
	h := newHarness(t, l)
	batch := func(specs ...TaskSpec) func(rev, now uint64) error {
		return func(rev, now uint64) error { _, err := h.p.EnqueueBatch(rev, now, specs); return err }
	}
	e := h.fail(KindInvalidTask, batch())
	if e.Reason != "batch is empty" {
		t.Fatalf("reason = %q", e.Reason)
	}
	e = h.fail(KindInvalidTask, batch(spec("a", 0), TaskSpec{TaskID: "b", ScanID: "s"}))
	if e.Reason != "target_ref is empty" {
		t.Fatalf("reason = %q", e.Reason)
	}
	if err := (TaskSpec{TaskID: "b", ScanID: "s"}).Validate(); !errors.Is(err, ErrInvalidTask) {
		t.Fatalf("Validate = %v", err)
	}
	if err := spec("a", 0).Validate(); err != nil {
		t.Fatalf("Validate = %v", err)
	}
	h.failAt(h.rev()+1, h.now, KindRevisionConflict, batch(spec("a", 0)))
	e = h.fail(KindTaskAlreadyExists, batch(spec("a", 0), spec("b", 0), spec("a", 1)))
	if e.TaskID != "a" {
		t.Fatalf("details = %+v", e)
	}
	h.fail(KindQueuedTaskCapacityReached, batch(spec("a", 0), spec("b", 0), spec("c", 0), spec("d", 0), spec("e", 0)))
	var got []ScanTask
	h.ok("batch of four", func(rev, now uint64) error {
		tr, err := h.p.EnqueueBatch(rev, now, []TaskSpec{spec("a", 0), spec("b", PriorityHigh), spec("c", 0), spec("d", 0)})
		got = tr.Value
		return err
	})
	if len(got) != 4 || got[1].TaskID() != "b" || got[1].Status() != TaskQueued || got[0].TargetRef() != "x-a" {
		t.Fatalf("batch value = %v", got)
	}
	if next, _ := h.p.PeekNext(); next.TaskID() != "b" {
		t.Fatalf("PeekNext = %v", next)
	}
	// The ordinals follow the slice order: a, c, d after b.
	var order []string
	for _, task := range h.p.TaskQueue().QueuedTasks() {
		order = append(order, task.TaskID())
	}
	if strings.Join(order, " ") != "b a c d" {
		t.Fatalf("order = %v", order)
	}
	h.fail(KindTaskAlreadyExists, batch(spec("z", 0), spec("c", 0)))
	h.fail(KindQueuedTaskCapacityReached, batch(spec("z", 0)))
	h.register("w", 4)
	h.assign("a", "w", 60)
	h.assign("b", "w", 60)
	// 4 active + 3 > 6: the active bound is checked before the queue bound.
	h.fail(KindActiveTaskCapacityReached, batch(spec("x", 0), spec("y", 0), spec("z", 0)))
	h.ok("two more", batch(spec("x", 0), spec("y", 0)))
}

func TestTaskQueue_CancelTaskByID(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 4)
	h.enqueue("q", 0)
	leased := h.enqueue("l", 0)
	_ = leased
	ll := h.assign("l", "w", 10)
	rl := h.running("r", "w", 10)
	done := h.running("d", "w", 100)
	h.ok("complete d", func(rev, now uint64) error { _, err := h.p.CompleteTask(rev, now, done); return err })
	byID := func(id string) func(rev, now uint64) error {
		return func(rev, now uint64) error {
			tr, err := h.p.CancelTaskByID(rev, now, id)
			if err == nil && tr.Value.Kind != Cancelled {
				t.Fatalf("outcome %v", tr.Value.Kind)
			}
			return err
		}
	}
	h.fail(KindInvalidTask, byID("bad id"))
	h.fail(KindTaskNotFound, byID("nope"))
	h.failAt(h.rev()+1, h.now, KindRevisionConflict, byID("q"))
	e := h.fail(KindInvalidTransition, byID("d"))
	if e.Status != TaskCompleted || e.Operation != "cancel" {
		t.Fatalf("details = %+v", e)
	}
	qOwn, _ := h.task("q").Ownership()
	h.ok("cancel queued", byID("q"))
	h.now += 10 // l's and r's leases have expired, not yet recovered
	h.ok("cancel leased with an expired lease", byID("l"))
	h.ok("cancel running with an expired lease", byID("r"))
	if w := h.worker("w"); w.CurrentTasks() != 0 {
		t.Fatalf("worker holds %d tasks", w.CurrentTasks())
	}
	// Replays: by ID and with the retained proofs.
	h.replay(func(rev, now uint64) (uint64, error) {
		tr, err := h.p.CancelTaskByID(rev, now, "l")
		if err == nil && tr.Value.Kind != AlreadyCancelled {
			t.Fatalf("replay = %v", tr.Value.Kind)
		}
		return tr.Revision, err
	})
	for _, own := range []TaskOwnership{qOwn, OwnershipFromLease(ll), OwnershipFromLease(rl)} {
		h.replay(func(rev, now uint64) (uint64, error) {
			tr, err := h.p.CancelTask(rev, now, own)
			if err == nil && tr.Value.Kind != AlreadyCancelled {
				t.Fatalf("proof replay = %v", tr.Value.Kind)
			}
			return tr.Revision, err
		})
	}
	h.fail(KindStaleOwnership, func(rev, now uint64) error { _, err := h.p.CompleteTask(rev, now, rl); return err })
}

// Goal: ValidIdentifier accepts exactly the bytes the rule names (ASCII
// letters, digits, '.', '_', ':', '-'), at every position — the lease
// commands skip it only for IDs equal to stored ones (leaseTask), so what
// it admits is what every stored ID is. Method: for lengths 1–17, put each
// of the 256 byte values at each position of an otherwise valid
// identifier and compare with the rule written out byte by byte.
func TestValidIdentifier_EveryByteEveryPosition(t *testing.T) {
	allowed := func(c byte) bool {
		return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._:-", c) >= 0
	}
	for n := 1; n <= 17; n++ {
		for pos := 0; pos < n; pos++ {
			for c := 0; c < 256; c++ {
				b := []byte(strings.Repeat("a", n))
				b[pos] = byte(c)
				if got, want := ValidIdentifier(string(b)), allowed(byte(c)); got != want {
					t.Fatalf("ValidIdentifier(%q) = %v, want %v", b, got, want)
				}
			}
		}
	}
	if ValidIdentifier(strings.Repeat("a", MaxIdentifierBytes+1)) || !ValidIdentifier(strings.Repeat("a", MaxIdentifierBytes)) {
		t.Fatal("the length bound moved")
	}
}
