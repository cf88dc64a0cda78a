// Benchmark of a node's restart with a large state (issue 15). Goal: a
// node holding 1 M tasks is serving again within 2 s of Open, because it
// restarts from a recent snapshot (by log bytes, snapbytes.go) and
// restores it quickly. Method: fill a one-voter node with 64 tenants of
// 16 384 queued tasks each (1 048 576 tasks, 64-byte targets, 4 096 per
// enqueue), close it, and time Open until it is ready (Open returns after
// the leader's barrier: every committed entry is applied). Modes: "log"
// (snapshots by entry count only: the fill's ≈ 260 entries never reach
// 8 192, so Open replays the whole log — the case), "bytes" (the
// default 64 MiB byte trigger) and "snapshot" (an explicit snapshot right
// before Close, whose allocations are reported: restore alone). It runs only with
// TERMIVAR_RESTART_BENCH=1 (a fill takes tens of seconds and ≈ 2 GB);
// TERMIVAR_RESTART_TASKS changes the task count, and
// TERMIVAR_RESTART_PROFILE=DIR writes a CPU profile of each Open there.
package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wire"
)

func BenchmarkNode_Restart(b *testing.B) {
	if os.Getenv("TERMIVAR_RESTART_BENCH") != "1" {
		b.Skip("set TERMIVAR_RESTART_BENCH=1 (fills a node with 1 M tasks)")
	}
	tasks := 1 << 20
	if v, err := strconv.Atoi(os.Getenv("TERMIVAR_RESTART_TASKS")); err == nil && v > 0 {
		tasks = v
	}
	for _, mode := range []string{"log", "bytes", "snapshot"} {
		b.Run(mode, func(b *testing.B) {
			snapBytes := int64(-1)
			if mode != "log" {
				snapBytes = DefaultSnapshotBytes
			}
			dir := b.TempDir()
			mut := func(c *Config) { c.SnapshotBytes = snapBytes }
			n := openNode(b, dir, mut)
			fillTasks(b, n, tasks)
			var snapAlloc, heap uint64
			if mode == "snapshot" {
				snapAlloc, heap = snapshotAlloc(b, n)
			}
			stats := n.RaftStats()
			if err := n.Close(); err != nil {
				b.Fatal(err)
			}
			n = nil
			runtime.GC()
			var opened time.Duration
			for b.Loop() {
				stop := startProfile(b, mode)
				start := time.Now()
				n2 := openNode(b, dir, mut)
				opened = time.Since(start)
				stop()
				b.StopTimer()
				if got := n2.FSM().TenantNames(); len(got) < tasks/16384 {
					b.Fatalf("%d tenants after restart", len(got))
				}
				if err := n2.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(opened.Milliseconds()), "restart-ms")
			if mode == "snapshot" {
				b.ReportMetric(float64(snapAlloc), "snapshot-alloc-B")
				b.ReportMetric(float64(heap), "heap-B")
			}
			b.Logf("%s: %d tasks, last log index %s, last snapshot index %s, restart %v", mode, tasks,
				stats["last_log_index"], stats["last_snapshot_index"], opened)
		})
	}
}

// snapshotAlloc takes a snapshot and reports what it allocated
// (TotalAlloc) beside the heap in use before it (HeapInuse after a GC):
// snapshot-alloc-B / heap-B is what a snapshot adds to the node's memory.
func snapshotAlloc(b *testing.B, n *Node) (alloc, heap uint64) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := n.Snapshot(); err != nil {
		b.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, before.HeapInuse
}

// startProfile starts a CPU profile of one Open when asked; the returned
// func stops it.
func startProfile(b *testing.B, mode string) func() {
	dir := os.Getenv("TERMIVAR_RESTART_PROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, "restart-"+mode+".prof"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// fillTasks creates tenants at the core's ceilings and enqueues tasks
// queued tasks into them, 16 384 per tenant, 4 096 per command.
func fillTasks(b *testing.B, n *Node, tasks int) {
	lim := distributed.DefaultLimits()
	lim.MaxTaskRecords, lim.MaxTerminalTasks = distributed.MaxTaskRecords, distributed.MaxTaskRecords
	lim.MaxActiveTasks, lim.MaxQueuedTasks = distributed.MaxActiveTasks, distributed.MaxActiveTasks
	ctx := context.Background()
	target := make([]byte, 64)
	for i := range target {
		target[i] = 'a' + byte(i%26)
	}
	var cmds []*pb.Command
	for t := 0; t*distributed.MaxActiveTasks < tasks; t++ {
		tenant := fmt.Sprintf("tenant%03d", t)
		mustPropose(b, n, &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: tenant, Limits: wire.LimitsToProto(lim)}}})
		for start := t * distributed.MaxActiveTasks; start < min(tasks, (t+1)*distributed.MaxActiveTasks); start += 4096 {
			e := &pb.EnqueueTasks{}
			for i := start; i < min(tasks, start+4096, (t+1)*distributed.MaxActiveTasks); i++ {
				e.Tasks = append(e.Tasks, &pb.TaskSpec{TaskId: fmt.Sprintf("t%07d", i), ScanId: fmt.Sprintf("s%d", i/4096), TargetRef: target, Priority: 1})
			}
			cmds = append(cmds, &pb.Command{Tenant: tenant, Op: &pb.Command_Enqueue{Enqueue: e}})
		}
	}
	for len(cmds) > 0 {
		k := min(len(cmds), 8)
		rs, err := n.ProposeAll(ctx, cmds[:k])
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range rs {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
		cmds = cmds[k:]
	}
}
