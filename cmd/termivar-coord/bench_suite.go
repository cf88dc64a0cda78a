package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"
)

// benchSuiteModes are the runs of `bench --suite` (make bench-node), in
// order; the first is the batched default every ratio is taken against,
// so all ratios come from one sitting on the same node. Sizes keep the
// whole suite to a few minutes on the project's 2-core VM.
var benchSuiteModes = [...]struct {
	name string
	set  func(*benchFlags)
}{
	{"batched default", func(f *benchFlags) { f.tasks = 30000 }},
	{"1 task/call, 16 producers, 16 workers, acquire 1", func(f *benchFlags) { f.tasks, f.batch, f.acquireMax, f.producers = 6000, 1, 1, 16 }},
	{"1 task/Enqueue, 16 producers, acquire 128", func(f *benchFlags) { f.tasks, f.batch, f.producers = 6000, 1, 16 }},
	{"rate 2000/s, 1 task/Enqueue, 16 producers", func(f *benchFlags) { f.tasks, f.batch, f.producers, f.rate = 6000, 1, 16, 2000 }},
	{"rate 2000/s, batches of 20", func(f *benchFlags) { f.tasks, f.batch, f.rate = 6000, 20, 2000 }},
	{"256 workers", func(f *benchFlags) { f.tasks, f.workers = 30000, 256 }},
	{"1024 workers", func(f *benchFlags) { f.tasks, f.workers = 30000, 1024 }},
	{"64 KiB results", func(f *benchFlags) { f.tasks, f.resultBytes = 3000, 64<<10 }},
	{"50 000 records resident", func(f *benchFlags) { f.tasks, f.resident = 15000, 50000 }},
	{"1000 idle long-polls", func(f *benchFlags) { f.tasks, f.idleConns = 6000, 1000 }},
}

// runBenchSuite runs benchSuiteModes against url (each in its own fresh
// tenant) and writes every result and then the table of ratios to w.
func runBenchSuite(ctx context.Context, base benchFlags, url, key string, w io.Writer) int {
	results := make([]benchResult, 0, len(benchSuiteModes))
	for _, m := range benchSuiteModes {
		f := base
		f.suite, f.rate, f.resident, f.idleConns = false, 0, 0, 0
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
		results = append(results, res)
	}
	writeSuiteTable(w, results)
	return exitOK
}

// writeSuiteTable prints one row per mode with its ratios to the first
// (the batched default).
func writeSuiteTable(w io.Writer, results []benchResult) {
	if len(results) == 0 {
		return
	}
	b := results[0]
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\ttasks/s\tx default\tCPU/task\tx default\tentries/task\te2e p50\te2e p99\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%s\t%.2f\t%.3f\t%s\t%s\t%s\n", r.mode, r.tasksPerSec(), r.tasksPerSec()/b.tasksPerSec(),
			r.cpuPerTask().Round(100*time.Nanosecond), float64(r.cpuPerTask())/float64(max(b.cpuPerTask(), 1)), r.entriesPerTask(),
			r.e2eP50.Round(10*time.Microsecond), r.e2eP99.Round(10*time.Microsecond), suiteExtra(r))
	}
	tw.Flush()
}

// suiteExtra is a mode's own figure: result throughput, idle memory.
func suiteExtra(r benchResult) string {
	switch {
	case r.idleConns > 0:
		return fmt.Sprintf("%d B/idle conn", r.idleConnBytes)
	case r.resultBytes >= 1<<10:
		return fmt.Sprintf("%.0f MB/s of results", float64(r.resultBytes)*r.tasksPerSec()/1e6)
	}
	return ""
}
