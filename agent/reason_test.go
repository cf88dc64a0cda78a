package agent_test

// Goal: failure reasons reach the server (exit status, signal, stderr
// tail, oversized output, handler error), and an attempt timeout kills the
// command's whole process group and fails the attempt with reason
// "timeout". Method: a real agent against the in-memory clienttest server;
// the server's task records (GetTask) are the observations.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/agent"
	"github.com/termivar/distributed/client"
	"github.com/termivar/distributed/client/clienttest"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func TestAgent_FailureReasonsReachServer(t *testing.T) {
	t.Parallel()
	b := setup(t, clienttest.Options{})
	ids := enqueue(t, b.c, "s", "exit3", "killed", "big", "noisy")
	start(t, agent.Config{
		Client: b.c, WorkerID: "w1", Capacity: 4, PollWait: time.Second, MaxResultBytes: 16,
		Command: sh(`case "$TERMIVAR_TARGET" in
			exit3) echo "scanner: host unreachable" >&2; exit 3;;
			killed) echo "about to die" >&2; kill -9 $$;;
			big) echo "writing a lot" >&2; head -c 1000 /dev/zero;;
			noisy) i=0; while [ $i -lt 300 ]; do echo "line $i of noise" >&2; i=$((i+1)); done; echo "last words" >&2; exit 1;;
			esac`),
	})
	waitFor(t, "all failed", func() bool { return progress(t, b.c, "s").GetFailed() == 4 })
	want := map[string]struct{ prefix, contains string }{
		ids[0]: {"exit status 3; stderr: ", "scanner: host unreachable"},
		ids[1]: {"signal: killed; stderr: ", "about to die"},
		ids[2]: {"output exceeds the result limit of 16 bytes; stderr: ", "writing a lot"},
		ids[3]: {"exit status 1; stderr: ", "last words"},
	}
	for id, w := range want {
		ti := task(t, b.c, id)
		r := ti.GetLastFailureReason()
		if !strings.HasPrefix(r, w.prefix) || !strings.Contains(r, w.contains) || len(r) > distributed.MaxFailureReasonBytes {
			t.Errorf("task %s reason = %q (%d bytes), want prefix %q containing %q", id, r, len(r), w.prefix, w.contains)
		}
		// Every attempt (1 + MaxRetries 3) keeps its reason.
		if n := len(ti.GetAttempts()); n != 4 {
			t.Errorf("task %s: %d attempt records, want 4", id, n)
		}
		for _, a := range ti.GetAttempts() {
			if a.GetOutcome() != "failed" || a.GetReason() == "" || a.GetWorkerId() != "w1" {
				t.Errorf("task %s attempt %v", id, a)
			}
		}
	}
	// The noisy tail keeps the end of stderr, not the beginning.
	if r := task(t, b.c, ids[3]).GetLastFailureReason(); strings.Contains(r, "line 0 of noise") || !strings.HasSuffix(r, "last words") {
		t.Errorf("noisy reason keeps the wrong end: %q", r)
	}
}

func TestAgent_HandlerErrorIsTheReason(t *testing.T) {
	t.Parallel()
	b := setup(t, clienttest.Options{})
	ids := enqueue(t, b.c, "s", "x")
	start(t, agent.Config{
		Client: b.c, WorkerID: "w1", PollWait: time.Second,
		Handler: func(context.Context, agent.Task) ([]byte, error) { return nil, errors.New("dns lookup failed") },
	})
	waitFor(t, "failed", func() bool { return progress(t, b.c, "s").GetFailed() == 1 })
	if r := task(t, b.c, ids[0]).GetLastFailureReason(); r != "handler error: dns lookup failed" {
		t.Errorf("reason = %q", r)
	}
}

// TestAgent_TimeoutKillsProcessGroup: a task enqueued with a 1 s attempt
// timeout runs a command that never ends (with a grandchild); the agent
// kills the whole process group at the timeout and fails the attempt with
// reason "timeout". When it counts the failure, the grandchild is dead.
func TestAgent_TimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	b := setup(t, clienttest.Options{})
	dir := t.TempDir()
	res, err := b.c.EnqueueTargets(context.Background(), client.EnqueueOptions{ScanID: "s", AttemptTimeoutSecs: 1, KeepTaskIDs: true}, slices.Values([]string{"hang"}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.TaskIDs[0]
	a, _ := start(t, agent.Config{
		Client: b.c, WorkerID: "w1", PollWait: time.Second, LeaseTTL: 30 * time.Second,
		Command: sh(`echo "starting slow scan" >&2; sleep 60 & echo $! > ` + dir + `/pid.$TERMIVAR_ATTEMPT.tmp; mv ` + dir + `/pid.$TERMIVAR_ATTEMPT.tmp ` + dir + `/pid.$TERMIVAR_ATTEMPT; wait`),
	})
	var pid int
	waitFor(t, "grandchild pid", func() bool {
		raw, err := os.ReadFile(filepath.Join(dir, "pid.1"))
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(raw)))
		return err == nil
	})
	t0 := time.Now()
	waitFor(t, "the first attempt failed", func() bool { return a.Stats().Failed >= 1 })
	if !processDead(pid) {
		t.Fatal("the agent reported the timeout while the grandchild still ran")
	}
	if el := time.Since(t0); el > 5*time.Second {
		t.Errorf("the timeout fired after %v, want about 1 s", el)
	}
	ti := task(t, b.c, id)
	as := ti.GetAttempts()
	if len(as) == 0 || as[0].GetOutcome() != "failed" || !strings.HasPrefix(as[0].GetReason(), "timeout: killed after 1s; stderr: starting slow scan") {
		t.Fatalf("attempt history = %v", as)
	}
	if ti.GetAttemptTimeoutSecs() != 1 {
		t.Errorf("attempt_timeout_secs = %d", ti.GetAttemptTimeoutSecs())
	}
	// Retries apply as for any failure: the task runs again.
	waitFor(t, "the second attempt started", func() bool {
		_, err := os.Stat(filepath.Join(dir, "pid.2"))
		return err == nil
	})
	if _, err := b.c.Cancel(context.Background(), &pb.CancelRequest{TaskId: id}); err != nil {
		t.Fatal(err)
	}
}
