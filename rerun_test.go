package distributed

// Goal: RerunTasks (rerun.go) puts failed, expired and cancelled tasks back
// in the queue as a new generation with a fresh retry budget; every earlier
// proof of the task stays stale; it is idempotent and atomic; and the
// export keeps all of it. Method: the harness of helpers_test.go.

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func (h *harness) rerun(req RerunRequest) RerunOutcome {
	h.t.Helper()
	var out RerunOutcome
	h.ok("rerun", func(rev, now uint64) error {
		tr, err := h.p.RerunTasks(rev, now, req)
		out = tr.Value
		return err
	})
	return out
}

// terminalTasks makes one task of every terminal status: failed (by
// exhausted retries), expired, cancelled (by its lease), completed.
func terminalTasks(t *testing.T) (*harness, TaskLease, TaskLease) {
	l := DefaultLimits()
	l.MaxRetries = 0
	h := newHarness(t, l)
	h.register("w", 4)
	failed := h.running("failed", "w", 60)
	h.failWith(failed, "boom")
	h.enqueue("expired", 0)
	h.now += 10
	h.ok("expire", func(rev, now uint64) error { _, err := h.p.ExpireOldTasks(rev, now, 10); return err })
	cancelled := h.running("cancelled", "w", 60)
	h.ok("cancel", func(rev, now uint64) error {
		_, err := h.p.CancelTask(rev, now, OwnershipFromLease(cancelled))
		return err
	})
	done := h.running("done", "w", 60)
	h.ok("complete", func(rev, now uint64) error { _, err := h.p.CompleteTask(rev, now, done); return err })
	return h, failed, cancelled
}

func TestRerunTasks_RequeuesAsNewGeneration(t *testing.T) {
	h, _, _ := terminalTasks(t)
	h.now += 30
	before := h.task("failed")
	out := h.rerun(RerunRequest{TaskIDs: []string{"failed", "done", "expired", "cancelled"}})
	if strings.Join(out.Requeued, ",") != "failed,expired,cancelled" || out.Unchanged != 1 {
		t.Fatalf("outcome = %+v", out)
	}
	got := h.task("failed")
	if got.Status() != TaskQueued || got.TaskGeneration() != before.TaskGeneration()+1 || got.RetryCount() != 0 ||
		got.Reruns() != 1 || got.CreatedAt() != h.now || got.Attempt() != before.Attempt() || len(got.Attempts()) != 1 {
		t.Fatalf("re-run task = %v (attempts %v)", got, got.Attempts())
	}
	if _, ok := got.Ownership(); !ok {
		t.Fatal("re-run task has no queued fence")
	}
	if h.task("done").Status() != TaskCompleted {
		t.Fatal("a completed task was re-run")
	}
	if s := h.p.Snapshot(); s.QueuedTasks != 3 || s.TerminalTasks != 1 || s.ActiveTasks != 3 {
		t.Fatalf("snapshot = %+v", s)
	}
	// Queue order: the fresh ordinals follow the request order.
	if next, _ := h.p.PeekNext(); next.TaskID() != "failed" {
		t.Fatalf("PeekNext = %s", next.TaskID())
	}
	// The re-run task runs again and has a fresh retry budget: with
	// MaxRetries 0 one failure exhausts it again.
	l := h.assign("failed", "w", 60)
	h.start(l)
	if l.TaskGeneration() != got.TaskGeneration() || l.Attempt() != before.Attempt()+1 {
		t.Fatalf("new lease = %v", l)
	}
	if o := h.failWith(l, "again"); o.Kind != RetryExhausted {
		t.Fatalf("outcome = %+v", o)
	}
	if as := h.task("failed").Attempts(); len(as) != 2 || as[1].TaskGeneration() != 1 {
		t.Fatalf("history = %v", as)
	}
}

func TestRerunTasks_RetryBudgetIsFresh(t *testing.T) {
	l := DefaultLimits()
	l.MaxRetries = 2
	h := newHarness(t, l)
	h.register("w", 1)
	h.enqueue("t", 0)
	for range 3 {
		lease := h.assign("t", "w", 60)
		h.start(lease)
		h.failWith(lease, "x")
	}
	if h.task("t").Status() != TaskFailed {
		t.Fatal("setup: task not failed")
	}
	h.rerun(RerunRequest{TaskIDs: []string{"t"}})
	lease := h.assign("t", "w", 60)
	h.start(lease)
	if o := h.failWith(lease, "x"); o.Kind != Requeued || o.RetryCount != 1 || o.TaskGeneration != 4 {
		t.Fatalf("first failure after a re-run = %+v, want Requeued retry 1 generation 4", o)
	}
}

// Fencing: every proof of an earlier generation is stale after a re-run.
func TestRerunTasks_OldProofsStayStale(t *testing.T) {
	h, failed, cancelled := terminalTasks(t)
	expiredFence := OwnershipFromFence(QueuedTaskFence{taskID: "expired", taskGeneration: 0, recordVersion: 1})
	h.rerun(RerunRequest{TaskIDs: []string{"failed", "cancelled", "expired"}})
	for name, l := range map[string]TaskLease{"failed": failed, "cancelled": cancelled} {
		for op, f := range map[string]func(rev, now uint64) error{
			"start":    func(rev, now uint64) error { _, err := h.p.StartTask(rev, now, l); return err },
			"complete": func(rev, now uint64) error { _, err := h.p.CompleteTask(rev, now, l); return err },
			"fail":     func(rev, now uint64) error { _, err := h.p.FailTask(rev, now, l); return err },
			"renew":    func(rev, now uint64) error { _, err := h.p.RenewLease(rev, now, l, 10); return err },
			"cancel":   func(rev, now uint64) error { _, err := h.p.CancelTask(rev, now, OwnershipFromLease(l)); return err },
		} {
			t.Run(name+"/"+op, func(t *testing.T) {
				h.t = t
				h.fail(KindStaleOwnership, f)
			})
		}
	}
	h.t = t
	h.fail(KindStaleOwnership, func(rev, now uint64) error { _, err := h.p.CancelTask(rev, now, expiredFence); return err })
	// The new generation's lease works; the old one still does not.
	h.register("w2", 1)
	nl := h.assign("cancelled", "w2", 60)
	h.start(nl)
	h.fail(KindStaleOwnership, func(rev, now uint64) error { _, err := h.p.CompleteTask(rev, now, cancelled); return err })
	h.ok("complete new", func(rev, now uint64) error {
		tr, err := h.p.CompleteTask(rev, now, nl)
		if err == nil && tr.Value.Receipt.TaskGeneration() != nl.TaskGeneration() {
			t.Fatalf("receipt generation = %d", tr.Value.Receipt.TaskGeneration())
		}
		return err
	})
}

func TestRerunTasks_IdempotentAndSelective(t *testing.T) {
	h, _, _ := terminalTasks(t)
	out := h.rerun(RerunRequest{TaskIDs: []string{"failed", "expired"}, Statuses: []TaskStatus{TaskExpired}})
	if strings.Join(out.Requeued, ",") != "expired" || out.Unchanged != 1 {
		t.Fatalf("outcome = %+v", out)
	}
	// A repeated request changes no task (it is still one command).
	before := h.task("expired")
	out = h.rerun(RerunRequest{TaskIDs: []string{"expired"}, Statuses: []TaskStatus{TaskExpired}})
	if len(out.Requeued) != 0 || out.Unchanged != 1 {
		t.Fatalf("second outcome = %+v", out)
	}
	if after := h.task("expired"); after.RecordVersion() != before.RecordVersion() || after.Reruns() != 1 {
		t.Fatalf("re-running a queued task changed it: %v -> %v", before, after)
	}
}

func TestRerunTasks_ErrorsChangeNothing(t *testing.T) {
	h, _, _ := terminalTasks(t)
	cases := []struct {
		name string
		req  RerunRequest
		kind ErrorKind
	}{
		{"no tasks", RerunRequest{}, KindInvalidTask},
		{"invalid id", RerunRequest{TaskIDs: []string{"bad id"}}, KindInvalidTask},
		{"repeated id", RerunRequest{TaskIDs: []string{"failed", "failed"}}, KindInvalidTask},
		{"completed status", RerunRequest{TaskIDs: []string{"done"}, Statuses: []TaskStatus{TaskCompleted}}, KindInvalidTask},
		{"queued status", RerunRequest{TaskIDs: []string{"done"}, Statuses: []TaskStatus{TaskQueued}}, KindInvalidTask},
		{"unknown task", RerunRequest{TaskIDs: []string{"failed", "nope"}}, KindTaskNotFound},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			h.t = t
			h.fail(tt.kind, func(rev, now uint64) error { _, err := h.p.RerunTasks(rev, now, tt.req); return err })
		})
	}
	h.t = t
	h.failAt(h.rev()+1, h.now, KindRevisionConflict, func(rev, now uint64) error {
		_, err := h.p.RerunTasks(rev, now, RerunRequest{TaskIDs: []string{"failed"}})
		return err
	})
	h.failAt(h.rev(), h.now-1, KindLogicalTimeRegression, func(rev, now uint64) error {
		_, err := h.p.RerunTasks(rev, now, RerunRequest{TaskIDs: []string{"failed"}})
		return err
	})
	big := RerunRequest{TaskIDs: make([]string, MaxTaskRecords+1)}
	if _, err := h.p.RerunTasks(h.rev(), h.now, big); !errors.Is(err, ErrInvalidTask) {
		t.Fatalf("too many IDs: %v", err)
	}
}

func TestRerunTasks_CapacityIsAtomic(t *testing.T) {
	l := smallLimits() // 8 records, 8 terminal
	l.MaxActiveTasks, l.MaxQueuedTasks, l.MaxRetries = 6, 4, 0
	h := newHarness(t, l)
	h.register("w", 4)
	var ids []string
	for _, id := range []string{"a", "b", "c"} {
		lease := h.running(id, "w", 60)
		h.failWith(lease, "x")
		ids = append(ids, id)
	}
	h.enqueue("q1", 0)
	h.enqueue("q2", 0)
	// 2 queued + 3 re-runs > 4 queued: nothing is re-run.
	h.fail(KindQueuedTaskCapacityReached, func(rev, now uint64) error {
		_, err := h.p.RerunTasks(rev, now, RerunRequest{TaskIDs: ids})
		return err
	})
	h.rerun(RerunRequest{TaskIDs: ids[:2]})
	for range 2 {
		h.ok("lease", func(rev, now uint64) error { _, err := h.p.AssignNextAvailable(rev, now, 60); return err })
	}
	h.enqueue("q3", 0)
	h.enqueue("q4", 0)
	// 6 active already: one more re-run exceeds MaxActiveTasks.
	h.fail(KindActiveTaskCapacityReached, func(rev, now uint64) error {
		_, err := h.p.RerunTasks(rev, now, RerunRequest{TaskIDs: ids[2:]})
		return err
	})
}

// The age restarts: a task re-run after it expired is not expired again by
// the next ExpireOldTasks with the same TTL.
func TestRerunTasks_AgeRestarts(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.enqueue("t", 0)
	h.now += 100
	h.ok("expire", func(rev, now uint64) error { _, err := h.p.ExpireOldTasks(rev, now, 100); return err })
	h.now += 5
	h.rerun(RerunRequest{TaskIDs: []string{"t"}})
	h.ok("expire again", func(rev, now uint64) error {
		tr, err := h.p.ExpireOldTasks(rev, now, 100)
		if err == nil && tr.Value != 0 {
			t.Fatalf("expired %d tasks", tr.Value)
		}
		return err
	})
}

func TestExport_AttemptsAndRerunsRoundTrip(t *testing.T) {
	h, _, _ := terminalTasks(t)
	h.enqueueTimeout("timed", 77)
	h.rerun(RerunRequest{TaskIDs: []string{"failed", "cancelled"}})
	state := h.export()
	q, err := RestoreWorkerPool(state)
	if err != nil {
		t.Fatalf("RestoreWorkerPool: %v", err)
	}
	if re, _ := q.ExportState(); !bytes.Equal(re, state) {
		t.Fatal("re-export differs")
	}
	for _, id := range []string{"failed", "cancelled", "done", "timed"} {
		a, b := h.task(id), mustTask(t, q, id)
		if a.String() != b.String() || a.Reruns() != b.Reruns() || a.AttemptTimeoutSecs() != b.AttemptTimeoutSecs() ||
			len(a.Attempts()) != len(b.Attempts()) {
			t.Fatalf("task %s restored as %v, was %v", id, b, a)
		}
		for i := range a.Attempts() {
			if a.Attempts()[i] != b.Attempts()[i] {
				t.Fatalf("task %s record %d restored as %v, was %v", id, i, b.Attempts()[i], a.Attempts()[i])
			}
		}
	}
}

func mustTask(t *testing.T, p *WorkerPool, id string) ScanTask {
	t.Helper()
	task, ok, err := p.GetTask(id)
	if err != nil || !ok {
		t.Fatalf("GetTask(%q) = %v, %v", id, ok, err)
	}
	return task
}

// A state written before the extensions existed (no section after the
// workers) restores and re-exports to the same bytes.
func TestExport_LegacyStateWithoutExtensions(t *testing.T) {
	h := busyPool(t)
	for _, task := range h.p.c.tasks {
		task.history, task.lastAttemptImplicit = nil, false
	}
	legacy := h.export()
	q, err := RestoreWorkerPool(legacy)
	if err != nil {
		t.Fatalf("legacy state rejected: %v", err)
	}
	if re, _ := q.ExportState(); !bytes.Equal(re, legacy) {
		t.Fatal("legacy state re-exports differently")
	}
}

func TestExport_RejectsHostileExtensions(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.enqueue("a", 0)
	h.enqueue("b", 0)
	plain := h.export()
	body := plain[len(poolMagic)+1 : len(plain)-4]
	ext := func(parts ...[]byte) []byte {
		e := &encoder{}
		return append(bytes.Clone(body), append(e.buf, bytes.Join(parts, nil)...)...)
	}
	enc := func(f func(e *encoder)) []byte { e := &encoder{}; f(e); return e.buf }
	entry := func(id string, timeout uint64) []byte {
		return enc(func(e *encoder) { e.str(id); e.uvarint(timeout); e.uvarint(0); e.uvarint(0) })
	}
	// rerunEntry claims re-runs with the given re-run and life bases.
	rerunEntry := func(id string, reruns, rerunBase, lifeBase uint64) []byte {
		return enc(func(e *encoder) {
			e.str(id)
			e.uvarint(0)
			e.uvarint(reruns)
			e.uvarint(rerunBase)
			e.uvarint(lifeBase)
			e.uvarint(0)
		})
	}
	good := framePool(poolMagic, ext(enc(func(e *encoder) { e.uvarint(1) }), entry("a", 5)))
	if p, err := RestoreWorkerPool(good); err != nil || mustTask(t, p, "a").AttemptTimeoutSecs() != 5 {
		t.Fatalf("well-formed extension rejected: %v", err)
	}
	for name, b := range map[string][]byte{
		"zero count":            ext(enc(func(e *encoder) { e.uvarint(0) })),
		"empty entry":           ext(enc(func(e *encoder) { e.uvarint(1) }), entry("a", 0)),
		"unknown task":          ext(enc(func(e *encoder) { e.uvarint(1) }), entry("zz", 5)),
		"out of order":          ext(enc(func(e *encoder) { e.uvarint(2) }), entry("b", 5), entry("a", 5)),
		"repeated":              ext(enc(func(e *encoder) { e.uvarint(2) }), entry("a", 5), entry("a", 6)),
		"count too high":        ext(enc(func(e *encoder) { e.uvarint(3) }), entry("a", 5)),
		"timeout above ceiling": ext(enc(func(e *encoder) { e.uvarint(1) }), entry("a", MaxTaskTTLSecs+1)),
		// a queued task at generation 0 cannot have been re-run
		"re-run without generation": ext(enc(func(e *encoder) { e.uvarint(1) }), rerunEntry("a", 1, 1, 0)),
		"re-run base at life base":  ext(enc(func(e *encoder) { e.uvarint(1) }), rerunEntry("a", 1, 0, 0)),
		"forged history": ext(enc(func(e *encoder) { e.uvarint(1) }), enc(func(e *encoder) {
			e.str("a")
			e.uvarint(0)
			e.uvarint(0)
			e.uvarint(1)
			encodeAttempt(e, AttemptRecord{attempt: 1, workerID: "w", leaseID: 1, outcome: AttemptFailed})
		})),
	} {
		if _, err := RestoreWorkerPool(framePool(poolMagic, b)); !errors.Is(err, ErrInvalidState) {
			t.Fatalf("%s: RestoreWorkerPool = %v, want ErrInvalidState", name, err)
		}
	}
}
