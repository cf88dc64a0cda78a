package distributed

import (
	"math"
	"slices"
)

// Purge (contract Part F, docs/adr/0002-purge.md) is the one departure from
// A.1's "nothing is evicted": terminal task records are removed on request,
// so that a coordinator that lives for months stays inside its limits. Lease
// IDs and enqueue ordinals keep their counters; generations are fenced by
// the generation floor (I11), so no proof of a purged life ever matches a
// later one.

// MaxPurgeTaskIDs bounds PurgeFilter.TaskIDs and the task IDs of
// ResultAggregator.PurgeResults: the hard ceiling of task records.
const MaxPurgeTaskIDs = MaxTaskRecords

// PurgeFilter selects the terminal tasks PurgeTasks removes. Either TaskIDs
// names them (each must exist and be terminal), or ScanID and FinishedBefore
// narrow "every terminal task": ScanID "" means every scan, FinishedBefore 0
// means no time bound, otherwise only tasks that became terminal strictly
// before that logical second.
type PurgeFilter struct {
	ScanID         string
	FinishedBefore uint64
	TaskIDs        []string
}

// PurgeOutcome is PurgeTasks' value: the purged task IDs in task-ID order
// (hosts remove their results and indexes with it).
type PurgeOutcome struct {
	TaskIDs []string
}

// validatePurgeFilter is argument validation (contract A.6 step 1).
func validatePurgeFilter(f PurgeFilter) *Error {
	if len(f.TaskIDs) > MaxPurgeTaskIDs {
		return &Error{Kind: KindInvalidTask, Reason: "too many task IDs"}
	}
	if len(f.TaskIDs) > 0 && (f.ScanID != "" || f.FinishedBefore != 0) {
		return &Error{Kind: KindInvalidTask, Reason: "task IDs exclude the scan and time filters"}
	}
	if f.ScanID != "" && !ValidIdentifier(f.ScanID) {
		return invalidTaskID()
	}
	return checkPurgeIDs(f.TaskIDs)
}

// checkPurgeIDs rejects invalid and repeated task IDs.
func checkPurgeIDs(ids []string) *Error {
	seen := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		if !ValidIdentifier(id) {
			return invalidTaskID()
		}
		if _, dup := seen[id]; dup {
			return &Error{Kind: KindInvalidTask, TaskID: id, Reason: "task ID is repeated"}
		}
		seen[id] = struct{}{}
	}
	return nil
}

// PurgeTasks removes terminal task records (beyond contract Part A; Part F).
// The selection is f (PurgeFilter); a selection that matches nothing is
// still a successful command. Errors, in order: ErrInvalidTask (the filter:
// "too many task IDs", "task IDs exclude the scan and time filters", an
// invalid scan or task ID, "task ID is repeated"), ErrRevisionConflict,
// ErrLogicalTimeRegression, for named tasks ErrTaskNotFound and
// ErrInvalidTransition (not terminal; Operation "purge"), then
// ErrCounterExhausted ("revision", "task_generation"). A later lease or
// fence of a purged task fails with ErrTaskPurged; its ID may be enqueued
// again and starts a new life at the generation floor (I11).
func (q *TaskQueue) PurgeTasks(expectedRevision, nowSecs uint64, f PurgeFilter) (Transition[PurgeOutcome], error) {
	var zero Transition[PurgeOutcome]
	if err := validatePurgeFilter(f); err != nil {
		return zero, err
	}
	c := q.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return zero, err
	}
	ts, err := c.purgeSelection(f)
	if err != nil {
		return zero, err
	}
	if err := c.canCommit(); err != nil {
		return zero, err
	}
	for _, t := range ts {
		if t.generation == math.MaxUint64 {
			return zero, exhausted("task_generation")
		}
	}
	ids := c.purge(ts)
	return Transition[PurgeOutcome]{Revision: c.commit(nowSecs), Value: PurgeOutcome{TaskIDs: ids}}, nil
}

// PurgeTasks removes terminal tasks; see TaskQueue.PurgeTasks.
func (p *WorkerPool) PurgeTasks(expectedRevision, nowSecs uint64, f PurgeFilter) (Transition[PurgeOutcome], error) {
	return p.TaskQueue().PurgeTasks(expectedRevision, nowSecs, f)
}

// purgeSelection returns the records f selects (check 4). Named tasks must
// exist and be terminal; filters walk the finish index (terminal tasks only).
func (c *coordinator) purgeSelection(f PurgeFilter) ([]*taskRec, *Error) {
	if len(f.TaskIDs) > 0 {
		ts := make([]*taskRec, 0, len(f.TaskIDs))
		for _, id := range f.TaskIDs {
			t := c.tasks[id]
			switch {
			case t == nil:
				return nil, &Error{Kind: KindTaskNotFound, TaskID: id}
			case !t.status.Terminal():
				return nil, &Error{Kind: KindInvalidTransition, TaskID: id, Status: t.status, Operation: "purge"}
			}
			ts = append(ts, t)
		}
		return ts, nil
	}
	var ts []*taskRec
	c.finished.walk(func(t *taskRec) bool {
		if f.FinishedBefore != 0 && t.finishedAt >= f.FinishedBefore {
			return false
		}
		if f.ScanID == "" || t.scanID() == f.ScanID {
			ts = append(ts, t)
		}
		return true
	})
	return ts, nil
}

// purge removes terminal records and raises the generation floor above
// each of their generations (I11). It returns their IDs in task-ID order.
func (c *coordinator) purge(ts []*taskRec) []string {
	ids := make([]string, len(ts))
	for i, t := range ts {
		c.finished.remove(t)
		delete(c.tasks, t.id)
		c.terminal--
		c.generationFloor = max(c.generationFloor, t.generation+1)
		ids[i] = t.id
	}
	slices.Sort(ids)
	return ids
}

// PurgeDue reports, without changing anything, whether a terminal task
// finished strictly before the logical second before (0: never), i.e.
// whether PurgeTasks with that FinishedBefore would purge anything. O(log n):
// the host's retention ticker polls it (docs/adr/0002-purge.md).
func (p *WorkerPool) PurgeDue(before uint64) bool {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.finished.head
	return t != nil && t.finishedAt < before
}

// purgedProof is the Part F rule for a proof of task id at generation gen:
// ErrTaskPurged when gen predates the task's current life (t non-nil) or,
// with no record, the generation floor. Nil otherwise (then the caller goes
// on with contract A.9: TaskNotFound, replays, StaleOwnership).
func (c *coordinator) purgedProof(t *taskRec, id string, gen uint64) *Error {
	if (t == nil && gen < c.generationFloor) || (t != nil && gen < t.lifeBase) {
		return &Error{Kind: KindTaskPurged, TaskID: id}
	}
	return nil
}

// runBase is the generation the record's current run started at (I5): the
// life's base, or after a re-run the generation the last re-run started.
func (t *taskRec) runBase() uint64 {
	if t.reruns > 0 {
		return t.rerunBaseValue()
	}
	return t.lifeBase
}

// PurgeResults removes the stored results of taskIDs (beyond contract Part
// A; Part F): hosts call it with PurgeOutcome.TaskIDs so that a purged task
// leaves no result behind. IDs without a result are skipped; the value is
// how many results were removed. Errors, in order: ErrStateInvariant (nil
// aggregator), ErrInvalidTask ("too many task IDs", an invalid ID, "task
// ID is repeated"), ErrRevisionConflict, ErrCounterExhausted ("revision").
// Success increments the revision once, also when nothing was stored.
//
// NB: the aggregator keeps no memory of purged receipts (it cannot
// authenticate a receipt's origin, contract A.11); the pool refuses every
// proof of a purged task with ErrTaskPurged, and hosts store a result only
// in the command that completes its task (docs/adr/0002-purge.md).
func (a *ResultAggregator) PurgeResults(expectedRevision uint64, taskIDs []string) (Transition[int], error) {
	if a == nil {
		return Transition[int]{}, errNilResultAggregator()
	}
	if len(taskIDs) > MaxPurgeTaskIDs {
		return Transition[int]{}, &Error{Kind: KindInvalidTask, Reason: "too many task IDs"}
	}
	if err := checkPurgeIDs(taskIDs); err != nil {
		return Transition[int]{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.initLocked()
	if expectedRevision != a.revision {
		return Transition[int]{}, &Error{Kind: KindRevisionConflict, Expected: expectedRevision, Actual: a.revision}
	}
	if a.revision == math.MaxUint64 {
		return Transition[int]{}, exhausted("revision")
	}
	n := 0
	for _, id := range taskIDs {
		if r, ok := a.results[id]; ok {
			a.totalBytes -= len(r.data)
			delete(a.results, id)
			n++
		}
	}
	a.revision++
	return Transition[int]{Revision: a.revision, Value: n}, nil
}
