package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// benchNode is what a node in its own process reported on its /metrics
// (--node-metrics: serve's --metrics-addr): its process CPU, its
// collector's cycles and its goroutines. With it a run against --server
// says which of the CPU per task is the node's and which the load's own
// client side (docs/benchmarks.md, "1 024 workers, session 8").
type benchNode struct {
	cpuSecs, gcCycles, goroutines float64
	// stackBytes, heapBytes: the node's stacks and heap in use (gauges;
	// the heap's includes garbage not yet collected). The run's are as at
	// its start, when every worker waits in its first Acquire.
	stackBytes, heapBytes float64
	ok                    bool
}

// benchNodeSeries are the series read, by name (the Go and process
// collectors of internal/metrics).
var benchNodeSeries = map[string]func(*benchNode, float64){
	"process_cpu_seconds_total":     func(n *benchNode, v float64) { n.cpuSecs = v },
	"go_gc_duration_seconds_count":  func(n *benchNode, v float64) { n.gcCycles = v },
	"go_goroutines":                 func(n *benchNode, v float64) { n.goroutines = v },
	"go_memstats_stack_inuse_bytes": func(n *benchNode, v float64) { n.stackBytes = v },
	"go_memstats_heap_inuse_bytes":  func(n *benchNode, v float64) { n.heapBytes = v },
}

// readBenchNode scrapes url (the zero benchNode when url is "" or the
// scrape fails: the run goes on without the node's figures).
func readBenchNode(ctx context.Context, url string) benchNode {
	var n benchNode
	if url == "" {
		return n
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return n
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return n
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return n
	}
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		set := benchNodeSeries[name]
		if !ok || set == nil {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			set(&n, v)
			found++
		}
	}
	n.ok = sc.Err() == nil && found == len(benchNodeSeries)
	return n
}

// since is the run's: n's counters less before's, n's goroutines, and
// before's memory (every worker waiting).
func (n benchNode) since(before benchNode) benchNode {
	return benchNode{cpuSecs: n.cpuSecs - before.cpuSecs, gcCycles: n.gcCycles - before.gcCycles,
		goroutines: n.goroutines, stackBytes: before.stackBytes, heapBytes: before.heapBytes, ok: n.ok && before.ok}
}

// line is the node's line for tasks tasks ("" when not read).
func (n benchNode) line(tasks int) string {
	if !n.ok || tasks <= 0 {
		return ""
	}
	return fmt.Sprintf("\nnode_cpu_per_task=%s node_gc_cycles=%.0f node_goroutines=%.0f node_stack_inuse_at_start=%.0f node_heap_inuse_at_start=%.0f",
		time.Duration(n.cpuSecs/float64(tasks)*float64(time.Second)).Round(10*time.Nanosecond), n.gcCycles, n.goroutines, n.stackBytes, n.heapBytes)
}

// nodeCPUPerTask is r's node CPU per task in seconds (ok: it was read).
func (r benchResult) nodeCPUPerTask() (float64, bool) {
	if !r.node.ok || r.tasks <= 0 {
		return 0, false
	}
	return r.node.cpuSecs / float64(r.tasks), true
}
