package distributed

import "math"

func validateTaskSpec(s TaskSpec) *Error {
	if p := identifierProblem(s.TaskID); p != "" {
		return &Error{Kind: KindInvalidTask, Reason: "task_id " + p}
	}
	if p := identifierProblem(s.ScanID); p != "" {
		return &Error{Kind: KindInvalidTask, Reason: "scan_id " + p}
	}
	switch {
	case len(s.TargetRef) == 0:
		return &Error{Kind: KindInvalidTask, Reason: "target_ref is empty"}
	case len(s.TargetRef) > MaxTargetRefBytes:
		return &Error{Kind: KindInvalidTask, Reason: "target_ref is too long"}
	case len(s.Phases) > MaxTaskPhases:
		return &Error{Kind: KindInvalidTask, Reason: "too many phases"}
	case !s.Priority.Valid():
		return &Error{Kind: KindInvalidTask, Reason: "priority is invalid"}
	case s.AttemptTimeoutSecs > MaxTaskTTLSecs:
		return &Error{Kind: KindInvalidTask, Reason: "attempt timeout is too long"}
	}
	return validateScheduling(s.Scheduling)
}

// Enqueue admits a new queued task. Errors, in order: ErrInvalidTask (spec),
// ErrRevisionConflict, ErrLogicalTimeRegression, ErrTaskAlreadyExists,
// ErrTaskRecordCapacityReached, ErrActiveTaskCapacityReached,
// ErrQueuedTaskCapacityReached, ErrTerminalCapacityReserved,
// ErrCounterExhausted.
func (q *TaskQueue) Enqueue(expectedRevision, nowSecs uint64, spec TaskSpec) (Transition[ScanTask], error) {
	if err := validateTaskSpec(spec); err != nil {
		return Transition[ScanTask]{}, err
	}
	c := q.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return Transition[ScanTask]{}, err
	}
	l := c.limits
	records := len(c.tasks)
	switch {
	case c.tasks[spec.TaskID] != nil:
		return Transition[ScanTask]{}, &Error{Kind: KindTaskAlreadyExists, TaskID: spec.TaskID}
	case records >= l.MaxTaskRecords:
		return Transition[ScanTask]{}, &Error{Kind: KindTaskRecordCapacityReached, Limit: uint64(l.MaxTaskRecords)}
	case c.active >= l.MaxActiveTasks:
		return Transition[ScanTask]{}, &Error{Kind: KindActiveTaskCapacityReached, Limit: uint64(l.MaxActiveTasks)}
	case c.queue.Len() >= l.MaxQueuedTasks:
		return Transition[ScanTask]{}, &Error{Kind: KindQueuedTaskCapacityReached, Limit: uint64(l.MaxQueuedTasks)}
	case c.terminal+c.active+1 > l.MaxTerminalTasks:
		return Transition[ScanTask]{}, &Error{Kind: KindTerminalCapacityReserved, Limit: uint64(l.MaxTerminalTasks)}
	}
	if err := c.canCommit(); err != nil {
		return Transition[ScanTask]{}, err
	}
	if !canBump(c.lastOrdinal) {
		return Transition[ScanTask]{}, exhausted("enqueue_ordinal")
	}
	t := c.admit(spec, nowSecs)
	return Transition[ScanTask]{Revision: c.commit(nowSecs), Value: t.view()}, nil
}

// Enqueue admits a new queued task; see TaskQueue.Enqueue.
func (p *WorkerPool) Enqueue(expectedRevision, nowSecs uint64, spec TaskSpec) (Transition[ScanTask], error) {
	return p.TaskQueue().Enqueue(expectedRevision, nowSecs, spec)
}

// Validate checks the spec as Enqueue does (contract A.7 reasons, in order) and
// returns ErrInvalidTask or nil. It never echoes the invalid value.
func (s TaskSpec) Validate() error {
	if err := validateTaskSpec(s); err != nil {
		return err
	}
	return nil
}

// EnqueueBatch admits every spec as a new queued task in one command, or none
// (beyond contract Part A; hosts use it for all-or-nothing batch submission). The
// tasks get consecutive ordinals in slice order; the revision increments
// once. Errors, in order: ErrInvalidTask ("batch is empty", or the first
// invalid spec), ErrRevisionConflict, ErrLogicalTimeRegression,
// ErrTaskAlreadyExists (a repeated ID in the batch or an existing task), then
// Enqueue's capacity checks for the whole batch (TaskRecordCapacityReached,
// ActiveTaskCapacityReached, QueuedTaskCapacityReached,
// TerminalCapacityReserved), then ErrCounterExhausted.
func (q *TaskQueue) EnqueueBatch(expectedRevision, nowSecs uint64, specs []TaskSpec) (Transition[[]ScanTask], error) {
	var zero Transition[[]ScanTask]
	if len(specs) == 0 {
		return zero, &Error{Kind: KindInvalidTask, Reason: "batch is empty"}
	}
	for _, s := range specs {
		if err := validateTaskSpec(s); err != nil {
			return zero, err
		}
	}
	c := q.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return zero, err
	}
	seen := make(map[string]struct{}, len(specs))
	for _, s := range specs {
		if _, dup := seen[s.TaskID]; dup || c.tasks[s.TaskID] != nil {
			return zero, &Error{Kind: KindTaskAlreadyExists, TaskID: s.TaskID}
		}
		seen[s.TaskID] = struct{}{}
	}
	l, n := c.limits, len(specs)
	switch {
	case len(c.tasks)+n > l.MaxTaskRecords:
		return zero, &Error{Kind: KindTaskRecordCapacityReached, Limit: uint64(l.MaxTaskRecords)}
	case c.active+n > l.MaxActiveTasks:
		return zero, &Error{Kind: KindActiveTaskCapacityReached, Limit: uint64(l.MaxActiveTasks)}
	case c.queue.Len()+n > l.MaxQueuedTasks:
		return zero, &Error{Kind: KindQueuedTaskCapacityReached, Limit: uint64(l.MaxQueuedTasks)}
	case c.terminal+c.active+n > l.MaxTerminalTasks:
		return zero, &Error{Kind: KindTerminalCapacityReserved, Limit: uint64(l.MaxTerminalTasks)}
	}
	if err := c.canCommit(); err != nil {
		return zero, err
	}
	if c.lastOrdinal > math.MaxUint64-uint64(n) {
		return zero, exhausted("enqueue_ordinal")
	}
	out := make([]ScanTask, n)
	for i, s := range specs {
		out[i] = c.admit(s, nowSecs).view()
	}
	return Transition[[]ScanTask]{Revision: c.commit(nowSecs), Value: out}, nil
}

// EnqueueBatch admits a batch all-or-nothing; see TaskQueue.EnqueueBatch.
func (p *WorkerPool) EnqueueBatch(expectedRevision, nowSecs uint64, specs []TaskSpec) (Transition[[]ScanTask], error) {
	return p.TaskQueue().EnqueueBatch(expectedRevision, nowSecs, specs)
}

// admit inserts a new queued task for a validated, admitted spec.
func (c *coordinator) admit(spec TaskSpec, now uint64) *taskRec {
	if !spec.Scheduling.IsZero() {
		c.ensureSched()
	}
	mask, _ := tagMask(spec.Scheduling.RequiredTags, "")
	t := &taskRec{
		id:        spec.TaskID,
		meta:      internMeta(c, spec.ScanID, spec.Phases),
		target:    spec.TargetRef,
		priority:  spec.Priority,
		status:    TaskQueued,
		createdAt: now,
		version:   1,

		notBefore:   spec.Scheduling.NotBeforeSecs,
		tagMask:     mask,
		backoffBase: uint32(spec.Scheduling.BackoffBaseSecs), // ≤ MaxBackoffSecs (validated)
		backoffCap:  uint32(spec.Scheduling.BackoffCapSecs),
		timeout:     uint32(spec.AttemptTimeoutSecs), // ≤ MaxTaskTTLSecs (validated)
		// A new life starts at the floor (I11): 0 unless tasks were purged.
		generation: c.generationFloor,
		lifeBase:   c.generationFloor,
	}
	c.tasks[t.id] = t
	c.active++
	if c.sched != nil {
		c.sched.scan(t.scanID()).active++
	}
	c.ages.push(t) // now is the newest creation time (I8)
	c.pushQueue(t)
	return t
}

// pushQueue gives t a fresh ordinal and queues it.
func (c *coordinator) pushQueue(t *taskRec) {
	c.lastOrdinal++
	t.ordinal = c.lastOrdinal
	c.queue.ReplaceOrInsert(t)
	if c.sched != nil {
		c.sched.addQueued(t, c.logicalTime)
	}
}

// CancelTask cancels a queued task with its exact fence, or a leased or
// running task with its exact, unexpired lease. Replaying the proof that
// cancelled the task returns AlreadyCancelled at the current revision.
// Errors: ErrInvalidTask/ErrInvalidWorker (proof identifiers),
// ErrRevisionConflict, ErrLogicalTimeRegression, ErrTaskPurged (Part F),
// ErrTaskNotFound, ErrStaleOwnership, ErrLeaseExpired, ErrCounterExhausted.
func (q *TaskQueue) CancelTask(expectedRevision, nowSecs uint64, own TaskOwnership) (Transition[CancellationOutcome], error) {
	var zero Transition[CancellationOutcome]
	if lease, isLease := own.Lease(); isLease {
		if err := validateLease(lease); err != nil {
			return zero, err
		}
	} else if !ValidIdentifier(own.fence.taskID) {
		return zero, invalidTaskID()
	}
	c := q.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return zero, err
	}
	t := c.tasks[own.TaskID()]
	if err := c.purgedProof(t, own.TaskID(), own.taskGeneration()); err != nil {
		return zero, err
	}
	if t == nil {
		return zero, &Error{Kind: KindTaskNotFound, TaskID: own.TaskID()}
	}
	if t.status == TaskCancelled && t.retainsProof(own) {
		return Transition[CancellationOutcome]{Revision: c.revision, Value: CancellationOutcome{Kind: AlreadyCancelled}}, nil
	}
	if lease, isLease := own.Lease(); isLease {
		if err := c.checkLease(t, lease, nowSecs); err != nil {
			return zero, err
		}
	} else if t.status != TaskQueued || own.fence != t.fence() {
		return zero, &Error{Kind: KindStaleOwnership, TaskID: t.id}
	}
	if err := c.canCommit(); err != nil {
		return zero, err
	}
	if !canBump(t.version) {
		return zero, exhausted("record_version")
	}
	c.cancel(t, own, nowSecs)
	return Transition[CancellationOutcome]{Revision: c.commit(nowSecs), Value: CancellationOutcome{Kind: Cancelled}}, nil
}

// CancelTask cancels a task; see TaskQueue.CancelTask.
func (p *WorkerPool) CancelTask(expectedRevision, nowSecs uint64, own TaskOwnership) (Transition[CancellationOutcome], error) {
	return p.TaskQueue().CancelTask(expectedRevision, nowSecs, own)
}

// CancelTaskByID is the trusted host's cancellation (beyond contract Part A): it
// cancels the named queued, leased or running task with the ownership the
// task holds at that moment — also when its lease has already expired, since
// the host, not a worker, asks — and retains that ownership as the proof, so
// a later CancelTask with it replays as AlreadyCancelled. Cancelling a
// cancelled task returns AlreadyCancelled at the current revision and
// changes nothing. Errors: ErrInvalidTask, ErrRevisionConflict,
// ErrLogicalTimeRegression, ErrTaskNotFound, ErrInvalidTransition (the task
// is completed, failed or expired; Operation "cancel"), ErrCounterExhausted.
func (q *TaskQueue) CancelTaskByID(expectedRevision, nowSecs uint64, taskID string) (Transition[CancellationOutcome], error) {
	var zero Transition[CancellationOutcome]
	if !ValidIdentifier(taskID) {
		return zero, invalidTaskID()
	}
	c := q.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return zero, err
	}
	t := c.tasks[taskID]
	switch {
	case t == nil:
		return zero, &Error{Kind: KindTaskNotFound, TaskID: taskID}
	case t.status == TaskCancelled:
		return Transition[CancellationOutcome]{Revision: c.revision, Value: CancellationOutcome{Kind: AlreadyCancelled}}, nil
	case t.status.Terminal():
		return zero, &Error{Kind: KindInvalidTransition, TaskID: taskID, Status: t.status, Operation: "cancel"}
	}
	if err := c.canCommit(); err != nil {
		return zero, err
	}
	if !canBump(t.version) {
		return zero, exhausted("record_version")
	}
	own := OwnershipFromFence(t.fence())
	if t.hasLease {
		own = OwnershipFromLease(t.currentLease())
	}
	c.cancel(t, own, nowSecs)
	return Transition[CancellationOutcome]{Revision: c.commit(nowSecs), Value: CancellationOutcome{Kind: Cancelled}}, nil
}

// CancelTaskByID cancels a task by ID; see TaskQueue.CancelTaskByID.
func (p *WorkerPool) CancelTaskByID(expectedRevision, nowSecs uint64, taskID string) (Transition[CancellationOutcome], error) {
	return p.TaskQueue().CancelTaskByID(expectedRevision, nowSecs, taskID)
}

// cancel ends t's attempt if it holds a lease, terminates it as cancelled
// at now and retains own, which names t, as its proof (I10). The caller
// has passed every check.
func (c *coordinator) cancel(t *taskRec, own TaskOwnership, now uint64) {
	held := t.lease
	if t.hasLease {
		c.endAttempt(t, now, AttemptCancelled, "")
	}
	c.terminate(t, TaskCancelled, now)
	t.setProof(own, held)
}

func (t *taskRec) fence() QueuedTaskFence {
	return QueuedTaskFence{taskID: t.id, taskGeneration: t.generation, recordVersion: t.version}
}

// terminate moves a non-terminal task to a terminal status at now: it
// leaves the queue or releases its worker, stops counting as active and
// enters the finish index. The caller has checked that t.version can be
// bumped.
func (c *coordinator) terminate(t *taskRec, status TaskStatus, now uint64) {
	switch {
	case t.status == TaskQueued:
		c.queue.Delete(t)
		if c.sched != nil {
			c.sched.removeQueued(t, c.logicalTime)
		}
	case t.hasLease:
		c.releaseLease(t)
	}
	c.ages.remove(t)
	c.active--
	c.terminal++
	if c.sched != nil {
		sc := c.sched.scans[t.scanID()]
		sc.active--
		c.sched.dropIfIdle(sc)
	}
	t.status = status
	t.version++
	t.finishedAt = now
	c.finished.push(t) // now is the newest finish time (I8)
}

// ExpireOldTasks expires every non-terminal task with now − CreatedAt ≥
// maxAgeSecs and returns how many. maxAgeSecs 0 fails with ErrInvalidLimit,
// above Limits.MaxTaskTTLSecs with ErrTimeLimitExceedsMaximum (both named
// "max_age_secs"); then ErrRevisionConflict, ErrLogicalTimeRegression,
// ErrCounterExhausted.
func (q *TaskQueue) ExpireOldTasks(expectedRevision, nowSecs, maxAgeSecs uint64) (Transition[int], error) {
	c := q.c
	if maxAgeSecs == 0 {
		return Transition[int]{}, &Error{Kind: KindInvalidLimit, Name: "max_age_secs"}
	}
	if maxAgeSecs > c.limits.MaxTaskTTLSecs {
		return Transition[int]{}, &Error{Kind: KindTimeLimitExceedsMaximum, Name: "max_age_secs", Actual: maxAgeSecs, Maximum: c.limits.MaxTaskTTLSecs}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return Transition[int]{}, err
	}
	var old []*taskRec
	if nowSecs >= maxAgeSecs {
		cutoff := nowSecs - maxAgeSecs
		c.ages.walk(func(t *taskRec) bool {
			if t.createdAt > cutoff {
				return false
			}
			old = append(old, t)
			return true
		})
	}
	if err := c.canCommit(); err != nil {
		return Transition[int]{}, err
	}
	for _, t := range old {
		if !canBump(t.version) {
			return Transition[int]{}, exhausted("record_version")
		}
	}
	for _, t := range old {
		if t.hasLease {
			c.endAttempt(t, nowSecs, AttemptTaskExpired, "")
		}
		c.terminate(t, TaskExpired, nowSecs)
	}
	return Transition[int]{Revision: c.commit(nowSecs), Value: len(old)}, nil
}

// ExpireOldTasks expires old tasks; see TaskQueue.ExpireOldTasks.
func (p *WorkerPool) ExpireOldTasks(expectedRevision, nowSecs, maxAgeSecs uint64) (Transition[int], error) {
	return p.TaskQueue().ExpireOldTasks(expectedRevision, nowSecs, maxAgeSecs)
}

// validateLease is argument validation for a lease: task ID, then worker ID.
func validateLease(l TaskLease) *Error {
	if !ValidIdentifier(l.taskID) {
		return invalidTaskID()
	}
	if !ValidIdentifier(l.workerID) {
		return invalidWorkerID()
	}
	return nil
}

// checkLease is the ownership rule shared by every lease-using command: the
// lease must equal the task's current lease and be unexpired at now.
func (c *coordinator) checkLease(t *taskRec, l TaskLease, now uint64) *Error {
	if !t.holds(l) {
		return &Error{Kind: KindStaleOwnership, TaskID: t.id}
	}
	if now >= l.expiresAt {
		return &Error{Kind: KindLeaseExpired, TaskID: t.id}
	}
	return nil
}

// releaseLease ends t's current lease: the expiry index, the worker's lease
// set and CurrentTasks. It does not change t's status or version.
func (c *coordinator) releaseLease(t *taskRec) {
	c.byExpiry.Delete(t)
	w := t.lease.worker // I4: a live worker holds every lease
	w.dropLease(t)
	w.current--
	c.refreshWorker(w)
	if c.sched != nil {
		c.sched.released(t.scanID())
	}
	t.lease, t.hasLease = leaseRec{}, false
}

// refreshWorker updates the live-worker index after a change to w that
// kept its LastHeartbeat and link state (only CurrentTasks changed).
func (c *coordinator) refreshWorker(w *workerRec) {
	if w.status != WorkerOffline {
		c.alive.refresh(w)
	}
}

// touchWorker applies change to w while keeping the live-worker index
// valid (I9). A linked worker whose LastHeartbeat stays the same is
// refreshed in its slot; one whose LastHeartbeat moves (to now, which no
// linked worker's exceeds, I8) leaves its slot for the next free one at
// the newest end; one that goes offline leaves the index.
func (c *coordinator) touchWorker(w *workerRec, change func()) {
	if w.status == WorkerOffline {
		change()
		if w.status != WorkerOffline {
			c.alive.insert(w)
		}
		return
	}
	oldKey := w.lastHeartbeat
	change()
	if w.lastHeartbeat == oldKey && w.status != WorkerOffline {
		c.refreshWorker(w)
		return
	}
	c.alive.remove(w)
	if w.status != WorkerOffline {
		c.alive.insert(w)
	}
}

// planRetries is the capacity and counter preflight of the retry rule for the
// given leased or running tasks: check 4 (the queue bound) then check 5.
func (c *coordinator) planRetries(ts []*taskRec) *Error {
	requeues := 0
	for _, t := range ts {
		if uint32(t.retryCount) < c.limits.MaxRetries {
			requeues++
		}
	}
	if c.queue.Len()+requeues > c.limits.MaxQueuedTasks {
		return &Error{Kind: KindQueuedTaskCapacityReached, Limit: uint64(c.limits.MaxQueuedTasks)}
	}
	if err := c.canCommit(); err != nil {
		return err
	}
	for _, t := range ts {
		if !canBump(t.version) {
			return exhausted("record_version")
		}
		if uint32(t.retryCount) < c.limits.MaxRetries && !canBump(t.generation) {
			return exhausted("task_generation")
		}
	}
	if c.lastOrdinal > math.MaxUint64-uint64(requeues) {
		return exhausted("enqueue_ordinal")
	}
	return nil
}

// retry applies the retry rule to a leased or running task whose preflight
// passed: requeue under a new generation, or fail when retries are exhausted.
// A requeued task gets its backoff's not-before time (schedule.go).
func (c *coordinator) retry(t *taskRec, now uint64) FailureOutcome {
	held := t.lease
	if uint32(t.retryCount) < c.limits.MaxRetries {
		c.releaseLease(t)
		t.generation++
		t.retryCount++
		t.status = TaskQueued
		t.startedAt, t.hasStarted = 0, false
		t.version++
		t.notBefore = c.retryNotBefore(t, now)
		c.pushQueue(t)
		return FailureOutcome{Kind: Requeued, TaskGeneration: t.generation, RetryCount: uint32(t.retryCount)}
	}
	c.terminate(t, TaskFailed, now)
	t.retainLease(held)
	return FailureOutcome{Kind: RetryExhausted, TaskGeneration: t.generation, RetryCount: uint32(t.retryCount)}
}

// recoverTasks applies the retry rule to ts in lease-ID order (ts is sorted by
// the caller) and fills in the summary's task counts.
func (c *coordinator) recoverTasks(ts []*taskRec, sum *RecoverySummary, now uint64) {
	for _, t := range ts {
		if c.retry(t, now).Kind == Requeued {
			sum.TasksRequeued++
		} else {
			sum.TasksFailed++
		}
	}
}
