package raftfsm

import (
	"math"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// applyRerun re-runs terminal tasks through the core's RerunTasks, one
// core command (value: distributed.RerunOutcome): the named tasks, or every
// task of the scan in enqueue order. Named tasks must belong to the scan
// when one is given (ErrInvalidTask otherwise); an unknown scan or task is
// ErrTaskNotFound. Purged tasks (purge.go) are out of the scan index and
// the pool: a scan re-run skips them, a named one is ErrTaskNotFound, and a
// scan whose every task was purged is unknown.
func (f *FSM) applyRerun(c tenantCall) Response {
	r := c.cmd.GetRerunTasks()
	ids, err := rerunIDs(c.t, r)
	if err != nil {
		return Response{Err: err}
	}
	statuses := make([]distributed.TaskStatus, 0, len(r.GetStatuses()))
	for _, s := range r.GetStatuses() {
		if s > math.MaxUint8 {
			return Response{Err: distributed.NewInvalidTaskError("rerun status must be failed, expired or cancelled")}
		}
		statuses = append(statuses, distributed.TaskStatus(s))
	}
	tr, err := c.t.pool.RerunTasks(c.rev, c.now, distributed.RerunRequest{TaskIDs: ids, Statuses: statuses})
	if err == nil {
		c.t.reopenScans(tr.Value.Requeued, c.now)
	}
	return resp(tr, err)
}

// reopenScans: the scans of re-run tasks are running again (scanMeta's
// invariants: a finished scan has only terminal tasks, ids[:firstOpen]
// are terminal), so each is walked again from its start — once per scan a
// re-run touches.
func (t *Tenant) reopenScans(requeued []string, now uint64) {
	seen := map[string]bool{}
	for _, id := range requeued {
		task, ok, err := t.pool.GetTask(id)
		if err != nil || !ok || seen[task.ScanID()] {
			continue
		}
		seen[task.ScanID()] = true
		if m, ok := t.meta[task.ScanID()]; ok {
			m.finished, m.finishedAt, m.firstOpen = false, 0, 0
			t.advanceScan(task.ScanID(), now)
		}
	}
}

// rerunIDs resolves the tasks a RerunTasks command names.
func rerunIDs(t *Tenant, r *pb.RerunTasks) ([]string, error) {
	scan := r.GetScanId()
	if scan == "" {
		return r.GetTaskIds(), nil
	}
	if err := distributed.CheckTaskCommandID(scan); err != nil {
		return nil, err
	}
	all, ok := t.scans[scan]
	if !ok {
		return nil, distributed.NewTaskNotFoundError(scan)
	}
	if len(r.GetTaskIds()) == 0 {
		return all, nil
	}
	member := make(map[string]bool, len(all))
	for _, id := range all {
		member[id] = true
	}
	for _, id := range r.GetTaskIds() {
		if !member[id] {
			return nil, notInScan(t, id)
		}
	}
	return r.GetTaskIds(), nil
}

// notInScan is the error for a named task the scan index does not list:
// an invalid ID, no such task (never enqueued, or purged), or a task of
// another scan.
func notInScan(t *Tenant, id string) error {
	if err := distributed.CheckTaskCommandID(id); err != nil {
		return err
	}
	if _, found, _ := t.pool.GetTask(id); !found {
		return distributed.NewTaskNotFoundError(id)
	}
	return distributed.NewInvalidTaskError("task is not in the scan")
}
