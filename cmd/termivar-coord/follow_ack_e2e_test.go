// End-to-end test of results --follow --delete-after-read with the built
// binary against a real serve process (docs/adr/0002-purge.md, "Delete
// after read"). Goal: a follower killed with SIGKILL mid-scan has purged
// only results it wrote (every task whose result is not in the file still
// exists); a follower started again from the last cursor in the file
// appends exactly the rest, so the file holds every result exactly once,
// in enqueue order; once it is done every task is purged and the scan is
// gone. Method: serve, two worker processes, follower processes appending
// to one file, the Go client to read the state.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// readResultLines parses a results --json file.
func readResultLines(t *testing.T, path string) []resultJSON {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []resultJSON
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r resultJSON
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestE2E_ResultsFollowDeleteAfterRead(t *testing.T) {
	t.Parallel()
	n := startServe(t)
	const total = 60
	var targets []string
	for i := range total {
		targets = append(targets, fmt.Sprintf("host-%03d", i))
	}
	if code, out := n.cli(t, strings.Join(targets, "\n"), "enqueue", "--scan", "big", "-"); code != 0 || !strings.Contains(out, "enqueued 60") {
		t.Fatalf("enqueue: exit %d %q", code, out)
	}
	path := filepath.Join(t.TempDir(), "big.jsonl")
	first, errOut, done := n.startFollower(t, path, "--delete-after-read")
	script := `sleep 0.05; echo "r:$TERMIVAR_TARGET"`
	n.startWorker(t, "w1", 2, script)
	n.startWorker(t, "w2", 2, script)
	waitCond(t, "the follower to write 20 results", func() bool { return countLines(t, path) >= 20 })
	_ = first.Process.Signal(syscall.SIGKILL)
	waitExit(t, "the killed follower", done)

	// Nothing the follower did not write was purged; some of what it
	// wrote (acknowledged by its later calls) was.
	c := n.client(t)
	written := map[string]bool{}
	lines := readResultLines(t, path)
	for _, r := range lines {
		written[r.TaskID] = true
	}
	acked := 0
	for _, tg := range targets {
		id := client.DeriveTaskID("big", tg)
		_, err := c.GetTask(t.Context(), &pb.GetTaskRequest{TaskId: id})
		switch {
		case err != nil && connect.CodeOf(err) != connect.CodeNotFound:
			t.Fatalf("GetTask(%s): %v", id, err)
		case err != nil && !written[id]:
			t.Fatalf("task %s was purged but its result is not in the file (%s)", id, errOut.String())
		case err != nil:
			acked++
		}
	}
	if acked == 0 {
		t.Fatalf("the killed follower wrote %d results and acknowledged none", len(lines))
	}
	t.Logf("killed after %d results, %d of them acknowledged and purged", len(lines), acked)

	_, errOut2, done2 := n.startFollower(t, path, "--delete-after-read", "--cursor", lines[len(lines)-1].Cursor)
	if code := waitExit(t, "the resumed follower", done2); code != 0 {
		t.Fatalf("resumed follower: exit %d: %s", code, errOut2.String())
	}
	var got []string
	for _, r := range readResultLines(t, path) {
		if r.Result != "r:"+r.TargetRef+"\n" && r.Result != "r:"+r.TargetRef {
			t.Fatalf("result %q does not match its target %s", r.Result, r.TargetRef)
		}
		got = append(got, r.TargetRef)
	}
	if strings.Join(got, ",") != strings.Join(targets, ",") {
		t.Fatalf("the file holds %d results, want the %d targets once each in enqueue order", len(got), total)
	}
	// The final acknowledgement purged the last page: no task is left and
	// the scan is gone.
	st, err := c.Status(t.Context(), &pb.StatusRequest{})
	if err != nil || st.GetTaskRecords() != 0 || st.GetResults() != 0 {
		t.Fatalf("status after the follow = %v (%v), want no task records and no results", st, err)
	}
	if code, out := n.cli(t, "", "scans", "--json"); code != 0 || strings.TrimSpace(out) != "" {
		t.Fatalf("scans after the follow: exit %d %q, want no scan", code, out)
	}
}

// TestCLI_ResultsDeleteAfterReadNeedsFollow: --delete-after-read without
// --follow is a usage error that reads and purges nothing.
func TestCLI_ResultsDeleteAfterReadNeedsFollow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, out, stderr := b.run(t, "", "results", "--scan", "f", "--delete-after-read")
	if code != exitUsage || out != "" || !strings.Contains(stderr, "--delete-after-read need --follow") {
		t.Fatalf("results --delete-after-read without --follow: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}
