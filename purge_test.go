package distributed

// Goal: PurgeTasks and PurgeResults (contract Part F, docs/adr/0002-purge.md):
// only terminal tasks go, under every task state; filters by scan, time and
// ID; every failure changes nothing; proofs of a purged life fail with
// ErrTaskPurged and a re-enqueued ID starts above every old generation;
// capacity is freed for good; export/restore round-trips after a purge and
// still reads version 1 states. Method: the error-atomic harness of
// helpers_test.go.

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"testing"
)

// purge runs PurgeTasks through the harness and returns the purged IDs.
func (h *harness) purge(f PurgeFilter) []string {
	h.t.Helper()
	var ids []string
	h.ok("purge", func(rev, now uint64) error {
		tr, err := h.p.PurgeTasks(rev, now, f)
		ids = tr.Value.TaskIDs
		return err
	})
	return ids
}

func (h *harness) complete(l TaskLease) CompletionReceipt {
	h.t.Helper()
	var r CompletionReceipt
	h.ok("complete "+l.TaskID(), func(rev, now uint64) error {
		tr, err := h.p.CompleteTask(rev, now, l)
		r = tr.Value.Receipt
		return err
	})
	return r
}

func noRetryLimits() Limits {
	l := DefaultLimits()
	l.MaxRetries = 0
	return l
}

// everyState builds one task in each of the seven statuses: e expired,
// q queued, l leased, r running, c completed, f failed, x cancelled.
func everyState(h *harness) {
	h.t.Helper()
	h.enqueue("e", PriorityNormal)
	h.now += 100
	h.register("w", 8)
	h.enqueue("q", PriorityNormal)
	h.enqueue("l", PriorityNormal)
	h.assign("l", "w", 600)
	h.running("r", "w", 600)
	h.complete(h.running("c", "w", 600))
	f := h.running("f", "w", 600)
	h.ok("fail f", func(rev, now uint64) error { _, err := h.p.FailTask(rev, now, f); return err })
	h.enqueue("x", PriorityNormal)
	h.ok("cancel x", func(rev, now uint64) error { _, err := h.p.CancelTaskByID(rev, now, "x"); return err })
	h.ok("expire e", func(rev, now uint64) error { _, err := h.p.ExpireOldTasks(rev, now, 50); return err })
	want := map[string]TaskStatus{"e": TaskExpired, "q": TaskQueued, "l": TaskLeased, "r": TaskRunning,
		"c": TaskCompleted, "f": TaskFailed, "x": TaskCancelled}
	for id, st := range want {
		if got := h.task(id).Status(); got != st {
			h.t.Fatalf("setup: %s is %v, want %v", id, got, st)
		}
	}
}

func TestTaskQueue_PurgeTasks_EveryState(t *testing.T) {
	h := newHarness(t, noRetryLimits())
	everyState(h)
	for _, id := range []string{"q", "l", "r"} {
		e := h.fail(KindInvalidTransition, func(rev, now uint64) error {
			_, err := h.p.PurgeTasks(rev, now, PurgeFilter{TaskIDs: []string{"c", id}})
			return err
		})
		if e.TaskID != id || e.Operation != "purge" || e.Status != h.task(id).Status() {
			t.Fatalf("purge %s: details %+v", id, e)
		}
	}
	e := h.fail(KindTaskNotFound, func(rev, now uint64) error {
		_, err := h.p.PurgeTasks(rev, now, PurgeFilter{TaskIDs: []string{"c", "nope"}})
		return err
	})
	if e.TaskID != "nope" {
		t.Fatalf("details %+v", e)
	}
	live := map[string]ScanTask{"q": h.task("q"), "l": h.task("l"), "r": h.task("r")}
	h.now++
	if got, want := h.purge(PurgeFilter{}), []string{"c", "e", "f", "x"}; !slices.Equal(got, want) {
		t.Fatalf("purged %v, want %v", got, want)
	}
	for id, before := range live {
		if after := h.task(id); after.String() != before.String() || after.RecordVersion() != before.RecordVersion() {
			t.Fatalf("%s changed by purge: %v -> %v", id, before, after)
		}
	}
	for _, id := range []string{"c", "e", "f", "x"} {
		if _, ok, _ := h.p.GetTask(id); ok {
			t.Fatalf("%s still present after purge", id)
		}
	}
	s := h.p.Snapshot()
	if s.TaskRecords != 3 || s.TerminalTasks != 0 || s.ActiveTasks != 3 || s.QueuedTasks != 1 {
		t.Fatalf("after purge %+v", s)
	}
	if w := h.worker("w"); w.CurrentTasks() != 2 || w.CompletedTasks() != 1 {
		t.Fatalf("worker after purge: current %d completed %d", w.CurrentTasks(), w.CompletedTasks())
	}
	// Nothing left to purge is still a successful command.
	if got := h.purge(PurgeFilter{}); len(got) != 0 {
		t.Fatalf("second purge removed %v", got)
	}
}

func TestTaskQueue_PurgeTasks_Filters(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 16)
	finish := func(id, scan string) {
		h.ok("enqueue "+id, func(rev, now uint64) error {
			_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: id, ScanID: scan, TargetRef: "t"})
			return err
		})
		l := h.assign(id, "w", 60)
		h.start(l)
		h.complete(l)
		h.now += 10
	}
	finish("a1", "a") // finished at 1000
	finish("b1", "b") // 1010
	finish("a2", "a") // 1020
	finish("b2", "b") // 1030
	if f, ok := h.task("a2").FinishedAt(); !ok || f != 1020 {
		t.Fatalf("FinishedAt(a2) = %d, %v", f, ok)
	}
	if h.p.PurgeDue(1000) || !h.p.PurgeDue(1001) {
		t.Fatal("PurgeDue disagrees with the finish times")
	}
	// Strictly before: a2 finished at 1020 stays.
	if got := h.purge(PurgeFilter{ScanID: "a", FinishedBefore: 1020}); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("scan a before 1020 purged %v", got)
	}
	if got := h.purge(PurgeFilter{FinishedBefore: 1021}); !slices.Equal(got, []string{"a2", "b1"}) {
		t.Fatalf("before 1021 purged %v", got)
	}
	if got := h.purge(PurgeFilter{ScanID: "a"}); len(got) != 0 {
		t.Fatalf("scan a purged %v", got)
	}
	if got := h.purge(PurgeFilter{ScanID: "b"}); !slices.Equal(got, []string{"b2"}) {
		t.Fatalf("scan b purged %v", got)
	}
	if h.p.PurgeDue(1 << 40) {
		t.Fatal("PurgeDue with no terminal task")
	}
}

func TestTaskQueue_PurgeTasks_RejectsAndChangesNothing(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 4)
	h.complete(h.running("t", "w", 60))
	purge := func(f PurgeFilter) func(rev, now uint64) error {
		return func(rev, now uint64) error { _, err := h.p.PurgeTasks(rev, now, f); return err }
	}
	for _, tc := range []struct {
		name   string
		f      PurgeFilter
		reason string
	}{
		{"ids with scan", PurgeFilter{ScanID: "s", TaskIDs: []string{"t"}}, "task IDs exclude the scan and time filters"},
		{"ids with time", PurgeFilter{FinishedBefore: 5, TaskIDs: []string{"t"}}, "task IDs exclude the scan and time filters"},
		{"bad scan", PurgeFilter{ScanID: "bad scan"}, reasonTaskCommandID},
		{"bad id", PurgeFilter{TaskIDs: []string{"t", "../x"}}, reasonTaskCommandID},
		{"repeated id", PurgeFilter{TaskIDs: []string{"t", "t"}}, "task ID is repeated"},
		{"too many", PurgeFilter{TaskIDs: make([]string, MaxPurgeTaskIDs+1)}, "too many task IDs"},
	} {
		e := h.fail(KindInvalidTask, purge(tc.f))
		if e.Reason != tc.reason {
			t.Fatalf("%s: reason %q, want %q", tc.name, e.Reason, tc.reason)
		}
		// Argument validation precedes the revision check.
		h.failAt(h.rev()+1, h.now, KindInvalidTask, purge(tc.f))
	}
	h.failAt(h.rev()+1, h.now, KindRevisionConflict, purge(PurgeFilter{}))
	h.failAt(h.rev(), h.now-1, KindLogicalTimeRegression, purge(PurgeFilter{TaskIDs: []string{"t"}}))
	if got := h.purge(PurgeFilter{TaskIDs: []string{"t"}}); !slices.Equal(got, []string{"t"}) {
		t.Fatalf("purged %v", got)
	}
	h.fail(KindTaskNotFound, purge(PurgeFilter{TaskIDs: []string{"t"}}))
}

// TestWorkerPool_PurgeFencing: every proof of a purged life fails with
// ErrTaskPurged, before and after the ID is enqueued again, and the new life
// starts above every generation the old one used.
func TestWorkerPool_PurgeFencing(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 8)
	// c: completed after one retry (generation 1).
	first := h.running("c", "w", 60)
	h.ok("fail c", func(rev, now uint64) error { _, err := h.p.FailTask(rev, now, first); return err })
	second := h.assign("c", "w", 60)
	h.start(second)
	h.complete(second)
	// x: cancelled by its queued fence (generation 0).
	fence := QueuedTaskFence{taskID: "x", taskGeneration: 0, recordVersion: 1}
	h.enqueue("x", PriorityNormal)
	h.ok("cancel x", func(rev, now uint64) error {
		_, err := h.p.CancelTask(rev, now, OwnershipFromFence(fence))
		return err
	})
	// Before any purge a proof of an unknown task is TaskNotFound (Part A).
	ghost := first
	ghost.taskID = "ghost"
	h.fail(KindTaskNotFound, func(rev, now uint64) error { _, err := h.p.StartTask(rev, now, ghost); return err })
	lastLease := second.LeaseID()
	h.purge(PurgeFilter{})

	stale := []struct {
		name string
		f    func(rev, now uint64) error
	}{
		{"start old lease", func(rev, now uint64) error { _, err := h.p.StartTask(rev, now, first); return err }},
		{"complete replay", func(rev, now uint64) error { _, err := h.p.CompleteTask(rev, now, second); return err }},
		{"fail", func(rev, now uint64) error { _, err := h.p.FailTask(rev, now, second); return err }},
		{"renew", func(rev, now uint64) error { _, err := h.p.RenewLease(rev, now, second, 60); return err }},
		{"cancel by lease", func(rev, now uint64) error {
			_, err := h.p.CancelTask(rev, now, OwnershipFromLease(second))
			return err
		}},
		{"cancel replay by fence", func(rev, now uint64) error {
			_, err := h.p.CancelTask(rev, now, OwnershipFromFence(fence))
			return err
		}},
	}
	check := func(when string) {
		t.Helper()
		for _, s := range stale {
			e := h.fail(KindTaskPurged, s.f)
			if e.TaskID != "c" && e.TaskID != "x" {
				t.Fatalf("%s %s: details %+v", when, s.name, e)
			}
		}
	}
	check("after purge")
	// A proof at or above the floor for a task that never existed is
	// still TaskNotFound.
	ghost.taskGeneration = 2
	h.fail(KindTaskNotFound, func(rev, now uint64) error { _, err := h.p.StartTask(rev, now, ghost); return err })

	// New lives: generation above every old one, fresh lease IDs.
	for _, id := range []string{"c", "x"} {
		if g := h.enqueue(id, PriorityNormal).TaskGeneration(); g != 2 {
			t.Fatalf("re-enqueued %s at generation %d, want the floor 2", id, g)
		}
	}
	check("after re-enqueue")
	// The re-enqueued x has the fence (x, 2, 1): the old (x, 0, 1) failed
	// above with TaskPurged instead of cancelling it.
	if got := h.task("x").Status(); got != TaskQueued {
		t.Fatalf("x is %v after the stale fence, want queued", got)
	}
	l := h.assign("c", "w", 60)
	if l.LeaseID() <= lastLease || l.TaskGeneration() != 2 {
		t.Fatalf("new life lease %v: want an ID above %d and generation 2", l, lastLease)
	}
	h.start(l)
	h.complete(l)
	if err := h.p.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestWorkerPool_PurgeKeepsTenantRunning: a pool at small limits runs ten
// times its record limit through, purging as it goes.
func TestWorkerPool_PurgeKeepsTenantRunning(t *testing.T) {
	h := newHarness(t, smallLimits())
	h.register("w", 4)
	limit := smallLimits().MaxTaskRecords
	for i := range 10 * limit {
		id := fmt.Sprintf("t%d", i%(limit+3)) // IDs come back in later lives
		h.complete(h.running(id, "w", 60))
		if h.p.Snapshot().TaskRecords == limit {
			h.fail(KindTaskRecordCapacityReached, func(rev, now uint64) error {
				_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: "over", ScanID: "s", TargetRef: "t"})
				return err
			})
			h.now++
			if got := h.purge(PurgeFilter{ScanID: "scan"}); len(got) != limit {
				t.Fatalf("purge %d removed %d", i, len(got))
			}
		}
	}
	if w := h.worker("w"); w.CompletedTasks() != uint64(10*limit) {
		t.Fatalf("completed %d, want %d", w.CompletedTasks(), 10*limit)
	}
}

func TestExport_RoundTripAfterPurge(t *testing.T) {
	h := newHarness(t, noRetryLimits())
	everyState(h)
	h.purge(PurgeFilter{TaskIDs: []string{"c", "f"}})
	b := h.export()
	p, err := RestoreWorkerPool(b)
	if err != nil {
		t.Fatalf("restore after purge: %v", err)
	}
	if b2, _ := p.ExportState(); !bytes.Equal(b, b2) {
		t.Fatal("re-export differs")
	}
	// The floor survives: a re-enqueued purged ID starts at generation 1
	// in both pools.
	for _, pool := range []*WorkerPool{h.p, p} {
		tr, err := pool.Enqueue(pool.Snapshot().Revision, h.now, TaskSpec{TaskID: "c", ScanID: "s", TargetRef: "t"})
		if err != nil || tr.Value.TaskGeneration() != 1 {
			t.Fatalf("re-enqueue after restore: %v, generation %d", err, tr.Value.TaskGeneration())
		}
	}
	if a, b := h.export(), mustExport(t, p); !bytes.Equal(a, b) {
		t.Fatal("the restored pool diverged from the original")
	}
}

func mustExport(t *testing.T, p *WorkerPool) []byte {
	t.Helper()
	b, err := p.ExportState()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// exportV1 encodes c in the version 1 layout (no generation floor, no
// finish times), as pools exported before purge existed.
func exportV1(c *coordinator) []byte {
	e := newEncoder(poolMagic, poolVersionV1)
	l := c.limits
	for _, v := range [...]uint64{
		uint64(l.MaxTaskRecords), uint64(l.MaxActiveTasks), uint64(l.MaxQueuedTasks),
		uint64(l.MaxTerminalTasks), uint64(l.MaxWorkers), uint64(l.MaxRetries),
		l.MaxLeaseTTLSecs, l.MaxTaskTTLSecs, l.HeartbeatTimeoutSecs,
		c.revision, c.logicalTime, c.lastLeaseID, c.lastOrdinal,
	} {
		e.uvarint(v)
	}
	ids := c.sortedTaskIDs()
	e.uvarint(uint64(len(ids)))
	for _, id := range ids {
		t := c.tasks[id]
		e.str(t.id)
		e.str(t.scanID())
		e.str(t.target)
		e.str(t.phases())
		e.uvarint(uint64(t.priority))
		e.uvarint(uint64(t.status))
		e.uvarint(t.createdAt)
		e.boolean(t.hasStarted)
		e.uvarint(t.startedAt)
		e.boolean(t.status == TaskCompleted)
		e.uvarint(t.completedAtValue())
		e.uvarint(uint64(t.retryCount))
		e.uvarint(uint64(t.attempt))
		e.uvarint(t.generation)
		e.uvarint(t.version)
		e.uvarint(t.ordinal)
		e.boolean(t.hasLease)
		if t.hasLease {
			t.currentLease().encode(e)
		}
		e.boolean(t.hasProof)
		if t.hasProof {
			t.proofValue().encode(e)
		}
		if t.status == TaskCompleted {
			t.receiptValue().encode(e)
		}
	}
	ws := c.sortedWorkers()
	e.uvarint(uint64(len(ws)))
	for _, w := range ws {
		w.encode(e)
	}
	return e.finish()
}

func TestRestoreWorkerPool_Version1(t *testing.T) {
	h := newHarness(t, noRetryLimits())
	everyState(h)
	h.now += 7
	h.ok("heartbeat", func(rev, now uint64) error {
		_, err := h.p.UpdateWorker(rev, now, "w", 1, WorkerObservation{Status: WorkerHealthy})
		return err
	})
	p, err := RestoreWorkerPool(exportV1(h.p.c))
	if err != nil {
		t.Fatalf("restore version 1: %v", err)
	}
	if p.Snapshot() != h.p.Snapshot() {
		t.Fatalf("snapshot %+v, want %+v", p.Snapshot(), h.p.Snapshot())
	}
	if err := p.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	// Completed tasks keep their completion time; other terminal tasks
	// finished at the state's logical time at the latest.
	completedAt, completed := h.task("c").CompletedAt()
	if !completed {
		t.Fatal("task c is not completed")
	}
	for id, want := range map[string]uint64{"c": completedAt, "f": h.now, "x": h.now, "e": h.now} {
		task, _, _ := p.GetTask(id)
		if got, ok := task.FinishedAt(); !ok || got != want {
			t.Fatalf("FinishedAt(%s) = %d, %v; want %d", id, got, ok, want)
		}
	}
	b := mustExport(t, p)
	if b[len(poolMagic)] != poolVersion {
		t.Fatalf("re-export version %d, want %d", b[len(poolMagic)], poolVersion)
	}
	if _, err := RestoreWorkerPool(b); err != nil {
		t.Fatalf("upgraded state does not restore: %v", err)
	}
}

func TestResultAggregator_PurgeResults(t *testing.T) {
	a, err := NewResultAggregatorWithLimits(ResultLimits{MaxResults: 2, MaxResultBytes: 8, MaxTotalBytes: 16, MaxAggregateItems: 4, MaxAggregateBytes: 16})
	if err != nil {
		t.Fatal(err)
	}
	store := func(id string, data string) {
		t.Helper()
		r := CompletionReceipt{taskID: id, workerID: "w", workerGeneration: 1, leaseID: 1, attempt: 1, recordVersion: 4}
		if _, err := a.StoreResult(a.Revision(), r, []byte(data)); err != nil {
			t.Fatalf("store %s: %v", id, err)
		}
	}
	store("a", "1234")
	store("b", "56")
	r := CompletionReceipt{taskID: "c", workerID: "w"}
	if _, err := a.StoreResult(a.Revision(), r, nil); !isKind(err, KindResultCapacityReached) {
		t.Fatalf("store over the limit: %v", err)
	}
	before, _ := a.ExportState()
	for _, tc := range []struct {
		rev  uint64
		ids  []string
		kind ErrorKind
	}{
		{a.Revision(), []string{"a", "a"}, KindInvalidTask},
		{a.Revision(), []string{"a", ""}, KindInvalidTask},
		{a.Revision(), make([]string, MaxPurgeTaskIDs+1), KindInvalidTask},
		{a.Revision() + 1, []string{"a"}, KindRevisionConflict},
	} {
		if _, err := a.PurgeResults(tc.rev, tc.ids); !isKind(err, tc.kind) {
			t.Fatalf("PurgeResults(%d, %d ids) = %v, want %v", tc.rev, len(tc.ids), err, tc.kind)
		}
		if after, _ := a.ExportState(); !bytes.Equal(before, after) {
			t.Fatal("a failed PurgeResults changed the state")
		}
	}
	rev := a.Revision()
	tr, err := a.PurgeResults(rev, []string{"a", "nope"})
	if err != nil || tr.Value != 1 || tr.Revision != rev+1 || a.ResultCount() != 1 || a.TotalBytes() != 2 {
		t.Fatalf("PurgeResults = %+v, %v; count %d bytes %d", tr, err, a.ResultCount(), a.TotalBytes())
	}
	if err := a.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	// The freed slot takes a new result; the state round-trips.
	store("c", "abcdefgh")
	b, _ := a.ExportState()
	a2, err := RestoreResultAggregator(b)
	if err != nil {
		t.Fatalf("restore after purge: %v", err)
	}
	if b2, _ := a2.ExportState(); !bytes.Equal(b, b2) {
		t.Fatal("re-export differs")
	}
	var nilAgg *ResultAggregator
	if _, err := nilAgg.PurgeResults(0, nil); !isKind(err, KindStateInvariant) {
		t.Fatalf("nil aggregator: %v", err)
	}
}

func isKind(err error, k ErrorKind) bool {
	e, ok := err.(*Error)
	return ok && e.Kind == k
}

// TestTaskQueue_PurgeTasks_GenerationExhausted: a purge that cannot raise
// the generation floor above a task's generation fails whole (white-box:
// such a state takes 2^64 generations to reach).
func TestTaskQueue_PurgeTasks_GenerationExhausted(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 4)
	h.complete(h.running("t", "w", 60))
	h.complete(h.running("u", "w", 60))
	c := h.p.c
	c.generationFloor = math.MaxUint64
	c.tasks["u"].generation = math.MaxUint64
	c.tasks["u"].lifeBase = math.MaxUint64
	// The receipt and the proof lease name the record's generation (compact.go).
	if err := h.p.CheckInvariants(); err != nil {
		t.Fatalf("setup: %v", err)
	}
	e := h.fail(KindCounterExhausted, func(rev, now uint64) error {
		_, err := h.p.PurgeTasks(rev, now, PurgeFilter{})
		return err
	})
	if e.Counter != "task_generation" {
		t.Fatalf("details %+v", e)
	}
	if got := h.purge(PurgeFilter{TaskIDs: []string{"t"}}); !slices.Equal(got, []string{"t"}) {
		t.Fatalf("purged %v", got)
	}
}
