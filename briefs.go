package distributed

// TaskBrief is the part of one task record that a host's index of tasks
// by scan reads back in bulk after a restore (beyond contract Part A, Part
// F: an addition): the task's ID, its scan, its status and its completion
// time. It is a copy; its strings are the record's own immutable ones, so
// a host that keeps an ID holds no second copy of it.
type TaskBrief struct {
	taskID     string
	scanID     string
	status     TaskStatus
	finishedAt uint64 // the completion time when completed (I8)
}

// TaskID returns the task's ID; "" when the brief names no task.
func (b TaskBrief) TaskID() string { return b.taskID }

// ScanID returns the scan the task belongs to.
func (b TaskBrief) ScanID() string { return b.scanID }

// Status returns the task's status.
func (b TaskBrief) Status() TaskStatus { return b.status }

// CompletedAt returns when the task completed; false unless it is
// completed (as ScanTask.CompletedAt).
func (b TaskBrief) CompletedAt() (uint64, bool) {
	if b.status != TaskCompleted {
		return 0, false
	}
	return b.finishedAt, true // I8
}

// Exists reports whether the brief names a task: false for the brief of an
// ID that has no task.
func (b TaskBrief) Exists() bool { return b.taskID != "" }

func (t *taskRec) brief() TaskBrief {
	return TaskBrief{taskID: t.id, scanID: t.scanID(), status: t.status, finishedAt: t.finishedAt}
}

// TaskBriefs appends to dst the brief of the task each of ids names, in
// the order of ids, and returns the extended slice. An ID with no task
// appends the zero TaskBrief (Exists is false). Unlike GetTask per ID it
// takes the lock once and copies four fields of each record, not the
// whole record with its lease, scheduling and attempt history: a host
// restoring its scan index reads every task back this way.
//
// The error is ErrInvalidTask when an ID is not a valid identifier; dst is
// then returned unchanged. The lock is held for all of ids: callers pass
// bounded lists (the FSM passes one scan's task IDs at a time).
func (q *TaskQueue) TaskBriefs(ids []string, dst []TaskBrief) ([]TaskBrief, error) {
	n := len(dst)
	q.c.mu.Lock()
	defer q.c.mu.Unlock()
	for _, id := range ids {
		t, ok := q.c.tasks[id]
		if !ok {
			// A key of the map is a valid identifier: only a miss can be
			// an invalid one.
			if !ValidIdentifier(id) {
				return dst[:n], invalidTaskID()
			}
			dst = append(dst, TaskBrief{})
			continue
		}
		dst = append(dst, t.brief())
	}
	return dst, nil
}

// TaskBriefs appends the briefs of ids to dst; see TaskQueue.TaskBriefs.
func (p *WorkerPool) TaskBriefs(ids []string, dst []TaskBrief) ([]TaskBrief, error) {
	return p.TaskQueue().TaskBriefs(ids, dst)
}
