package raftfsm

// Goal: a restored tenant costs no more heap per task than the applied
// one it was exported from (memory_test.go's budgets hold after a
// restart too). Method: export a tenant of memTenantTasks queued tasks,
// release it, and restore the state into a new FSM; the HeapAlloc delta
// after runtime.GC, divided by the task count, must be within the queued
// budget.

import (
	"runtime"
	"testing"
)

func TestMemory_RestoredTenantPerTask(t *testing.T) {
	b := memTenant(t)
	memEnqueue(t, b, "scan-q", 0, memTenantTasks)
	state, err := b.f.ExportState()
	if err != nil {
		t.Fatal(err)
	}
	b = nil
	before := memHeap()
	g := New(Options{})
	if err := g.RestoreState(state); err != nil {
		t.Fatal(err)
	}
	state = nil
	restored := float64(int64(memHeap())-int64(before)) / memTenantTasks
	runtime.KeepAlive(g)
	t.Logf("tenant heap per restored queued task %.0f B (budget %d)", restored, memTenantQueuedBudget)
	if restored > memTenantQueuedBudget {
		t.Errorf("tenant heap per restored queued task = %.0f B, want ≤ %d", restored, memTenantQueuedBudget)
	}
}
