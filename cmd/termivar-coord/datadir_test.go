package main

// A data dir that would make serve silently serve the wrong thing is
// refused by the real binary: exit code 2, one message naming the problem,
// at once (no hang), and the data dir unchanged so that the right start
// still works afterwards.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serveOnce runs `serve` on dir with extra args and returns its exit code
// and output; it must exit by itself within 30 s.
func serveOnce(t *testing.T, bin, dir string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := []string{"serve", "--data-dir", dir, "--api-addr", freeAddr(t), "--raft-addr", freeAddr(t), "--node-id", "e2e"}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("serve %v did not exit within 30 s (hang):\n%s", args, out)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

func TestServe_RefusesDataDirMismatch(t *testing.T) {
	n := startServe(t)
	dir := filepath.Join(n.dir, "data")

	code, out := serveOnce(t, n.bin, dir)
	if want := fmt.Sprintf("in use by PID %d", n.cmd.Process.Pid); code != exitRejected || !strings.Contains(out, want) {
		t.Fatalf("second serve on a used data dir: exit %d, output %q; want %d and %q", code, out, exitRejected, want)
	}

	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Wait(); err != nil {
		t.Fatalf("first serve: %v", err)
	}
	code, out = serveOnce(t, n.bin, dir, "--node-id", "other")
	if code != exitRejected || !strings.Contains(out, `belongs to node \"e2e\"`) && !strings.Contains(out, `belongs to node "e2e"`) {
		t.Fatalf("serve with another --node-id: exit %d, output %q", code, out)
	}

	if err := os.RemoveAll(filepath.Join(dir, "raft")); err != nil {
		t.Fatal(err)
	}
	code, out = serveOnce(t, n.bin, dir)
	if code != exitRejected || !strings.Contains(out, "has no raft state") || !strings.Contains(out, "--force-new-cluster") {
		t.Fatalf("serve without raft state: exit %d, output %q", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "raft", "wal")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused start created raft state: %v", err)
	}
}
