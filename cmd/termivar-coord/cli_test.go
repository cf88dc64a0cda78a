// Tests of the client-side commands run in process against the in-memory
// clienttest server: exit codes of the stable CLI surface, enqueue from a
// file, tasks/workers/status tables and JSON, cancel, watch --json and
// results --json while an in-process agent works the scan.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/termivar/distributed/agent"
	"github.com/termivar/distributed/client"
	"github.com/termivar/distributed/client/clienttest"
)

// NB: TestMain (goleak) lives in kill9_test.go.

type testBundle struct {
	srv *clienttest.Server
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	srv, err := clienttest.New(clienttest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return &testBundle{srv: srv}
}

// run runs one registered command in process and returns its exit code,
// stdout and stderr.
func (b *testBundle) run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := &cliEnv{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut}
	rest, err := parseGlobal(append([]string{"--server", b.srv.URL, "--key", b.srv.Key}, args...), env)
	if err != nil {
		t.Fatal(err)
	}
	code, ok := runRegistered(rest[0], rest[1:], env)
	if !ok {
		t.Fatalf("command %q not registered", rest[0])
	}
	return code, out.String(), errOut.String()
}

// work runs an in-process agent whose result is "r:" + the target.
func work(t *testing.T, url, key string, delay time.Duration) {
	t.Helper()
	c, err := client.New(client.Config{ServerURL: url, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{
		Client: c, WorkerID: "w1", Capacity: 8, PollWait: time.Second, UtilizationFunc: func() (uint32, uint32) { return 0, 0 },
		Handler: func(ctx context.Context, tk agent.Task) ([]byte, error) {
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return []byte("r:" + tk.Target), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		c.Close()
	})
}

func TestCLI_ExitCodes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if code, _, _ := b.run(t, "", "status", "--bogus"); code != exitUsage {
		t.Errorf("status --bogus: exit %d, want %d", code, exitUsage)
	}
	if code, _, _ := b.run(t, "", "enqueue", "x"); code != exitUsage {
		t.Errorf("enqueue without --scan: exit %d, want %d", code, exitUsage)
	}
	if code, _, stderr := b.run(t, "", "cancel", "no-such-task"); code != exitRejected || !strings.Contains(stderr, "task_not_found") {
		t.Errorf("cancel unknown: exit %d (%s), want %d", code, stderr, exitRejected)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	var out, errOut bytes.Buffer
	env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut}
	if code, _ := runRegistered("status", []string{"--server", dead, "--key", "k", "--retry-timeout", "300ms"}, env); code != exitUnreachable {
		t.Errorf("status against a closed port: exit %d (%s), want %d", code, errOut.String(), exitUnreachable)
	}
}

func TestCLI_KeyFromEnvironmentAndFile(t *testing.T) {
	// Not parallel: changes the working directory and environment.
	b := setup(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "termivar-data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, client.DefaultKeyFile), []byte(b.srv.Key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	t.Setenv(client.EnvServer, b.srv.URL)
	t.Setenv(client.EnvKey, "")
	var out, errOut bytes.Buffer
	env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut}
	if code, _ := runRegistered("status", nil, env); code != exitOK {
		t.Fatalf("status with env server and key file: exit %d: %s", code, errOut.String())
	}
	if err := os.Remove(filepath.Join(dir, client.DefaultKeyFile)); err != nil {
		t.Fatal(err)
	}
	if code, _ := runRegistered("status", nil, env); code != exitUsage {
		t.Errorf("status without any key: exit %d, want %d", code, exitUsage)
	}
	t.Setenv(client.EnvKey, b.srv.Key)
	if code, _ := runRegistered("status", nil, env); code != exitOK {
		t.Errorf("status with TERMIVAR_KEY: exit %d: %s", code, errOut.String())
	}
}

func TestCLI_EnqueueTasksCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	file := filepath.Join(t.TempDir(), "targets.txt")
	if err := os.WriteFile(file, []byte("# targets\na.example\n\nb.example\nc.example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := b.run(t, "", "enqueue", "--scan", "s1", "--priority", "high", "--phases", "1,2", "--file", file)
	if code != exitOK || out != "enqueued 3 tasks to scan s1\n" {
		t.Fatalf("enqueue --file: exit %d, out %q, err %q", code, out, stderr)
	}
	code, out, _ = b.run(t, "d.example\n", "--json", "enqueue", "--scan", "s1", "-")
	var enq struct {
		Enqueued int      `json:"enqueued"`
		TaskIDs  []string `json:"task_ids"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &enq) != nil || enq.Enqueued != 1 || enq.TaskIDs[0] != client.DeriveTaskID("s1", "d.example") {
		t.Fatalf("enqueue - --json: exit %d, out %q", code, out)
	}
	code, out, _ = b.run(t, "", "tasks", "--scan", "s1", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 4 {
		t.Fatalf("tasks --json: exit %d, %d lines: %q", code, len(lines), out)
	}
	var ti taskJSON
	if err := json.Unmarshal([]byte(lines[0]), &ti); err != nil || ti.Status != "queued" || ti.ScanID != "s1" {
		t.Errorf("tasks --json line = %q (%v)", lines[0], err)
	}
	id := client.DeriveTaskID("s1", "a.example")
	if code, out, _ = b.run(t, "", "cancel", id); code != exitOK || !strings.Contains(out, "cancelled task "+id) {
		t.Errorf("cancel: exit %d, %q", code, out)
	}
	if code, out, _ = b.run(t, "", "tasks", "--status", "cancelled"); code != exitOK || !strings.Contains(out, id) || !strings.HasPrefix(out, "TASK") {
		t.Errorf("tasks --status cancelled: exit %d, %q", code, out)
	}
	if code, out, _ = b.run(t, "", "status", "--json"); code != exitOK || !strings.Contains(out, `"task_records":4`) {
		t.Errorf("status --json: exit %d, %q", code, out)
	}
	if code, out, _ = b.run(t, "", "status"); code != exitOK || !strings.Contains(out, "4 records") {
		t.Errorf("status: exit %d, %q", code, out)
	}
}

// TestCLI_WatchAndResults enqueues 40 targets, lets an agent work them,
// follows the scan with watch --json (and the progress bar), then checks
// results --json comes back in enqueue order, each task once.
func TestCLI_WatchAndResults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var targets []string
	for i := range 40 {
		targets = append(targets, fmt.Sprintf("10.0.0.%d", i))
	}
	if code, _, stderr := b.run(t, "", append([]string{"enqueue", "--scan", "w"}, targets...)...); code != exitOK {
		t.Fatalf("enqueue: %s", stderr)
	}
	work(t, b.srv.URL, b.srv.Key, 20*time.Millisecond)
	code, out, stderr := b.run(t, "", "watch", "--scan", "w", "--json", "--interval", "50ms")
	if code != exitOK {
		t.Fatalf("watch --json: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var last progressJSON
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || !last.Done || last.Completed != 40 || last.Total != 40 {
		t.Fatalf("watch --json last line = %q (%v)", lines[len(lines)-1], err)
	}
	code, out, _ = b.run(t, "", "watch", "--scan", "w")
	if code != exitOK || !strings.Contains(out, "40/40") || !strings.Contains(out, "scan w done") {
		t.Errorf("watch (bar): exit %d, %q", code, out)
	}
	code, out, _ = b.run(t, "", "results", "--scan", "w", "--json")
	if code != exitOK {
		t.Fatalf("results --json: exit %d", code)
	}
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 40 {
		t.Fatalf("results --json: %d lines, want 40", len(lines))
	}
	for i, l := range lines {
		var r resultJSON
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Index != i+1 || r.Result != "r:"+targets[i] || r.TaskID != client.DeriveTaskID("w", targets[i]) {
			t.Fatalf("results line %d = %q (%v)", i, l, err)
		}
	}
	code, out, _ = b.run(t, "", "results", "--scan", "w")
	if code != exitOK || !strings.HasPrefix(out, "r:10.0.0.0\nr:10.0.0.1\n") {
		t.Errorf("results (raw): exit %d, %q", code, out[:min(len(out), 40)])
	}
	code, out, _ = b.run(t, "", "workers", "--json")
	if code != exitOK || !strings.Contains(out, `"worker_id":"w1"`) {
		t.Errorf("workers --json: exit %d, %q", code, out)
	}
	if code, _, _ = b.run(t, "", "watch", "--scan", "nope"); code != exitRejected {
		t.Errorf("watch of an empty scan: exit %d, want %d", code, exitRejected)
	}
}

// TestDemo runs the demo and checks it exits 0 and prints its summary with
// the crash, the recoveries and every result.
func TestDemo(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut}
	start := time.Now()
	code, _ := runRegistered("demo", nil, env)
	if code != exitOK {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	t.Logf("demo took %s", time.Since(start))
	s := out.String()
	for _, want := range []string{"!! worker w2 crashed while running", "== summary", "tasks:        200 (200 completed, 0 failed)", "results:      200 in enqueue order", "leases recovered:"} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if strings.Contains(s, "leases recovered:         0 ") {
		t.Errorf("demo recovered no leases:\n%s", s[strings.Index(s, "== summary"):])
	}
}

// TestDemo_MutualTLS runs the demo over mutual TLS: the node refuses a
// client without a certificate, and the whole scan (workers included) runs
// with client certificates.
func TestDemo_MutualTLS(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut}
	code, _ := runRegistered("demo", []string{"--mtls", "--targets", "80"}, env)
	if code != exitOK {
		t.Fatalf("demo --mtls: exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	s := out.String()
	for _, want := range []string{"serving the API on https://127.0.0.1:", "mutual TLS: a client without a certificate is refused",
		"tasks:        80 (80 completed, 0 failed)", "results:      80 in enqueue order"} {
		if !strings.Contains(s, want) {
			t.Errorf("demo --mtls output lacks %q:\n%s", want, s)
		}
	}
}
