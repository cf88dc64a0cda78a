// End-to-end test of results --follow with the built binary against a
// real serve process. Goal: a follower started before any worker writes
// every result of a running scan to a file exactly once, in enqueue order;
// interrupted (SIGINT) it names the cursor to resume from, exits 130, and
// a second follower started with that cursor appends the rest; watch then
// exits 4 because some targets failed, and scans shows the scan done with
// failures. Method: serve, two worker processes whose command fails two
// of 60 targets, follower processes writing to a file.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// countLines returns the number of complete lines in the file.
func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

// startFollower starts results --follow --json with stdout appended to
// path.
func (n *e2eNode) startFollower(t *testing.T, path string, extra ...string) (*exec.Cmd, *lockedBuffer, chan int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	errOut := &lockedBuffer{}
	cmd := exec.Command(n.bin, append([]string{"--server", n.url, "--key", n.key, "results", "--scan", "big", "--follow", "--json"}, extra...)...)
	cmd.Stdout, cmd.Stderr = f, errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		err := cmd.Wait()
		f.Close()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		done <- code
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, errOut, done
}

func waitExit(t *testing.T, what string, done chan int) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(3 * time.Minute):
		t.Fatalf("%s did not exit within 3 min", what)
	}
	return 0
}

func TestE2E_ResultsFollowToFile(t *testing.T) {
	t.Parallel()
	n := startServe(t)
	const total, failing = 60, 2
	var targets []string
	for i := range total {
		targets = append(targets, fmt.Sprintf("host-%03d", i))
	}
	if code, out := n.cli(t, strings.Join(targets, "\n"), "enqueue", "--scan", "big", "-"); code != 0 || !strings.Contains(out, "enqueued 60") {
		t.Fatalf("enqueue: exit %d %q", code, out)
	}
	path := filepath.Join(t.TempDir(), "big.jsonl")
	first, errOut, done := n.startFollower(t, path)
	// Targets host-040 and host-050 fail every attempt (their retries run
	// out). NB: the first 40 succeed, so the enqueue-order follower is not
	// held behind a task that is still being retried.
	script := `case "$TERMIVAR_TARGET" in host-0[45]0) exit 1;; esac; sleep 0.02; echo "r:$TERMIVAR_TARGET"`
	n.startWorker(t, "w1", 4, script)
	n.startWorker(t, "w2", 4, script)
	waitCond(t, "the follower to write 20 results", func() bool { return countLines(t, path) >= 20 })
	_ = first.Process.Signal(syscall.SIGINT)
	if code := waitExit(t, "the interrupted follower", done); code != 130 {
		t.Fatalf("interrupted follower: exit %d, want 130; stderr %s", code, errOut.String())
	}
	m := regexp.MustCompile(`resume with --cursor (e:\d+)`).FindStringSubmatch(errOut.String())
	if m == nil {
		t.Fatalf("interrupted follower's stderr names no cursor: %q", errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(mustRead(t, path)), "\n")
	var lastLine resultJSON
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &lastLine); err != nil || lastLine.Cursor != m[1] {
		t.Fatalf("last line %q (%v): cursor %q, the hint says %s", lines[len(lines)-1], err, lastLine.Cursor, m[1])
	}
	_, errOut2, done2 := n.startFollower(t, path, "--cursor", m[1])
	if code := waitExit(t, "the resumed follower", done2); code != 0 {
		t.Fatalf("resumed follower: exit %d: %s", code, errOut2.String())
	}
	// Every target that succeeded is in the file once, in enqueue order,
	// with its target; the failed ones are not.
	var want []string
	for _, tg := range targets {
		if tg != "host-040" && tg != "host-050" {
			want = append(want, tg)
		}
	}
	var got []string
	for _, r := range readResultLines(t, path) {
		if r.Result != "r:"+r.TargetRef+"\n" && r.Result != "r:"+r.TargetRef {
			t.Fatalf("line %+v: result does not match its target", r)
		}
		got = append(got, r.TargetRef)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("the file holds %d results, want the %d successful targets once each in enqueue order", len(got), len(want))
	}
	// watch exits 4: 2 targets failed.
	cmd := exec.Command(n.bin, "--server", n.url, "--key", n.key, "watch", "--scan", "big")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitScanFailed || !strings.Contains(string(out), fmt.Sprintf("scan big ended with %d failed and 0 expired tasks", failing)) {
		t.Fatalf("watch of a scan with failures: %v, %s", err, tail(string(out), 400))
	}
	code, sout := n.cli(t, "", "scans", "--json")
	var s scanJSON
	if err := json.Unmarshal([]byte(strings.TrimSpace(sout)), &s); code != 0 || err != nil {
		t.Fatalf("scans --json: exit %d %q (%v)", code, sout, err)
	}
	if s.State != "done_with_failures" || s.Completed != total-failing || s.Failed != failing || s.Results != total-failing || s.FinishedAt < s.CreatedAt || s.CreatedAt == 0 {
		t.Fatalf("scans --json = %+v", s)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
