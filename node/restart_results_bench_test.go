// The results modes of BenchmarkNode_Restart (issue 15). Goal: with
// snapshots whose trigger grows with the last snapshot's size
// (Config.SnapshotGrowth, snapbytes.go), a node holding results replays up
// to SnapshotGrowth × its last snapshot of result log at restart; measure
// what that costs against restoring the same state from a snapshot alone.
// Method: tenants of 2 048 completed tasks with 64 KiB results each
// (128 MiB per tenant; TERMIVAR_RESTART_RESULT_TENANTS, default 2, of them
// before the snapshot); "results" takes a snapshot of those, then adds
// results until the log after it is just below the trigger's limit
// (growth × the snapshot: the most a restart replays) and closes;
// "results-snapshot" fills the same way and takes a snapshot right before
// Close (restore only, of the same final state).
package node

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strconv"
	"testing"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wire"
	"github.com/termivar/distributed/raftfsm"
)

const (
	restartResultBytes     = 64 << 10
	restartResultsByTenant = 2048 // 128 MiB of results per tenant
)

// fillResults fills n as the results modes' doc says and returns the
// number of tenants it made.
func fillResults(b *testing.B, n *Node, mode string) int {
	before := 2
	if v, err := strconv.Atoi(os.Getenv("TERMIVAR_RESTART_RESULT_TENANTS")); err == nil && v > 0 {
		before = v
	}
	result := make([]byte, restartResultBytes)
	if _, err := rand.Read(result); err != nil {
		b.Fatal(err)
	}
	tenants := 0
	next := func(stop func() bool) {
		fillResultTenant(b, n, fmt.Sprintf("results%03d", tenants), result, stop)
		tenants++
	}
	for range before {
		next(func() bool { return false })
	}
	if err := n.Snapshot(); err != nil {
		b.Fatal(err)
	}
	snap := lastSnapshotIndex(b, n)
	waitFor(b, "the snapshot's results", func() bool { return n.snapTrig.lastResults.Load() > 0 })
	// NB: stop one 8 MiB acquire's worth of completions before the limit.
	full := func() bool { return n.snapTrig.applied.Load()+9<<20 >= n.snapTrig.limit() }
	for !full() {
		next(full)
	}
	if got := lastSnapshotIndex(b, n); got != snap {
		b.Fatalf("a snapshot at %d after the explicit one at %d: the fill passed the trigger", got, snap)
	}
	b.Logf("%s: snapshot of %d B of results, log after it %d B (%d B of results), limit %d B", mode, n.snapTrig.lastResults.Load(),
		n.snapTrig.applied.Load(), n.snapTrig.applied.Load()-n.snapTrig.commands.Load(), n.snapTrig.limit())
	return tenants
}

// fillResultTenant creates tenant and completes up to
// restartResultsByTenant tasks in it with result, 256 per acquire,
// until stop says so.
func fillResultTenant(b *testing.B, n *Node, tenant string, result []byte, stop func() bool) {
	lim := distributed.DefaultLimits()
	lim.MaxTaskRecords, lim.MaxTerminalTasks = distributed.MaxTaskRecords, distributed.MaxTaskRecords
	lim.MaxActiveTasks, lim.MaxQueuedTasks = distributed.MaxActiveTasks, distributed.MaxActiveTasks
	rl := distributed.DefaultResultLimits()
	rl.MaxResults, rl.MaxResultBytes, rl.MaxTotalBytes = distributed.MaxResults, restartResultBytes, distributed.MaxTotalResultBytes
	mustPropose(b, n, &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: tenant,
		Limits: wire.LimitsToProto(lim), ResultLimits: wire.ResultLimitsToProto(rl)}}})
	mustPropose(b, n, &pb.Command{Tenant: tenant, Op: &pb.Command_RegisterWorker{RegisterWorker: &pb.RegisterWorker{Spec: &pb.WorkerSpec{WorkerId: "w", Capacity: raftfsm.MaxAcquireTasks}}}})
	e := &pb.EnqueueTasks{}
	for i := range restartResultsByTenant {
		e.Tasks = append(e.Tasks, &pb.TaskSpec{TaskId: fmt.Sprintf("t%05d", i), ScanId: "s", TargetRef: []byte("x"), Priority: 1})
	}
	mustPropose(b, n, &pb.Command{Tenant: tenant, Op: &pb.Command_Enqueue{Enqueue: e}})
	for done := 0; done < restartResultsByTenant && !stop(); done += raftfsm.MaxAcquireTasks {
		r := mustPropose(b, n, &pb.Command{Tenant: tenant, Op: &pb.Command_AcquireTasks{AcquireTasks: &pb.AcquireTasks{
			WorkerId: "w", LeaseTtlSecs: 3600, MaxTasks: raftfsm.MaxAcquireTasks, Start: true}}})
		var cmds []*pb.Command
		for _, a := range r.Value.([]raftfsm.Acquired) {
			lb, _ := a.Lease.MarshalBinary()
			cmds = append(cmds, &pb.Command{Tenant: tenant, Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: lb, Result: result}}})
		}
		rs, err := n.ProposeAll(context.Background(), cmds)
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
