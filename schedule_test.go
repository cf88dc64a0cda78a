package distributed

// Goal: the scheduling features of contract Part F (not-before times,
// backoff, required tags, per-scan in-flight limits, pause and fairness)
// behave as documented, fence stale leases, keep every failure
// error-atomic, survive export/restore, and leave a pool that uses none of
// them exactly as contract Part A says. Method: the error-atomic harness of
// helpers_test.go, small hand-built scenarios, and exports compared byte
// for byte.

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func (h *harness) enqueueSched(id, scan string, p TaskPriority, s TaskScheduling) {
	h.t.Helper()
	h.ok("enqueue "+id, func(rev, now uint64) error {
		_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: id, ScanID: scan, TargetRef: "t-" + id, Priority: p, Scheduling: s})
		return err
	})
}

func (h *harness) registerTagged(id string, capacity uint32, tags ...WorkerTag) {
	h.t.Helper()
	h.ok("register "+id, func(rev, now uint64) error {
		_, err := h.p.RegisterWorker(rev, now, WorkerSpec{WorkerID: id, Capacity: capacity, Tags: tags})
		return err
	})
}

func (h *harness) assignNext(worker string) TaskLease {
	h.t.Helper()
	var l TaskLease
	h.ok("assign next to "+worker, func(rev, now uint64) error {
		tr, err := h.p.AssignNext(rev, now, worker, 60)
		l = tr.Value
		return err
	})
	return l
}

func (h *harness) assignAny() TaskLease {
	h.t.Helper()
	var l TaskLease
	h.ok("assign next available", func(rev, now uint64) error {
		tr, err := h.p.AssignNextAvailable(rev, now, 60)
		l = tr.Value
		return err
	})
	return l
}

func (h *harness) startAndFail(l TaskLease) FailureOutcome {
	h.t.Helper()
	h.ok("start", func(rev, now uint64) error { _, err := h.p.StartTask(rev, now, l); return err })
	var out FailureOutcome
	h.ok("fail", func(rev, now uint64) error {
		tr, err := h.p.FailTask(rev, now, l)
		out = tr.Value
		return err
	})
	return out
}

func (h *harness) startAndComplete(l TaskLease) {
	h.t.Helper()
	h.ok("start", func(rev, now uint64) error { _, err := h.p.StartTask(rev, now, l); return err })
	h.ok("complete", func(rev, now uint64) error { _, err := h.p.CompleteTask(rev, now, l); return err })
}

func (h *harness) updateScan(u ScanUpdate) {
	h.t.Helper()
	h.ok("update scan", func(rev, now uint64) error { _, err := h.p.UpdateScan(rev, now, u); return err })
}

// roundTrip exports, restores and requires equal bytes, then continues the
// test on the restored pool.
func (h *harness) roundTrip() {
	h.t.Helper()
	b := h.export()
	p, err := RestoreWorkerPool(b)
	if err != nil {
		h.t.Fatalf("RestoreWorkerPool: %v", err)
	}
	if got, _ := p.ExportState(); !bytes.Equal(got, b) {
		h.t.Fatal("restored pool re-exports other bytes")
	}
	h.p = p
}

func TestTaskQueue_EnqueueNotBefore(t *testing.T) {
	h := newHarness(t, smallLimits())
	h.register("w1", 2)
	h.enqueueSched("later", "s", PriorityHigh, TaskScheduling{NotBeforeSecs: 1050})
	h.enqueueSched("now", "s", PriorityLow, TaskScheduling{})
	if !h.task("later").Scheduled(h.now) || h.task("now").Scheduled(h.now) {
		t.Fatal("Scheduled: want the delayed task only")
	}
	if next, _ := h.p.PeekNext(); next.TaskID() != "now" {
		t.Fatalf("PeekNext = %s, want the due low-priority task", next.TaskID())
	}
	if l := h.assignNext("w1"); l.TaskID() != "now" {
		t.Fatalf("leased %s, want now", l.TaskID())
	}
	h.now = 1049
	h.fail(KindNoQueuedTask, func(rev, now uint64) error { _, err := h.p.AssignNext(rev, now, "w1", 60); return err })
	e := h.fail(KindTaskNotLeasable, func(rev, now uint64) error { _, err := h.p.AssignTask(rev, now, "later", "w1", 60); return err })
	if e.Reason != "task is scheduled for later" {
		t.Fatalf("reason %q", e.Reason)
	}
	if h.p.WakeDue(1049) || !h.p.WakeDue(1050) {
		t.Fatal("WakeDue: want due from 1050 only")
	}
	// Logical time must pass the not-before time before the task is
	// leasable: the command at 1050 itself still sees logical time 1049.
	h.now = 1050
	h.fail(KindNoQueuedTask, func(rev, now uint64) error { _, err := h.p.AssignNextAvailable(rev, now, 60); return err })
	h.ok("advance", func(rev, now uint64) error {
		tr, err := h.p.AdvanceTime(rev, now)
		if err == nil && tr.Value != 1 {
			return fmt.Errorf("woke %d, want 1", tr.Value)
		}
		return err
	})
	if h.p.WakeDue(1050) || h.task("later").Scheduled(1050) {
		t.Fatal("the task is still scheduled after its time")
	}
	if l := h.assignNext("w1"); l.TaskID() != "later" {
		t.Fatalf("leased %s, want later", l.TaskID())
	}
}

func TestWorkerPool_BackoffFencesStaleLease(t *testing.T) {
	h := newHarness(t, smallLimits())
	h.ok("options", func(rev, now uint64) error {
		_, err := h.p.SetSchedulingOptions(rev, now, SchedulingOptions{BackoffBaseSecs: 10, BackoffCapSecs: 15})
		return err
	})
	h.register("w1", 1)
	h.enqueueSched("t1", "s", PriorityNormal, TaskScheduling{})
	l1 := h.assignNext("w1")
	if out := h.startAndFail(l1); out.Kind != Requeued || out.RetryCount != 1 {
		t.Fatalf("FailTask = %+v, want Requeued 1", out)
	}
	nb := h.task("t1").Scheduling().NotBeforeSecs
	if want := h.now + BackoffSecs(10, 15, 1, "t1", 1); nb != want || nb < h.now+5 || nb > h.now+10 {
		t.Fatalf("not-before %d, want %d in [now+5, now+10]", nb, want)
	}
	// The stale lease of the backed-off task is fenced, whatever the time.
	h.fail(KindStaleOwnership, func(rev, now uint64) error { _, err := h.p.StartTask(rev, now, l1); return err })
	h.fail(KindNoQueuedTask, func(rev, now uint64) error { _, err := h.p.AssignNext(rev, now, "w1", 60); return err })
	h.roundTrip()
	h.now = nb
	h.ok("advance", func(rev, now uint64) error { _, err := h.p.AdvanceTime(rev, now); return err })
	l2 := h.assignNext("w1")
	if l2.TaskGeneration() != 1 || l2.Attempt() != 2 {
		t.Fatalf("second lease %+v", l2)
	}
	h.startAndFail(l2)
	// Retry 2 wants 20 s but the cap is 15.
	d := h.task("t1").Scheduling().NotBeforeSecs - h.now
	if d < 8 || d > 15 {
		t.Fatalf("second backoff %d s, want within [8, 15]", d)
	}
	h.fail(KindStaleOwnership, func(rev, now uint64) error { _, err := h.p.FailTask(rev, now, l2); return err })
}

func TestWorkerPool_PerEnqueueBackoffOverridesPool(t *testing.T) {
	h := newHarness(t, smallLimits())
	h.register("w1", 1)
	h.enqueueSched("t1", "s", PriorityNormal, TaskScheduling{BackoffBaseSecs: 100})
	h.startAndFail(h.assignNext("w1"))
	if d := h.task("t1").Scheduling().NotBeforeSecs - h.now; d < 50 || d > 100 {
		t.Fatalf("backoff %d, want the task's own base (50–100)", d)
	}
	h.enqueueSched("t2", "s", PriorityNormal, TaskScheduling{})
	h.startAndFail(h.assignNext("w1"))
	if nb := h.task("t2").Scheduling().NotBeforeSecs; nb != 0 {
		t.Fatalf("a task without backoff got not-before %d", nb)
	}
}

func TestBackoffSecs_DeterministicAndBounded(t *testing.T) {
	for retry := uint32(1); retry <= MaxRetries; retry++ {
		d := BackoffSecs(3, 1000, retry, "task-1", retry)
		full := min(uint64(3)<<(retry-1), 1000)
		if d < full-full/2 || d > full || d != BackoffSecs(3, 1000, retry, "task-1", retry) {
			t.Fatalf("BackoffSecs(retry %d) = %d, want in [%d, %d] and stable", retry, d, full-full/2, full)
		}
	}
	if BackoffSecs(0, 0, 1, "t", 1) != 0 {
		t.Fatal("no base must mean no backoff")
	}
	if d := BackoffSecs(MaxBackoffSecs, 0, MaxRetries, "t", 40); d > MaxBackoffSecs {
		t.Fatalf("backoff %d above the ceiling", d)
	}
}

func TestWorkerPool_RequiredTagsRouteTasks(t *testing.T) {
	h := newHarness(t, smallLimits())
	h.registerTagged("big", 4, TagLinux)
	h.registerTagged("gpu1", 1, TagGPU, TagLinux)
	h.enqueueSched("g", "s", PriorityHigh, TaskScheduling{RequiredTags: []WorkerTag{TagGPU, TagLinux}})
	h.enqueueSched("p", "s", PriorityLow, TaskScheduling{})
	if got := h.task("g").Scheduling().RequiredTags; len(got) != 2 || got[0] != TagLinux {
		t.Fatalf("required tags %v, want sorted [linux gpu]", got)
	}
	e := h.fail(KindTaskNotLeasable, func(rev, now uint64) error { _, err := h.p.AssignTask(rev, now, "g", "big", 60); return err })
	if e.Reason != "worker lacks a required tag" {
		t.Fatalf("reason %q", e.Reason)
	}
	// The worker without the tag skips the GPU task and takes the next.
	if l := h.assignNext("big"); l.TaskID() != "p" {
		t.Fatalf("big leased %s, want p", l.TaskID())
	}
	h.fail(KindNoQueuedTask, func(rev, now uint64) error { _, err := h.p.AssignNext(rev, now, "big", 60); return err })
	// AssignNextAvailable gives it to the tagged worker although big has
	// more free slots.
	if l := h.assignAny(); l.TaskID() != "g" || l.WorkerID() != "gpu1" {
		t.Fatalf("AssignNextAvailable leased %s to %s", l.TaskID(), l.WorkerID())
	}
	h.enqueueSched("g2", "s", PriorityHigh, TaskScheduling{RequiredTags: []WorkerTag{TagGPU}})
	h.fail(KindNoAvailableWorker, func(rev, now uint64) error { _, err := h.p.AssignNextAvailable(rev, now, 60); return err })
	h.fail(KindInvalidTask, func(rev, now uint64) error {
		_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: "x", ScanID: "s", TargetRef: "x", Scheduling: TaskScheduling{RequiredTags: []WorkerTag{9}}})
		return err
	})
	h.roundTrip()
	h.fail(KindNoAvailableWorker, func(rev, now uint64) error { _, err := h.p.AssignNextAvailable(rev, now, 60); return err })
}

func TestWorkerPool_ScanMaxInFlight(t *testing.T) {
	h := newHarness(t, smallLimits())
	h.register("w1", 8)
	h.updateScan(ScanUpdate{ScanID: "s", SetMaxInFlight: true, MaxInFlight: 1})
	h.enqueueSched("a1", "s", PriorityHigh, TaskScheduling{})
	h.enqueueSched("a2", "s", PriorityHigh, TaskScheduling{})
	h.enqueueSched("b1", "other", PriorityLow, TaskScheduling{})
	l := h.assignNext("w1")
	if l.TaskID() != "a1" {
		t.Fatalf("leased %s", l.TaskID())
	}
	if l2 := h.assignNext("w1"); l2.TaskID() != "b1" {
		t.Fatalf("leased %s, want b1 (scan s is at its limit)", l2.TaskID())
	}
	e := h.fail(KindTaskNotLeasable, func(rev, now uint64) error { _, err := h.p.AssignTask(rev, now, "a2", "w1", 60); return err })
	if e.Reason != "scan is at its in-flight limit" {
		t.Fatalf("reason %q", e.Reason)
	}
	st, _ := h.p.ScanState("s")
	if st.InFlight != 1 || st.Active != 2 || st.Settings.MaxInFlight != 1 {
		t.Fatalf("ScanState = %+v", st)
	}
	if set, err := h.p.ScanSettings("s"); err != nil || set != (ScanSettings{MaxInFlight: 1}) {
		t.Fatalf("ScanSettings = %+v, %v", set, err)
	}
	if _, err := h.p.ScanSettings("bad id"); !errors.Is(err, ErrInvalidTask) {
		t.Fatalf("ScanSettings(invalid) = %v", err)
	}
	h.roundTrip()
	h.startAndComplete(l)
	if l3 := h.assignNext("w1"); l3.TaskID() != "a2" {
		t.Fatalf("leased %s, want a2 after a1 completed", l3.TaskID())
	}
}

func TestWorkerPool_PauseAndResumeScan(t *testing.T) {
	h := newHarness(t, smallLimits())
	h.register("w1", 8)
	h.enqueueSched("a1", "s", PriorityNormal, TaskScheduling{})
	h.enqueueSched("a2", "s", PriorityNormal, TaskScheduling{})
	running := h.assignNext("w1")
	h.ok("start", func(rev, now uint64) error { _, err := h.p.StartTask(rev, now, running); return err })
	fence, _ := h.task("a2").Ownership()
	h.updateScan(ScanUpdate{ScanID: "s", SetPaused: true, Paused: true})
	if h.task("a2").Status() != TaskQueued {
		t.Fatal("a paused scan's queued task must stay queued")
	}
	h.fail(KindNoQueuedTask, func(rev, now uint64) error { _, err := h.p.AssignNext(rev, now, "w1", 60); return err })
	if _, ok := h.p.PeekNext(); ok {
		t.Fatal("PeekNext offers a paused scan's task")
	}
	h.roundTrip()
	// The running task finishes; the queued task's fence is still valid.
	h.ok("complete", func(rev, now uint64) error { _, err := h.p.CompleteTask(rev, now, running); return err })
	h.updateScan(ScanUpdate{ScanID: "s", SetPaused: true, Paused: false})
	if own, _ := h.task("a2").Ownership(); own != fence {
		t.Fatal("pause and resume changed the queued task's fence")
	}
	if l := h.assignNext("w1"); l.TaskID() != "a2" {
		t.Fatalf("leased %s after resume", l.TaskID())
	}
	h.fail(KindInvalidTask, func(rev, now uint64) error { _, err := h.p.UpdateScan(rev, now, ScanUpdate{ScanID: "s"}); return err })
	h.fail(KindInvalidTask, func(rev, now uint64) error {
		_, err := h.p.UpdateScan(rev, now, ScanUpdate{ScanID: "bad id", SetPaused: true})
		return err
	})
	h.fail(KindRevisionConflict, func(rev, now uint64) error {
		_, err := h.p.UpdateScan(rev+1, now, ScanUpdate{ScanID: "s", SetPaused: true, Paused: true})
		return err
	})
}

func TestWorkerPool_UpdateScanCapacity(t *testing.T) {
	l := smallLimits()
	h := newHarness(t, l)
	for i := range l.MaxTaskRecords {
		h.updateScan(ScanUpdate{ScanID: fmt.Sprintf("s%d", i), SetPaused: true, Paused: true})
	}
	h.fail(KindScanCapacityReached, func(rev, now uint64) error {
		_, err := h.p.UpdateScan(rev, now, ScanUpdate{ScanID: "one-more", SetMaxInFlight: true, MaxInFlight: 2})
		return err
	})
	// Clearing a scan's settings frees its place.
	h.updateScan(ScanUpdate{ScanID: "s0", SetPaused: true, Paused: false})
	h.updateScan(ScanUpdate{ScanID: "one-more", SetMaxInFlight: true, MaxInFlight: 2})
	h.roundTrip()
}

// fairnessLeases runs a big scan (enqueued first) and a small one of the
// same priority through one worker of capacity 1 and returns how many
// leases it took until the small scan finished.
func fairnessLeases(t *testing.T, fair bool, big, small int) int {
	l := DefaultLimits()
	l.MaxTaskRecords, l.MaxActiveTasks, l.MaxQueuedTasks, l.MaxTerminalTasks = 16384, 16384, 16384, 16384
	p, err := NewWorkerPoolWithOptions(l, SchedulingOptions{FairScans: fair})
	if err != nil {
		t.Fatal(err)
	}
	now := uint64(1)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(p.RegisterWorker(p.Snapshot().Revision, now, WorkerSpec{WorkerID: "w", Capacity: 1}))
	enqueue := func(scan string, n int) {
		specs := make([]TaskSpec, n)
		for i := range specs {
			specs[i] = TaskSpec{TaskID: fmt.Sprintf("%s-%06d", scan, i), ScanID: scan, TargetRef: "x"}
		}
		must(p.EnqueueBatch(p.Snapshot().Revision, now, specs))
	}
	enqueue("big", big)
	enqueue("small", small)
	done := 0
	for leases := 1; ; leases++ {
		tr, err := p.AssignNext(p.Snapshot().Revision, now, "w", 60)
		if err != nil {
			t.Fatalf("lease %d: %v", leases, err)
		}
		must(p.StartTask(p.Snapshot().Revision, now, tr.Value))
		must(p.CompleteTask(p.Snapshot().Revision, now, tr.Value))
		if task, _, _ := p.GetTask(tr.Value.TaskID()); task.ScanID() == "small" {
			if done++; done == small {
				return leases
			}
		}
	}
}

func TestWorkerPool_FairScans(t *testing.T) {
	const big, small = 5000, 50
	fair := fairnessLeases(t, true, big, small)
	if fair > 2*small {
		t.Fatalf("with FairScans the small scan finished after %d leases, want ≤ %d", fair, 2*small)
	}
	unfair := fairnessLeases(t, false, big, small)
	if unfair != big+small {
		t.Fatalf("without FairScans the small scan finished after %d leases, want %d (queue order)", unfair, big+small)
	}
	t.Logf("small scan (%d tasks) after a %d-task scan: done after %d leases with FairScans, %d without", small, big, fair, unfair)
}

func TestWorkerPool_SchedulingOptionsValidation(t *testing.T) {
	h := newHarness(t, smallLimits())
	for _, tc := range []struct {
		o    SchedulingOptions
		kind ErrorKind
	}{
		{SchedulingOptions{BackoffBaseSecs: MaxBackoffSecs + 1}, KindTimeLimitExceedsMaximum},
		{SchedulingOptions{BackoffBaseSecs: 1, BackoffCapSecs: MaxBackoffSecs + 1}, KindTimeLimitExceedsMaximum},
		{SchedulingOptions{BackoffCapSecs: 5}, KindInvalidLimitRelationship},
		{SchedulingOptions{BackoffBaseSecs: 10, BackoffCapSecs: 5}, KindInvalidLimitRelationship},
	} {
		h.fail(tc.kind, func(rev, now uint64) error { _, err := h.p.SetSchedulingOptions(rev, now, tc.o); return err })
		if _, err := NewWorkerPoolWithOptions(smallLimits(), tc.o); !errors.Is(err, tc.kind.sentinelForTest()) {
			t.Fatalf("NewWorkerPoolWithOptions(%+v) = %v, want %v", tc.o, err, tc.kind)
		}
	}
	h.fail(KindInvalidTask, func(rev, now uint64) error {
		_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: "x", ScanID: "s", TargetRef: "x", Scheduling: TaskScheduling{BackoffCapSecs: 3}})
		return err
	})
}

// A pool that never used a scheduling feature exports version 2 bytes (as
// before scheduling); a pool that did exports version 3, and a version 3
// frame without any scheduling data is refused.
func TestWorkerPool_ExportVersionFollowsScheduling(t *testing.T) {
	h := newHarness(t, smallLimits())
	h.enqueueSched("t1", "s", PriorityNormal, TaskScheduling{})
	if v := h.export()[4]; v != poolVersion {
		t.Fatalf("version %d without scheduling", v)
	}
	h.enqueueSched("t2", "s", PriorityNormal, TaskScheduling{NotBeforeSecs: 5000})
	if v := h.export()[4]; v != poolVersionSched {
		t.Fatalf("version %d with scheduling", v)
	}
	h.roundTrip()
	h.ok("cancel", func(rev, now uint64) error { _, err := h.p.CancelTaskByID(rev, now, "t2"); return err })
	h.roundTrip()
	empty := newHarness(t, smallLimits())
	empty.p.c.ensureSched()
	if b := empty.export(); b[4] != poolVersion {
		t.Fatal("an unused scheduling index changed the export version")
	}
	l := smallLimits()
	e := newEncoder(poolMagic, poolVersionSched)
	for _, v := range []uint64{uint64(l.MaxTaskRecords), uint64(l.MaxActiveTasks), uint64(l.MaxQueuedTasks),
		uint64(l.MaxTerminalTasks), uint64(l.MaxWorkers), uint64(l.MaxRetries),
		l.MaxLeaseTTLSecs, l.MaxTaskTTLSecs, l.HeartbeatTimeoutSecs, 0, 0, 0, 0, 0} {
		e.uvarint(v)
	}
	SchedulingOptions{}.encode(e)
	e.uvarint(0) // tasks
	e.uvarint(0) // workers
	e.uvarint(0) // scans
	var ie *Error
	if _, err := RestoreWorkerPool(e.finish()); !errors.As(err, &ie) || ie.Kind != KindInvalidState || !strings.Contains(ie.Reason, "no scheduling data") {
		t.Fatalf("restore of a version 3 frame without scheduling data = %v", err)
	}
}

// TestWorkerPool_RerunIsANewRun: a re-run clears the not-before time (a
// task cancelled while scheduled is leasable at once after its re-run)
// and starts the backoff again from the first retry (contract Part F,
// RerunTasks); required tags stay.
func TestWorkerPool_RerunIsANewRun(t *testing.T) {
	l := smallLimits()
	l.MaxRetries = 1
	h := newHarness(t, l)
	h.ok("options", func(rev, now uint64) error {
		_, err := h.p.SetSchedulingOptions(rev, now, SchedulingOptions{BackoffBaseSecs: 10, BackoffCapSecs: 1000})
		return err
	})
	h.registerTagged("w1", 1, TagLinux)
	h.enqueueSched("later", "s", PriorityNormal, TaskScheduling{NotBeforeSecs: h.now + 500, RequiredTags: []WorkerTag{TagLinux}})
	h.ok("cancel", func(rev, now uint64) error { _, err := h.p.CancelTaskByID(rev, now, "later"); return err })
	h.rerun(RerunRequest{TaskIDs: []string{"later"}})
	if s := h.task("later").Scheduling(); h.task("later").Scheduled(h.now) || s.NotBeforeSecs != 0 || len(s.RequiredTags) != 1 {
		t.Fatalf("re-run of a task cancelled while scheduled: %+v; want due now, tags kept", s)
	}
	h.startAndComplete(h.assignNext("w1"))

	h.enqueueSched("b", "s", PriorityNormal, TaskScheduling{})
	h.startAndFail(h.assignNext("w1"))
	h.now = h.task("b").Scheduling().NotBeforeSecs
	h.ok("advance", func(rev, now uint64) error { _, err := h.p.AdvanceTime(rev, now); return err })
	if out := h.startAndFail(h.assignNext("w1")); out.Kind != RetryExhausted {
		t.Fatalf("second failure = %+v, want RetryExhausted", out)
	}
	h.rerun(RerunRequest{TaskIDs: []string{"b"}})
	if h.task("b").Scheduled(h.now) {
		t.Fatal("a re-run task is scheduled")
	}
	h.roundTrip()
	l3 := h.assignNext("w1")
	h.startAndFail(l3)
	want := h.now + BackoffSecs(10, 1000, 1, "b", l3.Attempt())
	if nb := h.task("b").Scheduling().NotBeforeSecs; nb != want {
		t.Fatalf("backoff after the re-run: not-before %d, want %d (the first retry's)", nb, want)
	}
}
