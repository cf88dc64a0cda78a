package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/server"
)

// inProcessNode starts a real node (raft over raft-wal in a temp dir)
// behind an httptest server and returns its URL and admin key.
func inProcessNode(t *testing.T, cfg node.Config) (url, key string) {
	t.Helper()
	dir := t.TempDir()
	cfg.DataDir, cfg.RaftAddr = dir, "127.0.0.1:0"
	if cfg.TickInterval == 0 {
		cfg.TickInterval = -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, node.AdminKeyFile)
	if _, err := server.EnsureAdminKey(ctx, n, keyPath); err != nil {
		t.Fatal(err)
	}
	key, err = client.LoadKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.New(server.Config{Backend: n}).Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		n.Close()
	})
	return srv.URL, key
}

// runCLI runs one registered command in process against url.
func runCLI(t *testing.T, url, key string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut}
	rest, err := parseGlobal(append([]string{"--server", url, "--key", key}, args...), env)
	if err != nil {
		t.Fatal(err)
	}
	code, ok := runRegistered(rest[0], rest[1:], env)
	if !ok {
		t.Fatalf("command %q not registered", rest[0])
	}
	return code, out.String(), errOut.String()
}

// TestCLI_CancelAnyNonTerminalTask: `cancel TASK` against a real node
// cancels queued, leased and running tasks (no token needed), answers
// "already cancelled" for a cancelled one, and exits 2 with a clear message
// for a completed one.
func TestCLI_CancelAnyNonTerminalTask(t *testing.T) {
	t.Parallel()
	url, key := inProcessNode(t, node.Config{})
	c, err := client.New(client.Config{ServerURL: url, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	ids := []string{"q", "l", "r", "c"}
	if _, err := c.Enqueue(ctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{
		{TaskId: "l", ScanId: "s", TargetRef: "t"}, {TaskId: "r", ScanId: "s", TargetRef: "t"},
		{TaskId: "c", ScanId: "s", TargetRef: "t"}, {TaskId: "q", ScanId: "s", TargetRef: "t"},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 8}); err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w1"})
	if err != nil || l.GetTasks()[0].GetTaskId() != "l" {
		t.Fatalf("acquire = %v, %v", l, err)
	}
	rc, err := c.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w1", MaxTasks: 2, Start: true})
	if err != nil || len(rc.GetTasks()) != 2 {
		t.Fatalf("acquire = %v, %v", rc, err)
	}
	if _, err := c.Complete(ctx, &pb.CompleteRequest{LeaseToken: rc.GetTasks()[1].GetLeaseToken(), Result: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ id, was string }{{"q", "queued"}, {"l", "leased"}, {"r", "running"}} {
		code, out, errOut := runCLI(t, url, key, "cancel", tc.id)
		if code != exitOK || out != "cancelled task "+tc.id+" (was "+tc.was+")\n" {
			t.Errorf("cancel %s: exit %d, out %q, err %q", tc.id, code, out, errOut)
		}
	}
	code, out, _ := runCLI(t, url, key, "cancel", "--json", "r")
	var js struct {
		AlreadyCancelled bool `json:"already_cancelled"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &js) != nil || !js.AlreadyCancelled {
		t.Errorf("cancel again: exit %d, out %q", code, out)
	}
	code, out, errOut := runCLI(t, url, key, "cancel", "c")
	if code != exitRejected || out != "" || !strings.Contains(errOut, "task c is already completed") {
		t.Errorf("cancel completed: exit %d, out %q, err %q", code, out, errOut)
	}
	for _, id := range ids[:3] {
		if g, err := c.GetTask(ctx, &pb.GetTaskRequest{TaskId: id}); err != nil || g.GetTask().GetStatus() != "cancelled" {
			t.Errorf("task %s = %v, %v", id, g, err)
		}
	}
}
