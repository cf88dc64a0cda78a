package raftfsm

import (
	"slices"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// scanMeta is what the FSM records of a scan besides its task IDs
// (Tenant.scans): when it was created and finished, and the order in which
// its tasks completed. Everything is set in Apply from the command's
// stamped logical time, so every member holds the same values; the
// snapshot carries created, finished and the completion order
// (ScanIndex), the rest is derived again on restore.
type scanMeta struct {
	// createdAt is the logical time of the scan's first enqueue.
	createdAt uint64
	// finishedAt is the logical time at which the last task became
	// terminal; meaningful only when finished (0 there: unknown, a state
	// written before it was recorded).
	finishedAt uint64
	// finished: every task of the scan is terminal.
	// Invariant: finished iff firstOpen == len(ids).
	finished bool
	// firstOpen is the first position of the scan's task IDs whose task is
	// not terminal. Invariant: ids[:firstOpen] are terminal (terminal
	// tasks stay terminal, ARCHITECTURE.md task state machine), so the
	// position only moves forward and each task is passed once.
	firstOpen int
	// completed lists the completed tasks in completion order.
	// Invariant: exactly the scan's completed tasks, each once.
	completed []string
	// resultBytes is the size of the scan's stored results.
	resultBytes uint64
}

// noteEnqueued records new tasks of their scans: a new scan is created at
// now, and a finished scan that gets a task is running again.
func (t *Tenant) noteEnqueued(specs []distributed.TaskSpec, now uint64) {
	for _, s := range specs {
		m, ok := t.meta[s.ScanID]
		if !ok {
			m = &scanMeta{createdAt: now}
			t.meta[s.ScanID] = m
		}
		m.finished, m.finishedAt = false, 0
	}
}

// noteCompleted records a fresh completion of a task of scanID and the size
// of its stored result.
func (t *Tenant) noteCompleted(scanID, taskID string, resultBytes int) {
	if m, ok := t.meta[scanID]; ok {
		m.completed = append(m.completed, taskID)
		m.resultBytes += uint64(resultBytes)
	}
}

// terminalAt reports whether the task with this ID is terminal.
func (t *Tenant) terminalAt(id string) bool { return terminalIn(t.pool, id) }

// terminalIn reports whether the pool's task with this ID is terminal.
func terminalIn(pool *distributed.WorkerPool, id string) bool {
	task, ok, err := pool.GetTask(id)
	return err == nil && ok && task.Status().Terminal()
}

// advanceScan moves the scan's firstOpen past its terminal tasks and marks
// the scan finished at now when every task is terminal. O(1) when the
// first open task is still open; amortized O(1) per task over the scan's
// life.
func (t *Tenant) advanceScan(scanID string, now uint64) {
	m, ok := t.meta[scanID]
	if !ok || m.finished {
		return
	}
	ids := t.scans[scanID]
	for m.firstOpen < len(ids) && t.terminalAt(ids[m.firstOpen]) {
		m.firstOpen++
	}
	if m.firstOpen == len(ids) {
		m.finished, m.finishedAt = true, now
	}
}

// advanceAllScans advances every scan that is not finished (after a
// command that may have made tasks of any scan terminal).
func (t *Tenant) advanceAllScans(now uint64) {
	for id, m := range t.meta {
		if !m.finished {
			t.advanceScan(id, now)
		}
	}
}

// noteTerminations advances the scan tracking after a tenant command that
// may have made tasks terminal (tenantOp.terminates), then calls
// ProgressFunc.
func (f *FSM) noteTerminations(c tenantCall, op tenantOp) {
	taskID, one := op.terminates(c)
	if !one {
		c.t.advanceAllScans(c.now)
	} else if task, ok, err := c.t.pool.GetTask(taskID); err == nil && ok {
		c.t.advanceScan(task.ScanID(), c.now)
	}
	if f.opts.ProgressFunc != nil {
		f.opts.ProgressFunc(c.t.name)
	}
}

// oneTask is a tenantOp.terminates for commands that act on one task.
func oneTask(id func(c tenantCall) string) func(c tenantCall) (string, bool) {
	return func(c tenantCall) (string, bool) { return id(c), true }
}

// anyTask is a tenantOp.terminates for commands that may make tasks of
// any scan terminal (recoveries, worker loss).
func anyTask(tenantCall) (string, bool) { return "", false }

// exportScan encodes one scan for the snapshot.
func (t *Tenant) exportScan(id string) *pb.ScanIndex {
	si := &pb.ScanIndex{ScanId: id, TaskIds: t.scans[id]}
	if m, ok := t.meta[id]; ok {
		si.CreatedAt = m.createdAt
		si.CompletedIds = m.completed
		if m.finished {
			si.FinishedAt = m.finishedAt
		}
	}
	return si
}

// restoreScanMeta rebuilds a restored scan's metadata: the recorded
// creation, finish time and completion order, checked against the pool
// (every listed completion is a completed task of the scan, once), then
// the derived fields. Completed tasks the order does not list (a state
// written before it was recorded) are appended in (CompletedAt, enqueue
// position) order, so every member restores the same order.
func restoreScanMeta(pool *distributed.WorkerPool, results *distributed.ResultAggregator, sc *pb.ScanIndex) (*scanMeta, bool) {
	m := &scanMeta{createdAt: sc.GetCreatedAt()}
	listed := make(map[string]bool, len(sc.GetCompletedIds()))
	for _, id := range sc.GetCompletedIds() {
		task, ok, err := pool.GetTask(id)
		if err != nil || !ok || listed[id] || task.ScanID() != sc.GetScanId() || task.Status() != distributed.TaskCompleted {
			return nil, false
		}
		listed[id] = true
	}
	m.completed = slices.Clone(sc.GetCompletedIds())
	var missing []distributed.ScanTask
	for _, id := range sc.GetTaskIds() {
		task, _, _ := pool.GetTask(id)
		if r, ok, _ := results.GetResult(id); ok {
			m.resultBytes += uint64(len(r))
		}
		if task.Status() == distributed.TaskCompleted && !listed[id] {
			missing = append(missing, task)
		}
	}
	ids := sc.GetTaskIds()
	for m.firstOpen < len(ids) && terminalIn(pool, ids[m.firstOpen]) {
		m.firstOpen++
	}
	slices.SortStableFunc(missing, func(a, b distributed.ScanTask) int {
		x, _ := a.CompletedAt()
		y, _ := b.CompletedAt()
		return cmpUint(x, y)
	})
	for _, task := range missing {
		m.completed = append(m.completed, task.TaskID())
	}
	m.finished = m.firstOpen == len(ids)
	if !m.finished && sc.GetFinishedAt() != 0 {
		return nil, false
	}
	m.finishedAt = sc.GetFinishedAt()
	return m, true
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// leaseTask is a tenantOp.terminates for commands that act on the task of
// their lease.
var leaseTask = oneTask(func(c tenantCall) string { return c.lease.TaskID() })

// ScanState is a copy of what the FSM records of one scan.
type ScanState struct {
	ScanID string
	// CreatedAt is the logical time of the first enqueue (0: unknown).
	CreatedAt uint64
	// Finished: every task is terminal; FinishedAt is when the last one
	// became terminal (0 with Finished: unknown).
	Finished   bool
	FinishedAt uint64
	// Tasks is the number of the scan's task records; Completed of its
	// completed tasks; ResultBytes the size of their stored results.
	Tasks, Completed int
	ResultBytes      uint64
}

// ScanIDs returns the tenant's scan IDs, sorted.
func (v TenantView) ScanIDs() []string {
	v.f.mu.RLock()
	defer v.f.mu.RUnlock()
	return sortedKeys(v.t.scans)
}

// Scan returns what the FSM records of a scan.
func (v TenantView) Scan(scanID string) (ScanState, bool) {
	v.f.mu.RLock()
	defer v.f.mu.RUnlock()
	m, ok := v.t.meta[scanID]
	if !ok {
		return ScanState{}, false
	}
	return ScanState{ScanID: scanID, CreatedAt: m.createdAt, Finished: m.finished, FinishedAt: m.finishedAt,
		Tasks: len(v.t.scans[scanID]), Completed: len(m.completed), ResultBytes: m.resultBytes}, true
}

// ScanTaskWindow returns a copy of at most n of the scan's task IDs in
// enqueue order, from position from.
func (v TenantView) ScanTaskWindow(scanID string, from, n int) []string {
	v.f.mu.RLock()
	defer v.f.mu.RUnlock()
	return window(v.t.scans[scanID], from, n)
}

// ScanCompletedWindow returns a copy of at most n of the scan's completed
// task IDs in completion order, from position from.
func (v TenantView) ScanCompletedWindow(scanID string, from, n int) []string {
	v.f.mu.RLock()
	defer v.f.mu.RUnlock()
	m, ok := v.t.meta[scanID]
	if !ok {
		return nil
	}
	return window(m.completed, from, n)
}

func window(ids []string, from, n int) []string {
	if from < 0 || from >= len(ids) || n <= 0 {
		return nil
	}
	return slices.Clone(ids[from:min(len(ids), from+n)])
}
