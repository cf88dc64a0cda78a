package main

// Goal: the CLI side of failure reasons and re-runs (docs/contract.md
// Part F): enqueue --timeout reaches the task, tasks --status failed shows
// the last reason, task TASK shows the attempt history, retry re-runs a
// scan's failed tasks once (a second retry changes nothing), and bad flags
// are usage errors. Method: commands run in process against the clienttest
// server while a real agent runs a /bin/sh command.

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/termivar/distributed/agent"
	"github.com/termivar/distributed/client"
)

// shellWorker runs an agent with a /bin/sh script until the returned func
// is called (or the test ends).
func shellWorker(t *testing.T, b *testBundle, script string) func() {
	t.Helper()
	c, err := client.New(client.Config{ServerURL: b.srv.URL, Key: b.srv.Key})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{
		Client: c, WorkerID: "w1", PollWait: time.Second, UtilizationFunc: func() (uint32, uint32) { return 0, 0 },
		Command: []string{"/bin/sh", "-c", script},
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
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
			c.Close()
		}
	}
	t.Cleanup(stop)
	return stop
}

func TestCLI_ReasonsHistoryAndRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if code, _, stderr := b.run(t, "", "enqueue", "--scan", "r", "--timeout", "1h", "ok.example", "bad.example"); code != exitOK {
		t.Fatalf("enqueue --timeout: %s", stderr)
	}
	bad := client.DeriveTaskID("r", "bad.example")
	stop := shellWorker(t, b, `case "$TERMIVAR_TARGET" in bad.example) echo "connect: no route to host" >&2; exit 4;; *) echo ok;; esac`)
	waitCond(t, "bad.example failed for good", func() bool {
		_, out, _ := b.run(t, "", "tasks", "--scan", "r", "--status", "failed", "--json")
		return strings.Contains(out, bad)
	})
	stop()
	code, out, _ := b.run(t, "", "tasks", "--scan", "r", "--status", "failed")
	if code != exitOK || !strings.Contains(out, "LAST REASON") || !strings.Contains(out, "exit status 4; stderr: connect: no route") {
		t.Fatalf("tasks --status failed: exit %d\n%s", code, out)
	}
	code, out, _ = b.run(t, "", "task", bad)
	if code != exitOK || !strings.Contains(out, "timeout  1h0m0s per attempt") || strings.Count(out, "exit status 4; stderr: connect: no route to host") != 4 {
		t.Fatalf("task: exit %d\n%s", code, out)
	}
	var detail taskDetailJSON
	code, out, _ = b.run(t, "", "task", "--json", bad)
	if code != exitOK || json.Unmarshal([]byte(out), &detail) != nil || len(detail.Attempts) != 4 || detail.AttemptTimeoutSecs != 3600 ||
		detail.Attempts[3].Outcome != "failed" || detail.Attempts[3].WorkerID != "w1" || detail.LastFailureReason == "" {
		t.Fatalf("task --json: exit %d, %q", code, out)
	}

	// Bad invocations are usage errors and change nothing.
	for _, args := range [][]string{
		{"retry", "--status", "failed"},
		{"retry", "--scan", "r", "--status", "completed"},
		{"enqueue", "--scan", "r", "--timeout", "1500ms", "x.example"},
		{"task"},
	} {
		if code, _, _ := b.run(t, "", args...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, exitUsage)
		}
	}
	if code, _, stderr := b.run(t, "", "retry", "--scan", "no-such-scan"); code != exitRejected || !strings.Contains(stderr, "task_not_found") {
		t.Errorf("retry of an unknown scan: exit %d, %s", code, stderr)
	}

	code, out, _ = b.run(t, "", "retry", "--scan", "r", "--status", "failed,expired")
	if code != exitOK || !strings.Contains(out, "re-queued 1 task(s) of scan r; 1 left as they were") || !strings.Contains(out, bad) {
		t.Fatalf("retry: exit %d, %q", code, out)
	}
	code, out, _ = b.run(t, "", "--json", "retry", "--scan", "r", bad, bad)
	var again struct {
		Requeued  []string `json:"requeued"`
		Unchanged uint32   `json:"unchanged"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &again) != nil || len(again.Requeued) != 0 || again.Unchanged != 1 {
		t.Fatalf("second retry: exit %d, %q", code, out)
	}
	code, out, _ = b.run(t, "", "task", "--json", bad)
	if code != exitOK || json.Unmarshal([]byte(out), &detail) != nil || detail.Status != "queued" || detail.Reruns != 1 || detail.RetryCount != 0 {
		t.Fatalf("task after retry: exit %d, %q", code, out)
	}
}
