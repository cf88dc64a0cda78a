package distributed

// Goal: failure reasons, the attempt history and the per-attempt timeout
// (attempts.go) do what docs/contract.md Part F says, every failure of
// theirs changes nothing, and every way an attempt ends leaves one history
// record. Method: the harness of helpers_test.go (byte-identical exported
// state around each failure, full audit after each success).

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func (h *harness) failWith(l TaskLease, reason string) FailureOutcome {
	h.t.Helper()
	var out FailureOutcome
	h.ok("fail "+l.TaskID(), func(rev, now uint64) error {
		tr, err := h.p.FailTaskWithReason(rev, now, l, reason)
		out = tr.Value
		return err
	})
	return out
}

func (h *harness) lastAttempt(id string) AttemptRecord {
	h.t.Helper()
	as := h.task(id).Attempts()
	if len(as) == 0 {
		h.t.Fatalf("task %s has no attempt history", id)
	}
	return as[len(as)-1]
}

func TestFailTaskWithReason_RetainsReason(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 2)
	l := h.running("t", "w", 60)
	h.now += 5
	reason := "exit status 3; stderr: " + strings.Repeat("é", 200)
	if out := h.failWith(l, reason); out.Kind != Requeued {
		t.Fatalf("outcome = %+v, want Requeued", out)
	}
	a := h.lastAttempt("t")
	if a.Outcome() != AttemptFailed || a.Reason() != reason || a.Attempt() != 1 || a.WorkerID() != "w" ||
		a.LeaseID() != l.LeaseID() || a.AcquiredAt() != l.AcquiredAt() || a.EndedAt() != h.now || a.TaskGeneration() != 0 {
		t.Fatalf("attempt record = %v (reason %q)", a, a.Reason())
	}
	if s, ok := a.StartedAt(); !ok || s != l.AcquiredAt() {
		t.Fatalf("StartedAt = %d, %v", s, ok)
	}
	if r, ok := h.task("t").LastFailureReason(); !ok || r != reason {
		t.Fatalf("LastFailureReason = %q, %v", r, ok)
	}
	// A reason of exactly the bound is accepted.
	l2 := h.assign("t", "w", 60)
	h.start(l2)
	h.failWith(l2, strings.Repeat("x", MaxFailureReasonBytes))
	if got := len(h.lastAttempt("t").Reason()); got != MaxFailureReasonBytes {
		t.Fatalf("retained %d reason bytes", got)
	}
}

func TestFailTaskWithReason_RejectsBadReasonsAndChangesNothing(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 1)
	l := h.running("t", "w", 60)
	e := h.fail(KindFailureReasonTooLong, func(rev, now uint64) error {
		_, err := h.p.FailTaskWithReason(rev, now, l, strings.Repeat("x", MaxFailureReasonBytes+1))
		return err
	})
	if e.Actual != MaxFailureReasonBytes+1 || e.Limit != MaxFailureReasonBytes {
		t.Fatalf("error details = %+v", e)
	}
	e = h.fail(KindInvalidTask, func(rev, now uint64) error {
		_, err := h.p.FailTaskWithReason(rev, now, l, "bad \xff byte")
		return err
	})
	if strings.Contains(e.Error(), "bad") {
		t.Fatalf("error echoes the reason: %v", e)
	}
	// Reason validation comes first (contract A.6 check 1), then the revision.
	h.failAt(h.rev()+1, h.now, KindFailureReasonTooLong, func(rev, now uint64) error {
		_, err := h.p.FailTaskWithReason(rev, now, l, strings.Repeat("x", MaxFailureReasonBytes+1))
		return err
	})
	h.failAt(h.rev()+1, h.now, KindRevisionConflict, func(rev, now uint64) error {
		_, err := h.p.FailTaskWithReason(rev, now, l, "ok")
		return err
	})
	if !errors.Is(ValidateFailureReason(strings.Repeat("x", MaxFailureReasonBytes+1)), ErrFailureReasonTooLong) || ValidateFailureReason("fine") != nil {
		t.Fatal("ValidateFailureReason disagrees with FailTaskWithReason")
	}
}

func TestFailTaskWithReason_ExhaustedReplay(t *testing.T) {
	l := DefaultLimits()
	l.MaxRetries = 0
	h := newHarness(t, l)
	h.register("w", 1)
	lease := h.running("t", "w", 60)
	if out := h.failWith(lease, "first"); out.Kind != RetryExhausted {
		t.Fatalf("outcome = %+v", out)
	}
	// A replay with another reason (or none) is the same exact replay.
	for _, r := range []string{"second", ""} {
		h.replay(func(rev, now uint64) (uint64, error) {
			tr, err := h.p.FailTaskWithReason(rev, now, lease, r)
			return tr.Revision, err
		})
	}
	if got := h.lastAttempt("t").Reason(); got != "first" || len(h.task("t").Attempts()) != 1 {
		t.Fatalf("history after replays: %v", h.task("t").Attempts())
	}
}

// Every way an attempt ends leaves exactly one record with its outcome.
func TestAttemptHistory_EveryEnding(t *testing.T) {
	cases := []struct {
		name string
		end  func(h *harness, l TaskLease)
		want AttemptOutcome
	}{
		{"complete", func(h *harness, l TaskLease) {
			h.ok("complete", func(rev, now uint64) error { _, err := h.p.CompleteTask(rev, now, l); return err })
		}, AttemptCompleted},
		{"fail", func(h *harness, l TaskLease) {
			h.ok("fail", func(rev, now uint64) error { _, err := h.p.FailTask(rev, now, l); return err })
		}, AttemptFailed},
		{"lease expiry", func(h *harness, l TaskLease) {
			h.now = l.ExpiresAt()
			h.ok("recover", func(rev, now uint64) error { _, err := h.p.RecoverExpiredLeases(rev, now); return err })
		}, AttemptLeaseExpired},
		{"deregister", func(h *harness, l TaskLease) {
			h.ok("deregister", func(rev, now uint64) error { _, err := h.p.DeregisterWorker(rev, now, "w", 1); return err })
		}, AttemptWorkerLost},
		{"prune", func(h *harness, l TaskLease) {
			h.now += h.p.Limits().HeartbeatTimeoutSecs
			h.ok("prune", func(rev, now uint64) error { _, err := h.p.PruneDeadWorkers(rev, now); return err })
		}, AttemptWorkerLost},
		{"cancel by lease", func(h *harness, l TaskLease) {
			h.ok("cancel", func(rev, now uint64) error { _, err := h.p.CancelTask(rev, now, OwnershipFromLease(l)); return err })
		}, AttemptCancelled},
		{"cancel by id", func(h *harness, l TaskLease) {
			h.ok("cancel", func(rev, now uint64) error { _, err := h.p.CancelTaskByID(rev, now, "t"); return err })
		}, AttemptCancelled},
		{"expire old", func(h *harness, l TaskLease) {
			h.ok("expire", func(rev, now uint64) error { _, err := h.p.ExpireOldTasks(rev, now, 1); return err })
		}, AttemptTaskExpired},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, DefaultLimits())
			h.register("w", 1)
			l := h.running("t", "w", 30)
			if n := len(h.task("t").Attempts()); n != 0 {
				t.Fatalf("running attempt already in the history (%d records)", n)
			}
			h.now += 2
			tt.end(h, l)
			as := h.task("t").Attempts()
			if len(as) != 1 || as[0].Outcome() != tt.want || as[0].LeaseID() != l.LeaseID() || as[0].EndedAt() != h.now || as[0].Reason() != "" {
				t.Fatalf("history = %v, want one %v record of lease %d ended at %d", as, tt.want, l.LeaseID(), h.now)
			}
		})
	}
}

// Queued tasks that are cancelled or expired end no attempt.
func TestAttemptHistory_NoAttemptNoRecord(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.enqueue("a", 0)
	h.enqueue("b", 0)
	h.ok("cancel", func(rev, now uint64) error { _, err := h.p.CancelTaskByID(rev, now, "a"); return err })
	h.now += 5
	h.ok("expire", func(rev, now uint64) error { _, err := h.p.ExpireOldTasks(rev, now, 1); return err })
	for _, id := range []string{"a", "b"} {
		if n := len(h.task(id).Attempts()); n != 0 {
			t.Fatalf("task %s has %d records", id, n)
		}
	}
}

func TestAttemptHistory_BoundedOldestDropped(t *testing.T) {
	lim := DefaultLimits()
	lim.MaxRetries = 20
	h := newHarness(t, lim)
	h.register("w", 1)
	h.enqueue("t", 0)
	const attempts = MaxAttemptHistory + 4
	for i := 1; i <= attempts; i++ {
		l := h.assign("t", "w", 60)
		h.start(l)
		h.now++
		h.failWith(l, fmt.Sprintf("attempt %d", i))
	}
	as := h.task("t").Attempts()
	if len(as) != MaxAttemptHistory {
		t.Fatalf("%d records, want %d", len(as), MaxAttemptHistory)
	}
	for i, a := range as {
		want := uint32(attempts - MaxAttemptHistory + 1 + i)
		if a.Attempt() != want || a.Reason() != fmt.Sprintf("attempt %d", want) || a.TaskGeneration() != uint64(want-1) {
			t.Fatalf("record %d = %v (reason %q), want attempt %d", i, a, a.Reason(), want)
		}
	}
	// Attempts returns a copy.
	as[0] = AttemptRecord{}
	if h.task("t").Attempts()[0].Attempt() == 0 {
		t.Fatal("Attempts aliases the record")
	}
	// A completing attempt on a full history drops the oldest record too.
	l := h.assign("t", "w", 60)
	h.start(l)
	h.complete(l)
	as = h.task("t").Attempts()
	if len(as) != MaxAttemptHistory || as[0].Attempt() != attempts-MaxAttemptHistory+2 {
		t.Fatalf("after completion: %d records from attempt %d, want %d from %d", len(as), as[0].Attempt(), MaxAttemptHistory, attempts-MaxAttemptHistory+2)
	}
	if last := as[len(as)-1]; last.Attempt() != attempts+1 || last.Outcome() != AttemptCompleted {
		t.Fatalf("last record = %v, want the completed attempt %d", last, attempts+1)
	}
}

func TestEnqueue_AttemptTimeoutValidation(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.fail(KindInvalidTask, func(rev, now uint64) error {
		_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: "t", ScanID: "s", TargetRef: "x", AttemptTimeoutSecs: MaxTaskTTLSecs + 1})
		return err
	})
	h.ok("enqueue at the ceiling", func(rev, now uint64) error {
		tr, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: "t", ScanID: "s", TargetRef: "x", AttemptTimeoutSecs: MaxTaskTTLSecs})
		if err == nil && tr.Value.AttemptTimeoutSecs() != MaxTaskTTLSecs {
			t.Fatalf("AttemptTimeoutSecs = %d", tr.Value.AttemptTimeoutSecs())
		}
		return err
	})
}

func (h *harness) enqueueTimeout(id string, timeout uint64) {
	h.t.Helper()
	h.ok("enqueue "+id, func(rev, now uint64) error {
		_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: id, ScanID: "scan", TargetRef: "x", AttemptTimeoutSecs: timeout})
		return err
	})
}

func TestRenewLease_RefusedAtAttemptTimeout(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 1)
	h.enqueueTimeout("t", 100)
	l := h.assign("t", "w", 60)
	h.start(l)
	deadline := l.AcquiredAt() + 100
	for _, at := range []uint64{deadline - 50, deadline - 1} {
		h.now = at
		h.ok("renew before the deadline", func(rev, now uint64) error {
			tr, err := h.p.RenewLease(rev, now, l, 60)
			l = tr.Value
			return err
		})
	}
	h.now = deadline
	e := h.fail(KindAttemptTimedOut, func(rev, now uint64) error { _, err := h.p.RenewLease(rev, now, l, 60); return err })
	if e.TaskID != "t" || e.Limit != deadline {
		t.Fatalf("error = %+v", e)
	}
	// The lease itself stays valid until it expires: the worker reports the
	// timeout as a failure, and the retry rule applies as for any failure.
	if out := h.failWith(l, "timeout"); out.Kind != Requeued {
		t.Fatalf("outcome = %+v", out)
	}
	if a := h.lastAttempt("t"); a.Outcome() != AttemptFailed || a.Reason() != "timeout" {
		t.Fatalf("record = %v", a)
	}
	// The next attempt has its own deadline.
	h.register("w2", 1)
	l2 := h.assign("t", "w2", 60)
	h.now = l2.AcquiredAt() + 50
	h.ok("renew in the new attempt", func(rev, now uint64) error { _, err := h.p.RenewLease(rev, now, l2, 10); return err })
}

func TestRecoverExpiredLeases_TimedOutOutcome(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 2)
	h.enqueueTimeout("slow", 30)
	h.enqueueTimeout("short", 300)
	slow := h.assign("slow", "w", 40)  // expires after its deadline
	short := h.assign("short", "w", 5) // expires well before its deadline
	h.now = slow.ExpiresAt()
	h.ok("recover", func(rev, now uint64) error { _, err := h.p.RecoverExpiredLeases(rev, now); return err })
	if got := h.lastAttempt("slow").Outcome(); got != AttemptTimedOut {
		t.Fatalf("slow: %v, want timed_out", got)
	}
	if got := h.lastAttempt("short").Outcome(); got != AttemptLeaseExpired {
		t.Fatalf("short: %v, want lease_expired", got)
	}
	_ = short
}

// Without a timeout nothing about renewals changes (contract A.9).
func TestRenewLease_NoTimeoutUnchanged(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 1)
	l := h.running("t", "w", 60)
	for range 5 {
		h.now += 59
		h.ok("renew", func(rev, now uint64) error {
			tr, err := h.p.RenewLease(rev, now, l, 60)
			l = tr.Value
			return err
		})
	}
}

func TestAttemptRecord_RedactsReason(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 1)
	l := h.running("t", "w", 60)
	const secret = "stderr: password=hunter2"
	h.failWith(l, secret)
	a := h.lastAttempt("t")
	var logBuf bytes.Buffer
	slog.New(slog.NewTextHandler(&logBuf, nil)).Info("x", "a", a, "task", h.task("t"))
	for _, s := range []string{fmt.Sprint(a), fmt.Sprintf("%+v %#v %s %q", a, a, a, a), fmt.Sprint(h.task("t")), fmt.Sprintf("%#v", h.task("t").Attempts()), logBuf.String()} {
		if strings.Contains(s, "hunter2") {
			t.Fatalf("formatted form leaks the reason: %s", s)
		}
	}
	if !strings.Contains(fmt.Sprint(a), redacted) {
		t.Fatalf("no redaction marker: %v", a)
	}
}

func TestAttemptOutcome_Names(t *testing.T) {
	for _, o := range AllAttemptOutcomes() {
		if got, ok := ParseAttemptOutcome(o.String()); !ok || got != o {
			t.Fatalf("ParseAttemptOutcome(%q) = %v, %v", o, got, ok)
		}
	}
	if AttemptOutcome(0).Valid() || AttemptOutcome(200).Valid() {
		t.Fatal("invalid outcomes report valid")
	}
	if _, ok := ParseAttemptOutcome("nope"); ok {
		t.Fatal("unknown name parsed")
	}
}
