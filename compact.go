package distributed

import "strings"

// Compact task records (issue 15: lean records; ARCHITECTURE.md I3, I10,
// I12). A task record holds the part of its proofs that it does not hold
// already; the whole values are rebuilt on demand. What makes this exact:
//   - a lease, current (I3) or retained as the terminal proof (I10), names
//     the record's own task ID, generation and attempt;
//   - the fence a cancelled queued task retains is its own task ID and
//     generation with the record version before the cancellation (I10);
//   - a completed task's receipt is its proof lease with its generation
//     and record version (I10), and neither changes once it completed
//     (completed tasks are never re-run; purge removes the record);
//   - the history record of a completed task's last attempt is that proof
//     lease with the start and completion times (I12).
// Restore refuses input whose proofs differ from what the record implies,
// exactly the states the I3/I10 audit refused before.

// completedAtValue is a completed task's completion time: its finish time
// (I8); 0 for any other task.
func (t *taskRec) completedAtValue() uint64 {
	if t.status != TaskCompleted {
		return 0
	}
	return t.finishedAt
}

// rerunBaseValue is the generation the last re-run started: the current
// run's base, generation − retryCount (I5); 0 when never re-run.
func (t *taskRec) rerunBaseValue() uint64 {
	if t.reruns == 0 {
		return 0
	}
	return t.generation - uint64(t.retryCount)
}

// leaseRec is the part of a TaskLease the task record does not hold. The
// worker is its record (workers are never removed), so releasing a lease
// needs no lookup by ID; a restored lease points to a stub until
// rebuildIndexes resolves it.
type leaseRec struct {
	worker           *workerRec
	workerGeneration uint64
	leaseID          uint64
	acquiredAt       uint64
	expiresAt        uint64
}

// is reports whether r holds the worker and lease fields of l.
func (r leaseRec) is(l TaskLease) bool {
	return r.worker != nil && r.worker.id == l.workerID && r.workerGeneration == l.workerGeneration &&
		r.leaseID == l.leaseID && r.acquiredAt == l.acquiredAt && r.expiresAt == l.expiresAt
}

// stubLease is a decoded lease whose worker is not linked yet: a stub
// from ids holding only the worker's ID.
func stubLease(l TaskLease, ids *idTable) leaseRec {
	return leaseRec{worker: ids.stub(l.workerID), workerGeneration: l.workerGeneration, leaseID: l.leaseID, acquiredAt: l.acquiredAt, expiresAt: l.expiresAt}
}

// leaseOf rebuilds the whole lease from r and the record.
func (t *taskRec) leaseOf(r leaseRec) TaskLease {
	return TaskLease{
		taskID:           t.id,
		workerID:         r.worker.id,
		workerGeneration: r.workerGeneration,
		taskGeneration:   t.generation,
		attempt:          t.attempt,
		leaseID:          r.leaseID,
		acquiredAt:       r.acquiredAt,
		expiresAt:        r.expiresAt,
	}
}

// currentLease returns the current lease, zero when the task holds none.
func (t *taskRec) currentLease() TaskLease {
	if !t.hasLease {
		return TaskLease{}
	}
	return t.leaseOf(t.lease)
}

// namesRecord reports whether l names this record's task ID, generation
// and attempt (the part leaseRec leaves out).
func (t *taskRec) namesRecord(l TaskLease) bool {
	return l.taskID == t.id && l.taskGeneration == t.generation && l.attempt == t.attempt
}

// holds reports whether l is exactly the current lease.
func (t *taskRec) holds(l TaskLease) bool {
	return t.hasLease && t.namesRecord(l) && t.lease.is(l)
}

// proofValue returns the retained terminal proof (zero when none).
func (t *taskRec) proofValue() TaskOwnership {
	switch {
	case !t.hasProof:
		return TaskOwnership{}
	case t.proofIsFence:
		return OwnershipFromFence(QueuedTaskFence{taskID: t.id, taskGeneration: t.generation, recordVersion: t.version - 1})
	}
	return OwnershipFromLease(t.leaseOf(t.lease))
}

// retainsProof reports whether own is the retained terminal proof.
func (t *taskRec) retainsProof(own TaskOwnership) bool {
	return t.hasProof && t.proofValue() == own
}

// setProof retains own, which names this record, as the terminal proof;
// held is the lease the task held before terminate (own's, when own is a
// lease). Call it after terminate (a fence is the version before it).
func (t *taskRec) setProof(own TaskOwnership, held leaseRec) {
	if _, isLease := own.Lease(); isLease {
		t.retainLease(held)
		return
	}
	t.hasProof, t.proofIsFence, t.lease = true, true, leaseRec{}
}

// retainLease retains held, the lease t held until terminate, as its proof.
func (t *taskRec) retainLease(held leaseRec) {
	t.hasProof, t.proofIsFence, t.lease = true, false, held
}

// clearProof drops the retained terminal proof.
func (t *taskRec) clearProof() {
	t.hasProof, t.proofIsFence, t.lease = false, false, leaseRec{}
}

// receiptValue returns a completed task's receipt, zero for any other.
func (t *taskRec) receiptValue() CompletionReceipt {
	if t.status != TaskCompleted || !t.hasProof || t.proofIsFence {
		return CompletionReceipt{}
	}
	return CompletionReceipt{
		taskID:           t.id,
		taskGeneration:   t.generation,
		attempt:          t.attempt,
		leaseID:          t.lease.leaseID,
		workerID:         t.lease.worker.id,
		workerGeneration: t.lease.workerGeneration,
		recordVersion:    t.version,
	}
}

// completingAttempt is the history record of a completed task's last
// attempt, derived from its proof lease (lastAttemptImplicit).
func (t *taskRec) completingAttempt() AttemptRecord {
	return t.currentAttempt(t.finishedAt, AttemptCompleted, "")
}

// stored returns the stored history records (nil for none).
func (t *taskRec) stored() []AttemptRecord {
	if t.history == nil {
		return nil
	}
	return *t.history
}

// setStored replaces the stored history records; none is nil. The slice
// header is boxed only when it is first needed: taking h's address would
// move h to the heap on every call, including a completion's with no
// history (an allocation per lifecycle, docs/benchmarks.md, issue 15).
func (t *taskRec) setStored(h []AttemptRecord) {
	switch {
	case len(h) == 0:
		t.history = nil
	case t.history == nil:
		box := new([]AttemptRecord)
		*box = h
		t.history = box
	default:
		*t.history = h
	}
}

// attempts returns a copy of the task's attempt history, oldest first
// (I12), the implicit last record included.
func (t *taskRec) attempts() []AttemptRecord {
	h := t.stored()
	if !t.lastAttemptImplicit {
		return cloneHistory(h)
	}
	out := make([]AttemptRecord, 0, len(h)+1)
	return append(append(out, h...), t.completingAttempt())
}

// endCompletedAttempt records the end of a completing attempt: the record
// stays implicit (attempts derives it), and the oldest stored record goes
// when the history would exceed MaxAttemptHistory with it (I12).
func (t *taskRec) endCompletedAttempt() {
	t.setStored(t.roomForAttempt())
	t.lastAttemptImplicit = true
}

// roomForAttempt returns the stored history records with the oldest
// dropped when there are MaxAttemptHistory of them, so one more fits (I12).
func (t *taskRec) roomForAttempt() []AttemptRecord {
	h := t.stored()
	if len(h) == MaxAttemptHistory {
		copy(h, h[1:])
		h = h[:MaxAttemptHistory-1]
	}
	return h
}

// compactDecoded stores the decoded lease, proof and receipt of a restored
// record in compact form. It reports false when they are not what the
// record implies (a lease or proof naming another task, generation or
// attempt, a fence not of the previous version, a receipt that differs,
// a lease and a proof at once): states the audit refuses (I3, I10).
func (t *taskRec) compactDecoded(lease TaskLease, proof TaskOwnership, receipt CompletionReceipt, ids *idTable) bool {
	if t.hasLease && t.hasProof {
		return false
	}
	if t.hasLease {
		if !t.namesRecord(lease) {
			return false
		}
		t.lease = stubLease(lease, ids)
	}
	if t.hasProof {
		t.setProof(proof, leaseRec{})
		if l, isLease := proof.Lease(); isLease {
			if !t.namesRecord(l) {
				return false
			}
			t.lease = stubLease(l, ids)
		}
		if t.version == 0 || t.proofValue() != proof {
			return false
		}
	}
	return t.status != TaskCompleted || (t.hasProof && !t.proofIsFence && receipt == t.receiptValue())
}

// adoptImplicitAttempt makes a restored completed task's last history
// record implicit when it is exactly the derived one, so a restored record
// is as compact as the original; the history it reports is unchanged.
func (t *taskRec) adoptImplicitAttempt() {
	h := t.stored()
	n := len(h)
	if t.status != TaskCompleted || t.lastAttemptImplicit || n == 0 || h[n-1] != t.completingAttempt() {
		return
	}
	t.setStored(h[:n-1])
	t.lastAttemptImplicit = true
}

// maxInterned bounds the intern table; when it is full it starts afresh
// (the strings already shared stay shared), so it never grows with the
// number of scans a pool has seen.
const maxInterned = 4096

// taskMeta is the interned pair of a task's scan ID and phases: the tasks
// of a scan share it, so a record holds one pointer where the two strings
// took 32 bytes (docs/benchmarks.md, issue 15, lifecycle2). It is never
// mutated.
type taskMeta struct{ scanID, phases string }

// scanID returns the task's scan ID ("" only for a zero record).
func (t *taskRec) scanID() string {
	if t.meta == nil {
		return ""
	}
	return t.meta.scanID
}

// phases returns the task's phases as a string ("" for none).
func (t *taskRec) phases() string {
	if t.meta == nil {
		return ""
	}
	return t.meta.phases
}

// internMeta returns c's shared taskMeta for scanID and phases (a string
// from a spec, bytes from a restore's input). c.lastMeta is the pair
// returned last: a batch's tasks share their scan, so most calls need no
// lookup. Neither the comparison nor the lookup allocates (the conversions
// do not escape); only a pair not held yet is copied. It never changes
// what a command returns.
func internMeta[S ~string | ~[]byte](c *coordinator, scanID S, phases []byte) *taskMeta {
	if m := c.lastMeta; m != nil && m.scanID == string(scanID) && m.phases == string(phases) {
		return m
	}
	m, ok := c.interned[taskMeta{string(scanID), string(phases)}]
	if !ok {
		if len(c.interned) >= maxInterned {
			clear(c.interned)
		}
		m = &taskMeta{strings.Clone(string(scanID)), string(phases)}
		c.interned[*m] = m
	}
	c.lastMeta = m
	return m
}
