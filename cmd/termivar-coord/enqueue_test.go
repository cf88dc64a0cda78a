// Tests of the enqueue command's outcomes. Goal: the exit code says
// whether everything asked for is stored, the message says what was stored
// and why the rest was not, nothing is dropped silently, and a re-run of
// the same command completes without duplicates. Method: the command runs
// in process against the clienttest server (the real API and FSM) with
// small tenant limits; each case checks the exit code, the message and
// the tasks the server stores.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/client"
	"github.com/termivar/distributed/client/clienttest"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// setupLimits is setup with the system tenant's four task bounds set.
func setupLimits(t *testing.T, records, active, queued, terminal int) *testBundle {
	t.Helper()
	l := distributed.DefaultLimits()
	l.MaxTaskRecords, l.MaxActiveTasks, l.MaxQueuedTasks, l.MaxTerminalTasks = records, active, queued, terminal
	srv, err := clienttest.New(clienttest.Options{Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return &testBundle{srv: srv}
}

// scanTargets returns the scan's stored tasks as task ID → target, failing
// on a task listed twice.
func scanTargets(t *testing.T, c *client.Client, scan string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := c.EachTask(context.Background(), &pb.ListTasksRequest{ScanId: scan}, func(ti *pb.TaskInfo) error {
		if _, dup := m[ti.GetTaskId()]; dup {
			return fmt.Errorf("task %s listed twice", ti.GetTaskId())
		}
		m[ti.GetTaskId()] = ti.GetTargetRef()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// mustStore fails unless the scan stores exactly targets under their
// derived IDs.
func mustStore(t *testing.T, c *client.Client, scan string, targets []string) {
	t.Helper()
	got := scanTargets(t, c, scan)
	if len(got) != len(targets) {
		t.Fatalf("scan %s stores %d tasks, want %d", scan, len(got), len(targets))
	}
	for _, tg := range targets {
		if got[client.DeriveTaskID(scan, tg)] != tg {
			t.Fatalf("scan %s lacks target %q under its derived ID", scan, tg)
		}
	}
}

func writeTargets(t *testing.T, lines ...string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "targets.txt")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

func numbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d.example", prefix, i)
	}
	return out
}

func TestCLI_EnqueueDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	file := writeTargets(t, "a.example", "b.example", "a.example", "# c", "c.example", "", "a.example")
	code, out, stderr := b.run(t, "", "enqueue", "--scan", "s", "--quiet", "--file", file)
	want := "enqueued 3 tasks to scan s (2 duplicate lines stored once (line 3, line 7))\n"
	if code != exitOK || out != want {
		t.Fatalf("enqueue: exit %d, out %q, err %q; want 0, %q", code, out, stderr, want)
	}
	mustStore(t, b.cliClient(t, ""), "s", []string{"a.example", "b.example", "c.example"})
	// One repeated line: one task, exit 0, said so.
	code, out, _ = b.run(t, "x.example\nx.example\n", "--json", "enqueue", "--scan", "one", "-")
	var j enqueueJSON
	if code != exitOK || json.Unmarshal([]byte(out), &j) != nil || j.Enqueued != 1 || j.Duplicates != 1 || !j.Complete || len(j.DuplicateLines) != 1 || j.DuplicateLines[0] != 2 {
		t.Fatalf("enqueue x x: exit %d, out %q", code, out)
	}
	mustStore(t, b.cliClient(t, ""), "one", []string{"x.example"})
	// The re-run stores nothing new and exits 0.
	code, out, _ = b.run(t, "", "enqueue", "--scan", "s", "--quiet", "--file", file)
	if code != exitOK || !strings.HasPrefix(out, "enqueued 0 tasks to scan s (3 already present; 2 duplicate lines") {
		t.Fatalf("re-run: exit %d, out %q", code, out)
	}
	mustStore(t, b.cliClient(t, ""), "s", []string{"a.example", "b.example", "c.example"})
}

func TestCLI_EnqueueCollisions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if code, _, stderr := b.run(t, "", "enqueue", "--scan", "other", "--task-id", "x1", "p.example"); code != exitOK {
		t.Fatalf("enqueue other: %s", stderr)
	}
	code, out, stderr := b.run(t, "", "enqueue", "--scan", "s", "--quiet", "--task-id", "y0", "--task-id", "x1", "--task-id", "y0", "q0.example", "q1.example", "q2.example")
	if code != exitRejected {
		t.Fatalf("enqueue with collisions: exit %d, want %d; out %q err %q", code, exitRejected, out, stderr)
	}
	for _, want := range []string{"argument 2: task x1 already belongs to scan other", "argument 3: task y0 is given to an earlier line with another target",
		"2 targets not stored because the task ID is taken", "1 of 3 targets are stored"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if out != "enqueued 1 tasks to scan s\n" {
		t.Errorf("stdout = %q", out)
	}
	c := b.cliClient(t, "")
	if got := scanTargets(t, c, "s"); len(got) != 1 || got["y0"] != "q0.example" {
		t.Fatalf("scan s stores %v", got)
	}
	if got := scanTargets(t, c, "other"); len(got) != 1 || got["x1"] != "p.example" {
		t.Fatalf("scan other stores %v", got)
	}
	// The collisions are off the declared total (3 distinct lines, 2 never
	// stored): nothing is pending, so the scan can finish.
	if p, err := c.ScanProgress(context.Background(), &pb.ScanProgressRequest{ScanId: "s"}); err != nil || p.GetDeclaredTotal() != 1 || p.GetPending() != 0 {
		t.Fatalf("ScanProgress(s) = %v, %v; want declared 1, pending 0", p, err)
	}
	// This scan's own ID with another target.
	code, _, stderr = b.run(t, "", "enqueue", "--scan", "s", "--quiet", "--task-id", "y0", "z.example")
	if code != exitRejected || !strings.Contains(stderr, "argument 1: task y0 is already in this scan with another target") {
		t.Fatalf("own ID, other target: exit %d, err %q", code, stderr)
	}
	if got := scanTargets(t, c, "s"); len(got) != 1 || got["y0"] != "q0.example" {
		t.Fatalf("scan s stores %v after a refused collision", got)
	}
}

func TestCLI_EnqueueLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                              string
		records, active, queued, terminal int
		done, n, fit                      int
		msg                               []string
	}{
		{"records", 8, 8, 8, 8, 0, 10, 8, []string{"max_task_records limit (8)", "8 of 10 targets are stored", "--max-task-records", "delete finished scans (scans delete SCAN)", "tenants update --result-retention"}},
		{"active", 16, 4, 4, 16, 0, 6, 4, []string{"max_active_tasks limit (4)", "4 of 6 targets are stored", "--max-active-tasks", "leave out --no-wait"}},
		{"queued", 16, 8, 3, 16, 0, 6, 3, []string{"max_queued_tasks limit (3)", "3 of 6 targets are stored", "--max-queued-tasks"}},
		{"terminal", 16, 4, 4, 8, 6, 6, 2, []string{"max_terminal_tasks limit (8)", "2 of 6 targets are stored", "--max-terminal-tasks"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setupLimits(t, tt.records, tt.active, tt.queued, tt.terminal)
			c := b.cliClient(t, "")
			finish(t, c, tt.done)
			in := numbered("t", tt.n)
			code, out, stderr := b.run(t, "", append([]string{"enqueue", "--scan", "s", "--no-wait", "--quiet"}, in...)...)
			if code != exitRejected {
				t.Fatalf("exit %d, want %d; out %q err %q", code, exitRejected, out, stderr)
			}
			for _, want := range tt.msg {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			mustStore(t, c, "s", in[:tt.fit])
			// Without --no-wait the full records limit is still an error
			// (it frees only when terminal tasks are deleted).
			if tt.name == "records" {
				code, _, stderr = b.run(t, "", append([]string{"enqueue", "--scan", "s", "--quiet"}, in...)...)
				if code != exitRejected || !strings.Contains(stderr, "8 of 10 targets are stored") {
					t.Fatalf("re-run without --no-wait: exit %d, err %q", code, stderr)
				}
				mustStore(t, c, "s", in[:tt.fit])
			}
		})
	}
}

// finish enqueues n tasks into scan "pre" in small steps and completes
// them, so that n terminal records exist.
func finish(t *testing.T, c *client.Client, n int) {
	t.Helper()
	if n == 0 {
		return
	}
	ctx := context.Background()
	if _, err := c.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "wpre", Capacity: 64}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 3 {
		if _, err := c.EnqueueTargets(ctx, client.EnqueueOptions{ScanID: "pre"}, func(yield func(string) bool) {
			for k := i; k < min(i+3, n); k++ {
				if !yield(fmt.Sprint("pre", k)) {
					return
				}
			}
		}); err != nil {
			t.Fatal(err)
		}
		resp, err := c.Acquire(ctx, &pb.AcquireRequest{WorkerId: "wpre", MaxTasks: 3, Start: true, LeaseTtlSecs: 30})
		if err != nil {
			t.Fatal(err)
		}
		for _, lt := range resp.GetTasks() {
			if _, err := c.Complete(ctx, &pb.CompleteRequest{LeaseToken: lt.GetLeaseToken()}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestCLI_EnqueueInterruptedThenResumed: a queue of 8 and no worker, so the
// enqueue of 100 targets waits; interrupting it exits 130 and says 8 are
// stored; the same command with a worker running completes: exit 0, 92
// enqueued, 8 already present, 100 tasks stored once.
func TestCLI_EnqueueInterruptedThenResumed(t *testing.T) {
	t.Parallel()
	b := setupLimits(t, 512, 8, 8, 512)
	c := b.cliClient(t, "")
	in := numbered("t", 100)
	file := writeTargets(t, in...)
	cmd, _ := lookupCommand("enqueue")
	args := []string{"--server", b.srv.URL, "--key", b.srv.Key, "--scan", "s", "--batch", "16", "--file", file}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan int, 1)
	go func() { done <- runCommand(ctx, cmd, args, &cliEnv{stdout: &out, stderr: &errOut}) }()
	waitCond(t, "8 tasks stored and the enqueue waiting", func() bool {
		p, err := c.ScanProgress(context.Background(), &pb.ScanProgressRequest{ScanId: "s"})
		return err == nil && p.GetTotal() == 8 && strings.Contains(errOut.String(), "waiting for room")
	})
	cancel()
	if code := <-done; code != exitInterrupted || !strings.Contains(errOut.String(), "interrupted: 8 of 100 targets are stored; run the same command again") {
		t.Fatalf("interrupted: exit %d, err %q", code, errOut.String())
	}
	mustStore(t, c, "s", in[:8])
	p, err := c.ScanProgress(context.Background(), &pb.ScanProgressRequest{ScanId: "s"})
	if err != nil || p.GetDeclaredTotal() != 100 {
		t.Fatalf("ScanProgress = %v, %v; want declared total 100", p, err)
	}
	// watch shows the 92 not yet admitted (and does not call the scan done).
	watch, _ := lookupCommand("watch")
	wctx, wcancel := context.WithCancel(context.Background())
	var wout lockedBuffer
	go func() {
		done <- runCommand(wctx, watch, []string{"--server", b.srv.URL, "--key", b.srv.Key, "--scan", "s", "--json", "--interval", "50ms"}, &cliEnv{stdout: &wout, stderr: &errOut})
	}()
	waitCond(t, "watch reporting 92 not yet admitted", func() bool { return strings.Contains(wout.String(), `"not_admitted":92,"done":false`) })
	wcancel()
	if code := <-done; code != exitInterrupted {
		t.Fatalf("watch: exit %d", code)
	}
	work(t, b.srv.URL, b.srv.Key, time.Millisecond)
	code, stdout, stderr := b.run(t, "", "enqueue", "--scan", "s", "--batch", "16", "--quiet", "--file", file)
	if code != exitOK || stdout != "enqueued 92 tasks to scan s (8 already present)\n" {
		t.Fatalf("re-run: exit %d, out %q, err %q", code, stdout, stderr)
	}
	mustStore(t, c, "s", in)
	code, stdout, _ = b.run(t, "", "watch", "--scan", "s", "--json", "--interval", "50ms")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var last progressJSON
	if code != exitOK || json.Unmarshal([]byte(lines[len(lines)-1]), &last) != nil || !last.Done || last.Completed != 100 || last.NotAdmitted != 0 {
		t.Fatalf("watch after the re-run: exit %d, last line %q", code, lines[len(lines)-1])
	}
}

func TestCLI_EnqueueBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	long := strings.Repeat("x", distributed.MaxTargetRefBytes+1)
	file := writeTargets(t, "a.example", long, "c.example")
	code, _, stderr := b.run(t, "", "enqueue", "--scan", "s", "--file", file)
	if code != exitUsage || !strings.Contains(stderr, "line 2: target is longer than 1024 bytes") {
		t.Fatalf("long target in a file: exit %d, err %q", code, stderr)
	}
	if code, _, stderr = b.run(t, "", "enqueue", "--scan", "s", "--task-id", "a", "x.example", "y.example"); code != exitUsage || !strings.Contains(stderr, "got 1 --task-id for 2 targets") {
		t.Fatalf("--task-id count: exit %d, err %q", code, stderr)
	}
	if got := scanTargets(t, b.cliClient(t, ""), "s"); len(got) != 0 {
		t.Fatalf("refused input stored %v", got)
	}
	// A stream is sent as it is read: the lines before a bad one are stored.
	code, _, stderr = b.run(t, "a.example\nb\x00c\n", "enqueue", "--scan", "st", "--quiet", "-")
	if code != exitRejected || !strings.Contains(stderr, "target 2 contains a NUL byte") || !strings.Contains(stderr, "1 targets are stored (2 read)") {
		t.Fatalf("NUL in a stream: exit %d, err %q", code, stderr)
	}
	mustStore(t, b.cliClient(t, ""), "st", []string{"a.example"})
}

// TestCLI_EnqueueFlowControlStream: 50 000 targets on stdin (a stream, read
// once) into a tenant whose queue holds 512 (under the race detector 640
// into 64): with no worker the queue fills and the command waits for room
// (its progress bar says so); once a worker drains the queue it completes
// with exit 0, and every target is stored once. (The 1 000 000-target run of the issue needs terminal records to
// be freed, which purge and retention bring; until then the records limit,
// 65 536 for a tenant's lifetime, caps a tenant's total.)
func TestCLI_EnqueueFlowControlStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	admin := b.cliClient(t, "")
	ctx := context.Background()
	// NB: race builds audit the whole core state after every command
	// (invariants.go), so there the scan is smaller, and so is the queue.
	n, queue := 50000, uint32(512)
	if raceEnabled {
		n, queue = 640, 64
	}
	if _, err := admin.CreateTenant(ctx, &pb.CreateTenantRequest{Name: "flow",
		Limits: &pb.CoreLimits{MaxTaskRecords: 65536, MaxActiveTasks: queue, MaxQueuedTasks: queue, MaxTerminalTasks: 65536, MaxWorkers: 4,
			MaxRetries: 3, MaxLeaseTtlSecs: 3600, MaxTaskTtlSecs: 86400, HeartbeatTimeoutSecs: 3600},
		ResultLimits: &pb.ResultLimits{MaxResults: 65536, MaxResultBytes: 1024, MaxTotalBytes: 16 << 20, MaxAggregateItems: 1024, MaxAggregateBytes: 16 << 20}}); err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, role := range []string{"producer", "worker"} {
		k, err := admin.CreateKey(ctx, &pb.CreateKeyRequest{Tenant: "flow", Role: role})
		if err != nil {
			t.Fatal(err)
		}
		keys[role] = k.GetKey()
	}
	p, err := client.New(client.Config{ServerURL: b.srv.URL, Key: keys["producer"]})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	// No worker yet: the queue fills and the command waits for room.
	in := numbered("big", n)
	cmd, _ := lookupCommand("enqueue")
	var out, errOut lockedBuffer
	env := &cliEnv{stdin: strings.NewReader(strings.Join(in, "\n") + "\n"), stdout: &out, stderr: &errOut}
	done := make(chan int, 1)
	go func() {
		done <- runCommand(ctx, cmd, []string{"--server", b.srv.URL, "--key", keys["producer"], "--scan", "big", "--batch", "256", "-"}, env)
	}()
	waitCond(t, "a full queue and a waiting enqueue", func() bool {
		pr, err := p.ScanProgress(ctx, &pb.ScanProgressRequest{ScanId: "big"})
		return err == nil && pr.GetTotal() == queue && strings.Contains(errOut.String(), "waiting for room")
	})
	w, err := client.New(client.Config{ServerURL: b.srv.URL, Key: keys["worker"]})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	wctx, stop := context.WithCancel(ctx)
	drained := drainTenant(wctx, t, w)
	defer func() { stop(); <-drained }()
	// NB: enqueued + already present: under load a try that outlived its
	// attempt deadline is re-issued, and its first try may have been
	// applied (the second then finds its tasks present).
	code := <-done
	var enqueued, present int
	if _, err := fmt.Sscanf(out.String(), "enqueued %d tasks to scan big (%d already present)", &enqueued, &present); err != nil {
		present = 0
		_, err = fmt.Sscanf(out.String(), "enqueued %d tasks to scan big\n", &enqueued)
		if err != nil {
			enqueued = -1
		}
	}
	if code != exitOK || enqueued+present != n {
		t.Fatalf("enqueue of %d on stdin: exit %d, out %q, err %q; want all stored", n, code, out.String(), tail(errOut.String(), 300))
	}
	mustStore(t, p, "big", in)
}

// drainTenant completes the tenant's tasks (empty results) until ctx ends;
// the channel closes when it stopped.
func drainTenant(ctx context.Context, t *testing.T, w *client.Client) <-chan struct{} {
	t.Helper()
	if _, err := w.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "drain", Capacity: 512}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			acq, err := w.Acquire(ctx, &pb.AcquireRequest{WorkerId: "drain", MaxTasks: 256, Start: true, LeaseTtlSecs: 60, WaitSecs: 1})
			if err != nil || len(acq.GetTasks()) == 0 {
				continue
			}
			req := &pb.CompleteManyRequest{}
			for _, tk := range acq.GetTasks() {
				req.Items = append(req.Items, &pb.CompleteRequest{LeaseToken: tk.GetLeaseToken()})
			}
			_, _ = w.CompleteMany(ctx, req)
		}
	}()
	return done
}
