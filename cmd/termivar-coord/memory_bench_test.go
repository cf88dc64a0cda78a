// Memory cost of a node's state, measured on the real binary. Goal: the
// resident memory a `serve` process needs per queued task record, per
// retained completed task and per stored result byte, from which the
// service's per-tenant defaults are derived (docs/benchmarks.md, "Memory
// per task and per result byte"). Method: a fresh `serve` with every task
// limit at its ceiling; its VmRSS (and peak VmHWM) from /proc is read
// before and after each phase, through the API as a producer and a worker
// would: 16 384 queued tasks; 65 536 completed tasks with empty results;
// on a second fresh node, 1 024 completions with 64 KiB results each; after
// each, enough heartbeats for raft to take a snapshot, whose encoding of the
// whole state sets the peak (VmHWM).
// Run: go test -run '^$' -bench BenchmarkServe_Memory -benchtime 1x ./cmd/termivar-coord
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// procKB returns a "VmRSS"-style field of /proc/PID/status in bytes.
func procKB(tb testing.TB, pid int, field string) int64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb << 10
		}
	}
	tb.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// memNode is one measured serve process and an admin client of it.
type memNode struct {
	c        *coord
	cl       *client.Client
	pid      int
	dir      string
	metrics  string // the metrics listener's base URL
	profiles int    // heap profiles written (TERMIVAR_MEMORY_PROFILE_DIR)
}

func startMemNode(tb testing.TB, bin string, extra ...string) *memNode {
	tb.Helper()
	dir := tb.TempDir()
	metricsAddr := "127.0.0.1:" + strconv.Itoa(freePort(tb))
	extra = append([]string{"--metrics-addr", metricsAddr, "--pprof"}, extra...)
	c := startCoord(tb, bin, dir, freePort(tb), freePort(tb), extra...)
	tb.Cleanup(func() { c.kill9(tb) })
	key, err := client.LoadKey(filepath.Join(dir, "admin.key"))
	if err != nil {
		tb.Fatal(err)
	}
	// A measurement of bytes, not latency: the default 1 s per try failed
	// a heartbeat at load average 15 while a snapshot was written.
	cl, err := client.New(client.Config{ServerURL: c.url, Key: key, AttemptTimeout: 30 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	if _, err := cl.RegisterWorker(context.Background(), &pb.RegisterWorkerRequest{WorkerId: "w", Capacity: 4096}); err != nil {
		tb.Fatal(err)
	}
	return &memNode{c: c, cl: cl, pid: c.cmd.Process.Pid, dir: dir, metrics: "http://" + metricsAddr}
}

func (n *memNode) rss(tb testing.TB) int64 { return procKB(tb, n.pid, "VmRSS") }

// liveHeap is the node's heap right after a full collection: pprof's heap
// endpoint with gc=1 collects (runtime.GC, which also finishes sweeping)
// and with debug=1 appends runtime.MemStats read right after it, whose
// HeapAlloc is then the live heap. Unlike RSS it holds no garbage and no
// collector headroom (GOGC), so it is the bytes the state itself keeps.
// (The Go collector's go_memstats_heap_alloc_bytes on /metrics read
// 1.2–6 MB higher than this on the same heap, so it is not used.) With
// TERMIVAR_MEMORY_PROFILE_DIR set, a heap profile is written there too.
func (n *memNode) liveHeap(tb testing.TB) int64 {
	tb.Helper()
	get := func(path string) string {
		resp, err := http.Get(n.metrics + path)
		if err != nil {
			tb.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			tb.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return string(b)
	}
	if dir := os.Getenv("TERMIVAR_MEMORY_PROFILE_DIR"); dir != "" {
		n.profiles++
		name := filepath.Join(dir, fmt.Sprintf("heap-%d-%d.pprof", n.pid, n.profiles))
		if err := os.WriteFile(name, []byte(get("/debug/pprof/heap?gc=1")), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	for _, l := range strings.Split(get("/debug/pprof/heap?gc=1&debug=1"), "\n") {
		if v, ok := strings.CutPrefix(l, "# HeapAlloc = "); ok {
			b, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return b
		}
	}
	tb.Fatal("no HeapAlloc in /debug/pprof/heap?debug=1")
	return 0
}

// enqueue stores count tasks in scan with 18-byte targets.
func (n *memNode) enqueue(tb testing.TB, scan string, count int) {
	tb.Helper()
	_, err := n.cl.EnqueueTargets(context.Background(), client.EnqueueOptions{ScanID: scan, BatchSize: 4096}, func(yield func(string) bool) {
		for i := range count {
			if !yield(fmt.Sprintf("host-%06d.example", i)) {
				return
			}
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// completeAll leases and completes every queued task with result.
func (n *memNode) completeAll(tb testing.TB, result []byte, perCall int) {
	tb.Helper()
	ctx := context.Background()
	for {
		resp, err := n.cl.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w", MaxTasks: 256, Start: true, LeaseTtlSecs: 600})
		if err != nil {
			tb.Fatal(err)
		}
		if len(resp.GetTasks()) == 0 {
			return
		}
		tasks := resp.GetTasks()
		for len(tasks) > 0 {
			k := min(perCall, len(tasks))
			req := &pb.CompleteManyRequest{}
			for _, lt := range tasks[:k] {
				req.Items = append(req.Items, &pb.CompleteRequest{LeaseToken: lt.GetLeaseToken(), Result: result})
			}
			if _, err := n.cl.CompleteMany(ctx, req); err != nil {
				tb.Fatal(err)
			}
			tasks = tasks[k:]
		}
	}
}

// snapshot makes raft take a snapshot (it does every 8 192 log entries)
// by sending heartbeats from four goroutines until a new snapshot exists:
// a snapshot encodes the whole state once more, which sets the peak.
func (n *memNode) snapshot(tb testing.TB) {
	tb.Helper()
	metas := func() int {
		m, _ := filepath.Glob(filepath.Join(n.dir, "raft", "snapshots", "*", "meta.json"))
		return len(m)
	}
	before := metas()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 4)
	for g := range 4 {
		id := fmt.Sprint("hb", g)
		if _, err := n.cl.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: id, Capacity: 1}); err != nil {
			tb.Fatal(err)
		}
		go func() {
			for ctx.Err() == nil {
				if _, err := n.cl.Heartbeat(ctx, &pb.HeartbeatRequest{WorkerId: id, Generation: 1, Status: "healthy"}); err != nil && ctx.Err() == nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	waitWithin(tb, "a raft snapshot", 5*time.Minute, func() bool { return metas() != before })
	cancel()
	for range 4 {
		if err := <-errs; err != nil {
			tb.Fatal(err)
		}
	}
	if metas() == before {
		tb.Fatal("no snapshot within 5 minutes")
	}
}

func BenchmarkServe_Memory(b *testing.B) {
	if os.Getenv("TERMIVAR_MEMORY_BENCH") == "" {
		// NB: minutes of forced snapshots; CI's run-every-benchmark-once
		// pass would spend a third of its budget here.
		b.Skip("set TERMIVAR_MEMORY_BENCH=1 (make bench-memory) to measure RSS per record; the figures are in docs/benchmarks.md")
	}
	bin := buildBinary(b)
	for b.Loop() {
		const queued, completed = 16384, 65536
		n := startMemNode(b, bin)
		base, baseHeap := n.rss(b), n.liveHeap(b)
		// The heap per queued task is measured over the second half only,
		// so that buffers that grow once to their working size (raft-wal's
		// segment writer buffer, the proposer's) are not charged to it.
		n.enqueue(b, "q", queued/2)
		halfHeap := n.liveHeap(b)
		n.enqueue(b, "q2", queued/2)
		afterQueued, queuedHeap := n.rss(b), n.liveHeap(b)
		n.completeAll(b, nil, 256)
		for i := 1; i < completed/queued; i++ {
			n.enqueue(b, fmt.Sprint("c", i), queued)
			n.completeAll(b, nil, 256)
		}
		afterCompleted, completedHeap := n.rss(b), n.liveHeap(b)
		n.snapshot(b)
		b.ReportMetric(float64(base)/(1<<20), "base-MiB")
		b.ReportMetric(float64(afterQueued-base)/queued, "B/queued-task")
		b.ReportMetric(float64(afterCompleted-base)/completed, "B/completed-task")
		b.ReportMetric(float64(queuedHeap-halfHeap)/(queued/2), "heap-B/queued-task")
		b.ReportMetric(float64(completedHeap-baseHeap)/completed, "heap-B/completed-task")
		b.ReportMetric(float64(procKB(b, n.pid, "VmHWM"))/(1<<20), "peak-MiB-tasks")

		const results, size = 1024, 64 << 10
		r := startMemNode(b, bin, "--max-total-result-bytes", strconv.Itoa(256<<20))
		rbase := r.rss(b)
		r.enqueue(b, "r", results)
		r.completeAll(b, make([]byte, size), 16)
		rafter := r.rss(b)
		r.snapshot(b)
		b.ReportMetric(float64(r.rss(b)-rbase)/(results*size), "snap-RSS-B/result-B")
		b.ReportMetric(float64(rafter-rbase)/(results*size), "RSS-B/result-B")
		b.ReportMetric(float64(procKB(b, r.pid, "VmHWM")-rbase)/(results*size), "peak-B/result-B")
	}
}
