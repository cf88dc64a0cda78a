// The node's one log (docs/observability.md). Goal: with --log-format json
// every line a node writes — its own and hashicorp/raft's — is one JSON
// object, the significant events each get a line, and no target, result,
// token or key ever appears. Method: an in-process `serve` node (startNode)
// logging JSON at debug level into a buffer runs a workload that hits the
// queue limit, leases a task to a worker that then goes silent (declared
// dead, its task requeued), completes another with a result and forces a
// snapshot; the buffer is parsed line by line and searched for every
// secret the workload used, in raw, hex and base64 forms.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/logging"
	"github.com/termivar/distributed/node"
)

// syncBuffer is a bytes.Buffer safe for the node's concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logLines parses every line of out as one JSON object.
func logLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for i, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %d is not JSON: %v\n%s", i+1, err, l)
		}
		lines = append(lines, m)
	}
	return lines
}

// hasLine reports whether a line has msg and every given attribute.
func hasLine(lines []map[string]any, msg string, attrs map[string]any) bool {
	for _, l := range lines {
		if l["msg"] != msg {
			continue
		}
		ok := true
		for k, v := range attrs {
			ok = ok && l[k] == v
		}
		if ok {
			return true
		}
	}
	return false
}

func TestLog_JSONEventsNoSecrets(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	logger, err := logging.New(&buf, "json", "debug")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	apiLn, raftLn := listen(t), listen(t)
	f := nodeFlags(t, filepath.Join(dir, "data"), "n1", apiLn, raftLn)
	// NB: 3 s, not 1: logical time is whole seconds, so a 1 s timeout can
	// pass a moment after registration.
	f.limits.HeartbeatTimeoutSecs = 3
	f.limits.MaxQueuedTasks = 3
	f.cluster.raftLog = nil // NB: raft's lines into the logger, as serve does
	tn := &tnode{id: "n1", dir: f.dataDir}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rn, err := startNode(ctx, f, logger)
	if err != nil {
		t.Fatal(err)
	}
	tn.rn, tn.url = rn, rn.url
	tn.served = make(chan struct{})
	go func() { defer close(tn.served); _ = rn.hs.Serve(rn.ln) }()
	defer func() { rn.close(); <-tn.served }()
	adminKey := readAdminKey(t, f.dataDir)
	secrets := logWorkload(t, ctx, tn, adminKey)
	secret, err := os.ReadFile(filepath.Join(f.dataDir, node.SecretFile))
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, adminKey, string(secret))
	out := buf.String()
	lines := logLines(t, out)
	checkEvents(t, lines)
	for _, s := range secrets {
		for _, form := range []string{s, hex.EncodeToString([]byte(s)), base64.StdEncoding.EncodeToString([]byte(s)),
			base64.RawURLEncoding.EncodeToString([]byte(s))} {
			if len(form) >= 8 && strings.Contains(out, form) {
				t.Errorf("the log contains a secret (%d bytes)", len(s))
			}
		}
	}
}

// logWorkload runs the workload of the file comment and returns every
// secret it handled: targets, results, tokens, the worker's key.
func logWorkload(t *testing.T, ctx context.Context, tn *tnode, adminKey string) []string {
	t.Helper()
	admin, err := client.New(client.Config{ServerURL: tn.url, Key: adminKey})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	wk, err := admin.CreateKey(ctx, &pb.CreateKeyRequest{Role: "worker"})
	if err != nil {
		t.Fatal(err)
	}
	worker, err := client.New(client.Config{ServerURL: tn.url, Key: wk.GetKey()})
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	secrets := []string{wk.GetKey()}
	var tasks []*pb.NewTask
	for _, id := range []string{"t1", "t2", "t3", "t4"} {
		target := "https://hidden-" + id + ".internal.example/" + randomBytesHex(t)
		secrets = append(secrets, target)
		tasks = append(tasks, &pb.NewTask{TaskId: id, ScanId: "s1", TargetRef: target})
	}
	if _, err := admin.Enqueue(ctx, &pb.EnqueueRequest{Tasks: tasks}); err == nil {
		t.Fatal("enqueueing 4 tasks with --max-queued-tasks 3 succeeded")
	}
	if _, err := admin.Enqueue(ctx, &pb.EnqueueRequest{Tasks: tasks[:2]}); err != nil {
		t.Fatal(err)
	}
	var okGen uint64
	for _, w := range []string{"w-silent", "w-ok"} {
		rr, err := worker.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: w, Capacity: 1})
		if err != nil {
			t.Fatal(err)
		}
		okGen = rr.GetWorker().GetGeneration()
	}
	for i, w := range []string{"w-silent", "w-ok"} {
		acq, err := worker.Acquire(ctx, &pb.AcquireRequest{WorkerId: w, Start: true})
		if err != nil || len(acq.GetTasks()) != 1 {
			t.Fatalf("Acquire %s = %v, %v", w, acq, err)
		}
		tok := acq.GetTasks()[0].GetLeaseToken()
		secrets = append(secrets, string(tok))
		if i == 1 {
			result := "open ports: 22, 443 on " + randomBytesHex(t)
			secrets = append(secrets, result)
			cr, err := worker.Complete(ctx, &pb.CompleteRequest{LeaseToken: tok, Result: []byte(result)})
			if err != nil {
				t.Fatal(err)
			}
			secrets = append(secrets, string(cr.GetReceiptToken()))
		}
	}
	// w-ok keeps heartbeating; w-silent does not and is declared dead.
	waitCond(t, "w-silent declared dead", func() bool {
		_, _ = worker.Heartbeat(ctx, &pb.HeartbeatRequest{WorkerId: "w-ok", Generation: okGen})
		wl, err := admin.ListWorkers(ctx, &pb.ListWorkersRequest{})
		if err != nil {
			return false
		}
		for _, w := range wl.GetWorkers() {
			if w.GetWorkerId() == "w-silent" && w.GetStatus() == "offline" {
				return true
			}
		}
		return false
	})
	if err := tn.rn.n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	return secrets
}

// checkEvents checks the lines of the significant events and that
// raft's own lines came through the same logger.
func checkEvents(t *testing.T, lines []map[string]any) {
	t.Helper()
	raftLines := 0
	for _, l := range lines {
		if l["component"] == "raft" {
			raftLines++
		}
	}
	if raftLines == 0 {
		t.Error("no raft line in the log")
	}
	for _, e := range []struct {
		msg   string
		attrs map[string]any
	}{
		{"raft leader changed", map[string]any{"leader_id": "n1", "self": true}},
		{"tenant limit reached", map[string]any{"tenant": "default", "kind": "queued_task_capacity_reached"}},
		{"workers declared dead", map[string]any{"tenant": "default", "tasks_requeued": float64(1)}},
		{"raft snapshot written", nil},
	} {
		if !hasLine(lines, e.msg, e.attrs) {
			t.Errorf("no %q line with %v", e.msg, e.attrs)
		}
	}
}

func randomBytesHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestServe_ObservabilityFlagsRefused checks that bad log and metrics
// flags are usage errors before anything starts.
func TestServe_ObservabilityFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--log-format", "xml"}, {"--log-level", "verbose"}, {"--metrics-scans", "0"},
		{"--metrics-scans", "101"}} {
		dir := filepath.Join(t.TempDir(), "data")
		if code := runServe(append([]string{"--data-dir", dir}, args...)); code != exitUsage {
			t.Errorf("serve %v = exit %d, want %d", args, code, exitUsage)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("serve %v created the data dir (%v)", args, err)
		}
	}
}
