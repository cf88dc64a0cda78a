package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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

// benchNodeSeries are the families read, by name (the Go and process
// collectors of internal/metrics); a summary gives its count.
var benchNodeSeries = map[string]func(*benchNode, float64){
	"process_cpu_seconds_total":     func(n *benchNode, v float64) { n.cpuSecs = v },
	"go_gc_duration_seconds":        func(n *benchNode, v float64) { n.gcCycles = v },
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
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return n
	}
	found := 0
	for name, set := range benchNodeSeries {
		if v, ok := familyValue(families[name]); ok {
			set(&n, v)
			found++
		}
	}
	n.ok = found == len(benchNodeSeries)
	return n
}

// familyValue is the value of mf's one series (a summary's count).
func familyValue(mf *dto.MetricFamily) (float64, bool) {
	if len(mf.GetMetric()) != 1 {
		return 0, false
	}
	m := mf.GetMetric()[0]
	switch mf.GetType() {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue(), true
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue(), true
	case dto.MetricType_SUMMARY:
		return float64(m.GetSummary().GetSampleCount()), true
	case dto.MetricType_UNTYPED:
		return m.GetUntyped().GetValue(), true
	}
	return 0, false
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
