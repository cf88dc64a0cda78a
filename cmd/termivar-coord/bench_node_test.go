// --node-metrics (issue 15, 1 024 workers): the node's CPU, GC cycles and
// goroutines are read from its /metrics exposition before and after a
// run; a node that cannot be read gives no line instead of a wrong one.
package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/termivar/distributed/internal/metrics"
)

func TestReadBenchNode_Exposition(t *testing.T) {
	body := "# HELP process_cpu_seconds_total x\nprocess_cpu_seconds_total 12.5\n" +
		"# TYPE go_gc_duration_seconds summary\ngo_gc_duration_seconds{quantile=\"0.5\"} 0.001\ngo_gc_duration_seconds_sum 0.04\ngo_gc_duration_seconds_count 40\ngo_goroutines 2075\n" +
		"go_memstats_stack_inuse_bytes 3.3e+07\ngo_memstats_heap_inuse_bytes 9e+07\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) }))
	defer srv.Close()
	got := readBenchNode(context.Background(), srv.URL)
	if !got.ok || got.cpuSecs != 12.5 || got.gcCycles != 40 || got.goroutines != 2075 || got.stackBytes != 33e6 || got.heapBytes != 90e6 {
		t.Fatalf("readBenchNode = %+v, want cpu 12.5, gc 40, goroutines 2075, stack 33e6, heap 90e6", got)
	}
	run := got.since(benchNode{cpuSecs: 2.5, gcCycles: 30, goroutines: 9, stackBytes: 1e6, heapBytes: 2e6, ok: true})
	if line := run.line(1000); line != "\nnode_cpu_per_task=10ms node_gc_cycles=10 node_goroutines=2075 node_stack_inuse_at_start=1000000 node_heap_inuse_at_start=2000000" {
		t.Errorf("line = %q", line)
	}
}

func TestReadBenchNode_Unreadable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	partial := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("process_cpu_seconds_total 1\n")) // no GC cycles, no goroutines
	}))
	defer partial.Close()
	for name, url := range map[string]string{"none": "", "404": srv.URL, "partial": partial.URL, "refused": "http://127.0.0.1:1/metrics"} {
		n := readBenchNode(context.Background(), url)
		if n.ok {
			t.Errorf("%s: readBenchNode = %+v, want not ok", name, n)
		}
		if line := n.since(n).line(100); line != "" {
			t.Errorf("%s: line = %q, want none", name, line)
		}
	}
}

// TestReadBenchNode_Registry reads a node registry's own exposition (the
// series serve's --metrics-addr serves), so a renamed series fails here.
func TestReadBenchNode_Registry(t *testing.T) {
	reg := metrics.New()
	srv := httptest.NewServer(promhttp.HandlerFor(reg.Reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	if n := readBenchNode(context.Background(), srv.URL); !n.ok || n.goroutines < 1 {
		t.Fatalf("readBenchNode(registry) = %+v, want every series", n)
	}
}

// TestSuite_NodeColumn: the suite's table gives each mode's node CPU per
// task and its ratio to the batched default's when every default run was
// read, and nothing when one was not.
func TestSuite_NodeColumn(t *testing.T) {
	mk := func(mode string, nodeSecs float64, ok bool) benchResult {
		return benchResult{mode: mode, tasks: 1000, elapsed: time.Second, cpu: 30 * time.Millisecond,
			node: benchNode{cpuSecs: nodeSecs, ok: ok}}
	}
	results := []benchResult{mk(suiteDefault, 0.020, true), mk("1024 workers", 0.025, true), mk(suiteDefault, 0.030, true)}
	var out bytes.Buffer
	writeSuiteTable(&out, results, suiteBase(results))
	if !strings.Contains(out.String(), "node CPU/task 25µs x1.00") || !strings.Contains(out.String(), "node CPU/task 20µs x0.80") {
		t.Errorf("table without the node's column:\n%s", out.String())
	}
	results[2].node.ok = false
	out.Reset()
	writeSuiteTable(&out, results, suiteBase(results))
	if strings.Contains(out.String(), "node CPU") {
		t.Errorf("node column with a default run unread:\n%s", out.String())
	}
}
