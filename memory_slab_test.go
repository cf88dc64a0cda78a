package distributed

// Goal: records a restore hands out from chunks (slab.go) are freed when
// they are purged, like records allocated one by one. Method: restore a
// pool of completed tasks, purge every one of them, and compare the heap
// freed with the heap the restore took (HeapAlloc after runtime.GC, as
// memory_test.go).

import (
	"runtime"
	"testing"
)

func TestMemory_RestoredRecordsFreedByPurge(t *testing.T) {
	const n = 8192
	p, err := NewWorkerPoolWithLimits(MaximumLimits())
	if err != nil {
		t.Fatal(err)
	}
	r, _ := NewResultAggregatorWithLimits(MaximumResultLimits())
	memFillCompleted(t, p, r, n)
	state, err := p.ExportState()
	if err != nil {
		t.Fatal(err)
	}
	p, r = nil, nil
	before := heapInUse()
	q, err := RestoreWorkerPool(state)
	if err != nil {
		t.Fatal(err)
	}
	restored := heapInUse()
	out, err := q.PurgeTasks(q.c.revision, q.c.logicalTime, PurgeFilter{FinishedBefore: q.c.logicalTime + 1})
	if err != nil || len(out.Value.TaskIDs) != n {
		t.Fatalf("PurgeTasks purged %d of %d tasks: %v", len(out.Value.TaskIDs), n, err)
	}
	out = Transition[PurgeOutcome]{}
	purged := heapInUse()
	runtime.KeepAlive(q)
	runtime.KeepAlive(state)
	took, kept := int64(restored)-int64(before), int64(purged)-int64(before)
	t.Logf("restore of %d completed tasks took %d B per task; after purging them all %d B per task remain", n, took/n, kept/n)
	// What remains is the task map's table (Go maps do not shrink): a
	// fraction of a record.
	if kept*4 > took {
		t.Errorf("after purging every restored task %d B per task remain of %d, want ≤ a quarter", kept/n, took/n)
	}
}
