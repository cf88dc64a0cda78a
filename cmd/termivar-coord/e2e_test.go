// End-to-end tests of the built binary: they build termivar-coord, start
// `serve` on a temp dir and real `worker` processes running a small shell
// script, and drive everything through the CLI as a person or a script
// would. TestE2E_KillWorker is the evidence for crash recovery:
// 500 targets, one worker SIGKILLed mid-run, every task completes, results
// come back in enqueue order exactly once, and the killed worker's tasks
// were re-leased (attempt > 1). TestE2E_WatchAndResultsJSON checks the
// output of watch (bar and --json) and results --json.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// binary returns the termivar-coord binary (buildBinary: built once per
// test binary).
func binary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test builds the binary; skipped with -short")
	}
	return buildBinary(t)
}

// e2eNode is a `serve` process.
type e2eNode struct {
	bin, dir, url, key string
	cmd                *exec.Cmd
	logBuf             *lockedBuffer
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// lockedBuffer is a bytes.Buffer safe for a process's output goroutine and
// the test.
//
// NB: the buffer is a named field, not embedded: an embedded bytes.Buffer
// would promote ReadFrom, which os/exec's copy goroutine prefers to Write,
// bypassing the lock.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startServe starts `serve` on a temp dir and waits until it is ready and
// its admin key exists.
func startServe(t *testing.T) *e2eNode {
	t.Helper()
	bin := binary(t)
	dir := t.TempDir()
	api := freeAddr(t)
	n := &e2eNode{bin: bin, dir: dir, url: "http://" + api}
	logBuf := &lockedBuffer{}
	n.logBuf = logBuf
	n.cmd = exec.Command(bin, "serve", "--data-dir", filepath.Join(dir, "data"), "--api-addr", api,
		"--raft-addr", freeAddr(t), "--node-id", "e2e", "--tick", "200ms")
	n.cmd.Stdout, n.cmd.Stderr = logBuf, logBuf
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = n.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = n.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("serve log:\n%s", logBuf.String())
		}
	})
	keyPath := filepath.Join(dir, "data", "admin.key")
	deadline := time.Now().Add(60 * time.Second)
	for {
		if k, err := client.LoadKey(keyPath); err == nil {
			if resp, err := http.Get(n.url + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					n.key = k
					return n
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready after 60s:\n%s", logBuf.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cli runs one client command against n and returns exit code and stdout.
func (n *e2eNode) cli(t *testing.T, stdin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(n.bin, append([]string{"--server", n.url, "--key", n.key}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Logf("%s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	return code, out.String()
}

// e2eWorker is a `worker` process.
type e2eWorker struct {
	id  string
	cmd *exec.Cmd
	log *lockedBuffer
	// done is closed when the process exited; exitCode is then set.
	done     chan struct{}
	exitCode int
}

// startWorker starts a worker running script with /bin/sh.
func (n *e2eNode) startWorker(t *testing.T, id string, capacity int, script string) *e2eWorker {
	t.Helper()
	w := &e2eWorker{id: id, log: &lockedBuffer{}, done: make(chan struct{})}
	w.cmd = exec.Command(n.bin, "worker", "--server", n.url, "--key", n.key, "--id", id,
		"--capacity", fmt.Sprint(capacity), "--lease-ttl", "2s", "--heartbeat", "500ms", "--poll-wait", "2s", "--grace", "5s",
		"--", "/bin/sh", "-c", script)
	w.cmd.Stdout, w.cmd.Stderr = w.log, w.log
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := w.cmd.Wait()
		if ee, ok := err.(*exec.ExitError); ok {
			w.exitCode = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				w.exitCode = -int(ws.Signal())
			}
		}
		close(w.done)
	}()
	t.Cleanup(func() {
		_ = w.cmd.Process.Kill()
		<-w.done
		if t.Failed() {
			t.Logf("worker %s log (tail):\n%s", id, tail(w.log.String(), 3000))
		}
	})
	return w
}

// stop sends SIGTERM and waits for the exit code.
func (w *e2eWorker) stop(t *testing.T) int {
	t.Helper()
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("worker %s did not exit 30s after SIGTERM", w.id)
	}
	return w.exitCode
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (n *e2eNode) client(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{ServerURL: n.url, Key: n.key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// workScript echoes the target, the attempt and the fence after a short
// pause, so tasks overlap and a killed worker always holds some.
const workScript = `sleep 0.02; echo "$TERMIVAR_TARGET attempt=$TERMIVAR_ATTEMPT fence=$TERMIVAR_FENCE"`

func TestE2E_KillWorker(t *testing.T) {
	t.Parallel()
	n := startServe(t)
	c := n.client(t)
	ctx := context.Background()

	const total = 500
	targets := make([]string, total)
	for i := range targets {
		targets[i] = fmt.Sprintf("target-%03d.example", i)
	}
	file := filepath.Join(t.TempDir(), "targets.txt")
	if err := os.WriteFile(file, []byte(strings.Join(targets, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	workers := []*e2eWorker{
		n.startWorker(t, "w1", 8, workScript),
		// w2 hangs on every task until it dies (its tasks wait for their
		// parent, the agent, to disappear), so every lease it holds when it
		// is killed must be recovered and no Complete can be in flight.
		n.startWorker(t, "w2", 8, `while kill -0 $PPID 2>/dev/null; do sleep 0.05; done`),
		n.startWorker(t, "w3", 8, workScript),
	}
	if code, out := n.cli(t, "", "enqueue", "--scan", "e2e", "--file", file); code != 0 || !strings.Contains(out, "enqueued 500 tasks") {
		t.Fatalf("enqueue: exit %d, %q", code, out)
	}

	// Kill w2 with SIGKILL once the scan is under way and w2 holds leases;
	// the leases it holds after death are the ones to be recovered.
	w2Leases := func() []string {
		var ids []string
		for _, st := range []string{"leased", "running"} {
			if err := c.EachTask(ctx, &pb.ListTasksRequest{ScanId: "e2e", Status: st}, func(ti *pb.TaskInfo) error {
				if ti.GetAssignedTo() == "w2" {
					ids = append(ids, ti.GetTaskId())
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		return ids
	}
	var held []string
	// NB: generous: on a loaded machine the agents report high CPU use and
	// the node scales their capacity down to one slot each.
	deadline := time.Now().Add(3 * time.Minute)
	for held == nil {
		if time.Now().After(deadline) {
			t.Fatal("w2 never held a lease after 100 completions")
		}
		p, err := c.ScanProgress(ctx, &pb.ScanProgressRequest{ScanId: "e2e"})
		if err != nil {
			t.Fatal(err)
		}
		if p.GetCompleted() < 100 || len(w2Leases()) == 0 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err := workers[1].cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-workers[1].done
		held = w2Leases()
		t.Logf("SIGKILLed w2 holding %d leases at %d/%d completed", len(held), p.GetCompleted(), total)
		if len(held) == 0 {
			t.Fatal("w2 finished its tasks between the check and SIGKILL; nothing to recover")
		}
	}

	// Wait for the scan to finish through the CLI's watch.
	if code, out := n.cli(t, "", "watch", "--scan", "e2e", "--json", "--interval", "100ms"); code != 0 || !strings.Contains(out, `"done":true`) {
		t.Fatalf("watch: exit %d, %q", code, tail(out, 500))
	}
	elapsed := time.Since(start)
	t.Logf("500 tasks done in %s (%.0f tasks/s) with one worker killed", elapsed.Round(time.Millisecond), total/elapsed.Seconds())

	// Every task completed.
	code, out := n.cli(t, "", "tasks", "--scan", "e2e", "--json")
	if code != 0 {
		t.Fatalf("tasks: exit %d", code)
	}
	byID := map[string]taskJSON{}
	for sc := bufio.NewScanner(strings.NewReader(out)); sc.Scan(); {
		var tj taskJSON
		if err := json.Unmarshal(sc.Bytes(), &tj); err != nil {
			t.Fatalf("tasks --json line %q: %v", sc.Text(), err)
		}
		byID[tj.TaskID] = tj
	}
	if len(byID) != total {
		t.Fatalf("tasks: %d tasks, want %d", len(byID), total)
	}
	for id, tj := range byID {
		if tj.Status != "completed" || !tj.HasResult {
			t.Fatalf("task %s: status %s, result %v; want completed with a result", id, tj.Status, tj.HasResult)
		}
	}
	// The killed worker's tasks were leased again.
	for _, id := range held {
		if a := byID[id].Attempt; a < 2 {
			t.Errorf("task %s held by the killed worker: attempt %d, want > 1", id, a)
		}
	}

	// Results in enqueue order, each exactly once.
	code, out = n.cli(t, "", "results", "--scan", "e2e", "--json")
	if code != 0 {
		t.Fatalf("results: exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != total {
		t.Fatalf("results: %d lines, want %d", len(lines), total)
	}
	seen := map[string]bool{}
	for i, l := range lines {
		var r resultJSON
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("results line %d: %v", i, err)
		}
		if seen[r.TaskID] {
			t.Fatalf("results: task %s twice", r.TaskID)
		}
		seen[r.TaskID] = true
		if r.TaskID != client.DeriveTaskID("e2e", targets[i]) || !strings.HasPrefix(r.Result, targets[i]+" attempt=") {
			t.Fatalf("results line %d = %s; want the result of %s (enqueue order)", i, l, targets[i])
		}
	}

	// The survivors drain on SIGTERM and exit 0.
	for _, w := range []*e2eWorker{workers[0], workers[2]} {
		if code := w.stop(t); code != 0 {
			t.Errorf("worker %s: exit %d after SIGTERM, want 0", w.id, code)
		}
	}
	// NB: w2 may be offline too: on a loaded machine the scan can outlast
	// the heartbeat timeout (60 s), and then the node prunes the dead w2.
	code, out = n.cli(t, "", "workers", "--json")
	status := map[string]string{}
	for sc := bufio.NewScanner(strings.NewReader(out)); sc.Scan(); {
		var w struct {
			WorkerID string `json:"worker_id"`
			Status   string `json:"status"`
		}
		if err := json.Unmarshal(sc.Bytes(), &w); err != nil {
			t.Fatalf("workers --json line %q: %v", sc.Text(), err)
		}
		status[w.WorkerID] = w.Status
	}
	if code != 0 || status["w1"] != "offline" || status["w3"] != "offline" {
		t.Errorf("workers after drain: exit %d, %s; want w1 and w3 offline", code, out)
	}
}

func TestE2E_WatchAndResultsJSON(t *testing.T) {
	t.Parallel()
	n := startServe(t)
	const total = 30
	var targets []string
	for i := range total {
		targets = append(targets, fmt.Sprintf("10.1.0.%d", i+1))
	}
	if code, out := n.cli(t, strings.Join(targets, "\n"), "enqueue", "--scan", "w", "--phases", "1,2", "-"); code != 0 || !strings.Contains(out, "enqueued 30") {
		t.Fatalf("enqueue: exit %d %q", code, out)
	}
	// watch of an unfinished scan: start it before any worker exists.
	type result struct {
		code int
		out  string
	}
	// NB: the worker starts only once watch printed its first line (a
	// fixed pause is too short when the machine is loaded).
	wout, werr := &lockedBuffer{}, &lockedBuffer{}
	wcmd := exec.Command(n.bin, "--server", n.url, "--key", n.key, "watch", "--scan", "w", "--json", "--interval", "100ms")
	wcmd.Stdout, wcmd.Stderr = wout, werr
	if err := wcmd.Start(); err != nil {
		t.Fatal(err)
	}
	watched := make(chan result, 1)
	go func() {
		err := wcmd.Wait()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		watched <- result{code, wout.String()}
	}()
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(wout.String(), "\n"); {
		if time.Now().After(deadline) {
			_ = wcmd.Process.Kill()
			t.Fatalf("watch printed nothing in 60s: %s", werr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.startWorker(t, "w1", 3, `sleep 0.1; printf '%s|%s' "$TERMIVAR_TARGET" "$TERMIVAR_PHASES"`)
	var r result
	select {
	case r = <-watched:
	case <-time.After(3 * time.Minute):
		_ = wcmd.Process.Kill()
		<-watched
		t.Fatal("watch did not end 3 min after the worker started")
	}
	if r.code != 0 {
		t.Logf("watch stderr: %s", werr.String())
	}
	if r.code != 0 {
		t.Fatalf("watch --json: exit %d", r.code)
	}
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	var first, last progressJSON
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if first.Done || first.Queued != total || first.Total != total {
		t.Errorf("watch first line = %+v, want %d queued, not done", first, total)
	}
	if !last.Done || last.Completed != total || last.Results != total || len(lines) < 3 {
		t.Errorf("watch last line = %+v after %d lines; want done with %d completed", last, len(lines), total)
	}
	prev := -1
	for _, l := range lines {
		var p progressJSON
		_ = json.Unmarshal([]byte(l), &p)
		if int(p.Completed) < prev {
			t.Errorf("watch: completed went backwards: %s", l)
		}
		prev = int(p.Completed)
	}
	// The bar form of a finished scan.
	if code, out := n.cli(t, "", "watch", "--scan", "w"); code != 0 || !strings.Contains(out, "30/30") || !strings.Contains(out, "scan w done") {
		t.Errorf("watch: exit %d, %q", code, out)
	}
	code, out := n.cli(t, "", "results", "--scan", "w", "--json")
	if code != 0 {
		t.Fatalf("results --json: exit %d", code)
	}
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != total {
		t.Fatalf("results --json: %d lines, want %d", len(lines), total)
	}
	for i, l := range lines {
		var rj resultJSON
		if err := json.Unmarshal([]byte(l), &rj); err != nil || rj.Index != i+1 || rj.Result != targets[i]+"|1,2" || rj.TaskID != client.DeriveTaskID("w", targets[i]) {
			t.Errorf("results --json line %d = %s (%v)", i, l, err)
		}
	}
	// Exit codes: a rejected request and an unknown scan.
	if code, _ := n.cli(t, "", "cancel", "nope"); code != exitRejected {
		t.Errorf("cancel unknown task: exit %d, want %d", code, exitRejected)
	}
	if code, _ := n.cli(t, "", "status", "--json"); code != 0 {
		t.Errorf("status: exit %d", code)
	}
}
