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

// scanTask is what restoreScanMeta reads of a scan's task: a tenth of a
// ScanTask's bytes, for every task of a restored state.
type scanTask struct {
	id          string
	status      distributed.TaskStatus
	completedAt uint64 // 0 unless completed
}

func scanTaskOf(t distributed.ScanTask) scanTask {
	at, _ := t.CompletedAt()
	return scanTask{id: t.TaskID(), status: t.Status(), completedAt: at}
}

// scanTaskIDs returns the IDs of tasks: the pool's own strings, so a
// restored scan's ID list shares them instead of holding copies decoded
// from the snapshot.
func scanTaskIDs(tasks []scanTask) []string {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.id
	}
	return ids
}

// restoreScanMeta rebuilds a restored scan's metadata: the recorded
// creation, finish time, completion order and ordinals, checked against
// the pool (every listed completion is a completed task of the scan,
// once; purged tasks are listed nowhere), then the derived fields. tasks
// are the scan's tasks, in the order of its task IDs (restoreTenant looked
// each up once).
// Completed tasks the order does not list (a state written before it was
// recorded) are appended in (CompletedAt, enqueue position) order with the
// next completion ordinals, so every member restores the same order.
func restoreScanMeta(pool *distributed.WorkerPool, results *distributed.ResultAggregator, sc *pb.ScanIndex, tasks []scanTask) (*scanMeta, bool) {
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
	var missing []scanTask
	for _, task := range tasks {
		// NB: ResultSize, not GetResult: a copy of every result only to
		// count its bytes was a tenth of a restore's allocations.
		if n, ok, _ := results.ResultSize(task.id); ok {
			m.resultBytes += uint64(n)
		}
		if task.status == distributed.TaskCompleted && !listed[task.id] {
			missing = append(missing, task)
		}
	}
	for m.firstOpen < len(tasks) && tasks[m.firstOpen].status.Terminal() {
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
	ids := make([]string, 0, len(sc.GetCompletedIds()))
	listed := make(map[string]bool, len(sc.GetCompletedIds()))
	for _, id := range sc.GetCompletedIds() {
		task, ok, err := pool.GetTask(id)
		if err != nil || !ok || listed[id] || task.ScanID() != sc.GetScanId() || task.Status() != distributed.TaskCompleted {
			return nil, nil, false
		}
		listed[id] = true
		ids = append(ids, task.TaskID())
	}
	return ids, listed, true
}

// appendMissing appends completed tasks the recorded order lacks, by
// completion time (stable: enqueue position breaks ties).
func (m *scanMeta) appendMissing(missing []scanTask) {
	slices.SortStableFunc(missing, func(a, b scanTask) int { return cmp.Compare(a.completedAt, b.completedAt) })
	for _, task := range missing {
		m.completed = append(m.completed, task.id)
		m.compOrds = append(m.compOrds, m.nextComp)
		m.nextComp++
	}
}
