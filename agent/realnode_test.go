package agent_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/termivar/distributed/agent"
	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/server"
)

// realNode starts a real node (raft over raft-wal in a temp dir) behind an
// httptest server and returns an admin client.
func realNode(t *testing.T) *client.Client {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := node.Open(ctx, node.Config{DataDir: dir, RaftAddr: "127.0.0.1:0", TickInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, node.AdminKeyFile)
	if _, err := server.EnsureAdminKey(ctx, n, keyPath); err != nil {
		t.Fatal(err)
	}
	key, err := client.LoadKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.New(server.Config{Backend: n}).Handler())
	c, err := client.New(client.Config{ServerURL: srv.URL, Key: key, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		srv.CloseClientConnections()
		srv.Close()
		n.Close()
	})
	return c
}

// TestAgent_RealNode_DeregisteredFromOutside runs the agent against a real
// node. An operator deregisters the worker while its task runs: the lease
// is recovered, the agent's next renewal or heartbeat learns it, kills the
// task without reporting, reactivates the worker (generation 3) and
// finishes the retried task (attempt 2). It also checks a fresh agent takes
// over the live registration of the same ID.
func TestAgent_RealNode_DeregisteredFromOutside(t *testing.T) {
	t.Parallel()
	c := realNode(t)
	ctx := context.Background()
	ids := enqueue(t, c, "s", "x")
	a, stop := start(t, agent.Config{
		Client: c, WorkerID: "w1", PollWait: time.Second, LeaseTTL: 3 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
		Logger: testLogger(t),
		Handler: func(ctx context.Context, tk agent.Task) ([]byte, error) {
			if tk.Attempt == 1 {
				<-ctx.Done() // hang until abandoned
				return nil, ctx.Err()
			}
			return []byte("ok"), nil
		},
	})
	waitFor(t, "running", func() bool { return progress(t, c, "s").GetRunning() == 1 })
	resp, err := c.Deregister(ctx, &pb.DeregisterRequest{WorkerId: "w1", Generation: 1})
	if err != nil || resp.GetSummary().GetTasksRequeued() != 1 {
		t.Fatalf("Deregister = %v, %v; want 1 task requeued", resp, err)
	}
	waitFor(t, "completion", func() bool { return progress(t, c, "s").GetCompleted() == 1 })
	if ti := task(t, c, ids[0]); ti.GetAttempt() != 2 {
		t.Errorf("attempt = %d, want 2", ti.GetAttempt())
	}
	// NB: the node applies the completion before the agent reads the
	// answer that acknowledges it (and counts it).
	waitFor(t, "the agent's count", func() bool { return a.Stats().Completed >= 1 })
	if s := a.Stats(); s.Abandoned != 1 || s.Registrations != 2 || s.Completed != 1 {
		t.Errorf("Stats = %+v, want 1 abandoned, 2 registrations, 1 completed", s)
	}
	ws, err := c.ListWorkers(ctx, &pb.ListWorkersRequest{})
	if err != nil || ws.GetWorkers()[0].GetGeneration() != 3 {
		t.Fatalf("ListWorkers = %v, %v; want w1 at generation 3", ws, err)
	}
	// A second process with the same ID (the first one "died").
	a2, _ := start(t, agent.Config{Client: c, WorkerID: "w1", PollWait: time.Second, Handler: func(context.Context, agent.Task) ([]byte, error) { return nil, nil }})
	waitFor(t, "take-over", func() bool { return a2.Stats().Registrations == 1 })
	if err := stop(); err != nil {
		t.Errorf("first agent Run = %v", err)
	}
}

// TestAgent_RealNode_CancelledByProducerKillsProcessGroup runs a command
// (with a background grandchild) for a task on a real node; a producer
// cancels the running task by ID (no token). The agent's next renewal is
// rejected (stale_ownership) and it must kill the whole process group,
// report nothing, and keep serving: a task enqueued afterwards completes.
func TestAgent_RealNode_CancelledByProducerKillsProcessGroup(t *testing.T) {
	t.Parallel()
	c := realNode(t)
	ctx := context.Background()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	ids := enqueue(t, c, "s", "x")
	a, _ := start(t, agent.Config{
		Client: c, WorkerID: "w1", Capacity: 1, PollWait: time.Second, LeaseTTL: 3 * time.Second,
		Logger:  testLogger(t),
		Command: sh(`if [ "$TERMIVAR_TARGET" = x ]; then sleep 60 & echo $! > ` + pidFile + `.tmp; mv ` + pidFile + `.tmp ` + pidFile + `; wait; fi; echo done`),
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
	resp, err := c.Cancel(ctx, &pb.CancelRequest{TaskId: ids[0]})
	if err != nil || resp.GetPreviousStatus() != "running" {
		t.Fatalf("CancelTask = %v, %v; want a running task cancelled", resp, err)
	}
	waitFor(t, "abandon", func() bool { return a.Stats().Abandoned == 1 })
	waitFor(t, "grandchild killed", func() bool { return syscall.Kill(pid, 0) != nil })
	if s := a.Stats(); s.Completed != 0 || s.Failed != 0 {
		t.Errorf("Stats = %+v; a cancelled task must not be reported", s)
	}
	if st := task(t, c, ids[0]).GetStatus(); st != "cancelled" {
		t.Errorf("task status = %s, want cancelled", st)
	}
	more := enqueue(t, c, "s", "y")
	waitFor(t, "next task", func() bool { return task(t, c, more[0]).GetStatus() == "completed" })
}
