package distributed

import (
	"fmt"
	"log/slog"
	"strconv"
	"unicode/utf8"
)

// Failure reasons, attempt history and per-attempt timeouts (beyond
// contract Part A; docs/contract.md Part F). A core used as Part A describes
// — FailTask, no AttemptTimeoutSecs — behaves exactly as Part A says; the
// only visible addition is the history each task keeps of its last
// attempts.

const (
	// MaxFailureReasonBytes bounds the reason FailTaskWithReason retains.
	MaxFailureReasonBytes = 512
	// MaxAttemptHistory is how many ended attempts a task retains (I12);
	// when one more ends, the oldest record is dropped (Attempt still
	// counts them all).
	MaxAttemptHistory = 8
)

// AttemptOutcome says how an attempt ended.
type AttemptOutcome uint8

// Attempt outcomes. The zero value is not a valid outcome.
const (
	// AttemptCompleted: CompleteTask.
	AttemptCompleted AttemptOutcome = iota + 1
	// AttemptFailed: FailTask or FailTaskWithReason (requeued or exhausted).
	AttemptFailed
	// AttemptLeaseExpired: RecoverExpiredLeases, before the attempt's deadline.
	AttemptLeaseExpired
	// AttemptTimedOut: RecoverExpiredLeases of a lease that expired at or
	// after the attempt's deadline (AcquiredAt + AttemptTimeoutSecs).
	AttemptTimedOut
	// AttemptWorkerLost: DeregisterWorker or PruneDeadWorkers.
	AttemptWorkerLost
	// AttemptCancelled: CancelTask with the lease, or CancelTaskByID.
	AttemptCancelled
	// AttemptTaskExpired: ExpireOldTasks.
	AttemptTaskExpired
	attemptOutcomeEnd
)

var attemptOutcomeNames = [...]string{"", "completed", "failed", "lease_expired", "timed_out", "worker_lost", "cancelled", "task_expired"}

// String returns the outcome's snake_case name, e.g. "lease_expired".
func (o AttemptOutcome) String() string {
	if o.Valid() {
		return attemptOutcomeNames[o]
	}
	return "attempt_outcome(" + strconv.Itoa(int(o)) + ")"
}

// Valid reports whether o is a declared outcome.
func (o AttemptOutcome) Valid() bool { return o > 0 && o < attemptOutcomeEnd }

// AllAttemptOutcomes returns every outcome in declaration order.
func AllAttemptOutcomes() []AttemptOutcome {
	out := make([]AttemptOutcome, 0, int(attemptOutcomeEnd)-1)
	for o := AttemptOutcome(1); o < attemptOutcomeEnd; o++ {
		out = append(out, o)
	}
	return out
}

// ParseAttemptOutcome maps a name produced by String back to the outcome.
func ParseAttemptOutcome(name string) (AttemptOutcome, bool) {
	for o := AttemptOutcome(1); o < attemptOutcomeEnd; o++ {
		if attemptOutcomeNames[o] == name {
			return o, true
		}
	}
	return 0, false
}

// AttemptRecord is one ended attempt of a task: who held it, under which
// lease, when it was leased, started and ended, how it ended and, for a
// failure, the worker's reason. The reason is redacted in every formatted
// form (it may quote a scanner's stderr); Reason returns it.
type AttemptRecord struct {
	attempt        uint32
	taskGeneration uint64
	workerID       string
	leaseID        uint64
	acquiredAt     uint64
	startedAt      uint64
	hasStarted     bool
	endedAt        uint64
	outcome        AttemptOutcome
	reason         string
}

// Attempt returns the attempt number (the lease's Attempt).
func (a AttemptRecord) Attempt() uint32 { return a.attempt }

// TaskGeneration returns the task generation the attempt ran under.
func (a AttemptRecord) TaskGeneration() uint64 { return a.taskGeneration }

// WorkerID returns the worker that held the attempt's lease.
func (a AttemptRecord) WorkerID() string { return a.workerID }

// LeaseID returns the attempt's last lease ID (renewals replace it).
func (a AttemptRecord) LeaseID() uint64 { return a.leaseID }

// AcquiredAt returns the logical second the attempt's lease was granted.
func (a AttemptRecord) AcquiredAt() uint64 { return a.acquiredAt }

// StartedAt returns when the attempt started running, if it did.
func (a AttemptRecord) StartedAt() (uint64, bool) { return a.startedAt, a.hasStarted }

// EndedAt returns the logical second the attempt ended.
func (a AttemptRecord) EndedAt() uint64 { return a.endedAt }

// Outcome returns how the attempt ended.
func (a AttemptRecord) Outcome() AttemptOutcome { return a.outcome }

// Reason returns the worker's failure reason (real value, not redacted);
// empty unless the outcome is AttemptFailed and the worker gave one.
func (a AttemptRecord) Reason() string { return a.reason }

// String renders the record with its reason redacted.
func (a AttemptRecord) String() string {
	reason := ""
	if a.reason != "" {
		reason = " Reason:" + redacted
	}
	return fmt.Sprintf("AttemptRecord{Attempt:%d TaskGeneration:%d WorkerID:%s LeaseID:%d AcquiredAt:%d EndedAt:%d Outcome:%s%s}",
		a.attempt, a.taskGeneration, safeID(a.workerID), a.leaseID, a.acquiredAt, a.endedAt, a.outcome, reason)
}

// GoString renders the record with its reason redacted.
func (a AttemptRecord) GoString() string { return a.String() }

// Format renders the record with its reason redacted, whatever the verb.
func (a AttemptRecord) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(a.String())) }

// LogValue renders the record for slog with its reason redacted.
func (a AttemptRecord) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Uint64("attempt", uint64(a.attempt)),
		slog.String("worker_id", safeID(a.workerID)),
		slog.Uint64("lease_id", a.leaseID),
		slog.Uint64("ended_at", a.endedAt),
		slog.String("outcome", a.outcome.String()),
		slog.Int("reason_bytes", len(a.reason)),
	)
}

// AttemptTimeoutSecs returns the per-attempt timeout (0: none).
func (t ScanTask) AttemptTimeoutSecs() uint64 { return t.timeout }

// Attempts returns a copy of the task's last ended attempts, oldest first
// (at most MaxAttemptHistory).
func (t ScanTask) Attempts() []AttemptRecord { return cloneHistory(t.history) }

// LastFailureReason returns the reason of the newest ended attempt if that
// attempt failed with one.
func (t ScanTask) LastFailureReason() (string, bool) {
	if n := len(t.history); n > 0 && t.history[n-1].reason != "" {
		return t.history[n-1].reason, true
	}
	return "", false
}

// Reruns returns how many times RerunTasks put the task back in the queue.
func (t ScanTask) Reruns() uint32 { return t.reruns }

func cloneHistory(h []AttemptRecord) []AttemptRecord {
	if len(h) == 0 {
		return nil
	}
	return append([]AttemptRecord(nil), h...)
}

// ValidateFailureReason checks a reason as FailTaskWithReason does:
// ErrFailureReasonTooLong above MaxFailureReasonBytes, ErrInvalidTask if it
// is not valid UTF-8. It never echoes the reason.
func ValidateFailureReason(reason string) error {
	if err := validateReason(reason); err != nil {
		return err
	}
	return nil
}

func validateReason(reason string) *Error {
	if len(reason) > MaxFailureReasonBytes {
		return &Error{Kind: KindFailureReasonTooLong, Actual: uint64(len(reason)), Limit: MaxFailureReasonBytes}
	}
	if !utf8.ValidString(reason) {
		return &Error{Kind: KindInvalidTask, Reason: "failure reason is not valid UTF-8"}
	}
	return nil
}

// FailTaskWithReason is FailTask that also retains the worker's reason in
// the attempt's history record (beyond contract Part A). The reason is
// validated first (ErrFailureReasonTooLong, ErrInvalidTask for invalid
// UTF-8), then everything is as FailTask, whose errors it returns. An
// exact replay of the exhausting lease returns the retained outcome, whatever
// its reason.
func (p *WorkerPool) FailTaskWithReason(expectedRevision, nowSecs uint64, lease TaskLease, reason string) (Transition[FailureOutcome], error) {
	if err := validateReason(reason); err != nil {
		return Transition[FailureOutcome]{}, err
	}
	return p.c.failTask(expectedRevision, nowSecs, lease, reason)
}

// currentAttempt is t's current attempt (its lease's), ended at endedAt
// with outcome and reason.
func (t *taskRec) currentAttempt(endedAt uint64, outcome AttemptOutcome, reason string) AttemptRecord {
	return AttemptRecord{
		attempt:        t.attempt,
		taskGeneration: t.generation,
		workerID:       t.lease.worker.id,
		leaseID:        t.lease.leaseID,
		acquiredAt:     t.lease.acquiredAt,
		startedAt:      t.startedAt,
		hasStarted:     t.hasStarted,
		endedAt:        endedAt,
		outcome:        outcome,
		reason:         reason,
	}
}

// endAttempt records the end of t's current attempt in its history, before
// the command releases the lease. The caller has passed every check.
func (c *coordinator) endAttempt(t *taskRec, now uint64, outcome AttemptOutcome, reason string) {
	t.setStored(append(t.roomForAttempt(), t.currentAttempt(now, outcome, reason)))
}

// endAttempts records the end of every task's current attempt.
func (c *coordinator) endAttempts(ts []*taskRec, now uint64, outcome AttemptOutcome) {
	for _, t := range ts {
		c.endAttempt(t, now, outcome, "")
	}
}

// expiryOutcome says how an expired lease ended its attempt: timed out when
// it expired at or after the attempt's deadline.
func expiryOutcome(t *taskRec) AttemptOutcome {
	if d, ok := t.deadline(); ok && t.lease.expiresAt >= d {
		return AttemptTimedOut
	}
	return AttemptLeaseExpired
}

// deadline returns AcquiredAt + the attempt timeout of a leased task
// (saturating), if the task has a timeout.
func (t *taskRec) deadline() (uint64, bool) {
	if t.timeout == 0 {
		return 0, false
	}
	if t.lease.acquiredAt > ^uint64(0)-uint64(t.timeout) {
		return ^uint64(0), true
	}
	return t.lease.acquiredAt + uint64(t.timeout), true
}

// checkDeadline refuses a renewal at or after the attempt's deadline.
func (c *coordinator) checkDeadline(t *taskRec, now uint64) *Error {
	if d, ok := t.deadline(); ok && now >= d {
		return &Error{Kind: KindAttemptTimedOut, TaskID: t.id, Limit: d}
	}
	return nil
}
