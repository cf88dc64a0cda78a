package model

import (
	"fmt"
	"unicode/utf8"

	distributed "github.com/termivar/distributed"
)

// Attempt mirrors distributed.AttemptRecord with exported fields.
type Attempt struct {
	Attempt        uint32
	TaskGeneration uint64
	WorkerID       string
	LeaseID        uint64
	AcquiredAt     uint64
	StartedAt      uint64
	HasStarted     bool
	EndedAt        uint64
	Outcome        distributed.AttemptOutcome
	Reason         string
}

// checkReason is FailTaskWithReason's argument check.
func checkReason(reason string) error {
	if len(reason) > distributed.MaxFailureReasonBytes {
		return &distributed.Error{Kind: distributed.KindFailureReasonTooLong, Actual: uint64(len(reason)), Limit: distributed.MaxFailureReasonBytes}
	}
	if !utf8.ValidString(reason) {
		return invalidTask("failure reason is not valid UTF-8")
	}
	return nil
}

// endAttempt appends the record of task ti's current attempt to a new
// history slice (the old one may be shared by a clone), keeping the last
// MaxAttemptHistory.
func (m *Model) endAttempt(ti int, now uint64, outcome distributed.AttemptOutcome, reason string) {
	t := &m.tasks[ti]
	a := Attempt{
		Attempt:        t.Lease.Attempt,
		TaskGeneration: t.Lease.TaskGeneration,
		WorkerID:       t.Lease.WorkerID,
		LeaseID:        t.Lease.LeaseID,
		AcquiredAt:     t.Lease.AcquiredAt,
		StartedAt:      t.StartedAt,
		HasStarted:     t.HasStarted,
		EndedAt:        now,
		Outcome:        outcome,
		Reason:         reason,
	}
	keep := t.History
	if len(keep) >= distributed.MaxAttemptHistory {
		keep = keep[len(keep)-distributed.MaxAttemptHistory+1:]
	}
	h := make([]Attempt, 0, len(keep)+1)
	t.History = append(append(h, keep...), a)
}

// deadline returns the current attempt's deadline, if the task has a timeout.
func (m *Model) deadline(ti int) (uint64, bool) {
	t := m.tasks[ti]
	if t.TimeoutSecs == 0 {
		return 0, false
	}
	d := t.Lease.AcquiredAt + t.TimeoutSecs
	if d < t.Lease.AcquiredAt {
		d = ^uint64(0)
	}
	return d, true
}

// beforeDeadline refuses a renewal at or after the attempt's deadline.
func (m *Model) beforeDeadline(ti int, now uint64) error {
	if d, ok := m.deadline(ti); ok && now >= d {
		return &distributed.Error{Kind: distributed.KindAttemptTimedOut, TaskID: m.tasks[ti].TaskID, Limit: d}
	}
	return nil
}

// expiryOutcome is how an expired lease ends its attempt.
func (m *Model) expiryOutcome(ti int) distributed.AttemptOutcome {
	if d, ok := m.deadline(ti); ok && m.tasks[ti].Lease.ExpiresAt >= d {
		return distributed.AttemptTimedOut
	}
	return distributed.AttemptLeaseExpired
}

// RerunTasks puts the named tasks in a selected terminal status back in the
// queue as new generations, in request order.
func (m *Model) RerunTasks(rev, now uint64, req distributed.RerunRequest) (distributed.RerunOutcome, uint64, error) {
	sel, err := checkRerun(req)
	if err != nil {
		return distributed.RerunOutcome{}, 0, err
	}
	if err := m.begin(rev, now); err != nil {
		return distributed.RerunOutcome{}, 0, err
	}
	var picked []int
	for _, id := range req.TaskIDs {
		ti := m.taskIndex(id)
		if ti < 0 {
			return distributed.RerunOutcome{}, 0, &distributed.Error{Kind: distributed.KindTaskNotFound, TaskID: id}
		}
		if sel[m.tasks[ti].Status] {
			picked = append(picked, ti)
		}
	}
	l := m.limits
	switch {
	case m.nonTerminal()+len(picked) > l.MaxActiveTasks:
		return distributed.RerunOutcome{}, 0, &distributed.Error{Kind: distributed.KindActiveTaskCapacityReached, Limit: uint64(l.MaxActiveTasks)}
	case m.count(distributed.TaskQueued)+len(picked) > l.MaxQueuedTasks:
		return distributed.RerunOutcome{}, 0, &distributed.Error{Kind: distributed.KindQueuedTaskCapacityReached, Limit: uint64(l.MaxQueuedTasks)}
	}
	if err := m.revisionExhausted(); err != nil {
		return distributed.RerunOutcome{}, 0, err
	}
	out := distributed.RerunOutcome{Requeued: []string{}, Unchanged: len(req.TaskIDs) - len(picked)}
	for _, ti := range picked {
		t := &m.tasks[ti]
		t.Status = distributed.TaskQueued
		t.TaskGeneration++
		t.RerunBase = t.TaskGeneration
		t.RetryCount = 0
		t.Scheduling.NotBeforeSecs = 0 // a new run: leasable at once
		t.FinishedAt = 0
		t.Reruns++
		t.CreatedAt = now
		t.StartedAt, t.HasStarted = 0, false
		t.FailedBy, t.FailedOutcome, t.CancelledBy = Lease{}, distributed.FailureOutcome{}, Ownership{}
		t.RecordVersion++
		m.lastOrdinal++
		t.Ordinal = m.lastOrdinal
		out.Requeued = append(out.Requeued, t.TaskID)
	}
	return out, m.commit(now), nil
}

func checkRerun(req distributed.RerunRequest) (map[distributed.TaskStatus]bool, error) {
	if len(req.TaskIDs) == 0 {
		return nil, invalidTask("rerun names no task")
	}
	if len(req.TaskIDs) > distributed.MaxTaskRecords {
		return nil, invalidTask("rerun names too many tasks")
	}
	for i, id := range req.TaskIDs {
		if !distributed.ValidIdentifier(id) {
			return nil, invalidTask(badTaskCommandID)
		}
		for _, earlier := range req.TaskIDs[:i] {
			if earlier == id {
				return nil, invalidTask("rerun names a task twice")
			}
		}
	}
	sel := map[distributed.TaskStatus]bool{}
	statuses := req.Statuses
	if len(statuses) == 0 {
		statuses = []distributed.TaskStatus{distributed.TaskFailed, distributed.TaskExpired, distributed.TaskCancelled}
	}
	for _, s := range statuses {
		switch s {
		case distributed.TaskFailed, distributed.TaskExpired, distributed.TaskCancelled:
			sel[s] = true
		default:
			return nil, invalidTask("rerun status must be failed, expired or cancelled")
		}
	}
	return sel, nil
}

// checkGeneration is I5 and I11 for one task: the generation is the base of
// its current run (LifeBase, or RerunBase after a re-run) plus its retry
// count, a re-run starts above its life's base, and the life's base is at
// most the generation floor.
func (m *Model) checkGeneration(t Task) error {
	base := t.LifeBase
	if t.Reruns > 0 {
		base = t.RerunBase
	}
	switch {
	case (t.Reruns == 0) != (t.RerunBase == 0) || (t.Reruns > 0 && t.RerunBase <= t.LifeBase):
		return fmt.Errorf("model: task %s re-run base %d is inconsistent (life base %d, %d re-runs)", t.TaskID, t.RerunBase, t.LifeBase, t.Reruns)
	case t.TaskGeneration != base+uint64(t.RetryCount) || t.LifeBase > m.genFloor:
		return fmt.Errorf("model: task %s generation %d is not its run's base %d (floor %d) plus %d retries", t.TaskID, t.TaskGeneration, base, m.genFloor, t.RetryCount)
	}
	return nil
}
