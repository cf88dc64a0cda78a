// Tests of the scheduling commands (contract Part F) in process against
// the in-memory clienttest server: enqueue --delay/--require-tag/
// --max-in-flight, tasks showing "scheduled", pause, resume, limit,
// scheduling, bad flags (exit 1) and rejected requests (exit 2), and the
// watch label for scheduled, paused and unroutable tasks.
package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func TestCLI_Scheduling(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, out, stderr := b.run(t, "", "enqueue", "--scan", "s1", "--delay", "1h", "--require-tag", "gpu", "--max-in-flight", "2", "a.example", "b.example")
	if code != exitOK || out != "enqueued 2 tasks to scan s1\n" {
		t.Fatalf("enqueue: exit %d, out %q, err %q", code, out, stderr)
	}
	// The command declares the input's total beside the scheduling fields
	// (both kept by the merge of honest enqueue and scheduling).
	code, out, _ = b.run(t, "", "scans", "--json")
	var sj scanJSON
	if code != exitOK || json.Unmarshal([]byte(strings.Split(out, "\n")[0]), &sj) != nil || sj.Declared != 2 || sj.Pending != 0 ||
		sj.Scheduled != 2 || sj.MaxInFlight != 2 {
		t.Fatalf("scans --json after enqueue --delay: exit %d, %q; want declared 2, scheduled 2, max in flight 2", code, out)
	}
	code, out, _ = b.run(t, "", "tasks", "--scan", "s1")
	if code != exitOK || strings.Count(out, "scheduled") != 2 {
		t.Fatalf("tasks: exit %d, want two scheduled tasks:\n%s", code, out)
	}
	code, out, _ = b.run(t, "", "tasks", "--status", "scheduled", "--json")
	var ti taskJSON
	if code != exitOK || json.Unmarshal([]byte(strings.Split(out, "\n")[0]), &ti) != nil || !ti.Scheduled ||
		ti.NotBefore == 0 || len(ti.RequiredTags) != 1 || ti.RequiredTags[0] != "gpu" {
		t.Fatalf("tasks --status scheduled --json: exit %d, %q", code, out)
	}
	if code, out, _ = b.run(t, "", "pause", "s1"); code != exitOK || out != "scan s1: paused, 0 in flight (at most 2), 2 not finished\n" {
		t.Fatalf("pause: exit %d, %q", code, out)
	}
	if code, out, _ = b.run(t, "", "resume", "s1"); code != exitOK || !strings.Contains(out, "scan s1: running") {
		t.Fatalf("resume: exit %d, %q", code, out)
	}
	code, out, _ = b.run(t, "", "--json", "limit", "--max-in-flight", "0", "s1")
	var lim struct {
		MaxInFlight uint32 `json:"max_in_flight"`
		Active      uint32 `json:"active"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &lim) != nil || lim.MaxInFlight != 0 || lim.Active != 2 {
		t.Fatalf("limit --json: exit %d, %q", code, out)
	}
	if code, out, _ = b.run(t, "", "scheduling", "--backoff-base", "2s", "--backoff-cap", "1m", "--fair-scans"); code != exitOK || !strings.Contains(out, "fair scans true") {
		t.Fatalf("scheduling: exit %d, %q", code, out)
	}
	for _, bad := range [][]string{
		{"enqueue", "--scan", "s2", "--require-tag", "quantum", "x"},
		{"enqueue", "--scan", "s2", "--at", "tomorrow", "x"},
		{"enqueue", "--scan", "s2", "--delay", "500ms", "x"},
		{"enqueue", "--scan", "s2", "--backoff-cap", "1m", "x"},
		{"pause"},
		{"limit", "s1", "s2"},
		{"scheduling", "--backoff-base", "1500ms"},
	} {
		if code, _, stderr := b.run(t, "", bad...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", bad, code, exitUsage, stderr)
		}
	}
	if code, _, stderr := b.run(t, "", "scheduling", "--backoff-base", "1m", "--backoff-cap", "2s"); code != exitRejected {
		t.Errorf("scheduling with cap below base: exit %d, want %d (%s)", code, exitRejected, stderr)
	}
	if code, _, stderr := b.run(t, "", "pause", "bad scan"); code != exitRejected {
		t.Errorf("pause of an invalid scan ID: exit %d, want %d (%s)", code, exitRejected, stderr)
	}
}

func TestDescribeScheduling(t *testing.T) {
	if got := describeScheduling(&pb.ScanProgressResponse{}); got != "" {
		t.Fatalf("nothing scheduled: %q", got)
	}
	got := describeScheduling(&pb.ScanProgressResponse{Scheduled: 3, Paused: true, Unroutable: 2, LiveWorkers: 4})
	if got != " scheduled 3 PAUSED | 2 queued need tags no live worker has (4 live)" {
		t.Fatalf("describeScheduling = %q", got)
	}
}

// TestCLI_Schedules: schedules create fires its first tick at once (the
// in-memory node's ticker), the next after --every, each as its own scan;
// list shows it; delete stops it.
func TestCLI_Schedules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, out, stderr := b.run(t, "", "schedules", "create", "--every", "1h", "--scan-prefix", "nightly", "a.example", "b.example")
	if code != exitOK || !strings.Contains(out, "schedule nightly: 2 targets every 1h0m0s") {
		t.Fatalf("schedules create: exit %d, %q, %q", code, out, stderr)
	}
	scanTasks := func(scan string) int {
		_, out, _ := b.run(t, "", "tasks", "--scan", scan, "--json")
		return strings.Count(out, "\n")
	}
	waitCond(t, "tick 1 enqueued", func() bool { return scanTasks("nightly-1") == 2 })
	b.srv.Advance(time.Hour)
	waitCond(t, "tick 2 enqueued", func() bool { return scanTasks("nightly-2") == 2 })
	code, out, _ = b.run(t, "", "schedules", "list")
	if code != exitOK || !strings.Contains(out, "nightly") || !strings.Contains(out, "nightly-2") {
		t.Fatalf("schedules list: exit %d, %q", code, out)
	}
	if code, out, _ = b.run(t, "", "schedules", "delete", "nightly"); code != exitOK || !strings.Contains(out, "deleted schedule nightly") {
		t.Fatalf("schedules delete: exit %d, %q", code, out)
	}
	if code, _, _ = b.run(t, "", "schedules", "delete", "nightly"); code != exitRejected {
		t.Fatalf("deleting a deleted schedule: exit %d, want %d", code, exitRejected)
	}
	for _, bad := range [][]string{
		{"schedules"}, {"schedules", "create", "--every", "1h", "x"}, {"schedules", "create", "--scan-prefix", "p", "x"},
		{"schedules", "create", "--every", "1500ms", "--scan-prefix", "p", "x"}, {"schedules", "frobnicate"},
	} {
		if code, _, stderr := b.run(t, "", bad...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", bad, code, exitUsage, stderr)
		}
	}
}

// TestExplainStall_Scheduling: watch explains a stall that scheduling
// causes — a paused scan, only scheduled tasks, only tasks that need tags
// no live worker declared, a scan at its in-flight limit — and leaves the
// other explanations (no live worker) to explainStall.
func TestExplainStall_Scheduling(t *testing.T) {
	for _, c := range []struct {
		p    *pb.ScanProgressResponse
		want string
	}{
		{&pb.ScanProgressResponse{Total: 3, Queued: 3, Paused: true, LiveWorkers: 1, FreeSlots: 4, MaxResults: 9},
			"scan paused with 3 queued tasks: resume it with termivar-coord resume"},
		{&pb.ScanProgressResponse{Total: 3, Queued: 2, Completed: 1, Scheduled: 2, LiveWorkers: 1, FreeSlots: 4, MaxResults: 9},
			"2 queued tasks are scheduled for later (a delay, a not-before time or a retry backoff)"},
		{&pb.ScanProgressResponse{Total: 3, Queued: 3, Scheduled: 1, Unroutable: 2, LiveWorkers: 2, FreeSlots: 4, MaxResults: 9},
			"2 queued tasks need tags no live worker declared (2 live workers): start a worker with those --tag flags"},
		{&pb.ScanProgressResponse{Total: 3, Queued: 1, Running: 2, MaxInFlight: 2, LiveWorkers: 1, FreeSlots: 4, MaxResults: 9},
			"at its in-flight limit (2 leased or running): 1 queued tasks wait for one to finish"},
		{&pb.ScanProgressResponse{Total: 2, Queued: 2, Unroutable: 2, LiveWorkers: 0, MaxResults: 9},
			"2 queued tasks and no live worker: start one with termivar-coord worker"},
		{&pb.ScanProgressResponse{Total: 2, Queued: 2, Scheduled: 1, LiveWorkers: 1, FreeSlots: 1, MaxResults: 9}, ""},
	} {
		if got := explainStall(c.p); got != c.want {
			t.Errorf("explainStall(%v) = %q, want %q", c.p, got, c.want)
		}
	}
}
