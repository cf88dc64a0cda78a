package distributed

import (
	"math"
	"sort"
)

func (c *coordinator) validateTTL(leaseTTL uint64) *Error {
	if leaseTTL == 0 || leaseTTL > c.limits.MaxLeaseTTLSecs {
		return &Error{Kind: KindLeaseTTLOutOfRange, Actual: leaseTTL, Maximum: c.limits.MaxLeaseTTLSecs}
	}
	return nil
}

// checkAssignable is check 4 for a named worker: found, healthy and alive at
// now, with a free slot.
func (c *coordinator) checkAssignable(id string, now uint64) (*workerRec, *Error) {
	return c.checkWorkerAssignable(c.workers[id], id, now)
}

// checkWorkerAssignable is checkAssignable for w, the record of id or nil.
func (c *coordinator) checkWorkerAssignable(w *workerRec, id string, now uint64) (*workerRec, *Error) {
	switch {
	case w == nil:
		return nil, &Error{Kind: KindWorkerNotFound, WorkerID: id}
	case w.status != WorkerHealthy || c.dead(w, now):
		return nil, &Error{Kind: KindWorkerUnavailable, WorkerID: id}
	case w.availableSlots() == 0:
		return nil, &Error{Kind: KindWorkerAtCapacity, WorkerID: id}
	}
	return w, nil
}

// grant leases queued task t to eligible worker w: check 5, then the change.
func (c *coordinator) grant(t *taskRec, w *workerRec, now, ttl uint64) (Transition[TaskLease], error) {
	switch {
	case c.revision == math.MaxUint64:
		return Transition[TaskLease]{}, exhausted("revision")
	case !canBump(c.lastLeaseID):
		return Transition[TaskLease]{}, exhausted("lease_id")
	case t.attempt == math.MaxUint32:
		return Transition[TaskLease]{}, exhausted("attempt")
	case !canBump(t.version):
		return Transition[TaskLease]{}, exhausted("record_version")
	case now > math.MaxUint64-ttl:
		return Transition[TaskLease]{}, exhausted("lease_expiry")
	}
	c.queue.Delete(t)

	c.lastLeaseID++
	t.attempt++
	t.lease = leaseRec{
		worker:           w,
		workerGeneration: w.generation,
		leaseID:          c.lastLeaseID,
		acquiredAt:       now,
		expiresAt:        now + ttl,
	}
	t.hasLease = true
	t.status = TaskLeased
	t.version++
	c.byExpiry.insert(t)
	w.addLease(t)
	w.current++
	c.refreshWorker(w)
	if c.sched != nil {
		c.sched.take(t, t.lease.leaseID, c.logicalTime) // fairness.go
	}
	return Transition[TaskLease]{Revision: c.commit(now), Value: t.currentLease()}, nil
}

// AssignNextAvailable leases the highest queued task to the best eligible
// worker (most available slots, then smallest ID). Errors:
// ErrLeaseTTLOutOfRange, ErrRevisionConflict, ErrLogicalTimeRegression,
// ErrNoQueuedTask, ErrNoAvailableWorker, ErrCounterExhausted.
func (p *WorkerPool) AssignNextAvailable(expectedRevision, nowSecs, leaseTTL uint64) (Transition[TaskLease], error) {
	c := p.c
	if err := c.validateTTL(leaseTTL); err != nil {
		return Transition[TaskLease]{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return Transition[TaskLease]{}, err
	}
	t, w, err := c.pickAvailable(nowSecs)
	if err != nil {
		return Transition[TaskLease]{}, err
	}
	return c.grant(t, w, nowSecs, leaseTTL)
}

// AssignNext leases the highest queued task to the named worker. Errors:
// ErrInvalidWorker, ErrLeaseTTLOutOfRange, ErrRevisionConflict,
// ErrLogicalTimeRegression, ErrNoQueuedTask, ErrWorkerNotFound,
// ErrWorkerUnavailable, ErrWorkerAtCapacity, ErrCounterExhausted.
func (p *WorkerPool) AssignNext(expectedRevision, nowSecs uint64, workerID string, leaseTTL uint64) (Transition[TaskLease], error) {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	// The ID's check runs only when it names no record: every stored
	// worker ID is valid (see leaseTask).
	w := c.workers[workerID]
	if w == nil && !ValidIdentifier(workerID) {
		return Transition[TaskLease]{}, invalidWorkerID()
	}
	if err := c.validateTTL(leaseTTL); err != nil {
		return Transition[TaskLease]{}, err
	}
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return Transition[TaskLease]{}, err
	}
	if !c.anyQueued() {
		return Transition[TaskLease]{}, &Error{Kind: KindNoQueuedTask}
	}
	w, err := c.checkWorkerAssignable(w, workerID, nowSecs)
	if err != nil {
		return Transition[TaskLease]{}, err
	}
	t := c.nextQueued(w) // with scheduling: the first task w's tags cover
	if t == nil {
		return Transition[TaskLease]{}, &Error{Kind: KindNoQueuedTask}
	}
	return c.grant(t, w, nowSecs, leaseTTL)
}

// AssignTask leases the named queued task to the named worker. Errors:
// ErrInvalidTask, ErrInvalidWorker, ErrLeaseTTLOutOfRange,
// ErrRevisionConflict, ErrLogicalTimeRegression, ErrTaskNotFound,
// ErrTaskNotQueued, ErrWorkerNotFound, ErrWorkerUnavailable,
// ErrWorkerAtCapacity, ErrCounterExhausted.
func (p *WorkerPool) AssignTask(expectedRevision, nowSecs uint64, taskID, workerID string, leaseTTL uint64) (Transition[TaskLease], error) {
	c := p.c
	if !ValidIdentifier(taskID) {
		return Transition[TaskLease]{}, invalidTaskID()
	}
	if !ValidIdentifier(workerID) {
		return Transition[TaskLease]{}, invalidWorkerID()
	}
	if err := c.validateTTL(leaseTTL); err != nil {
		return Transition[TaskLease]{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return Transition[TaskLease]{}, err
	}
	t := c.tasks[taskID]
	if t == nil {
		return Transition[TaskLease]{}, &Error{Kind: KindTaskNotFound, TaskID: taskID}
	}
	if t.status != TaskQueued {
		return Transition[TaskLease]{}, &Error{Kind: KindTaskNotQueued, TaskID: taskID, Status: t.status}
	}
	w, err := c.checkAssignable(workerID, nowSecs)
	if err != nil {
		return Transition[TaskLease]{}, err
	}
	if err := c.notLeasable(t, w); err != nil {
		return Transition[TaskLease]{}, err
	}
	return c.grant(t, w, nowSecs, leaseTTL)
}

// leaseTask runs checks 1–3 and the task lookup shared by Start, Complete,
// Fail and Renew: a lease with an invalid ID is ErrInvalidTask or
// ErrInvalidWorker, one of a purged life ErrTaskPurged (Part F), of no task
// ErrTaskNotFound. The caller holds the lock.
//
// Check 1 is validateLease's, but a lease whose task ID names a record and
// whose worker ID is that record's lease holder's carries two IDs equal to
// stored ones, and every stored ID is valid (Enqueue and RegisterWorker
// admit only valid IDs, Restore refuses others): the byte-by-byte check
// runs only for the other leases. The errors come in the same order as
// with the check before the lookup (docs/benchmarks.md, issue 15).
func (c *coordinator) leaseTask(rev, now uint64, l TaskLease) (*taskRec, *Error) {
	t := c.tasks[l.taskID]
	if t == nil || !t.hasLease || t.lease.worker.id != l.workerID {
		if err := validateLease(l); err != nil {
			return nil, err
		}
	}
	if err := c.begin(rev, now); err != nil {
		return nil, err
	}
	if err := c.purgedProof(t, l.taskID, l.taskGeneration); err != nil {
		return nil, err
	}
	if t == nil {
		return nil, &Error{Kind: KindTaskNotFound, TaskID: l.taskID}
	}
	return t, nil
}

// StartTask moves a leased task to running (StartedAt = now). Replaying the
// current lease on a running task returns AlreadyStarted while the lease is
// unexpired. Errors: ErrInvalidTask/ErrInvalidWorker, ErrRevisionConflict,
// ErrLogicalTimeRegression, ErrTaskPurged, ErrTaskNotFound, ErrStaleOwnership,
// ErrLeaseExpired, ErrCounterExhausted.
func (p *WorkerPool) StartTask(expectedRevision, nowSecs uint64, lease TaskLease) (Transition[StartOutcome], error) {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	t, err := c.leaseTask(expectedRevision, nowSecs, lease)
	if err != nil {
		return Transition[StartOutcome]{}, err
	}
	if err := c.checkLease(t, lease, nowSecs); err != nil {
		return Transition[StartOutcome]{}, err
	}
	if t.status == TaskRunning {
		return Transition[StartOutcome]{Revision: c.revision, Value: StartOutcome{Kind: StartAlreadyStarted, StartedAt: t.startedAt}}, nil
	}
	if err := c.canCommit(); err != nil {
		return Transition[StartOutcome]{}, err
	}
	if !canBump(t.version) {
		return Transition[StartOutcome]{}, exhausted("record_version")
	}
	t.status = TaskRunning
	t.startedAt, t.hasStarted = nowSecs, true
	t.version++
	return Transition[StartOutcome]{Revision: c.commit(nowSecs), Value: StartOutcome{Kind: StartStarted, StartedAt: nowSecs}}, nil
}

// CompleteTask completes a running task: CompletedAt = now, lease cleared,
// worker released (CurrentTasks−1, CompletedTasks+1), and a CompletionReceipt
// retained and returned. Replaying the completing lease returns
// AlreadyCompleted with the same receipt. Errors: ErrInvalidTask/
// ErrInvalidWorker, ErrRevisionConflict, ErrLogicalTimeRegression,
// ErrTaskPurged, ErrTaskNotFound, ErrStaleOwnership, ErrLeaseExpired, ErrInvalidTransition
// (leased, not started), ErrCounterExhausted.
func (p *WorkerPool) CompleteTask(expectedRevision, nowSecs uint64, lease TaskLease) (Transition[CompletionOutcome], error) {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	t, err := c.leaseTask(expectedRevision, nowSecs, lease)
	if err != nil {
		return Transition[CompletionOutcome]{}, err
	}
	if t.status == TaskCompleted && t.retainsProof(OwnershipFromLease(lease)) {
		return Transition[CompletionOutcome]{Revision: c.revision, Value: CompletionOutcome{Kind: AlreadyCompleted, Receipt: t.receiptValue()}}, nil
	}
	if err := c.checkLease(t, lease, nowSecs); err != nil {
		return Transition[CompletionOutcome]{}, err
	}
	if t.status != TaskRunning {
		return Transition[CompletionOutcome]{}, &Error{Kind: KindInvalidTransition, TaskID: t.id, Status: t.status, Operation: "complete"}
	}
	w := t.lease.worker // the lease's holder (checkLease, I4)
	switch {
	case c.revision == math.MaxUint64:
		return Transition[CompletionOutcome]{}, exhausted("revision")
	case !canBump(t.version):
		return Transition[CompletionOutcome]{}, exhausted("record_version")
	case !canBump(w.completed):
		return Transition[CompletionOutcome]{}, exhausted("completed_tasks")
	}
	held := t.lease
	c.terminate(t, TaskCompleted, nowSecs)
	w.completed++
	t.retainLease(held)     // the receipt derives from it (I10)
	t.endCompletedAttempt() // the attempt's record, too (I12)
	return Transition[CompletionOutcome]{Revision: c.commit(nowSecs), Value: CompletionOutcome{Kind: Completed, Receipt: t.receiptValue()}}, nil
}

// FailTask fails the running attempt: the task is requeued under a new
// generation while RetryCount < MaxRetries (Requeued), else it becomes failed
// (RetryExhausted, retained; replaying the same lease returns an equal
// outcome). Errors: ErrInvalidTask/ErrInvalidWorker, ErrRevisionConflict,
// ErrLogicalTimeRegression, ErrTaskPurged, ErrTaskNotFound, ErrStaleOwnership,
// ErrLeaseExpired, ErrInvalidTransition, ErrQueuedTaskCapacityReached,
// ErrCounterExhausted.
func (p *WorkerPool) FailTask(expectedRevision, nowSecs uint64, lease TaskLease) (Transition[FailureOutcome], error) {
	return p.c.failTask(expectedRevision, nowSecs, lease, "")
}

// failTask is FailTask retaining reason (validated by the caller) in the
// attempt's history record.
func (c *coordinator) failTask(expectedRevision, nowSecs uint64, lease TaskLease, reason string) (Transition[FailureOutcome], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, err := c.leaseTask(expectedRevision, nowSecs, lease)
	if err != nil {
		return Transition[FailureOutcome]{}, err
	}
	if t.status == TaskFailed && t.retainsProof(OwnershipFromLease(lease)) {
		return Transition[FailureOutcome]{Revision: c.revision, Value: FailureOutcome{Kind: RetryExhausted, TaskGeneration: t.generation, RetryCount: uint32(t.retryCount)}}, nil
	}
	if err := c.checkLease(t, lease, nowSecs); err != nil {
		return Transition[FailureOutcome]{}, err
	}
	if t.status != TaskRunning {
		return Transition[FailureOutcome]{}, &Error{Kind: KindInvalidTransition, TaskID: t.id, Status: t.status, Operation: "fail"}
	}
	if err := c.planRetries([]*taskRec{t}); err != nil {
		return Transition[FailureOutcome]{}, err
	}
	c.endAttempt(t, nowSecs, AttemptFailed, reason)
	out := c.retry(t, nowSecs)
	return Transition[FailureOutcome]{Revision: c.commit(nowSecs), Value: out}, nil
}

// RenewLease gives the current, unexpired lease of a leased or running task
// a new LeaseID and ExpiresAt = now + leaseTTL; attempt, generations and
// AcquiredAt stay, and the old lease value becomes stale. Errors:
// ErrInvalidTask/ErrInvalidWorker, ErrLeaseTTLOutOfRange,
// ErrRevisionConflict, ErrLogicalTimeRegression, ErrTaskPurged, ErrTaskNotFound,
// ErrStaleOwnership, ErrLeaseExpired, ErrCounterExhausted.
func (p *WorkerPool) RenewLease(expectedRevision, nowSecs uint64, lease TaskLease, leaseTTL uint64) (Transition[TaskLease], error) {
	c := p.c
	if err := validateLease(lease); err != nil { // before the TTL's check
		return Transition[TaskLease]{}, err
	}
	if err := c.validateTTL(leaseTTL); err != nil {
		return Transition[TaskLease]{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t, err := c.leaseTask(expectedRevision, nowSecs, lease)
	if err != nil {
		return Transition[TaskLease]{}, err
	}
	if err := c.checkLease(t, lease, nowSecs); err != nil {
		return Transition[TaskLease]{}, err
	}
	if err := c.checkDeadline(t, nowSecs); err != nil {
		return Transition[TaskLease]{}, err
	}
	switch {
	case c.revision == math.MaxUint64:
		return Transition[TaskLease]{}, exhausted("revision")
	case !canBump(c.lastLeaseID):
		return Transition[TaskLease]{}, exhausted("lease_id")
	case !canBump(t.version):
		return Transition[TaskLease]{}, exhausted("record_version")
	case nowSecs > math.MaxUint64-leaseTTL:
		return Transition[TaskLease]{}, exhausted("lease_expiry")
	}
	c.byExpiry.Delete(t)
	c.lastLeaseID++
	t.lease.leaseID = c.lastLeaseID // the worker's lease slot stays (workers.go)
	t.lease.expiresAt = nowSecs + leaseTTL
	t.version++
	c.byExpiry.insert(t)
	return Transition[TaskLease]{Revision: c.commit(nowSecs), Value: t.currentLease()}, nil
}

// RecoverExpiredLeases applies the retry rule to every leased or running task
// whose lease has ExpiresAt ≤ now, in lease-ID order. Errors:
// ErrRevisionConflict, ErrLogicalTimeRegression,
// ErrQueuedTaskCapacityReached, ErrCounterExhausted.
func (p *WorkerPool) RecoverExpiredLeases(expectedRevision, nowSecs uint64) (Transition[RecoverySummary], error) {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return Transition[RecoverySummary]{}, err
	}
	var ts []*taskRec
	c.byExpiry.Ascend(func(t *taskRec) bool {
		if t.lease.expiresAt > nowSecs {
			return false
		}
		ts = append(ts, t)
		return true
	})
	sort.Slice(ts, func(i, j int) bool { return ts[i].lease.leaseID < ts[j].lease.leaseID })
	if err := c.planRetries(ts); err != nil {
		return Transition[RecoverySummary]{}, err
	}
	affected := make(map[string]struct{}, len(ts))
	for _, t := range ts {
		affected[t.lease.worker.id] = struct{}{}
	}
	sum := RecoverySummary{WorkersAffected: len(affected)}
	for _, t := range ts {
		c.endAttempt(t, nowSecs, expiryOutcome(t), "")
	}
	c.recoverTasks(ts, &sum, nowSecs)
	return Transition[RecoverySummary]{Revision: c.commit(nowSecs), Value: sum}, nil
}
