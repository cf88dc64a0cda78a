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
// TERMIVAR_RESTART_TASKS changes the task count,
// TERMIVAR_RESTART_PROFILE=DIR writes a CPU and an allocation profile of
// each Open there, and TERMIVAR_RESTART_DIR=DIR keeps the filled data
// dirs there for later runs (restartDir), TERMIVAR_RESTART_GROWTH=G sets
// Config.SnapshotGrowth (default 1). restart-ms is the fastest Open
// of the run (-benchtime Nx opens N times); the log line lists each.
package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	for _, mode := range []string{"log", "bytes", "snapshot", "results", "results-snapshot"} {
		b.Run(mode, func(b *testing.B) {
			snapBytes := int64(-1)
			if mode != "log" {
				snapBytes = DefaultSnapshotBytes
			}
			growth := 0 // Config's default
			if v, err := strconv.Atoi(os.Getenv("TERMIVAR_RESTART_GROWTH")); err == nil && v > 0 {
				growth = v
			}
			mut := func(c *Config) { c.SnapshotBytes, c.SnapshotGrowth = snapBytes, growth }
			dir, filled := restartDir(b, mode)
			var snapAlloc, heap uint64
			if !filled {
				snapAlloc, heap = fillDir(b, dir, mode, tasks, mut)
			}
			runtime.GC()
			var times []time.Duration
			for b.Loop() {
				stop := startProfile(b, mode)
				start := time.Now()
				n2 := openBenchNode(b, dir, mut)
				times = append(times, time.Since(start))
				stop()
				b.StopTimer()
				if got := n2.FSM().TenantNames(); len(got) < wantTenants(mode, tasks) {
					b.Fatalf("%d tenants after restart", len(got))
				}
				if err := n2.Close(); err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				b.StartTimer()
			}
			b.ReportMetric(float64(slices.Min(times).Milliseconds()), "restart-ms")
			if snapAlloc > 0 {
				b.ReportMetric(float64(snapAlloc), "snapshot-alloc-B")
				b.ReportMetric(float64(heap), "heap-B")
			}
			b.Logf("%s: %d tasks, restart (each Open) %v", mode, tasks, times)
		})
	}
}

// wantTenants is the fewest tenants a node filled for mode holds (the
// results modes make at least 3: 2 before their snapshot, 1 after).
func wantTenants(mode string, tasks int) int {
	if strings.HasPrefix(mode, "results") {
		return 3
	}
	return tasks / 16384
}

// restartDir returns the data dir of one mode: a fresh temporary one, or
// with TERMIVAR_RESTART_DIR=DIR the directory DIR/MODE, which the first
// run fills and later runs (of any build) reopen as it is — so that two
// builds are compared on the same data, runs interleaved. filled reports
// that the fill is done.
func restartDir(b *testing.B, mode string) (dir string, filled bool) {
	root := os.Getenv("TERMIVAR_RESTART_DIR")
	if root == "" {
		return b.TempDir(), false
	}
	dir = filepath.Join(root, mode)
	if _, err := os.Stat(filepath.Join(dir, "filled")); err == nil {
		return dir, true
	}
	if err := os.RemoveAll(dir); err != nil {
		b.Fatal(err)
	}
	return dir, false
}

// fillDir fills a node on dir, takes the mode's snapshot (returning what
// it allocated, snapshotAlloc) and closes it, then marks dir filled.
func fillDir(b *testing.B, dir, mode string, tasks int, mut func(*Config)) (snapAlloc, heap uint64) {
	n := openNode(b, dir, mut)
	if strings.HasPrefix(mode, "results") {
		fillResults(b, n, mode)
	} else {
		fillTasks(b, n, tasks)
	}
	if mode == "snapshot" || mode == "results-snapshot" {
		snapAlloc, heap = snapshotAlloc(b, n)
	}
	stats := n.RaftStats()
	if err := n.Close(); err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: filled, last log index %s, last snapshot index %s", mode, stats["last_log_index"], stats["last_snapshot_index"])
	if err := os.WriteFile(filepath.Join(dir, "filled"), nil, 0o600); err != nil {
		b.Fatal(err)
	}
	return snapAlloc, heap
}

// openBenchNode is openNode with a wait long enough for a loaded machine
// (openNode's 20 s ran out at a load average of 15 on 2 cores).
func openBenchNode(b *testing.B, dir string, mut func(*Config)) *Node {
	cfg := Config{DataDir: dir, RaftAddr: "127.0.0.1:0", TickInterval: -1}
	mut(&cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n, err := Open(ctx, cfg)
	if err != nil {
		b.Fatalf("Open: %v", err)
	}
	return n
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
// func stops it. It also writes the allocation profile before and after
// the Open (restart-MODE.allocs-before, -after): pprof's -diff_base of the
// two is what the Open allocated.
func startProfile(b *testing.B, mode string) func() {
	dir := os.Getenv("TERMIVAR_RESTART_PROFILE")
	if dir == "" {
		return func() {}
	}
	base := filepath.Join(dir, "restart-"+mode)
	writeAllocs(b, base+".allocs-before")
	f, err := os.Create(base + ".prof")
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
			writeAllocs(b, base+".allocs-after")
		})
	}
	b.Cleanup(stop) // when Open fails
	return stop
}

// writeAllocs writes the cumulative allocation profile to path.
func writeAllocs(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		b.Fatal(err)
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
