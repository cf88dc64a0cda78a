// Tests of the worker agent against the in-memory clienttest server. Each
// test runs a real agent with a small /bin/sh command (or an in-process
// handler) and checks what the server ends up with: results stored, attempts
// failed, leases renewed, process groups killed when the lease goes stale,
// graceful drain and re-registration after the worker was declared dead.
package agent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/termivar/distributed/agent"
	"github.com/termivar/distributed/client"
	"github.com/termivar/distributed/client/clienttest"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testBundle struct {
	srv *clienttest.Server
	c   *client.Client
}

func setup(t *testing.T, opts clienttest.Options) *testBundle {
	t.Helper()
	srv, err := clienttest.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.Config{ServerURL: srv.URL, Key: srv.Key, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		srv.Close()
	})
	return &testBundle{srv: srv, c: c}
}

// start runs the agent in the background; the returned func drains it and
// returns Run's error.
func start(t *testing.T, cfg agent.Config) (*agent.Agent, func() error) {
	t.Helper()
	if cfg.UtilizationFunc == nil {
		cfg.UtilizationFunc = idle
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return a, stop
}

func enqueue(t *testing.T, c *client.Client, scan string, targets ...string) []string {
	t.Helper()
	res, err := c.EnqueueTargets(context.Background(), client.EnqueueOptions{ScanID: scan, Phases: []byte{1, 2}, KeepTaskIDs: true}, slices.Values(targets))
	if err != nil {
		t.Fatal(err)
	}
	return res.TaskIDs
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processDead reports whether pid is gone, a zombie (killed, not yet
// reaped by init) or exiting. NB: a killed process shows state R while it
// exits, flagged PF_EXITING from before it closes its files to when it
// becomes a zombie; a loaded machine can keep it there for milliseconds
// after the agent, seeing the command's pipes closed, counted the
// outcome (TestAgent_TimeoutKillsProcessGroup failed 1 run in 90 under
// -race on 2 busy cores).
func processDead(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) != nil
	}
	// The state, then ppid, pgrp, session, tty_nr, tpgid and flags follow
	// the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if i < 0 || len(f) < 7 {
		return false
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return f[0] == "Z" || f[0] == "X" || (err == nil && flags&pfExiting != 0)
}

// pfExiting is the kernel's PF_EXITING task flag.
const pfExiting = 0x4

func progress(t *testing.T, c *client.Client, scan string) *pb.ScanProgressResponse {
	t.Helper()
	p, err := c.ScanProgress(context.Background(), &pb.ScanProgressRequest{ScanId: scan})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func results(t *testing.T, c *client.Client, scan string) []string {
	t.Helper()
	var out []string
	if err := c.Results(context.Background(), scan, func(_ string, r []byte) error { out = append(out, string(r)); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func task(t *testing.T, c *client.Client, id string) *pb.TaskInfo {
	t.Helper()
	r, err := c.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetTask()
}

// idle pins utilization to 0 so that the machine's load does not scale
// the worker's capacity down mid-test.
func idle() (uint32, uint32) { return 0, 0 }

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func TestAgent_RunsCommandPerTask(t *testing.T) {
	t.Parallel()
	b := setup(t, clienttest.Options{})
	var targets []string
	for i := range 20 {
		targets = append(targets, fmt.Sprintf("host-%02d", i))
	}
	ids := enqueue(t, b.c, "s", targets...)
	a, stop := start(t, agent.Config{
		Client: b.c, WorkerID: "w1", Capacity: 4, PollWait: time.Second,
		Command: sh(`echo "$TERMIVAR_TARGET|$TERMIVAR_TASK_ID|$TERMIVAR_SCAN_ID|$TERMIVAR_PHASES|$TERMIVAR_ATTEMPT|$TERMIVAR_FENCE"; echo oops >&2`),
	})
	waitFor(t, "20 completions", func() bool { return progress(t, b.c, "s").GetCompleted() == 20 })
	got := results(t, b.c, "s")
	for i, r := range got {
		f := strings.Split(strings.TrimSpace(r), "|")
		if len(f) != 6 || f[0] != targets[i] || f[1] != ids[i] || f[2] != "s" || f[3] != "1,2" || f[4] != "1" {
			t.Fatalf("result %d = %q; want target|task|scan|1,2|1|fence", i, r)
		}
		if fence, err := strconv.ParseUint(f[5], 10, 64); err != nil || fence == 0 {
			t.Errorf("result %d: TERMIVAR_FENCE = %q, want a lease ID", i, f[5])
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("Run = %v, want nil after drain", err)
	}
	if s := a.Stats(); s.Completed != 20 || s.Failed != 0 || s.Registrations != 1 {
		t.Errorf("Stats = %+v", s)
	}
	// The drain deregistered the worker.
	ws, err := b.c.ListWorkers(context.Background(), &pb.ListWorkersRequest{})
	if err != nil || len(ws.GetWorkers()) != 1 || ws.GetWorkers()[0].GetStatus() != "offline" {
		t.Errorf("ListWorkers after drain = %v, %v; want w1 offline", ws, err)
	}
}

func TestAgent_FailuresAndOversizedOutput(t *testing.T) {
	t.Parallel()
	b := setup(t, clienttest.Options{})
	ids := enqueue(t, b.c, "s", "ok", "exit3", "big")
	a, _ := start(t, agent.Config{
		Client: b.c, WorkerID: "w1", Capacity: 3, PollWait: time.Second, MaxResultBytes: 16,
		Command: sh(`case "$TERMIVAR_TARGET" in ok) echo fine;; exit3) exit 3;; big) head -c 1000 /dev/zero;; esac`),
	})
	// exit3 and big fail every attempt: 1 + MaxRetries(3) attempts each.
	waitFor(t, "all terminal", func() bool {
		p := progress(t, b.c, "s")
		return p.GetCompleted() == 1 && p.GetFailed() == 2
	})
	if got := results(t, b.c, "s"); len(got) != 1 || got[0] != "fine\n" {
		t.Errorf("results = %q, want [fine]", got)
	}
	for _, id := range ids[1:] {
		if ti := task(t, b.c, id); ti.GetRetryCount() != 3 || ti.GetHasResult() {
			t.Errorf("task %s: retries %d, has result %v; want 3 retries, no result", id, ti.GetRetryCount(), ti.GetHasResult())
		}
	}
	// The agent counts an attempt after the server answered it.
	waitFor(t, "agent counted 8 failed attempts and 1 completion", func() bool {
		s := a.Stats()
		return s.Failed == 8 && s.Completed == 1
	})
}

// TestAgent_StaleLeaseKillsProcessGroup cancels a running task on the
// server; the next renewal is rejected and the agent must kill the whole
// process group (including a grandchild) before it counts the task as
// abandoned, and report nothing. "At once" is checked as an order of
// events: the moment the agent counts the abandonment, the grandchild is
// already dead (gone or a zombie awaiting its reaper), with no waiting.
func TestAgent_StaleLeaseKillsProcessGroup(t *testing.T) {
	t.Parallel()
	b := setup(t, clienttest.Options{})
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	ids := enqueue(t, b.c, "s", "x")
	a, _ := start(t, agent.Config{
		Client: b.c, WorkerID: "w1", Capacity: 1, PollWait: time.Second, LeaseTTL: 3 * time.Second,
		Command: sh(`sleep 60 & echo $! > ` + pidFile + `.tmp; mv ` + pidFile + `.tmp ` + pidFile + `; wait`),
	})
	var pid int
	waitFor(t, "grandchild pid", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	// Cancel through the API, as an operator would.
	if _, err := b.c.Cancel(t.Context(), &pb.CancelRequest{TaskId: ids[0]}); err != nil {
		t.Fatalf("CancelTask = %v", err)
	}
	waitFor(t, "abandon", func() bool { return a.Stats().Abandoned == 1 })
	if !processDead(pid) {
		t.Fatal("the agent counted the task abandoned while its grandchild still ran")
	}
	if s := a.Stats(); s.Completed != 0 || s.Failed != 0 {
		t.Errorf("Stats = %+v; a stale task must not be reported", s)
	}
	if st := task(t, b.c, ids[0]).GetStatus(); st != "cancelled" {
		t.Errorf("task status = %s, want cancelled", st)
	}
}

// TestAgent_RenewsBeforeHalfTTL runs a task longer than the lease and
// checks it survives on renewals.
func TestAgent_RenewsBeforeHalfTTL(t *testing.T) {
	t.Parallel()
	b := setup(t, clienttest.Options{})
	enqueue(t, b.c, "s", "x")
	start(t, agent.Config{Client: b.c, WorkerID: "w1", PollWait: time.Second, LeaseTTL: 2 * time.Second, Command: sh("sleep 3.2; echo done")})
	waitFor(t, "completion", func() bool { return progress(t, b.c, "s").GetCompleted() == 1 })
	if n := b.srv.Renewals(); n < 3 {
		t.Errorf("renewals = %d over 3.2 s with a 2 s TTL, want >= 3", n)
	}
}

// TestAgent_DrainKillsAfterGrace stops the agent while a long task runs:
// after the grace period the task is killed and failed (requeued), then the
// worker is deregistered and Run returns nil.
func TestAgent_DrainKillsAfterGrace(t *testing.T) {
	t.Parallel()
	b := setup(t, clienttest.Options{})
	ids := enqueue(t, b.c, "s", "slow", "fast")
	a, stop := start(t, agent.Config{
		Client: b.c, WorkerID: "w1", Capacity: 2, PollWait: time.Second, Grace: 500 * time.Millisecond,
		Command: sh(`if [ "$TERMIVAR_TARGET" = slow ]; then sleep 60; fi; echo "$TERMIVAR_TARGET"`),
	})
	waitFor(t, "fast done, slow running", func() bool {
		p := progress(t, b.c, "s")
		return p.GetCompleted() == 1 && p.GetRunning() == 1
	})
	begin := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("drain took %v with a 500ms grace", d)
	}
	if s := a.Stats(); s.Failed != 1 || s.Completed != 1 {
		t.Errorf("Stats = %+v, want 1 failed (killed after grace), 1 completed", s)
	}
	if ti := task(t, b.c, ids[0]); ti.GetStatus() != "queued" || ti.GetRetryCount() != 1 {
		t.Errorf("slow task = %s with %d retries; want queued again with 1", ti.GetStatus(), ti.GetRetryCount())
	}
}

// TestAgent_ReregistersWhenDeclaredDead moves the server's clock past the
// heartbeat timeout: the worker is pruned, its lease recovered; the agent's
// next heartbeat learns it, kills the task without reporting, and
// reactivates the worker, which then finishes the retried task.
func TestAgent_ReregistersWhenDeclaredDead(t *testing.T) {
	t.Parallel()
	b := setup(t, clienttest.Options{})
	ids := enqueue(t, b.c, "s", "x")
	var calls sync.Map
	a, _ := start(t, agent.Config{
		Client: b.c, WorkerID: "w1", PollWait: time.Second, HeartbeatInterval: 100 * time.Millisecond,
		Handler: func(ctx context.Context, tk agent.Task) ([]byte, error) {
			if _, again := calls.LoadOrStore(tk.Attempt, true); !again && tk.Attempt == 1 {
				<-ctx.Done() // the first attempt hangs until abandoned
				return nil, ctx.Err()
			}
			return []byte(fmt.Sprintf("attempt %d", tk.Attempt)), nil
		},
	})
	waitFor(t, "running", func() bool { return progress(t, b.c, "s").GetRunning() == 1 })
	b.srv.Advance(61 * time.Second) // past HeartbeatTimeoutSecs (60)
	waitFor(t, "completion", func() bool { return progress(t, b.c, "s").GetCompleted() == 1 })
	if got := results(t, b.c, "s"); len(got) != 1 || got[0] != "attempt 2" {
		t.Errorf("results = %q, want [attempt 2]", got)
	}
	if s := a.Stats(); s.Registrations != 2 || s.Abandoned != 1 {
		t.Errorf("Stats = %+v, want 2 registrations, 1 abandoned", s)
	}
	if ti := task(t, b.c, ids[0]); ti.GetAttempt() != 2 {
		t.Errorf("attempt = %d, want 2", ti.GetAttempt())
	}
}

// TestAgent_TakesOverStaleRegistration starts an agent whose ID is still
// registered (a previous process died without deregistering).
func TestAgent_TakesOverStaleRegistration(t *testing.T) {
	t.Parallel()
	b := setup(t, clienttest.Options{})
	if _, err := b.c.RegisterWorker(context.Background(), &pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 1}); err != nil {
		t.Fatal(err)
	}
	enqueue(t, b.c, "s", "x")
	a, _ := start(t, agent.Config{Client: b.c, WorkerID: "w1", PollWait: time.Second, Logger: testLogger(t), Handler: func(context.Context, agent.Task) ([]byte, error) { return []byte("ok"), nil }})
	waitFor(t, "completion", func() bool { return progress(t, b.c, "s").GetCompleted() == 1 })
	ws, _ := b.c.ListWorkers(context.Background(), &pb.ListWorkersRequest{})
	if g := ws.GetWorkers()[0].GetGeneration(); g != 3 || a.Stats().Registrations != 1 {
		t.Errorf("generation = %d, want 3 (registered 1, deregistered 2, reactivated 3)", g)
	}
}

func TestAgent_CrashReportsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, clienttest.Options{})
	enqueue(t, b.c, "s", "x")
	a, err := agent.New(agent.Config{Client: b.c, WorkerID: "w1", PollWait: time.Second, Command: sh("sleep 60"), Logger: testLogger(t), UtilizationFunc: idle})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background()) }()
	waitFor(t, "running", func() bool { return a.Running() == 1 })
	a.Crash()
	if err := <-done; !errors.Is(err, agent.ErrCrashed) {
		t.Fatalf("Run after Crash = %v, want ErrCrashed", err)
	}
	if ti := progress(t, b.c, "s"); ti.GetRunning() != 1 {
		t.Errorf("after a crash the task must still be running on the server (lease not yet expired): %v", ti)
	}
}

func TestNew_Validation(t *testing.T) {
	t.Parallel()
	c, err := client.New(client.Config{ServerURL: "http://127.0.0.1:1", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, agent.Task) ([]byte, error) { return nil, nil }
	tests := []agent.Config{
		{WorkerID: "w", Handler: h},
		{Client: c, WorkerID: "bad id", Handler: h},
		{Client: c, WorkerID: "w"},
		{Client: c, WorkerID: "w", Handler: h, Command: []string{"x"}},
		{Client: c, WorkerID: "w", Handler: h, LeaseTTL: time.Second},
		{Client: c, WorkerID: "w", Handler: h, Capacity: 300},
	}
	for i, cfg := range tests {
		if _, err := agent.New(cfg); err == nil {
			t.Errorf("New(case %d) = nil error", i)
		}
	}
}

// TestAgent_KillsLeftoversAfterExit checks that background processes a task
// leaves in its process group do not outlive the attempt.
func TestAgent_KillsLeftoversAfterExit(t *testing.T) {
	t.Parallel()
	b := setup(t, clienttest.Options{})
	pidFile := filepath.Join(t.TempDir(), "pid")
	enqueue(t, b.c, "s", "x")
	start(t, agent.Config{
		Client: b.c, WorkerID: "w1", PollWait: time.Second,
		Command: sh(`sleep 60 >/dev/null 2>&1 & echo $! > ` + pidFile + `; echo done`),
	})
	waitFor(t, "completion", func() bool { return progress(t, b.c, "s").GetCompleted() == 1 })
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	waitFor(t, "leftover killed", func() bool { return syscall.Kill(pid, 0) != nil })
}

// TestAgent_UsesTenantResultLimit: with no MaxResultBytes configured the
// agent bounds results by the limit the server reports at registration, and
// fails an attempt whose output is larger instead of sending it.
func TestAgent_UsesTenantResultLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, clienttest.Options{MaxResultBytes: 16})
	enqueue(t, b.c, "s", "small", "big")
	a, _ := start(t, agent.Config{
		Client: b.c, WorkerID: "w1", Capacity: 2, PollWait: time.Second,
		Command: sh(`case "$TERMIVAR_TARGET" in small) printf 0123456789abcdef;; big) printf 0123456789abcdefX;; esac`),
	})
	waitFor(t, "all terminal", func() bool {
		p := progress(t, b.c, "s")
		return p.GetCompleted() == 1 && p.GetFailed() == 1
	})
	if got := results(t, b.c, "s"); len(got) != 1 || got[0] != "0123456789abcdef" {
		t.Errorf("results = %q, want the 16-byte output only", got)
	}
	// The agent counts an attempt after the server answered it, so its
	// counters may trail the server's view for a moment.
	waitFor(t, "agent counted every attempt", func() bool {
		s := a.Stats()
		return s.Completed == 1 && s.Failed == 4
	})
}
