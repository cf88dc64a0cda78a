// `bench --cluster`: a short run against one node and a 3-member loopback
// cluster prints both results, their ratio and a leader-kill recovery with
// a new leader; out-of-range or conflicting flags are usage errors.
package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestBench_Cluster(t *testing.T) {
	var f benchFlags
	if err := newBenchFlagSet(&f).Parse([]string{"--cluster", "3", "--tasks", "400", "--batch", "50", "--workers", "2", "--acquire", "32"}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := runBenchCluster(f, &out); code != exitOK {
		t.Fatalf("bench --cluster 3 = %d:\n%s", code, out.String())
	}
	s := out.String()
	if n := len(regexp.MustCompile(`(?m)^tasks=400 `).FindAllString(s, -1)); n != 2 {
		t.Fatalf("want two runs of 400 tasks, got %d:\n%s", n, s)
	}
	cpu := regexp.MustCompile(`(?m)^process_cpu_per_task=(\S+)$`).FindAllStringSubmatch(s, -1)
	if len(cpu) != 2 {
		t.Fatalf("want a process_cpu_per_task line per run, got %d:\n%s", len(cpu), s)
	}
	for _, m := range cpu {
		if d, err := time.ParseDuration(m[1]); err != nil || d <= 0 {
			t.Fatalf("process_cpu_per_task %q", m[1])
		}
	}
	if !strings.Contains(s, "single_to_cluster_cpu_per_task_ratio=") {
		t.Fatalf("no CPU ratio:\n%s", s)
	}
	cores := regexp.MustCompile(`(?m)^cores_used single=([0-9.]+) cluster=([0-9.]+)$`).FindStringSubmatch(s)
	if cores == nil {
		t.Fatalf("no cores_used line:\n%s", s)
	}
	for _, c := range cores[1:] {
		if v, err := strconv.ParseFloat(c, 64); err != nil || v <= 0 {
			t.Fatalf("cores_used %q", c)
		}
	}
	ratio := regexp.MustCompile(`(?m)^cluster_to_single_ratio=([0-9.]+)$`).FindStringSubmatch(s)
	if ratio == nil {
		t.Fatalf("no ratio:\n%s", s)
	}
	if r, err := strconv.ParseFloat(ratio[1], 64); err != nil || r <= 0 {
		t.Fatalf("ratio %q", ratio[1])
	}
	rec := regexp.MustCompile(`(?m)^leader_kill_recovery=(\S+) \(killed (n\d), next leader (n\d)\)$`).FindStringSubmatch(s)
	if rec == nil {
		t.Fatalf("no recovery line:\n%s", s)
	}
	if d, err := time.ParseDuration(rec[1]); err != nil || d <= 0 || rec[2] == rec[3] {
		t.Fatalf("recovery %q, killed %s, next %s", rec[1], rec[2], rec[3])
	}
	t.Logf("\n%s", s)
}

func TestBench_ClusterFlags(t *testing.T) {
	for _, args := range [][]string{{"--cluster", "8"}, {"--cluster", "-1"}, {"--cluster", "3", "--embedded=false"}} {
		if code := runBench(args); code != exitUsage {
			t.Errorf("bench %v = %d, want %d", args, code, exitUsage)
		}
	}
}
