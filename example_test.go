package distributed_test

import (
	"fmt"

	distributed "github.com/termivar/distributed"
)

// Example runs one task through its whole lifecycle: register a worker,
// enqueue, assign, start, complete, then store and aggregate the result.
func Example() {
	pool := distributed.NewWorkerPool()
	results := distributed.NewResultAggregator()
	now := uint64(100)

	w, err := pool.RegisterWorker(pool.Snapshot().Revision, now, distributed.WorkerSpec{WorkerID: "worker-1", Capacity: 2})
	if err != nil {
		panic(err)
	}
	fmt.Println("registered", w.Value.WorkerID(), "generation", w.Value.Generation(), "at revision", w.Revision)

	t, err := pool.TaskQueue().Enqueue(w.Revision, now, distributed.TaskSpec{
		TaskID: "scan-1:host-a", ScanID: "scan-1", TargetRef: "10.0.0.7", Priority: distributed.PriorityHigh,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("enqueued", t.Value) // the target is redacted

	lease, err := pool.AssignNextAvailable(t.Revision, now+1, 30)
	if err != nil {
		panic(err)
	}
	fmt.Println("leased to", lease.Value.WorkerID(), "attempt", lease.Value.Attempt(), "lease", lease.Value.LeaseID(), "expires", lease.Value.ExpiresAt())

	started, err := pool.StartTask(lease.Revision, now+2, lease.Value)
	if err != nil {
		panic(err)
	}
	done, err := pool.CompleteTask(started.Revision, now+5, lease.Value)
	if err != nil {
		panic(err)
	}
	fmt.Println("completion:", done.Value.Kind, "at revision", done.Revision)

	stored, err := results.StoreResult(results.Revision(), done.Value.Receipt, []byte("open ports: 22, 443"))
	if err != nil {
		panic(err)
	}
	fmt.Println("result:", stored.Value.Kind)

	agg, err := results.AggregateResults([]string{"scan-1:host-a"})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s => %s\n", agg[0].TaskID, agg[0].Result)
	fmt.Println(pool.Snapshot())
	// Output:
	// registered worker-1 generation 1 at revision 1
	// enqueued ScanTask{TaskID:scan-1:host-a ScanID:scan-1 TargetRef:<redacted> Status:queued Priority:high Attempt:0 TaskGeneration:0 RecordVersion:1}
	// leased to worker-1 attempt 1 lease 1 expires 131
	// completion: completed at revision 5
	// result: stored
	// scan-1:host-a => open ports: 22, 443
	// {5 105 1 0 0 1 1}
}
