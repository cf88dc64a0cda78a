package distributed

import "unicode/utf8"

// State export of the fields beyond contract Part A (attempts.go,
// rerun.go). They follow the workers as an optional section, so that a
// state without any of them encodes exactly as before (and a node restores
// the snapshots it wrote before they existed):
//
//	count ≥ 1, then per task that has any, in task-ID order:
//	  task ID, attempt timeout, re-runs, and if re-runs > 0 the re-run
//	  base generation and the life's base generation, then the history
//	  count and each record (see encodeAttempt)
//
// A task without re-runs has no base in the section: its life's base is
// its generation minus its retry count (I5), derived after decoding.
//
// An entry with nothing in it, an unknown or out-of-order task ID, or a
// zero count is ErrInvalidState, so every accepted input re-exports to
// itself.

func (t *taskRec) hasExtensions() bool {
	return t.timeout != 0 || t.reruns != 0 || t.history != nil || t.lastAttemptImplicit
}

// encodeTaskExtensions writes the section for the tasks of ids (in that
// order) that have anything in it, or nothing at all.
func (c *coordinator) encodeTaskExtensions(e *encoder, ids []string) {
	n := 0
	for _, id := range ids {
		if c.tasks[id].hasExtensions() {
			n++
		}
	}
	if n == 0 {
		return
	}
	e.uvarint(uint64(n))
	for _, id := range ids {
		t := c.tasks[id]
		if !t.hasExtensions() {
			continue
		}
		e.str(t.id)
		e.uvarint(uint64(t.timeout))
		e.uvarint(uint64(t.reruns))
		if t.reruns > 0 {
			e.uvarint(t.rerunBaseValue())
			e.uvarint(t.lifeBase)
		}
		n := len(t.stored())
		if t.lastAttemptImplicit {
			n++
		}
		e.uvarint(uint64(n))
		for _, a := range t.stored() {
			encodeAttempt(e, a)
		}
		if t.lastAttemptImplicit {
			encodeAttempt(e, t.completingAttempt())
		}
	}
}

func encodeAttempt(e *encoder, a AttemptRecord) {
	e.uvarint(uint64(a.attempt))
	e.uvarint(a.taskGeneration)
	e.str(a.workerID)
	e.uvarint(a.leaseID)
	e.uvarint(a.acquiredAt)
	e.boolean(a.hasStarted)
	e.uvarint(a.startedAt)
	e.uvarint(a.endedAt)
	e.uvarint(uint64(a.outcome))
	e.str(a.reason)
}

func decodeAttempt(d *decoder) AttemptRecord {
	return AttemptRecord{
		attempt:        d.u32(),
		taskGeneration: d.uvarint(),
		workerID:       d.str(MaxIdentifierBytes),
		leaseID:        d.uvarint(),
		acquiredAt:     d.uvarint(),
		hasStarted:     d.boolean(),
		startedAt:      d.uvarint(),
		endedAt:        d.uvarint(),
		outcome:        AttemptOutcome(d.u8()),
		reason:         d.str(MaxFailureReasonBytes),
	}
}

// decodeTaskExtensions reads the optional section after the workers.
func (c *coordinator) decodeTaskExtensions(d *decoder) *Error {
	if d.failed || d.remaining() == 0 {
		return nil
	}
	// An entry takes at least 5 bytes; a record at least 11.
	n := d.count(uint64(len(c.tasks)), 5)
	if n == 0 {
		return invalidState("task extension section is empty")
	}
	prev := ""
	for i := 0; i < n && !d.failed; i++ {
		id := d.str(MaxIdentifierBytes)
		t := c.tasks[id]
		if d.failed {
			break
		}
		if t == nil || (i > 0 && id <= prev) || t.hasExtensions() {
			return invalidState("task extensions name an unknown task or are out of order")
		}
		prev = id
		t.timeout = uint32(d.bounded(MaxTaskTTLSecs))
		t.reruns = d.u32()
		if t.reruns > 0 {
			// The re-run base is derived (generation − retryCount, I5):
			// a stored one that differs breaks I5.
			if rerunBase := d.uvarint(); !d.failed && (rerunBase == 0 || rerunBase != t.rerunBaseValue()) {
				return invalidState("a re-run base differs from generation − retry count (I5)")
			}
			t.lifeBase = d.uvarint()
		}
		h := d.count(MaxAttemptHistory, 11)
		var recs []AttemptRecord
		for j := 0; j < h && !d.failed; j++ {
			recs = append(recs, decodeAttempt(d))
		}
		t.setStored(recs)
		if !d.failed && !t.hasExtensions() {
			return invalidState("task extension entry is empty")
		}
	}
	return nil
}

// deriveLifeBase gives a restored task that was never re-run its life's
// base, generation − retry count (I5); a retry count above the generation
// is left for the audit to reject.
func (t *taskRec) deriveLifeBase() {
	if t.reruns == 0 && uint64(t.retryCount) <= t.generation {
		t.lifeBase = t.generation - uint64(t.retryCount)
	}
}

// auditAttempts checks a task's fields beyond contract Part A: the timeout
// bound and the attempt history (I12): at most
// MaxAttemptHistory records of issued leases, attempts and lease IDs
// strictly increasing and below the current attempt, generations not
// decreasing and at most the task's, times ordered and not after logical
// time, valid outcomes and workers, and a valid reason only on a failure.
func (c *coordinator) auditAttempts(t *taskRec) *Error {
	if t.timeout > MaxTaskTTLSecs {
		return auditError("I2: attempt timeout exceeds its ceiling")
	}
	if t.lastAttemptImplicit && (t.status != TaskCompleted || !t.hasProof || t.proofIsFence) {
		return auditError("I12: an implicit attempt record on a task that did not complete")
	}
	if n := len(t.stored()); t.status == TaskCompleted && !t.lastAttemptImplicit && n > 0 && t.stored()[n-1].attempt == t.attempt {
		return auditError("I12: a completed task's completing attempt is recorded as ended otherwise")
	}
	history := t.attempts()
	if len(history) > MaxAttemptHistory {
		return auditError("I12: attempt history exceeds its bound")
	}
	for i, a := range history {
		if err := c.auditAttempt(t, a); err != nil {
			return err
		}
		if i > 0 {
			p := history[i-1]
			if a.attempt <= p.attempt || a.leaseID <= p.leaseID || a.taskGeneration < p.taskGeneration || a.acquiredAt < p.endedAt {
				return auditError("I12: attempt history is not in attempt order")
			}
		}
	}
	return nil
}

// auditAttempt checks one history record of t (I12).
func (c *coordinator) auditAttempt(t *taskRec, a AttemptRecord) *Error {
	current := t.attempt
	if t.hasLease {
		current-- // the running attempt is not in the history yet
	}
	switch {
	case a.attempt == 0 || a.attempt > current || a.taskGeneration > t.generation:
		return auditError("I12: attempt record names an attempt the task has not ended")
	case a.leaseID == 0 || a.leaseID > c.lastLeaseID || !ValidIdentifier(a.workerID):
		return auditError("I12: attempt record names an unissued lease or an invalid worker")
	case a.endedAt > c.logicalTime || a.acquiredAt > a.endedAt:
		return auditError("I12: attempt record times are inconsistent")
	case a.hasStarted && (a.startedAt < a.acquiredAt || a.startedAt > a.endedAt):
		return auditError("I12: attempt record times are inconsistent")
	case !a.hasStarted && a.startedAt != 0:
		return auditError("I12: attempt record has a start time but did not start")
	case !a.outcome.Valid():
		return auditError("I12: attempt outcome is invalid")
	case a.reason != "" && (a.outcome != AttemptFailed || len(a.reason) > MaxFailureReasonBytes || !utf8.ValidString(a.reason)):
		return auditError("I12: attempt reason is invalid or on an attempt that did not fail")
	}
	return nil
}
