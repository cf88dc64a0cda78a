package raftfsm

import (
	"slices"

	distributed "github.com/termivar/distributed"
)

// AppliedIndex returns the raft index of the last applied entry.
func (f *FSM) AppliedIndex() uint64 { return f.appliedIndex.Load() }

// Epoch returns the cluster epoch ID, or nil before InitCluster.
func (f *FSM) Epoch() []byte {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Clone(f.epoch)
}

// LastTime returns the logical time of the last applied command.
func (f *FSM) LastTime() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.lastTime
}

// Key returns the key record with this ID.
func (f *FSM) Key(id string) (KeyRecord, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	k, ok := f.keys[id]
	return k, ok
}

// KeyCount returns how many keys exist.
func (f *FSM) KeyCount() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.keys)
}

// TenantNames returns every tenant name, sorted.
func (f *FSM) TenantNames() []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return sortedKeys(f.tenants)
}

// TenantView is a read handle on one tenant. The core instances are safe
// for concurrent use; the other accessors copy under the FSM lock.
type TenantView struct {
	f *FSM
	t *Tenant
}

// Tenant returns a read handle on the named tenant.
func (f *FSM) Tenant(name string) (TenantView, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	t, ok := f.tenants[name]
	return TenantView{f: f, t: t}, ok
}

// Name returns the tenant's name.
func (v TenantView) Name() string { return v.t.name }

// Pool returns the tenant's WorkerPool. Callers must only read through it.
func (v TenantView) Pool() *distributed.WorkerPool { return v.t.pool }

// Limits returns the tenant's core limits.
func (v TenantView) Limits() distributed.Limits { return v.t.limits }

// ResultLimits returns the tenant's result limits.
func (v TenantView) ResultLimits() distributed.ResultLimits { return v.t.resultLimits }

// GetResult returns a copy of a task's result.
// HasResult reports whether the task has a stored result, without copying it.
func (v TenantView) HasResult(taskID string) bool {
	ok, _ := v.t.results.HasResult(taskID)
	return ok
}

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

// WorkerOwner returns the key ID a worker ID is bound to, if any.
func (v TenantView) WorkerOwner(workerID string) (string, bool) {
	v.f.mu.RLock()
	defer v.f.mu.RUnlock()
	k, ok := v.t.owners[workerID]
	return k, ok
}
