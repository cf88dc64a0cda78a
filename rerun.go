package distributed

import "math"

// Re-running terminal tasks (beyond contract Part A; docs/contract.md
// Part F): a failed, expired or cancelled task goes back to the queue as a
// new generation with a fresh retry budget. Every proof of its earlier
// generations stays stale (its lease, fence and retained terminal proof no
// longer match the record); completed tasks are never re-run, so receipts
// and stored results keep meaning what they meant.

// RerunRequest names the tasks RerunTasks considers and which terminal
// statuses it re-runs.
type RerunRequest struct {
	// TaskIDs are the tasks to consider, each at most once; 1 to
	// MaxTaskRecords of them.
	TaskIDs []string
	// Statuses are the terminal statuses to re-run, each failed, expired
	// or cancelled; empty means all three.
	Statuses []TaskStatus
}

// RerunOutcome is RerunTasks' value.
type RerunOutcome struct {
	// Requeued lists the re-run tasks in request order.
	Requeued []string
	// Unchanged counts the named tasks left as they were: not terminal
	// (already queued, leased or running — a re-run of those is a no-op),
	// completed, or in a status the request did not select.
	Unchanged int
}

// DefaultRerunStatuses returns the statuses an empty RerunRequest.Statuses
// selects: failed, expired and cancelled.
func DefaultRerunStatuses() []TaskStatus {
	return []TaskStatus{TaskFailed, TaskExpired, TaskCancelled}
}

// validateRerun is argument validation for RerunTasks; it returns the
// selected statuses as a set.
func validateRerun(req RerunRequest) (map[TaskStatus]bool, *Error) {
	switch {
	case len(req.TaskIDs) == 0:
		return nil, &Error{Kind: KindInvalidTask, Reason: "rerun names no task"}
	case len(req.TaskIDs) > MaxTaskRecords:
		return nil, &Error{Kind: KindInvalidTask, Reason: "rerun names too many tasks"}
	}
	seen := make(map[string]struct{}, len(req.TaskIDs))
	for _, id := range req.TaskIDs {
		if !ValidIdentifier(id) {
			return nil, invalidTaskID()
		}
		if _, dup := seen[id]; dup {
			return nil, &Error{Kind: KindInvalidTask, Reason: "rerun names a task twice"}
		}
		seen[id] = struct{}{}
	}
	statuses := req.Statuses
	if len(statuses) == 0 {
		statuses = DefaultRerunStatuses()
	}
	set := make(map[TaskStatus]bool, len(statuses))
	for _, s := range statuses {
		if s != TaskFailed && s != TaskExpired && s != TaskCancelled {
			return nil, &Error{Kind: KindInvalidTask, Reason: "rerun status must be failed, expired or cancelled"}
		}
		set[s] = true
	}
	return set, nil
}

// RerunTasks puts the named tasks whose status is selected back in the
// queue, in request order, as one command. Each re-run task gets a new
// generation (TaskGeneration+1), RetryCount 0 (a full retry budget),
// CreatedAt = now (its age restarts), a fresh enqueue ordinal, Reruns+1,
// and loses its retained terminal proof; its attempt history and Attempt
// count stay. Tasks that are not terminal, completed, or not selected are
// left unchanged (counted in Unchanged): re-running a queued task is a
// no-op, not an error, so a duplicated request is harmless. A request that
// changes nothing is still a successful command.
//
// Errors, in order: ErrInvalidTask (no, too many, invalid or repeated task
// IDs; a status other than failed, expired or cancelled),
// ErrRevisionConflict, ErrLogicalTimeRegression, ErrTaskNotFound (the first
// unknown ID), ErrActiveTaskCapacityReached, ErrQueuedTaskCapacityReached,
// ErrCounterExhausted.
func (q *TaskQueue) RerunTasks(expectedRevision, nowSecs uint64, req RerunRequest) (Transition[RerunOutcome], error) {
	var zero Transition[RerunOutcome]
	set, verr := validateRerun(req)
	if verr != nil {
		return zero, verr
	}
	c := q.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return zero, err
	}
	picked, err := c.pickReruns(req.TaskIDs, set)
	if err != nil {
		return zero, err
	}
	if err := c.planReruns(picked); err != nil {
		return zero, err
	}
	out := RerunOutcome{Requeued: make([]string, 0, len(picked)), Unchanged: len(req.TaskIDs) - len(picked)}
	for _, t := range picked {
		c.rerun(t, nowSecs)
		out.Requeued = append(out.Requeued, t.id)
	}
	return Transition[RerunOutcome]{Revision: c.commit(nowSecs), Value: out}, nil
}

// RerunTasks re-runs terminal tasks; see TaskQueue.RerunTasks.
func (p *WorkerPool) RerunTasks(expectedRevision, nowSecs uint64, req RerunRequest) (Transition[RerunOutcome], error) {
	return p.TaskQueue().RerunTasks(expectedRevision, nowSecs, req)
}

// pickReruns finds every named task (ErrTaskNotFound for the first unknown
// one) and returns those in a selected terminal status, in request order.
func (c *coordinator) pickReruns(ids []string, set map[TaskStatus]bool) ([]*taskRec, *Error) {
	var picked []*taskRec
	for _, id := range ids {
		t := c.tasks[id]
		if t == nil {
			return nil, &Error{Kind: KindTaskNotFound, TaskID: id}
		}
		if set[t.status] {
			picked = append(picked, t)
		}
	}
	return picked, nil
}

// planReruns is check 4 (the active and queue bounds) then check 5 for
// the picked tasks. Terminal + active stays the same, so the terminal
// reservation and the record bound hold.
func (c *coordinator) planReruns(ts []*taskRec) *Error {
	l, n := c.limits, len(ts)
	switch {
	case c.active+n > l.MaxActiveTasks:
		return &Error{Kind: KindActiveTaskCapacityReached, Limit: uint64(l.MaxActiveTasks)}
	case c.queue.Len()+n > l.MaxQueuedTasks:
		return &Error{Kind: KindQueuedTaskCapacityReached, Limit: uint64(l.MaxQueuedTasks)}
	}
	if err := c.canCommit(); err != nil {
		return err
	}
	for _, t := range ts {
		switch {
		case !canBump(t.version):
			return exhausted("record_version")
		case !canBump(t.generation):
			return exhausted("task_generation")
		case t.reruns == math.MaxUint32:
			return exhausted("reruns")
		}
	}
	if c.lastOrdinal > math.MaxUint64-uint64(n) {
		return exhausted("enqueue_ordinal")
	}
	return nil
}

// rerun moves a terminal task back to the queue as a new generation; it
// leaves the finish index (I3, I8) and keeps its life's base (I11). A
// re-run is a new run (contract Part F): its not-before time is cleared,
// so it is leasable at once even if it ended while scheduled (cancelled or
// expired before its time), and its backoff starts again from the first
// retry (RetryCount 0); its required tags and backoff overrides stay.
func (c *coordinator) rerun(t *taskRec, now uint64) {
	c.finished.remove(t)
	t.finishedAt = 0
	c.terminal--
	c.active++
	t.status = TaskQueued
	t.generation++ // the re-run's base: generation − retryCount (rerunBaseValue)
	t.retryCount = 0
	t.notBefore = 0
	t.reruns++
	t.createdAt = now
	t.startedAt, t.hasStarted = 0, false
	t.clearProof()
	t.version++
	c.ages.push(t) // now is the newest creation time (I8)
	if c.sched != nil {
		c.sched.scan(t.scanID()).active++ // fairness.go (I13)
	}
	c.pushQueue(t)
}
