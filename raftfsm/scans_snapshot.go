package raftfsm

import (
	"cmp"
	"slices"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// exportScan encodes one scan for the snapshot. Ordinals that are the
// positions (nothing purged) are left out, so a state without purges
// encodes as before.
func (t *Tenant) exportScan(id string) *pb.ScanIndex {
	si := &pb.ScanIndex{ScanId: id, TaskIds: t.scans[id]}
	m, ok := t.meta[id]
	if !ok {
		return si
	}
	si.CreatedAt = m.createdAt
	si.DeclaredTotal = m.declared
	si.CompletedIds = m.completed
	if m.finished {
		si.FinishedAt = m.finishedAt
	}
	si.TaskOrdinals, si.NextOrdinal = exportOrds(m.ords, m.nextOrd)
	si.CompletedOrdinals, si.NextCompletion = exportOrds(m.compOrds, m.nextComp)
	return si
}

// exportOrds returns ords and next as the snapshot carries them: nil when
// ords are 0, 1, 2, ..., and 0 when next is their count.
func exportOrds(ords []uint64, next uint64) ([]uint64, uint64) {
	if next == uint64(len(ords)) {
		return nil, 0 // increasing, below next, len(ords) of them: 0..n-1
	}
	return ords, next
}

// restoreOrds is the inverse of exportOrds for a list of n entries; false
// when the ordinals do not increase strictly below next or do not match
// the list.
func restoreOrds(ords []uint64, next uint64, n int) ([]uint64, uint64, bool) {
	if len(ords) == 0 && next == 0 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = uint64(i)
		}
		return out, uint64(n), true
	}
	if len(ords) != n || next < uint64(n) {
		return nil, 0, false
	}
	for i, o := range ords {
		if o >= next || (i > 0 && o <= ords[i-1]) {
			return nil, 0, false
		}
	}
	return slices.Clone(ords), next, true
}

// scanTaskIDs returns the IDs of tasks: the pool's own strings, so a
// restored scan's ID list shares them instead of holding copies decoded
// from the snapshot.
func scanTaskIDs(tasks []distributed.TaskBrief) []string {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.TaskID()
	}
	return ids
}

// scanBriefs reads back the tasks a restored scan lists, in its order, in
// one call (TaskBriefs: no per-task copy of the record): false unless
// every one is a task of the pool in that scan. buf is reused.
func scanBriefs(pool *distributed.WorkerPool, sc *pb.ScanIndex, buf []distributed.TaskBrief) ([]distributed.TaskBrief, bool) {
	tasks, err := pool.TaskBriefs(sc.GetTaskIds(), buf[:0])
	if err != nil {
		return buf, false
	}
	for _, b := range tasks {
		if !b.Exists() || b.ScanID() != sc.GetScanId() {
			return tasks, false
		}
	}
	return tasks, true
}

// restoreScanMeta rebuilds a restored scan's metadata: the recorded
// creation, finish time, completion order and ordinals, checked against
// the pool (every listed completion is a completed task of the scan,
// once; purged tasks are listed nowhere), then the derived fields. tasks
// are the scan's tasks, in the order of its task IDs (restoreTenant looked
// them up in one call, scanBriefs).
// Completed tasks the order does not list (a state written before it was
// recorded) are appended in (CompletedAt, enqueue position) order with the
// next completion ordinals, so every member restores the same order.
func restoreScanMeta(pool *distributed.WorkerPool, results *distributed.ResultAggregator, sc *pb.ScanIndex, tasks []distributed.TaskBrief) (*scanMeta, bool) {
	m := &scanMeta{createdAt: sc.GetCreatedAt(), declared: sc.GetDeclaredTotal()}
	var ok bool
	if m.ords, m.nextOrd, ok = restoreOrds(sc.GetTaskOrdinals(), sc.GetNextOrdinal(), len(sc.GetTaskIds())); !ok {
		return nil, false
	}
	if m.compOrds, m.nextComp, ok = restoreOrds(sc.GetCompletedOrdinals(), sc.GetNextCompletion(), len(sc.GetCompletedIds())); !ok {
		return nil, false
	}
	var listed map[string]bool
	if m.completed, listed, ok = checkCompletedIDs(pool, sc); !ok {
		return nil, false
	}
	var missing []distributed.TaskBrief
	for _, task := range tasks {
		// NB: ResultSize, not GetResult: a copy of every result only to
		// count its bytes was a tenth of a restore's allocations.
		if n, ok, _ := results.ResultSize(task.TaskID()); ok {
			m.resultBytes += uint64(n)
		}
		if task.Status() == distributed.TaskCompleted && !listed[task.TaskID()] {
			missing = append(missing, task)
		}
	}
	for m.firstOpen < len(tasks) && tasks[m.firstOpen].Status().Terminal() {
		m.firstOpen++
	}
	m.appendMissing(missing)
	m.finished = m.firstOpen == len(tasks) && m.admitted()
	if !m.finished && sc.GetFinishedAt() != 0 {
		return nil, false
	}
	m.finishedAt = sc.GetFinishedAt()
	return m, true
}

// checkCompletedIDs checks that every listed completion is a completed task
// of the scan, once, and returns their IDs (the pool's strings) and
// their set.
func checkCompletedIDs(pool *distributed.WorkerPool, sc *pb.ScanIndex) ([]string, map[string]bool, bool) {
	tasks, err := pool.TaskBriefs(sc.GetCompletedIds(), nil)
	if err != nil {
		return nil, nil, false
	}
	ids := make([]string, 0, len(tasks))
	listed := make(map[string]bool, len(tasks))
	for _, task := range tasks {
		if !task.Exists() || listed[task.TaskID()] || task.ScanID() != sc.GetScanId() || task.Status() != distributed.TaskCompleted {
			return nil, nil, false
		}
		listed[task.TaskID()] = true
		ids = append(ids, task.TaskID())
	}
	return ids, listed, true
}

// completedAt is a brief's completion time, 0 unless completed.
func completedAt(b distributed.TaskBrief) uint64 {
	at, _ := b.CompletedAt()
	return at
}

// appendMissing appends completed tasks the recorded order lacks, by
// completion time (stable: enqueue position breaks ties).
func (m *scanMeta) appendMissing(missing []distributed.TaskBrief) {
	slices.SortStableFunc(missing, func(a, b distributed.TaskBrief) int { return cmp.Compare(completedAt(a), completedAt(b)) })
	for _, task := range missing {
		m.completed = append(m.completed, task.TaskID())
		m.compOrds = append(m.compOrds, m.nextComp)
		m.nextComp++
	}
}
