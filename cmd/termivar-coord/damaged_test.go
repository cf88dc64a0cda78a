// Tests of serve on a damaged data dir. Goal: serve refuses with exit code
// 2 and one error line naming the damaged file and what to do, never a
// panic or a hang. Method: a data dir written through node.Open, damaged,
// then the built binary's serve run on it with a deadline. (The node tests
// cover each refusal's message in detail; this is the exit mapping.)
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/raftfsm"
)

// writeDataDir runs a node on a new data dir: a few enqueues, optionally a
// snapshot at the last index.
func writeDataDir(t *testing.T, snapshot bool) string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := node.Open(ctx, node.Config{DataDir: dir, RaftAddr: "127.0.0.1:0", TickInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		cmd := &pb.Command{Tenant: raftfsm.SystemTenant, Op: &pb.Command_Enqueue{Enqueue: &pb.EnqueueTasks{
			Tasks: []*pb.TaskSpec{{TaskId: fmt.Sprintf("t%d", i), ScanId: "s", TargetRef: []byte("x")}}}}}
		if r, err := n.Propose(ctx, cmd); err != nil || r.Err != nil {
			t.Fatalf("propose: %v %v", err, r.Err)
		}
	}
	if snapshot {
		if err := n.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func onlySegment(t *testing.T, dir string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "raft", "wal", "*.wal"))
	if len(m) != 1 {
		t.Fatalf("segments: %v", m)
	}
	return m[0]
}

func TestServe_DamagedDataDirExits2(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binary")
	}
	bin := buildBinary(t)
	cases := []struct {
		name     string
		snapshot bool
		damage   func(t *testing.T, dir string)
		file     string // the path the message must name, relative to the data dir
		phrase   string
	}{
		{"segments deleted, wal-meta kept", false, func(t *testing.T, dir string) {
			if err := os.Remove(onlySegment(t, dir)); err != nil {
				t.Fatal(err)
			}
		}, filepath.Join("raft", "wal"), "is missing but raft-wal's wal-meta.db lists it"},
		{"last record truncated, snapshot at the last index", true, func(t *testing.T, dir string) {
			seg := onlySegment(t, dir)
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			end := len(bytes.TrimRight(b, "\x00")) // the last record ends here
			if err := os.Truncate(seg, int64(end-12)); err != nil {
				t.Fatal(err)
			}
		}, filepath.Join("raft", "wal"), "truncated"},
		{"byte flipped in the middle", false, func(t *testing.T, dir string) {
			f, err := os.OpenFile(onlySegment(t, dir), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte{0xee}, 300); err != nil {
				t.Fatal(err)
			}
		}, filepath.Join("raft", "wal"), "cannot be trusted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeDataDir(t, c.snapshot)
			c.damage(t, dir)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "serve", "--data-dir", dir, "--api-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if ctx.Err() != nil || !errors.As(err, &ee) || ee.ExitCode() != exitRejected {
				t.Fatalf("serve: %v (deadline: %v), want exit code %d\n%s", err, ctx.Err(), exitRejected, stderr.String())
			}
			out := stderr.String()
			var errLines []string
			for l := range strings.SplitSeq(out, "\n") {
				if strings.Contains(l, "level=ERROR") {
					errLines = append(errLines, l)
				}
			}
			if len(errLines) != 1 || strings.Contains(out, "panic") {
				t.Fatalf("want one error line and no panic, got:\n%s", out)
			}
			for _, want := range []string{filepath.Join(dir, c.file), c.phrase, "to repair"} {
				if !strings.Contains(errLines[0], want) {
					t.Errorf("error line does not say %q:\n%s", want, errLines[0])
				}
			}
			t.Logf("%s", errLines[0])
		})
	}
}
