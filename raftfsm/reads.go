package raftfsm

import (
	"slices"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// AppliedIndex returns the raft index of the last applied entry.
func (f *FSM) AppliedIndex() uint64 { return f.appliedIndex.Load() }

// Epoch returns the cluster epoch ID, or nil before InitCluster.
func (f *FSM) Epoch() []byte {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Clone(f.epoch)
}

// LastTime returns the logical time of the last applied entry's commands
// (published.go: it does not wait for an Apply in progress).
func (f *FSM) LastTime() uint64 { return f.lastTimePub.Load() }

// Key returns the live key record with this ID as of the last applied
// entry, without waiting for an Apply in progress (published.go P2: a
// revoked key is gone from the moment its revocation is applied).
func (f *FSM) Key(id string) (KeyRecord, bool) {
	return f.pubKeys.get(id)
}

// KeyCount returns how many live keys exist.
func (f *FSM) KeyCount() int { return f.pubKeys.len() }

// TenantNames returns every tenant name, sorted.
func (f *FSM) TenantNames() []string { return f.pubTenants.sortedKeys() }

// Reader is a read-only handle on an FSM: every read the API serves and
// none of the writes (those go through the log: Apply). node.Node hands it
// to the server; a Reader is cheap to copy and safe for concurrent use.
type Reader struct{ f *FSM }

// Reader returns a read-only handle on f.
func (f *FSM) Reader() Reader { return Reader{f: f} }

// Key returns the live key record with this ID.
func (r Reader) Key(id string) (KeyRecord, bool) { return r.f.Key(id) }

// KeyCount returns how many live keys exist.
func (r Reader) KeyCount() int { return r.f.KeyCount() }

// ListKeys lists a tenant's keys (every tenant's for ""), see FSM.ListKeys.
func (r Reader) ListKeys(tenant string, includeRevoked bool) []KeyInfo {
	return r.f.ListKeys(tenant, includeRevoked)
}

// Tenant returns a read handle on the named tenant.
func (r Reader) Tenant(name string) (TenantView, bool) { return r.f.Tenant(name) }

// TenantNames returns every tenant name, sorted.
func (r Reader) TenantNames() []string { return r.f.TenantNames() }

// AppliedIndex returns the raft index of the last applied entry.
func (r Reader) AppliedIndex() uint64 { return r.f.AppliedIndex() }

// LastTime returns the logical time of the last applied command.
func (r Reader) LastTime() uint64 { return r.f.LastTime() }

// StateHash returns the hash of the whole applied state (statehash.go).
func (r Reader) StateHash() (StateHash, error) { return r.f.StateHash() }

// TenantView is a read-only handle on one tenant: it exposes the reads of
// the tenant's WorkerPool and results, never the instances themselves, so
// no write path is reachable from it. The core instances are safe for
// concurrent use; the other accessors copy under the FSM lock.
type TenantView struct {
	f *FSM
	t *Tenant
}

// Tenant returns a read handle on the named tenant, as of the last
// applied entry, without waiting for an Apply in progress (published.go).
func (f *FSM) Tenant(name string) (TenantView, bool) {
	t, ok := f.pubTenants.get(name)
	return TenantView{f: f, t: t}, ok
}

// Name returns the tenant's name.
func (v TenantView) Name() string { return v.t.name }

// GetTask returns a copy of the task record (WorkerPool.GetTask).
func (v TenantView) GetTask(taskID string) (distributed.ScanTask, bool, error) {
	return v.t.pool.GetTask(taskID)
}

// TaskIDs returns every task ID, sorted (WorkerPool.TaskIDs).
func (v TenantView) TaskIDs() []string { return v.t.pool.TaskIDs() }

// GetWorker returns a copy of the worker record (WorkerPool.GetWorker).
func (v TenantView) GetWorker(workerID string) (distributed.WorkerNode, bool, error) {
	return v.t.pool.GetWorker(workerID)
}

// Workers returns copies of every worker record (WorkerPool.Workers).
func (v TenantView) Workers() []distributed.WorkerNode { return v.t.pool.Workers() }

// Counters returns the pool's counters and revision: the core's
// StateSnapshot, which is not a state snapshot (that is ExportState, and
// raft's snapshots are built from it).
func (v TenantView) Counters() distributed.StateSnapshot { return v.t.pool.Snapshot() }

// RecoveryDue reports which background recoveries would do something at
// now (WorkerPool.RecoveryDue).
func (v TenantView) RecoveryDue(now, maxAgeSecs uint64) (expiredLeases, deadWorkers, oldTasks bool) {
	return v.t.pool.RecoveryDue(now, maxAgeSecs)
}

// Limits returns the tenant's core limits.
func (v TenantView) Limits() distributed.Limits { return v.t.limits }

// ResultLimits returns the tenant's result limits.
func (v TenantView) ResultLimits() distributed.ResultLimits { return v.t.resultLimits }

// HasResult reports whether the task has a stored result, without copying it.
func (v TenantView) HasResult(taskID string) bool {
	ok, _ := v.t.results.HasResult(taskID)
	return ok
}

// GetResult returns a copy of a task's result.
func (v TenantView) GetResult(taskID string) ([]byte, bool, error) {
	return v.t.results.GetResult(taskID)
}

// AggregateResults aggregates results in the given order (contract A.11).
func (v TenantView) AggregateResults(ids []string) ([]distributed.AggregatedResult, error) {
	return v.t.results.AggregateResults(ids)
}

// ResultCount returns how many results are stored.
func (v TenantView) ResultCount() int { return v.t.results.ResultCount() }

// ResultBytes returns the stored result bytes.
func (v TenantView) ResultBytes() int { return v.t.results.TotalBytes() }

// ScanTaskIDs returns a copy of the scan's task IDs in enqueue order.
func (v TenantView) ScanTaskIDs(scanID string) []string {
	v.f.mu.RLock()
	defer v.f.mu.RUnlock()
	return slices.Clone(v.t.scans[scanID])
}

// ScanDeclaredTotal returns the number of targets the scan's producer
// declared (EnqueueTasks.declared_total), 0 if none.
func (v TenantView) ScanDeclaredTotal(scanID string) uint64 {
	v.f.mu.RLock()
	defer v.f.mu.RUnlock()
	if m, ok := v.t.meta[scanID]; ok {
		return m.declared
	}
	return 0
}

// WorkerOwner returns the key ID a worker ID is bound to, if any.
func (v TenantView) WorkerOwner(workerID string) (string, bool) {
	v.f.mu.RLock()
	defer v.f.mu.RUnlock()
	k, ok := v.t.owners[workerID]
	return k, ok
}

// RecoveryCommands returns the background recovery commands that would do
// something in the named tenant at logical time now: RecoverExpiredLeases,
// PruneDeadWorkers, AdvanceTime (a scheduled task is due) and ExpireOldTasks (tasks older than maxAgeSecs; 0 or a
// value above the tenant's MaxTaskTTLSecs takes MaxTaskTTLSecs), the
// retention policy's PurgeTasks (terminal tasks that finished more than
// result_retention_secs before now; docs/adr/0002-purge.md) and the due
// ticks of recurring scans (FireSchedule, recurring.go). It reads
// the core's index minima only (O(log n), no record copies), so an idle
// tenant yields none and does not grow the log.
func (v TenantView) RecoveryCommands(now, maxAgeSecs uint64) []*pb.Command {
	if maxAgeSecs == 0 || maxAgeSecs > v.t.limits.MaxTaskTTLSecs {
		maxAgeSecs = v.t.limits.MaxTaskTTLSecs
	}
	expired, dead, old := v.t.pool.RecoveryDue(now, maxAgeSecs)
	var ops []*pb.Command
	if expired {
		ops = append(ops, &pb.Command{Tenant: v.t.name, Op: &pb.Command_RecoverExpiredLeases{RecoverExpiredLeases: &pb.RecoverExpiredLeases{}}})
	}
	if dead {
		ops = append(ops, &pb.Command{Tenant: v.t.name, Op: &pb.Command_PruneDeadWorkers{PruneDeadWorkers: &pb.PruneDeadWorkers{}}})
	}
	if old {
		ops = append(ops, &pb.Command{Tenant: v.t.name, Op: &pb.Command_ExpireOldTasks{ExpireOldTasks: &pb.ExpireOldTasks{MaxAgeSecs: maxAgeSecs}}})
	}
	// A scheduled task whose time has come needs a command at or after it
	// (contract Part F); the recovery commands that wake long-polls are
	// one, else AdvanceTime.
	if !expired && !dead && v.t.pool.WakeDue(now) {
		ops = append(ops, &pb.Command{Tenant: v.t.name, Op: &pb.Command_AdvanceTime{AdvanceTime: &pb.AdvanceTime{}}})
	}
	if purge := v.t.retentionCommand(now, v.ResultRetentionSecs()); purge != nil {
		ops = append(ops, purge)
	}
	return append(ops, v.ScheduleCommands(now)...) // recurring.go
}

// ResultRetentionSecs returns the tenant's result retention policy (0: off).
func (v TenantView) ResultRetentionSecs() uint64 {
	v.f.mu.RLock()
	defer v.f.mu.RUnlock()
	return v.t.retentionSecs
}
