// Benchmark of large results through the node (issue 15). Goal: a 64 KiB
// result is copied as few times as possible between the proposal and the
// result store: marshalled once into its framed log entry, written by
// raft-wal, decoded once by Apply and kept by the store as decoded.
// Method: a real one-voter node; every iteration completes 16 running
// tasks with a 64 KiB result each, proposed together (they share entries,
// as concurrent workers' completions do). Allocations per op and the
// -memprofile's alloc_space by function show each copy; result-MB/s is
// the payload rate.
package node

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wire"
	"github.com/termivar/distributed/raftfsm"
)

func BenchmarkNode_CompleteResult64K(b *testing.B) {
	const per, resultBytes = 16, 64 << 10
	n := openNode(b, b.TempDir(), nil)
	defer n.Close()
	lim := distributed.DefaultLimits()
	lim.MaxTaskRecords, lim.MaxTerminalTasks = distributed.MaxTaskRecords, distributed.MaxTaskRecords
	lim.MaxActiveTasks, lim.MaxQueuedTasks = distributed.MaxActiveTasks, distributed.MaxActiveTasks
	rl := distributed.DefaultResultLimits()
	rl.MaxResults, rl.MaxResultBytes, rl.MaxTotalBytes = distributed.MaxResults, resultBytes, distributed.MaxTotalResultBytes
	mustPropose(b, n, &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "big",
		Limits: wire.LimitsToProto(lim), ResultLimits: wire.ResultLimitsToProto(rl)}}})
	mustPropose(b, n, &pb.Command{Tenant: "big", Op: &pb.Command_RegisterWorker{RegisterWorker: &pb.RegisterWorker{Spec: &pb.WorkerSpec{WorkerId: "w", Capacity: 4096}}}})
	result := make([]byte, resultBytes)
	if _, err := rand.Read(result); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	made := 0
	// leases enqueues and leases the next per tasks (outside the timer).
	leases := func() [][]byte {
		e := &pb.EnqueueTasks{}
		for i := range per {
			e.Tasks = append(e.Tasks, &pb.TaskSpec{TaskId: fmt.Sprintf("t%d", made+i), ScanId: "s", TargetRef: []byte("x"), Priority: 1})
		}
		made += per
		mustPropose(b, n, &pb.Command{Tenant: "big", Op: &pb.Command_Enqueue{Enqueue: e}})
		r := mustPropose(b, n, &pb.Command{Tenant: "big", Op: &pb.Command_AcquireTasks{AcquireTasks: &pb.AcquireTasks{WorkerId: "w", LeaseTtlSecs: 600, MaxTasks: per, Start: true}}})
		var out [][]byte
		for _, a := range r.Value.([]raftfsm.Acquired) {
			lb, _ := a.Lease.MarshalBinary()
			out = append(out, lb)
		}
		return out
	}
	b.ReportAllocs()
	b.SetBytes(per * resultBytes)
	for b.Loop() {
		if made+per > rl.MaxResults {
			b.Fatal("out of task records: run with a smaller -benchtime")
		}
		b.StopTimer()
		ls := leases()
		cmds := make([]*pb.Command, len(ls))
		for i, lb := range ls {
			cmds[i] = &pb.Command{Tenant: "big", Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: lb, Result: result}}}
		}
		b.StartTimer()
		rs, err := n.ProposeAll(ctx, cmds)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rs {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
}
