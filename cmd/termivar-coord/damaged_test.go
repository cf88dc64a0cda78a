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
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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
			seg := onlySegment(t, dir)
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			// NB: inside a record's payload (an enqueued task ID), not at a
			// fixed offset that could fall on a record's padding.
			at := bytes.Index(b, []byte("t2"))
			if at < 0 {
				t.Fatal("task t2 not found in the segment")
			}
			f, err := os.OpenFile(seg, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte{0xee}, int64(at)); err != nil {
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

// TestServe_DiskFullExitsForRestart fills a small tmpfs under a running
// serve: raft-wal's segment rotation fails with ENOSPC and every later
// write answers "segment is sealed". serve must exit non-zero (2) with one
// message within the log store's grace period (10 s), and once space is
// freed a restart serves again. Needs root and mount rights.
func TestServe_DiskFullExitsForRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the binary and fills a tmpfs")
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=80m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root and mount rights): %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	bin := buildBinary(t)
	dir := filepath.Join(mnt, "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	api, raftPort := freePort(t), freePort(t)
	c := startCoord(t, bin, dir, api, raftPort)
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }()
	key, err := os.ReadFile(filepath.Join(dir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(mnt, "filler")
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	if free := int64(st.Bavail)*st.Bsize - 4<<20; free > 0 {
		if err := os.WriteFile(filler, make([]byte, free), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Writes until the disk is full (or serve has exited); then the exit
	// itself is the event.
	start := time.Now()
	for i := 0; i < 40 && len(exited) == 0; i++ {
		postPadding(c.url, strings.TrimSpace(string(key)), i)
	}
	var code int
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("serve ended with %v, want a non-zero exit", err)
		}
		code = ee.ExitCode()
	case <-time.After(90 * time.Second):
		c.kill9(t)
		t.Fatal("serve kept running on a full disk")
	}
	log, _ := os.ReadFile(filepath.Join(dir, "serve.log"))
	if code != exitRejected || !strings.Contains(string(log), "the raft log store fails its writes") {
		t.Fatalf("exit code %d, want %d with the log store message; log:\n%s", code, exitRejected, log)
	}
	t.Logf("serve exited %d after %s", code, time.Since(start).Round(time.Millisecond))
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	c = startCoord(t, bin, dir, api, raftPort) // fails the test unless /readyz turns ok
	c.cmd.Process.Signal(syscall.SIGTERM)
	_ = c.cmd.Wait()
}

// postPadding sends an Enqueue of about 4 MB that the FSM rejects (its
// expected revision is never current) but that raft still logs.
func postPadding(url, key string, i int) {
	var sb strings.Builder
	sb.WriteString(`{"expected_revision":"1099511627776","tasks":[`)
	target := strings.Repeat("x", 1000)
	for j := range 4000 {
		if j > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"task_id":"p%d-%d","scan_id":"s","target_ref":"%s"}`, i, j, target)
	}
	sb.WriteString(`]}`)
	req, err := http.NewRequest(http.MethodPost, url+"/termivar.v1.Producer/Enqueue", strings.NewReader(sb.String()))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
