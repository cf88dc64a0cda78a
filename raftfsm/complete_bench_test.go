// Benchmark of the FSM's complete path. Goal: the scan record a completion
// updates (completion order, the scan's first open task, ProgressFunc)
// stays a small part of a completion. Method: complete one running task per
// iteration; tasks are enqueued and leased outside the timer.
package raftfsm

import (
	"strconv"
	"testing"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wire"
)

// BenchmarkFSM_Complete measures the complete path (core completion,
// result store, and the FSM's scan record: completion order and the scan's
// first open task): each iteration completes one running task of a
// 512-task scan with a 16-byte result. Chunks of tasks are enqueued and
// leased with the timer stopped; a new FSM replaces one whose task records
// run out.
func BenchmarkFSM_Complete(b *testing.B) {
	const chunk = 512
	lim := distributed.DefaultLimits()
	lim.MaxTaskRecords, lim.MaxTerminalTasks, lim.MaxActiveTasks, lim.MaxQueuedTasks = 65536, 65536, 16384, 16384
	rl := distributed.DefaultResultLimits()
	rl.MaxResults, rl.MaxTotalBytes = 65536, 256<<20
	var tb *testBundle
	var leases []distributed.TaskLease
	used, scans := 0, 0
	refill := func() {
		if tb == nil || used+chunk > lim.MaxTaskRecords {
			tb = &testBundle{f: New(Options{}), now: 100}
			tb.must(b, &pb.Command{Op: &pb.Command_InitCluster{InitCluster: &pb.InitCluster{EpochId: make([]byte, 16)}}})
			tb.must(b, &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "acme",
				Limits: wire.LimitsToProto(lim), ResultLimits: wire.ResultLimitsToProto(rl)}}})
			tb.must(b, &pb.Command{Op: &pb.Command_RegisterWorker{RegisterWorker: &pb.RegisterWorker{Spec: &pb.WorkerSpec{WorkerId: "w1", Capacity: 4096}}}})
			used = 0
		}
		e := &pb.EnqueueTasks{}
		for i := range chunk {
			e.Tasks = append(e.Tasks, &pb.TaskSpec{TaskId: "s" + strconv.Itoa(scans) + "-" + strconv.Itoa(i), ScanId: "s" + strconv.Itoa(scans), TargetRef: []byte("t"), Priority: 1})
		}
		tb.must(b, &pb.Command{Op: &pb.Command_Enqueue{Enqueue: e}})
		for range chunk / 256 {
			for _, a := range valueOf[[]Acquired](b, tb.must(b, acquireCmd("", "w1", 256))) {
				leases = append(leases, a.Lease)
			}
		}
		used += chunk
		scans++
	}
	result := make([]byte, 16)
	b.ReportAllocs()
	for b.Loop() {
		if len(leases) == 0 {
			b.StopTimer()
			refill()
			b.StartTimer()
		}
		r := tb.f.ApplyCommand(&pb.Command{Version: CommandVersion, Tenant: "acme", NowSecs: tb.now, Op: completeCmd("", leases[0], result).Op}).(Response)
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		leases = leases[1:]
	}
}
