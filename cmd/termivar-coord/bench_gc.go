package main

import (
	"context"
	"fmt"
	"runtime/metrics"
	"time"
)

// benchGC is what this process's collector and allocator counted
// (runtime/metrics, no stop of the world): a run's difference of two says
// what grows with the number of workers (docs/benchmarks.md, "1 024
// workers, session 8"). Embedded, both ends of the loopback are in it.
type benchGC struct {
	cycles, allocBytes, allocObjects uint64
	gcCPU                            float64 // seconds, the runtime's estimate of the collector's CPU
	stackScanBytes                   uint64  // stack bytes the last cycle scanned (not a counter)
	goroutines                       uint64  // goroutines now (not a counter)
}

var benchGCNames = [...]string{
	"/gc/cycles/total:gc-cycles", "/gc/heap/allocs:bytes", "/gc/heap/allocs:objects",
	"/cpu/classes/gc/total:cpu-seconds", "/gc/scan/stack:bytes", "/sched/goroutines:goroutines",
}

// readBenchGC samples the process's collector and allocator.
func readBenchGC() benchGC {
	var s [len(benchGCNames)]metrics.Sample
	for i, n := range benchGCNames {
		s[i].Name = n
	}
	metrics.Read(s[:])
	u := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	var cpu float64
	if s[3].Value.Kind() == metrics.KindFloat64 {
		cpu = s[3].Value.Float64()
	}
	return benchGC{cycles: u(0), allocBytes: u(1), allocObjects: u(2), gcCPU: cpu, stackScanBytes: u(4), goroutines: u(5)}
}

// since is the run's counts: g's counters less before's, g's gauges.
func (g benchGC) since(before benchGC) benchGC {
	return benchGC{cycles: g.cycles - before.cycles, allocBytes: g.allocBytes - before.allocBytes,
		allocObjects: g.allocObjects - before.allocObjects, gcCPU: g.gcCPU - before.gcCPU,
		stackScanBytes: g.stackScanBytes, goroutines: g.goroutines}
}

// line is the run's collector line for tasks tasks ("" when nothing was
// counted).
func (g benchGC) line(tasks int) string {
	if g.allocObjects == 0 || tasks <= 0 {
		return ""
	}
	n := float64(tasks)
	return fmt.Sprintf("\ngc_cycles=%d alloc_bytes_per_task=%.0f allocs_per_task=%.1f gc_cpu_per_task=%s stack_scanned_last_cycle=%d goroutines=%d",
		g.cycles, float64(g.allocBytes)/n, float64(g.allocObjects)/n,
		time.Duration(g.gcCPU/n*float64(time.Second)).Round(10*time.Nanosecond), g.stackScanBytes, g.goroutines)
}

// collected is the run's collector and node figures: as finish read them,
// or read now for a run that failed before finishing.
func (r *benchRun) collected(ctx context.Context) (benchGC, benchNode) {
	if r.doneGC.allocObjects == 0 { // NB: a cumulative count, never 0 once read
		r.doneGC, r.doneNd = readBenchGC(), readBenchNode(ctx, r.f.nodeMetricsURL)
	}
	return r.doneGC.since(r.gc0), r.doneNd.since(r.node0)
}
