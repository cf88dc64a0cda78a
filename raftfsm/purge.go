package raftfsm

import (
	"slices"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Purge and retention (contract Part F, docs/adr/0002-purge.md): the FSM
// removes terminal tasks through the core's PurgeTasks, their results
// through PurgeResults, and their IDs from the scan index and the scan
// records (scans.go forgetPurged), in one command.

// MaxResultRetentionSecs bounds a tenant's result_retention_secs (ten
// years): a larger value is a mistake, not a policy.
const MaxResultRetentionSecs = 3650 * 86400

// PurgeValue is the value of PurgeTasks.
type PurgeValue struct {
	// TaskIDs are the purged task IDs, in task-ID order.
	TaskIDs []string
	// Results is how many stored results went with them.
	Results int
	// Cancelled is how many non-terminal tasks cancel_first cancelled.
	Cancelled int
}

// purgeFilter turns the command into the core's filter at logical time
// now; whole_scan names every task the scan index lists (all must be
// terminal after cancel_first). ok is false when older_than_secs reaches
// back before time 0, so that nothing can be old enough.
func (t *Tenant) purgeFilter(p *pb.PurgeTasks, now uint64) (f distributed.PurgeFilter, ok bool, err error) {
	if p.GetFinishedBefore() != 0 && p.GetOlderThanSecs() != 0 {
		return f, false, fsmErr(KindInvalidCommand, "finished_before and older_than_secs exclude each other")
	}
	if p.GetCancelFirst() && !p.GetWholeScan() {
		return f, false, fsmErr(KindInvalidCommand, "cancel_first needs whole_scan")
	}
	if p.GetWholeScan() && (p.GetScanId() == "" || len(p.GetTaskIds()) > 0 || p.GetFinishedBefore() != 0 || p.GetOlderThanSecs() != 0) {
		return f, false, fsmErr(KindInvalidCommand, "whole_scan takes a scan_id and nothing else")
	}
	if p.GetWholeScan() {
		if err := distributed.CheckTaskCommandID(p.GetScanId()); err != nil {
			return f, false, err
		}
		ids := t.scans[p.GetScanId()]
		if len(ids) == 0 {
			return f, false, fsmErr(KindScanNotFound, "")
		}
		return distributed.PurgeFilter{TaskIDs: slices.Clone(ids)}, true, nil
	}
	f = distributed.PurgeFilter{ScanID: p.GetScanId(), FinishedBefore: p.GetFinishedBefore(), TaskIDs: p.GetTaskIds()}
	if age := p.GetOlderThanSecs(); age != 0 {
		if now <= age {
			return f, false, nil
		}
		f.FinishedBefore = now - age
	}
	return f, true, nil
}

// applyPurge runs PurgeTasks (value: PurgeValue). With cancel_first the
// scan's non-terminal tasks are cancelled first (CancelTaskByID, one core
// command each), then every task of the scan is purged.
func (f *FSM) applyPurge(c tenantCall) Response {
	t, p := c.t, c.cmd.GetPurgeTasks()
	filter, ok, err := t.purgeFilter(p, c.now)
	if err != nil {
		return Response{Err: err}
	}
	if !ok {
		return Response{Value: PurgeValue{}}
	}
	rev, cancelled := c.rev, 0
	if p.GetCancelFirst() {
		if rev, cancelled, err = f.cancelLive(t, filter.TaskIDs, rev, c.now); err != nil {
			return Response{Err: err}
		}
		t.advanceScan(p.GetScanId(), c.now) // the scan record follows the cancels
	}
	touched := t.purgeScans(p.GetScanId(), filter) // NB: before the purge, while the tasks exist
	tr, err := t.pool.PurgeTasks(rev, c.now, filter)
	if err != nil {
		return Response{Err: err}
	}
	ids := tr.Value.TaskIDs
	sizes := t.resultSizes(ids)
	rr, err := t.results.PurgeResults(t.results.Revision(), ids)
	if err != nil {
		// NB: unreachable (the IDs are valid, distinct and bounded by the
		// record limit); reported loudly, the task records are gone.
		f.log.Error("result purge failed after task purge", "kind", KindOf(err))
	}
	t.forgetPurged(ids, sizes, touched)
	if len(ids) > 0 && f.opts.ProgressFunc != nil {
		f.opts.ProgressFunc(t.name) // followers re-read: the scan may be gone
	}
	return Response{Revision: tr.Revision, Value: PurgeValue{TaskIDs: ids, Results: rr.Value, Cancelled: cancelled}}
}

// cancelLive cancels the non-terminal tasks among ids, chaining revisions
// from rev (the first call checks the caller's expected revision).
func (f *FSM) cancelLive(t *Tenant, ids []string, rev, now uint64) (uint64, int, error) {
	n := 0
	for _, id := range ids {
		task, found, err := t.pool.GetTask(id)
		if err != nil || !found || task.Status().Terminal() {
			continue
		}
		tr, err := t.pool.CancelTaskByID(rev, now, id)
		if err != nil {
			return rev, n, err
		}
		rev = tr.Revision
		n++
	}
	return rev, n, nil
}

// purgeScans returns the scans a purge of scan (the command's scan_id)
// through filter can touch: the scan — of the filter, or of whole_scan,
// whose filter names its task IDs, none looked up — or the scans of the
// tasks the filter names; nil when it can touch any scan (a purge by
// finish time alone).
func (t *Tenant) purgeScans(scan string, filter distributed.PurgeFilter) []string {
	if scan != "" {
		return []string{scan}
	}
	if len(filter.TaskIDs) == 0 {
		return nil
	}
	seen := map[string]bool{}
	out := []string{}
	for _, id := range filter.TaskIDs {
		if task, ok, err := t.pool.GetTask(id); err == nil && ok && !seen[task.ScanID()] {
			seen[task.ScanID()] = true
			out = append(out, task.ScanID())
		}
	}
	return out
}

// resultSizes returns the sizes of the stored results of ids (for the
// scan records' result bytes, read before the results are purged). NB:
// ResultSize, not GetResult, which copies each result only to measure it.
func (t *Tenant) resultSizes(ids []string) map[string]int {
	out := make(map[string]int, len(ids))
	for _, id := range ids {
		if n, ok, _ := t.results.ResultSize(id); ok {
			out[id] = n
		}
	}
	return out
}

// applyUpdateTenant sets a tenant's retention policy.
func (f *FSM) applyUpdateTenant(u *pb.UpdateTenant) Response {
	t, ok := f.tenants[u.GetName()]
	if !ok {
		return Response{Err: fsmErr(KindUnknownTenant, "")}
	}
	if err := checkRetention(u.GetResultRetentionSecs()); err != nil {
		return Response{Err: err}
	}
	t.retentionSecs = u.GetResultRetentionSecs()
	return Response{Revision: t.pool.Snapshot().Revision}
}

func checkRetention(secs uint64) error {
	if secs > MaxResultRetentionSecs {
		return fsmErr(KindInvalidCommand, "result_retention_secs is above ten years")
	}
	return nil
}

// retentionCommand returns the PurgeTasks the leader proposes for a
// retention policy of age seconds at now, or nil when nothing is old enough
// (WorkerPool.PurgeDue, O(log n)).
func (t *Tenant) retentionCommand(now, age uint64) *pb.Command {
	if age == 0 || now <= age || !t.pool.PurgeDue(now-age) {
		return nil
	}
	return &pb.Command{Tenant: t.name, Op: &pb.Command_PurgeTasks{PurgeTasks: &pb.PurgeTasks{OlderThanSecs: age}}}
}
