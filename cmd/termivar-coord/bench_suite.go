package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// benchSuiteModes are the runs of `bench --suite` (make bench-node), in
// order, each in a fresh tenant of the same node: a warm-up that is not
// reported (the node's first run pays for its heap and log segments),
// then the batched default, the other modes, and the batched default
// again; every ratio is taken against the mean of the two defaults, so
// all ratios come from one sitting and a drift of the shared machine's
// load during the suite shows as the difference between the two. Each
// run's scans are deleted once it is measured, so every mode starts from
// the same heap (the collector's pace follows the live heap). Sizes
// keep the whole suite to a few minutes on the project's 2-core VM.
var benchSuiteModes = [...]struct {
	name string
	set  func(*benchFlags)
}{
	{suiteWarmUp, func(f *benchFlags) { f.tasks = 10000 }},
	{suiteDefault, func(f *benchFlags) { f.tasks = 30000 }},
	{"1 task/call, 16 producers, 16 workers, acquire 1", func(f *benchFlags) { f.tasks, f.batch, f.acquireMax, f.producers = 6000, 1, 1, 16 }},
	{"1 task/call as single calls (--single-calls)", func(f *benchFlags) { f.tasks, f.batch, f.acquireMax, f.producers, f.singleCalls = 6000, 1, 1, 16, true }},
	{"1 task/call with worker sessions (--worker-session)", func(f *benchFlags) {
		f.tasks, f.batch, f.acquireMax, f.producers, f.workerSession = 6000, 1, 1, 16, true
	}},
	{"1 task/call with worker and producer sessions", func(f *benchFlags) {
		f.tasks, f.batch, f.acquireMax, f.producers, f.workerSession, f.producerSession = 6000, 1, 1, 16, true, true
	}},
	{"1 task/Enqueue, 16 producers, acquire 128", func(f *benchFlags) { f.tasks, f.batch, f.producers = 6000, 1, 16 }},
	{"rate 2000/s, 1 task/Enqueue, 16 producers", func(f *benchFlags) { f.tasks, f.batch, f.producers, f.rate = 6000, 1, 16, 2000 }},
	{"rate 2000/s, batches of 20", func(f *benchFlags) { f.tasks, f.batch, f.rate = 6000, 20, 2000 }},
	{"rate 2000/s, batches of 20, worker sessions", func(f *benchFlags) { f.tasks, f.batch, f.rate, f.workerSession = 6000, 20, 2000, true }},
	{"256 workers", func(f *benchFlags) { f.tasks, f.workers = 30000, 256 }},
	{"1024 workers", func(f *benchFlags) { f.tasks, f.workers = 30000, 1024 }},
	{"64 KiB results", func(f *benchFlags) { f.tasks, f.resultBytes = 3000, 64<<10 }},
	{"50 000 records resident", func(f *benchFlags) { f.tasks, f.resident = 15000, 50000 }},
	{"1000 idle long-polls", func(f *benchFlags) { f.tasks, f.idleConns = 6000, 1000 }},
	{suiteDefault, func(f *benchFlags) { f.tasks = 30000 }},
}

const (
	suiteWarmUp  = "warm-up"
	suiteDefault = "batched default"
)

// runBenchSuite runs benchSuiteModes against url (each in its own fresh
// tenant) and writes every result and then the table of ratios to w.
func runBenchSuite(ctx context.Context, flags benchFlags, url, key string, w io.Writer) int {
	results := make([]benchResult, 0, len(benchSuiteModes))
	for _, m := range benchSuiteModes {
		f := flags
		f.suite, f.rate, f.resident, f.idleConns, f.dropAfter = false, 0, 0, 0, true
		f.cpuProfile = "" // the suite's profile covers all its runs (startProfiles)
		f.traceFile = ""  // a trace is of one run
		if m.set(&f); f.idleConns > 0 && !f.embedded {
			continue // the memory of a separate server is not this process's
		}
		res, err := bench(ctx, f, url, key)
		res.mode = m.name
		if err != nil {
			fmt.Fprintf(os.Stderr, "termivar-coord bench --suite: %s: %v\n", m.name, err)
			return exitFor("bench", err)
		}
		fmt.Fprintf(w, "== %s\n%s\n", m.name, res)
		if m.name != suiteWarmUp {
			results = append(results, res)
		}
	}
	base := suiteBase(results)
	writeSuiteTable(w, results, base)
	fl, err := measureRPCFloor(ctx, flags, url, key)
	if err != nil {
		fmt.Fprintf(os.Stderr, "termivar-coord bench --suite: rpc floor: %v\n", err)
		return exitFor("bench", err)
	}
	writeFloor(w, fl, base)
	return exitOK
}

// suiteRate is a throughput and a CPU cost per task, and the node's own
// CPU per task when it was read (--node-metrics against --server; 0: not).
type suiteRate struct {
	tasksPerSec    float64
	cpuPerTask     time.Duration
	nodeCPUPerTask float64 // seconds
}

// suiteBase is the mean of the batched default's runs among results.
func suiteBase(results []benchResult) suiteRate {
	var b suiteRate
	n, nodes := 0, 0
	for _, r := range results {
		if r.mode == suiteDefault {
			b.tasksPerSec += r.tasksPerSec()
			b.cpuPerTask += r.cpuPerTask()
			n++
			if c, ok := r.nodeCPUPerTask(); ok {
				b.nodeCPUPerTask += c
				nodes++
			}
		}
	}
	if n == 0 {
		return suiteRate{tasksPerSec: 1, cpuPerTask: 1}
	}
	out := suiteRate{tasksPerSec: b.tasksPerSec / float64(n), cpuPerTask: max(b.cpuPerTask/time.Duration(n), 1)}
	if nodes == n { // NB: a ratio to a base some runs lack would mislead
		out.nodeCPUPerTask = b.nodeCPUPerTask / float64(n)
	}
	return out
}

// writeSuiteTable prints one row per mode with its ratios to b (the
// batched default's mean).
func writeSuiteTable(w io.Writer, results []benchResult, b suiteRate) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\ttasks/s\tx default\tCPU/task\tx default\tentries/task\tcalls/task\te2e p50\te2e p99\t\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%s\t%.2f\t%.3f\t%.3f\t%s\t%s\t  %s\t\n", r.mode, r.tasksPerSec(), r.tasksPerSec()/b.tasksPerSec,
			r.cpuPerTask().Round(100*time.Nanosecond), float64(r.cpuPerTask())/float64(b.cpuPerTask), r.entriesPerTask(), r.callsPerTask(),
			r.e2eP50.Round(10*time.Microsecond), r.e2eP99.Round(10*time.Microsecond), suiteExtra(r)+suiteNode(r, b))
	}
	tw.Flush()
}

// suiteExtra is a mode's own figure: result throughput, idle memory.
func suiteExtra(r benchResult) string {
	switch {
	case r.idleConns > 0:
		return fmt.Sprintf("%d B/idle conn", r.idle.bytes)
	case r.resultBytes >= 1<<10:
		return fmt.Sprintf("%.0f MB/s of results", float64(r.resultBytes)*r.tasksPerSec()/1e6)
	}
	return ""
}

// suiteNode is the node's own CPU per task against b's when both were read
// (--node-metrics): with the node in its own process, the bench's client
// side (every worker's connection, goroutines and heap) is not in it
// (docs/benchmarks.md, "1 024 workers, session 8").
func suiteNode(r benchResult, b suiteRate) string {
	c, ok := r.nodeCPUPerTask()
	if !ok || b.nodeCPUPerTask <= 0 {
		return ""
	}
	return fmt.Sprintf(" node CPU/task %s x%.2f", time.Duration(c*float64(time.Second)).Round(100*time.Nanosecond), c/b.nodeCPUPerTask)
}

// rpcFloor is what one authenticated API call costs without the log: the
// floor under every per-call mode.
type rpcFloor struct {
	calls   int
	elapsed time.Duration
	cpu     time.Duration
}

// floorCallers sizes measureRPCFloor.
const floorCallers = 32

// floorCalls is how many calls measureRPCFloor makes (a variable: the
// suite's test makes fewer, since under -race the 20 000 took most of
// its time).
var floorCalls = 20000

// measureRPCFloor runs floorCalls Producer.GetTask calls of one existing
// task from floorCallers goroutines (a read: no proposal, no log entry)
// and returns their rate and this process's CPU per call, client and
// server included when embedded.
func measureRPCFloor(ctx context.Context, base benchFlags, url, key string) (rpcFloor, error) {
	f := base
	f.producers, f.workers, f.idleConns = floorCallers, 1, 0
	r := &benchRun{f: f}
	defer r.close()
	if err := r.connect(ctx, url, key); err != nil {
		return rpcFloor{}, err
	}
	req := &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "floor", ScanId: "floor", TargetRef: "floor"}}}
	if err := benchEnqueue(ctx, r.prod, req, &r.errs); err != nil {
		return rpcFloor{}, err
	}
	var next atomic.Int64
	var firstErr atomic.Pointer[error]
	start, cpu0 := time.Now(), processCPU()
	var wg sync.WaitGroup
	for range floorCallers {
		wg.Go(func() {
			for next.Add(1) <= int64(floorCalls) {
				if _, err := r.prod.GetTask(ctx, &pb.GetTaskRequest{TaskId: "floor"}); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return rpcFloor{}, *p
	}
	return rpcFloor{calls: floorCalls, elapsed: time.Since(start), cpu: processCPU() - cpu0}, nil
}

// writeFloor prints the floor and what it bounds: with three calls per
// task (Enqueue, Acquire, Complete), single calls cannot beat a third of
// the floor's call rate, nor cost less CPU than three floor calls.
func writeFloor(w io.Writer, fl rpcFloor, batched suiteRate) {
	perSec := float64(fl.calls) / fl.elapsed.Seconds()
	cpu := fl.cpu / time.Duration(fl.calls)
	fmt.Fprintf(w, "rpc_floor: %d GetTask calls from %d callers: %.0f calls/s, CPU/call %s; bound for 3 calls/task: %.0f tasks/s (%.2fx default), CPU/task >= %s (%.1fx default)\n",
		fl.calls, floorCallers, perSec, cpu.Round(100*time.Nanosecond), perSec/3, perSec/3/batched.tasksPerSec,
		(3 * cpu).Round(100*time.Nanosecond), float64(3*cpu)/float64(batched.cpuPerTask))
}
