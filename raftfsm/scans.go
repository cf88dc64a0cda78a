package raftfsm

import (
	"maps"
	"slices"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// scanMeta is what the FSM records of a scan besides its task IDs
// (Tenant.scans): when it was created and finished, and the order in which
// its tasks completed. Everything is set in Apply from the command's
// stamped logical time, so every member holds the same values; the
// snapshot carries created, finished, the completion order and the
// ordinals (ScanIndex), the rest is derived again on restore.
type scanMeta struct {
	// createdAt is the logical time of the scan's first enqueue.
	createdAt uint64
	// finishedAt is the logical time at which the last task became
	// terminal; meaningful only when finished (0 there: unknown, a state
	// written before it was recorded).
	finishedAt uint64
	// finished: every task of the scan is terminal and the producer's
	// declared total, if any, is admitted.
	// Invariant: finished iff firstOpen == len(ids) && nextOrd >= declared.
	finished bool
	// firstOpen is the first position of the scan's task IDs whose task is
	// not terminal. Invariant: ids[:firstOpen] are terminal (terminal
	// tasks stay terminal, ARCHITECTURE.md task state machine), so the
	// position only moves forward and each task is passed once; a purge
	// (which takes terminal tasks only) moves it back by the purged
	// positions before it.
	firstOpen int
	// completed lists the completed tasks in completion order.
	// Invariant: exactly the scan's completed tasks (purged ones removed),
	// each once.
	completed []string
	// resultBytes is the size of the scan's stored results.
	resultBytes uint64
	// ords are the enqueue ordinals of the scan's task IDs (parallel to
	// Tenant.scans), compOrds the completion ordinals of completed;
	// nextOrd and nextComp the next ones. Invariant: strictly increasing
	// and below their next; a purge removes entries and never renumbers,
	// so FollowResults cursors (ordinals) stay valid across purges.
	ords, compOrds    []uint64
	nextOrd, nextComp uint64
	// declared is the number of targets the scan's producer declared
	// (EnqueueTasks.declared_total; 0: none, a later declaration replaces
	// it). nextOrd counts every task ever admitted to the scan (purged or
	// not), so declared - nextOrd, when positive, is the part not yet
	// admitted; the record (and with it the declaration) goes when a purge
	// empties the scan.
	declared uint64
}

// admitted reports whether the producer's declared total, if any, is
// admitted.
func (m *scanMeta) admitted() bool { return m.nextOrd >= m.declared }

// pending is the part of the declared total not yet admitted.
func (m *scanMeta) pending() uint64 {
	if m.admitted() {
		return 0
	}
	return m.declared - m.nextOrd
}

// noteEnqueued records new tasks in their scans' task IDs and ordinals
// (kept parallel here, their one writer besides restore): a new scan is
// created at now, and a finished scan that gets a task is running again.
// Each run of specs of one scan (a whole batch, usually) looks the scan up
// once. declared, when non-zero, is the declared total of the batch's one
// scan.
func (t *Tenant) noteEnqueued(specs []distributed.TaskSpec, now, declared uint64) {
	for rest := specs; len(rest) > 0; {
		scan := rest[0].ScanID
		n := len(rest)
		if i := slices.IndexFunc(rest, func(s distributed.TaskSpec) bool { return s.ScanID != scan }); i >= 0 {
			n = i
		}
		m, ok := t.meta[scan]
		if !ok {
			m = &scanMeta{createdAt: now}
			t.meta[scan] = m
		}
		m.finished, m.finishedAt = false, 0
		ids := t.scans[scan]
		for _, s := range rest[:n] {
			ids = append(ids, s.TaskID)
			m.ords = append(m.ords, m.nextOrd)
			m.nextOrd++
		}
		t.scans[scan] = ids
		rest = rest[n:]
	}
	if declared != 0 {
		t.meta[specs[0].ScanID].declared = declared
	}
}

// applyDeclare replaces an existing scan's declared total without
// enqueueing (EnqueueTasks with declare_scan_id and no tasks; value: nil).
// A scan whose new total is admitted and whose tasks are all terminal
// finishes now; one whose total is no longer admitted runs again.
func (f *FSM) applyDeclare(t *Tenant, e *pb.EnqueueTasks, now uint64) Response {
	scan, d := e.GetDeclareScanId(), e.GetDeclaredTotal()
	if d == 0 {
		return Response{Err: fsmErr(KindInvalidCommand, "declare_scan_id needs a declared total")}
	}
	m, ok := t.meta[scan]
	if !ok {
		return Response{Err: fsmErr(KindScanNotFound, "")}
	}
	m.declared = d
	if !m.admitted() {
		m.finished, m.finishedAt = false, 0
	}
	t.advanceScan(scan, now)
	if f.opts.ProgressFunc != nil {
		f.opts.ProgressFunc(t.name)
	}
	return Response{Revision: t.pool.Snapshot().Revision}
}

// noteCompleted records a fresh completion of a task of scanID and the size
// of its stored result.
func (t *Tenant) noteCompleted(scanID, taskID string, resultBytes int) {
	if m, ok := t.meta[scanID]; ok {
		m.completed = append(m.completed, taskID)
		m.compOrds = append(m.compOrds, m.nextComp)
		m.nextComp++
		m.resultBytes += uint64(resultBytes)
	}
}

// terminalAt reports whether the task with this ID is terminal.
func (t *Tenant) terminalAt(id string) bool {
	task, ok, err := t.pool.GetTask(id)
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
	if m.firstOpen == len(ids) && m.admitted() {
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
// may have made tasks terminal (tenantOp.terminates; v is its value), then
// calls ProgressFunc. A command of any task whose value says it ended none
// walks no scan.
func (f *FSM) noteTerminations(c tenantCall, op tenantOp, v any) {
	taskID, one := op.terminates(c)
	if !one {
		if !endedNone(v) {
			c.t.advanceAllScans(c.now)
		}
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

// endedNone reports whether an anyTask command's value says it made no
// task terminal: a recovery that failed no task (it only requeued, the
// retry rule), an ExpireOldTasks that expired none.
func endedNone(v any) bool {
	switch v := v.(type) {
	case distributed.RecoverySummary:
		return v.TasksFailed == 0
	case int:
		return v == 0
	}
	return false
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
	// NextOrdinal and NextCompletion are the next enqueue and completion
	// ordinals: every task (completion) of the scan so far has a smaller
	// one, purged or not.
	NextOrdinal, NextCompletion uint64
	// Declared is the producer's declared total (0: none); Pending the part
	// of it not yet admitted (Declared - NextOrdinal, at least 0). A scan
	// with Pending > 0 is not Finished.
	Declared, Pending uint64
}

// ScanEntry is a task ID of a scan with its enqueue or completion ordinal.
type ScanEntry struct {
	ID  string
	Ord uint64
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
		Tasks: len(v.t.scans[scanID]), Completed: len(m.completed), ResultBytes: m.resultBytes,
		NextOrdinal: m.nextOrd, NextCompletion: m.nextComp, Declared: m.declared, Pending: m.pending()}, true
}

// ScanTaskWindow returns at most n of the scan's task IDs in enqueue order
// whose ordinal is at least from, with their ordinals.
func (v TenantView) ScanTaskWindow(scanID string, from uint64, n int) []ScanEntry {
	v.f.mu.RLock()
	defer v.f.mu.RUnlock()
	m, ok := v.t.meta[scanID]
	if !ok {
		return nil
	}
	return window(v.t.scans[scanID], m.ords, from, n)
}

// ScanCompletedWindow returns at most n of the scan's completed task IDs
// in completion order whose completion ordinal is at least from, with
// their ordinals.
func (v TenantView) ScanCompletedWindow(scanID string, from uint64, n int) []ScanEntry {
	v.f.mu.RLock()
	defer v.f.mu.RUnlock()
	m, ok := v.t.meta[scanID]
	if !ok {
		return nil
	}
	return window(m.completed, m.compOrds, from, n)
}

// window returns at most n entries of ids (ordinals ords, increasing) from
// the first whose ordinal is at least from.
func window(ids []string, ords []uint64, from uint64, n int) []ScanEntry {
	i, _ := slices.BinarySearch(ords, from)
	var out []ScanEntry
	for ; i < len(ids) && len(out) < n; i++ {
		out = append(out, ScanEntry{ID: ids[i], Ord: ords[i]})
	}
	return out
}

// EntryIDs returns the IDs of entries.
func EntryIDs(entries []ScanEntry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.ID
	}
	return out
}

// forgetPurged removes purged task IDs from the scan index and the scan
// records (docs/adr/0002-purge.md): a scan left with no task is dropped
// with its record; otherwise its completion order loses them, its result
// bytes lose their sizes (resultSize, read before the results were
// purged) and firstOpen moves back by the purged positions before it.
// Ordinals are not renumbered. The index then lists exactly tasks of the
// pool. Only the scans in touched are walked (nil: every scan), so a purge
// of one scan's tasks costs that scan's size, not the tenant's; touched
// must hold the scan of every purged ID (purgeScans).
func (t *Tenant) forgetPurged(ids []string, resultSize map[string]int, touched []string) {
	if len(ids) == 0 {
		return
	}
	gone := make(map[string]bool, len(ids))
	for _, id := range ids {
		gone[id] = true
	}
	if touched == nil {
		touched = slices.Collect(maps.Keys(t.scans))
	}
	for _, scan := range touched {
		t.forgetInScan(scan, gone, resultSize)
	}
}

// forgetInScan removes the gone IDs from one scan's index and record.
func (t *Tenant) forgetInScan(scan string, gone map[string]bool, resultSize map[string]int) {
	list, ok := t.scans[scan]
	if !ok || !slices.ContainsFunc(list, func(id string) bool { return gone[id] }) {
		return
	}
	m := t.meta[scan]
	for _, id := range list {
		if gone[id] {
			m.resultBytes -= uint64(resultSize[id])
		}
	}
	kept, ords, firstOpen := dropIDs(list, m.ords, gone, m.firstOpen)
	if len(kept) == 0 {
		delete(t.scans, scan)
		delete(t.meta, scan)
		return
	}
	t.scans[scan], m.ords, m.firstOpen = kept, ords, firstOpen
	m.completed, m.compOrds, _ = dropIDs(m.completed, m.compOrds, gone, 0)
}

// dropIDs removes the gone IDs from ids and their ordinals, in place, and
// moves pos (a position in ids) back by the removed positions before it.
func dropIDs(ids []string, ords []uint64, gone map[string]bool, pos int) ([]string, []uint64, int) {
	n, newPos := 0, pos
	for i, id := range ids {
		if gone[id] {
			if i < pos {
				newPos--
			}
			continue
		}
		ids[n], ords[n] = id, ords[i]
		n++
	}
	clear(ids[n:])
	return ids[:n], ords[:n], newPos
}
