package distributed

// Goal: purge (purge.go) and re-runs (rerun.go) compose: a re-run task
// leaves the finish index until it ends again and is then purgeable; a
// purge takes the attempt history with the record; a purged ID enqueued
// again starts with no history, no re-runs and the new spec's timeout; a
// proof of a purged life is ErrTaskPurged while a proof of the current
// life from before its re-run stays ErrStaleOwnership (the life's base is
// kept across re-runs, I5 and I11); RerunTasks naming a purged ID is
// ErrTaskNotFound; and all of it survives export/restore. Method: the
// error-atomic harness of helpers_test.go.

import (
	"bytes"
	"slices"
	"testing"
)

// failedTask runs id once and fails it with reason (MaxRetries 0: the task
// ends failed) and returns the lease.
func (h *harness) failedTask(id, reason string) TaskLease {
	h.t.Helper()
	l := h.running(id, "w", 60)
	if out := h.failWith(l, reason); out.Kind != RetryExhausted {
		h.t.Fatalf("fail %s: outcome %+v, want RetryExhausted", id, out)
	}
	return l
}

// lease assigns and starts the queued task id on worker w.
func (h *harness) lease(id string) TaskLease {
	h.t.Helper()
	l := h.assign(id, "w", 60)
	h.start(l)
	return l
}

func TestPurge_RerunTaskPurgeableAfterItEndsAgain(t *testing.T) {
	h := newHarness(t, noRetryLimits())
	h.register("w", 4)
	first := h.failedTask("t", "first")
	h.now += 10
	h.rerun(RerunRequest{TaskIDs: []string{"t"}})
	if _, ok := h.task("t").FinishedAt(); ok {
		t.Fatal("a re-run task still has a finish time")
	}
	// Queued again: neither a time filter nor a named purge takes it.
	if got := h.purge(PurgeFilter{FinishedBefore: h.now + 1}); len(got) != 0 {
		t.Fatalf("time purge took the re-run task: %v", got)
	}
	e := h.fail(KindInvalidTransition, func(rev, now uint64) error {
		_, err := h.p.PurgeTasks(rev, now, PurgeFilter{TaskIDs: []string{"t"}})
		return err
	})
	if e.TaskID != "t" || e.Status != TaskQueued {
		t.Fatalf("details %+v", e)
	}
	h.now += 10
	second := h.lease("t")
	h.now += 5
	h.failWith(second, "second")
	if fin, ok := h.task("t").FinishedAt(); !ok || fin != h.now {
		t.Fatalf("FinishedAt = %d, %v; want %d", fin, ok, h.now)
	}
	if n := len(h.task("t").Attempts()); n != 2 {
		t.Fatalf("history has %d records before the purge, want 2", n)
	}
	// Only tasks that finished strictly before the bound go: not yet t.
	if got := h.purge(PurgeFilter{FinishedBefore: h.now}); len(got) != 0 {
		t.Fatalf("purged %v before the task's new finish time", got)
	}
	if got := h.purge(PurgeFilter{FinishedBefore: h.now + 1}); !slices.Equal(got, []string{"t"}) {
		t.Fatalf("purged %v, want [t]", got)
	}
	if _, found, _ := h.p.GetTask("t"); found {
		t.Fatal("purged task still found")
	}
	// The purged life's proofs are TaskPurged, from after and before the
	// re-run.
	for _, l := range []TaskLease{second, first} {
		h.fail(KindTaskPurged, func(rev, now uint64) error { _, err := h.p.FailTask(rev, now, l); return err })
	}
}

func TestPurge_ReenqueuedIDStartsWithEmptyHistory(t *testing.T) {
	h := newHarness(t, noRetryLimits())
	h.register("w", 4)
	h.enqueueTimeout("t", 30)
	first := h.assign("t", "w", 60)
	h.start(first)
	h.failWith(first, "boom")
	h.rerun(RerunRequest{TaskIDs: []string{"t"}})
	again := h.lease("t")
	h.failWith(again, "boom again")
	old := h.task("t")
	if len(old.Attempts()) != 2 || old.Reruns() != 1 || old.AttemptTimeoutSecs() != 30 {
		t.Fatalf("setup: %v attempts %d reruns %d timeout %d", old, len(old.Attempts()), old.Reruns(), old.AttemptTimeoutSecs())
	}
	h.purge(PurgeFilter{TaskIDs: []string{"t"}})
	floor := h.p.c.generationFloor
	if floor != old.TaskGeneration()+1 {
		t.Fatalf("floor %d, want %d", floor, old.TaskGeneration()+1)
	}
	fresh := h.enqueue("t", PriorityNormal)
	if len(fresh.Attempts()) != 0 || fresh.Reruns() != 0 || fresh.AttemptTimeoutSecs() != 0 || fresh.Attempt() != 0 {
		t.Fatalf("re-enqueued task keeps its purged life: %v attempts %v reruns %d timeout %d",
			fresh, fresh.Attempts(), fresh.Reruns(), fresh.AttemptTimeoutSecs())
	}
	if _, ok := fresh.LastFailureReason(); ok {
		t.Fatal("re-enqueued task reports the purged life's failure reason")
	}
	if fresh.TaskGeneration() != floor {
		t.Fatalf("new life at generation %d, want the floor %d", fresh.TaskGeneration(), floor)
	}
	// Its first attempt is the first record of the new history.
	l := h.lease("t")
	h.failWith(l, "new life")
	as := h.task("t").Attempts()
	if len(as) != 1 || as[0].Attempt() != 1 || as[0].TaskGeneration() != floor || as[0].Reason() != "new life" {
		t.Fatalf("new life's history %v", as)
	}
}

// TestPurge_RerunKeepsLifeBase: after purge, re-enqueue and a re-run, a
// proof of the purged life is TaskPurged but a proof of the current life
// from before the re-run is StaleOwnership; the same after restore.
func TestPurge_RerunKeepsLifeBase(t *testing.T) {
	h := newHarness(t, noRetryLimits())
	h.register("w", 4)
	purged := h.failedTask("t", "old life")
	h.purge(PurgeFilter{TaskIDs: []string{"t"}})
	h.enqueue("t", PriorityNormal)
	before := h.lease("t")
	h.failWith(before, "before the re-run")
	h.rerun(RerunRequest{TaskIDs: []string{"t"}})
	if g := h.task("t").TaskGeneration(); g != before.TaskGeneration()+1 {
		t.Fatalf("re-run generation %d, want %d", g, before.TaskGeneration()+1)
	}
	check := func(p *WorkerPool, when string) {
		t.Helper()
		h.p = p
		start := func(l TaskLease) func(rev, now uint64) error {
			return func(rev, now uint64) error { _, err := h.p.StartTask(rev, now, l); return err }
		}
		if e := h.fail(KindTaskPurged, start(purged)); e.TaskID != "t" {
			t.Fatalf("%s: details %+v", when, e)
		}
		h.fail(KindStaleOwnership, start(before))
	}
	check(h.p, "live")
	state := h.export()
	q, err := RestoreWorkerPool(state)
	if err != nil {
		t.Fatalf("RestoreWorkerPool: %v", err)
	}
	if re, _ := q.ExportState(); !bytes.Equal(re, state) {
		t.Fatal("re-export differs")
	}
	check(q, "restored")
	// The restored pool goes on: the re-run life ends and is purged.
	l := h.lease("t")
	h.failWith(l, "after restore")
	if got := h.purge(PurgeFilter{}); !slices.Equal(got, []string{"t"}) {
		t.Fatalf("purged %v", got)
	}
	h.fail(KindTaskPurged, func(rev, now uint64) error { _, err := h.p.StartTask(rev, now, l); return err })
}

func TestRerunTasks_PurgedTaskIsNotFound(t *testing.T) {
	h := newHarness(t, noRetryLimits())
	h.register("w", 4)
	h.failedTask("a", "x")
	h.failedTask("b", "y")
	h.purge(PurgeFilter{TaskIDs: []string{"a"}})
	e := h.fail(KindTaskNotFound, func(rev, now uint64) error {
		_, err := h.p.RerunTasks(rev, now, RerunRequest{TaskIDs: []string{"b", "a"}})
		return err
	})
	if e.TaskID != "a" {
		t.Fatalf("details %+v", e)
	}
	if out := h.rerun(RerunRequest{TaskIDs: []string{"b"}}); !slices.Equal(out.Requeued, []string{"b"}) {
		t.Fatalf("outcome %+v", out)
	}
}
