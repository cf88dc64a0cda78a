// Tests of the scan commands run in process against the in-memory
// clienttest server. Goal: scans prints every scan's state, times, counts
// and result size (table and JSON, bounded by --limit); results --follow
// prints every result exactly once as tasks finish, in enqueue or
// completion order, with targets and cursors, and resumes from a cursor;
// watch explains a stall from the node's facts (result store full, no
// worker, leases to wait for), shows no ETA while nothing moves, and exits
// 4 when the scan ended with failed or expired tasks. Method: a worker
// driven through the client (or an in-process agent), CLI output parsed.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// cliClient is a client of the bundle's server with its admin key.
func (b *testBundle) cliClient(t *testing.T, key string) *client.Client {
	t.Helper()
	if key == "" {
		key = b.srv.Key
	}
	c, err := client.New(client.Config{ServerURL: b.srv.URL, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// leaseAll registers worker w and leases n tasks to it (started, 300 s
// leases); it returns the lease tokens by task ID.
func leaseAll(t *testing.T, c *client.Client, w string, n int) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	if _, err := c.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: w, Capacity: uint32(n)}); err != nil {
		t.Fatal(err)
	}
	acq, err := c.Acquire(ctx, &pb.AcquireRequest{WorkerId: w, MaxTasks: uint32(n), Start: true, LeaseTtlSecs: 300})
	if err != nil || len(acq.GetTasks()) != n {
		t.Fatalf("acquire %d: %v, %v", n, acq, err)
	}
	out := map[string][]byte{}
	for _, lt := range acq.GetTasks() {
		out[lt.GetTargetRef()] = lt.GetLeaseToken()
	}
	return out
}

func TestCLI_Scans(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.cliClient(t, "")
	ctx := context.Background()
	for _, a := range [][]string{{"enqueue", "--scan", "alpha", "a1", "a2"}, {"enqueue", "--scan", "beta", "b1"}} {
		if code, _, stderr := b.run(t, "", a...); code != exitOK {
			t.Fatalf("%v: %s", a, stderr)
		}
	}
	leases := leaseAll(t, c, "w1", 3)
	if _, err := c.Complete(ctx, &pb.CompleteRequest{LeaseToken: leases["a1"], Result: []byte("12345")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(ctx, &pb.CompleteRequest{LeaseToken: leases["b1"], Result: make([]byte, 2048)}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := b.run(t, "", "scans")
	if code != exitOK {
		t.Fatalf("scans: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("scans printed %d lines, want a header and 2 rows:\n%s", len(lines), out)
	}
	for _, col := range []string{"SCAN", "STATE", "CREATED", "FINISHED", "ADMITTED", "QUEUED", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "EXPIRED", "RESULTS", "RESULT SIZE"} {
		if !strings.Contains(lines[0], col) {
			t.Errorf("header %q lacks %s", lines[0], col)
		}
	}
	// alpha: running, not finished ("-"), 2 admitted, 1 running, 1 completed.
	if f := strings.Fields(lines[1]); f[0] != "alpha" || f[1] != "running" || !strings.Contains(lines[1], " - ") || !strings.HasSuffix(lines[1], "5 B") {
		t.Errorf("alpha row = %q", lines[1])
	}
	if f := strings.Fields(lines[2]); f[0] != "beta" || f[1] != "done" || strings.Contains(lines[2], " - ") || !strings.HasSuffix(lines[2], "2.0 KiB") {
		t.Errorf("beta row = %q", lines[2])
	}
	code, out, _ = b.run(t, "", "scans", "--json")
	if code != exitOK {
		t.Fatalf("scans --json: exit %d", code)
	}
	var rows []scanJSON
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r scanJSON
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("scans --json line %q: %v", l, err)
		}
		rows = append(rows, r)
	}
	a, bt := rows[0], rows[1]
	if a.ScanID != "alpha" || a.State != "running" || a.Admitted != 2 || a.Running != 1 || a.Completed != 1 || a.Results != 1 || a.ResultBytes != 5 || a.FinishedAt != 0 || a.CreatedAt == 0 {
		t.Errorf("alpha = %+v", a)
	}
	if bt.ScanID != "beta" || bt.State != "done" || bt.FinishedAt < bt.CreatedAt || bt.ResultBytes != 2048 {
		t.Errorf("beta = %+v", bt)
	}
	if code, out, _ = b.run(t, "", "scans", "--limit", "1", "--json"); code != exitOK || strings.Count(out, "\n") != 1 {
		t.Errorf("scans --limit 1: exit %d, %q", code, out)
	}
	if code, _, _ = b.run(t, "", "scans", "extra"); code != exitUsage {
		t.Errorf("scans extra: exit %d, want %d", code, exitUsage)
	}
	// tasks shows the target.
	code, out, _ = b.run(t, "", "tasks", "--scan", "alpha")
	if code != exitOK || !strings.Contains(out, "TARGET") || !strings.Contains(out, " a2 ") {
		t.Errorf("tasks: exit %d\n%s", code, out)
	}
}

// followLines runs results --follow --json with extra args and parses the
// lines.
func followLines(t *testing.T, b *testBundle, args ...string) []resultJSON {
	t.Helper()
	code, out, stderr := b.run(t, "", append([]string{"results", "--scan", "f", "--follow", "--json"}, args...)...)
	if code != exitOK {
		t.Fatalf("results --follow %v: exit %d: %s", args, code, stderr)
	}
	var rs []resultJSON
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var r resultJSON
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		rs = append(rs, r)
	}
	return rs
}

func TestCLI_ResultsFollow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var targets []string
	for i := range 30 {
		targets = append(targets, fmt.Sprintf("10.1.0.%d", i))
	}
	if code, _, stderr := b.run(t, "", append([]string{"enqueue", "--scan", "f"}, targets...)...); code != exitOK {
		t.Fatalf("enqueue: %s", stderr)
	}
	// The follower starts before any task finished and ends with the scan.
	work(t, b.srv.URL, b.srv.Key, 20*time.Millisecond)
	rs := followLines(t, b)
	if len(rs) != len(targets) {
		t.Fatalf("results --follow printed %d results, want %d", len(rs), len(targets))
	}
	for i, r := range rs {
		if r.TargetRef != targets[i] || r.Result != "r:"+targets[i] || r.Index != i+1 || r.Cursor != fmt.Sprintf("e:%d", i+1) {
			t.Fatalf("result %d = %+v, want target %s in enqueue order with cursor e:%d", i, r, targets[i], i+1)
		}
	}
	// Resume after the 10th: exactly the other 20, in order.
	rest := followLines(t, b, "--cursor", rs[9].Cursor)
	if len(rest) != 20 || rest[0].TargetRef != targets[10] || rest[19].TargetRef != targets[29] {
		t.Fatalf("resumed follow = %d results from %+v", len(rest), rest[0])
	}
	// Completion order: every result once.
	seen := map[string]int{}
	for _, r := range followLines(t, b, "--completion-order") {
		seen[r.TargetRef]++
	}
	for _, tg := range targets {
		if seen[tg] != 1 {
			t.Fatalf("completion-order follow passed %s %d times", tg, seen[tg])
		}
	}
	// Raw output: one line per result.
	code, out, _ := b.run(t, "", "results", "--scan", "f", "--follow")
	if code != exitOK || strings.Count(out, "\n") != 30 || !strings.HasPrefix(out, "r:10.1.0.0\n") {
		t.Errorf("results --follow (raw): exit %d, %d lines", code, strings.Count(out, "\n"))
	}
	// results --json (no follow) carries the target.
	code, out, _ = b.run(t, "", "results", "--scan", "f", "--json")
	if code != exitOK || !strings.Contains(out, `"target_ref":"10.1.0.0"`) {
		t.Errorf("results --json: exit %d, %.80q", code, out)
	}
	if code, _, _ := b.run(t, "", "results", "--scan", "f", "--cursor", "e:1"); code != exitUsage {
		t.Errorf("--cursor without --follow: exit %d, want %d", code, exitUsage)
	}
	if code, _, stderr := b.run(t, "", "results", "--scan", "nope", "--follow"); code != exitRejected || !strings.Contains(stderr, "scan_not_found") {
		t.Errorf("follow of an unknown scan: exit %d, %q", code, stderr)
	}
	if code, _, stderr := b.run(t, "", "results", "--scan", "f", "--follow", "--cursor", "c:1"); code != exitRejected || !strings.Contains(stderr, "cursor") {
		t.Errorf("follow with a cursor of the other order: exit %d, %q", code, stderr)
	}
}

func TestCLI_WatchExitsNonZeroOnFailedTasks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.cliClient(t, "")
	ctx := context.Background()
	if code, _, stderr := b.run(t, "", "enqueue", "--scan", "bad", "x1", "x2"); code != exitOK {
		t.Fatalf("enqueue: %s", stderr)
	}
	if _, err := c.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 2}); err != nil {
		t.Fatal(err)
	}
	// x1 completes; x2 fails until its retries are exhausted.
	for failed := false; !failed; {
		acq, err := c.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w1", MaxTasks: 2, Start: true})
		if err != nil || len(acq.GetTasks()) == 0 {
			t.Fatalf("acquire: %v, %v", acq, err)
		}
		for _, lt := range acq.GetTasks() {
			if lt.GetTargetRef() == "x1" {
				if _, err := c.Complete(ctx, &pb.CompleteRequest{LeaseToken: lt.GetLeaseToken(), Result: []byte("ok")}); err != nil {
					t.Fatal(err)
				}
				continue
			}
			fr, err := c.Fail(ctx, &pb.FailRequest{LeaseToken: lt.GetLeaseToken()})
			if err != nil {
				t.Fatal(err)
			}
			failed = fr.GetRetryExhausted()
		}
	}
	code, out, stderr := b.run(t, "", "watch", "--scan", "bad")
	if code != exitScanFailed || !strings.Contains(stderr, "scan bad ended with 1 failed and 0 expired tasks") || !strings.Contains(out, "1 completed, 1 failed") {
		t.Fatalf("watch of a scan with a failed task: exit %d, stdout %q, stderr %q; want exit %d", code, out, stderr, exitScanFailed)
	}
	if code, _, _ := b.run(t, "", "watch", "--scan", "bad", "--json"); code != exitScanFailed {
		t.Fatalf("watch --json of a scan with a failed task: exit %d, want %d", code, exitScanFailed)
	}
	// A scan whose tasks all completed or were cancelled exits 0.
	if code, _, _ := b.run(t, "", "enqueue", "--scan", "gone", "y1"); code != exitOK {
		t.Fatal("enqueue gone")
	}
	if code, _, _ := b.run(t, "", "cancel", client.DeriveTaskID("gone", "y1")); code != exitOK {
		t.Fatal("cancel")
	}
	if code, out, stderr := b.run(t, "", "watch", "--scan", "gone"); code != exitOK {
		t.Fatalf("watch of a cancelled scan: exit %d, %q %q", code, out, stderr)
	}
}

// watchFor runs watch --json on scan for d and returns its lines (a stalled
// scan never ends by itself).
func watchFor(t *testing.T, c *client.Client, scan string, d time.Duration) []progressJSON {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var buf bytes.Buffer
	err := watchScan(ctx, c, watchOptions{scan: scan, interval: 50 * time.Millisecond, stallAfter: 200 * time.Millisecond, json: true}, &buf)
	if err == nil || ctx.Err() == nil {
		t.Fatalf("watch of a stalled scan = %v, want it to run until cut off", err)
	}
	var out []progressJSON
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var p progressJSON
		if err := json.Unmarshal([]byte(l), &p); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, p)
	}
	return out
}

// TestCLI_WatchExplainsStall: a tenant whose result store holds 2 results
// stalls on its third completion; watch says so, with no ETA. Then the
// reasons for a scan without workers and for one waiting on leases.
func TestCLI_WatchExplainsStall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	admin := b.cliClient(t, "")
	ctx := context.Background()
	rl := &pb.ResultLimits{MaxResults: 2, MaxResultBytes: 1024, MaxTotalBytes: 1 << 20, MaxAggregateItems: 2, MaxAggregateBytes: 1 << 20}
	if _, err := admin.CreateTenant(ctx, &pb.CreateTenantRequest{Name: "small", ResultLimits: rl}); err != nil {
		t.Fatal(err)
	}
	k, err := admin.CreateKey(ctx, &pb.CreateKeyRequest{Tenant: "small", Role: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	c := b.cliClient(t, k.GetKey())
	if _, err := c.Enqueue(ctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{
		{TaskId: "s1", ScanId: "s", TargetRef: "s1"}, {TaskId: "s2", ScanId: "s", TargetRef: "s2"}, {TaskId: "s3", ScanId: "s", TargetRef: "s3"},
	}}); err != nil {
		t.Fatal(err)
	}
	leases := leaseAll(t, c, "w1", 3)
	for _, id := range []string{"s1", "s2"} {
		if _, err := c.Complete(ctx, &pb.CompleteRequest{LeaseToken: leases[id], Result: []byte("r")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Complete(ctx, &pb.CompleteRequest{LeaseToken: leases["s3"], Result: []byte("r")}); err == nil {
		t.Fatal("a third result was stored in a store of two")
	}
	lines := watchFor(t, c, "s", time.Second)
	last := lines[len(lines)-1]
	if want := "result store full (2 of 2 results): raise --max-results or delete scans"; last.Stall != want || last.ETA != nil {
		t.Fatalf("last watch line = %+v, want stall %q and no ETA", last, want)
	}
	// No worker at all: queued tasks wait for one.
	if _, err := admin.Enqueue(ctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "q1", ScanId: "q", TargetRef: "q1"}}}); err != nil {
		t.Fatal(err)
	}
	lines = watchFor(t, admin, "q", 600*time.Millisecond)
	last = lines[len(lines)-1]
	if want := "1 queued tasks and no live worker: start one with termivar-coord worker"; last.Stall != want {
		t.Fatalf("watch of a scan without workers: stall %q, want %q", last.Stall, want)
	}
	// Its task leased and never reported: the lease is what it waits for.
	leaseAll(t, admin, "w9", 1)
	lines = watchFor(t, admin, "q", 600*time.Millisecond)
	last = lines[len(lines)-1]
	if !strings.HasPrefix(last.Stall, "waiting for 1 leases to complete or expire (the first expires in 4m5") && !strings.HasPrefix(last.Stall, "waiting for 1 leases to complete or expire (the first expires in 5m0s") {
		t.Fatalf("watch of a leased task: stall %q", last.Stall)
	}
	// The bar says the same, and shows no ETA.
	bctx, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
	defer cancel()
	var bar bytes.Buffer
	_ = watchScan(bctx, admin, watchOptions{scan: "q", interval: 50 * time.Millisecond, stallAfter: 200 * time.Millisecond}, &bar)
	if out := bar.String(); !strings.Contains(out, "| waiting for 1 leases") || strings.Contains(out, "ETA") {
		t.Fatalf("watch bar of a stalled scan = %q, want the stall and no ETA", out[max(0, len(out)-300):])
	}
}

// TestWatchState_NoETAWhileStalled: the ETA comes from the rate since the
// watch began and disappears when nothing moved for stallAfter (the bar's
// own prediction showed "ETA 0s" then).
func TestWatchState_NoETAWhileStalled(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	var w watchState
	w.observe(&pb.ScanProgressResponse{Total: 100, Queued: 100, LiveWorkers: 1, FreeSlots: 1}, t0)
	if _, ok := w.eta(t0.Add(time.Second), 5*time.Second); ok {
		t.Fatal("an ETA before anything finished")
	}
	w.observe(&pb.ScanProgressResponse{Total: 100, Queued: 90, Completed: 10, LiveWorkers: 1, FreeSlots: 1}, t0.Add(10*time.Second))
	if eta, ok := w.eta(t0.Add(10*time.Second), 5*time.Second); !ok || eta != 90*time.Second {
		t.Fatalf("eta = %v, %v; want 90s (10 tasks per 10 s, 90 left)", eta, ok)
	}
	if _, ok := w.eta(t0.Add(16*time.Second), 5*time.Second); ok {
		t.Fatal("an ETA 6 s after the last change with stallAfter 5 s")
	}
	if got := w.stall(t0.Add(16*time.Second), 5*time.Second); got != "no progress for 6s" {
		t.Fatalf("stall = %q", got)
	}
	// A full result store is reported while the scan still moves.
	w.observe(&pb.ScanProgressResponse{Total: 100, Failed: 11, Completed: 10, Queued: 79, TenantResults: 10, MaxResults: 10}, t0.Add(17*time.Second))
	if got := w.stall(t0.Add(17*time.Second), 5*time.Second); got != "result store full (10 of 10 results): raise --max-results or delete scans" {
		t.Fatalf("stall of a moving scan with a full store = %q", got)
	}
}

func TestExplainStall(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p    *pb.ScanProgressResponse
		want string
	}{
		{&pb.ScanProgressResponse{Total: 2, Completed: 2}, ""},
		{&pb.ScanProgressResponse{Total: 2, Running: 2, TenantResults: 5, MaxResults: 5, NextLeaseExpiry: 10}, "result store full (5 of 5 results): raise --max-results or delete scans"},
		{&pb.ScanProgressResponse{Total: 2, Running: 2, TenantResultBytes: 2048, MaxResultTotalBytes: 2048, MaxResults: 9}, "result store full (2.0 KiB of 2.0 KiB): raise --max-total-result-bytes or delete scans"},
		{&pb.ScanProgressResponse{Total: 3, Queued: 3, MaxResults: 9}, "3 queued tasks and no live worker: start one with termivar-coord worker"},
		{&pb.ScanProgressResponse{Total: 3, Queued: 1, Running: 2, LiveWorkers: 2, MaxResults: 9}, "no worker with free slots (2 live workers, every slot taken; 1 queued tasks)"},
		{&pb.ScanProgressResponse{Total: 3, Leased: 1, Running: 1, Completed: 1, NowSecs: 100, NextLeaseExpiry: 123, LiveWorkers: 1, FreeSlots: 3, MaxResults: 9}, "waiting for 2 leases to complete or expire (the first expires in 23s)"},
		{&pb.ScanProgressResponse{Total: 1, Running: 1, NowSecs: 130, NextLeaseExpiry: 123, MaxResults: 9}, "waiting for 1 leases: the first has expired and is recovered on the node's next tick"},
		{&pb.ScanProgressResponse{Total: 1, Queued: 1, LiveWorkers: 1, FreeSlots: 1, MaxResults: 9}, ""},
		{&pb.ScanProgressResponse{Total: 2, Completed: 2, DeclaredTotal: 5, Pending: 3, MaxResults: 9}, "every admitted task ended and 3 declared targets are not admitted: is the enqueue still running? (re-run it to store the rest)"},
		{&pb.ScanProgressResponse{Total: 2, Completed: 2, DeclaredTotal: 2, MaxResults: 9}, ""},
	} {
		if got := explainStall(c.p); got != c.want {
			t.Errorf("explainStall(%v) = %q, want %q", c.p, got, c.want)
		}
	}
}

// TestScansTable_RetentionColumn: the RETENTION column appears only when a
// scan has a deadline; a scan without one shows "-" there.
func TestScansTable_RetentionColumn(t *testing.T) {
	t.Parallel()
	rows := []*pb.ScanInfo{{ScanId: "a", State: "done", CreatedAt: 1, FinishedAt: 2}, {ScanId: "b", State: "running", CreatedAt: 1}}
	var out bytes.Buffer
	if err := writeScansTable(&out, rows); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "RETENTION") {
		t.Fatalf("a table without deadlines has a RETENTION column:\n%s", out.String())
	}
	deadline := uint64(1_800_000_000)
	rows[0].RetentionDeadline = &deadline
	out.Reset()
	if err := writeScansTable(&out, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if !strings.HasSuffix(lines[0], "RETENTION") || !strings.HasSuffix(lines[1], logicalTime(deadline)) || !strings.HasSuffix(lines[2], " -") {
		t.Fatalf("table with one deadline:\n%s", out.String())
	}
}

// TestScansTable_DeclaredColumns: DECLARED and PENDING appear only when a
// scan declared a total; a scan without one shows "-" in both; --json
// carries declared_total and pending only for a declared scan.
func TestScansTable_DeclaredColumns(t *testing.T) {
	t.Parallel()
	rows := []*pb.ScanInfo{{ScanId: "a", State: "done", Admitted: 5}, {ScanId: "b", State: "running", Admitted: 7}}
	var out bytes.Buffer
	if err := writeScansTable(&out, rows); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "DECLARED") || strings.Contains(out.String(), "PENDING") {
		t.Fatalf("a table without declared totals has their columns:\n%s", out.String())
	}
	rows[1].DeclaredTotal, rows[1].Pending = 20, 13
	out.Reset()
	if err := writeScansTable(&out, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	fields := func(l string) []string { return strings.Fields(l) }
	if h := fields(lines[0]); len(h) < 7 || h[4] != "ADMITTED" || h[5] != "DECLARED" || h[6] != "PENDING" {
		t.Fatalf("header %q, want ADMITTED DECLARED PENDING", lines[0])
	}
	// The dates take two fields each ("-" one): a, done, -, -, 5, -, -.
	if a := fields(lines[1]); a[4] != "5" || a[5] != "-" || a[6] != "-" {
		t.Fatalf("row without a declared total %q, want 5 - -", lines[1])
	}
	if b := fields(lines[2]); b[4] != "7" || b[5] != "20" || b[6] != "13" {
		t.Fatalf("declared row %q, want 7 20 13", lines[2])
	}
	j := toScanJSON(rows[1])
	if j.Declared != 20 || j.Pending != 13 || toScanJSON(rows[0]).Declared != 0 {
		t.Fatalf("scan JSON = %+v", j)
	}
}

// TestCLI_ScansRetentionDeadline: with a tenant retention a finished scan
// shows its deadline (finish time + retention) in the RETENTION column and
// in --json, a running one shows "-" (JSON: absent); after scans delete
// the scan is no longer listed.
func TestCLI_ScansRetentionDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.cliClient(t, "")
	ctx := context.Background()
	for _, a := range [][]string{{"enqueue", "--scan", "done", "d1"}, {"enqueue", "--scan", "run", "r1"}} {
		if code, _, stderr := b.run(t, "", a...); code != exitOK {
			t.Fatalf("%v: %s", a, stderr)
		}
	}
	lease := leaseAll(t, c, "w1", 2)["d1"]
	if _, err := c.Complete(ctx, &pb.CompleteRequest{LeaseToken: lease, Result: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateTenant(ctx, &pb.UpdateTenantRequest{ResultRetentionSecs: 7 * 86400}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := b.run(t, "", "scans", "--json")
	if code != exitOK {
		t.Fatalf("scans --json: exit %d: %s", code, stderr)
	}
	var rows []scanJSON
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r scanJSON
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		rows = append(rows, r)
	}
	if len(rows) != 2 || rows[0].RetentionDeadline == nil || *rows[0].RetentionDeadline != rows[0].FinishedAt+7*86400 || rows[1].RetentionDeadline != nil {
		t.Fatalf("scans --json = %+v, want done with deadline finished_at+7d, run without", rows)
	}
	code, out, _ = b.run(t, "", "scans")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 3 || !strings.HasSuffix(lines[0], "RETENTION") ||
		!strings.HasSuffix(lines[1], logicalTime(*rows[0].RetentionDeadline)) || !strings.HasSuffix(lines[2], " -") {
		t.Fatalf("scans: exit %d\n%s", code, out)
	}
	if code, _, stderr = b.run(t, "", "scans", "delete", "done"); code != exitOK {
		t.Fatalf("scans delete done: exit %d: %s", code, stderr)
	}
	if code, out, _ = b.run(t, "", "scans", "--json"); code != exitOK || strings.Contains(out, `"done"`) || !strings.Contains(out, `"run"`) {
		t.Fatalf("scans after delete: exit %d\n%s", code, out)
	}
}
