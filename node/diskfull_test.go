// Tests of a failing log store (a full disk). Goal: while the log store
// fails, CommitHealth (and so /readyz) says the node cannot commit; a
// failure that clears heals by itself; one that lasts past the grace
// period fails the node (serve then exits non-zero for its supervisor to
// restart it); either way every acknowledged command is still there after
// a restart.
// Method: a raft.LogStore wrapper that fails writes on command with
// ENOSPC; and, where the test runs as root and may mount, raft-wal on a
// small tmpfs filled up for real.
package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/raftfsm"
)

// faultyLogStore fails every write with ENOSPC while fail is set.
type faultyLogStore struct {
	raft.LogStore
	fail atomic.Bool
}

func (s *faultyLogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *faultyLogStore) StoreLogs(logs []*raft.Log) error {
	if s.fail.Load() {
		return fmt.Errorf("write wal segment: %w", syscall.ENOSPC)
	}
	return s.LogStore.StoreLogs(logs)
}

func (s *faultyLogStore) IsMonotonic() bool { return true }

// proposeOnce proposes an enqueue of id and reports whether it was
// acknowledged.
func proposeOnce(n *Node, id string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := n.Propose(ctx, enqueue(raftfsm.SystemTenant, id))
	return err == nil && r.Err == nil
}

// checkTasks reopens dir and checks every acknowledged task is there.
func checkTasks(t *testing.T, dir string, acked []string) {
	t.Helper()
	n := openNode(t, dir, nil)
	defer n.Close()
	tv, _ := n.FSM().Tenant(raftfsm.SystemTenant)
	for _, id := range acked {
		if _, _, err := tv.GetTask(id); err != nil {
			t.Errorf("acknowledged task %s is lost: %v", id, err)
		}
	}
}

func TestNode_LogStoreFailureHeals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fs := &faultyLogStore{}
	n := openNode(t, dir, func(c *Config) {
		c.wrapLogStore = func(s raft.LogStore) raft.LogStore { fs.LogStore = s; return fs }
		c.storeFailGrace = time.Minute
	})
	var acked []string
	for i := range 5 {
		id := fmt.Sprintf("before-%d", i)
		if !proposeOnce(n, id) {
			t.Fatalf("propose %s failed on a healthy store", id)
		}
		acked = append(acked, id)
	}
	fs.fail.Store(true)
	if proposeOnce(n, "during") {
		t.Fatal("a proposal was acknowledged while every write fails")
	}
	if err := n.CommitHealth(); !errors.Is(err, ErrLogStoreFailing) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("CommitHealth = %v, want ErrLogStoreFailing wrapping ENOSPC", err)
	}
	fs.fail.Store(false)
	waitFor(t, "a proposal to succeed after the failure cleared", func() bool { return proposeOnce(n, "after") })
	acked = append(acked, "after")
	if err := n.CommitHealth(); err != nil {
		t.Fatalf("CommitHealth = %v after healing", err)
	}
	if n.Err() != nil {
		t.Fatalf("Err = %v after healing", n.Err())
	}
	n.Close()
	checkTasks(t, dir, acked)
}

func TestNode_LogStoreFailureFailsNode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fs := &faultyLogStore{}
	n := openNode(t, dir, func(c *Config) {
		c.wrapLogStore = func(s raft.LogStore) raft.LogStore { fs.LogStore = s; return fs }
		c.storeFailGrace = 500 * time.Millisecond
	})
	acked := []string{"a", "b"}
	for _, id := range acked {
		if !proposeOnce(n, id) {
			t.Fatalf("propose %s failed on a healthy store", id)
		}
	}
	fs.fail.Store(true)
	start := time.Now()
	for i := 0; ; i++ {
		if proposeOnce(n, fmt.Sprintf("during-%d", i)) {
			t.Fatal("a proposal was acknowledged while every write fails")
		}
		select {
		case <-n.Failed():
		default:
			if time.Since(start) > 30*time.Second {
				t.Fatal("the node did not fail within 30 s of a log store failing every write")
			}
			continue
		}
		break
	}
	t.Logf("node failed %s after the first failing write (grace 500ms)", time.Since(start).Round(time.Millisecond))
	if err := n.Err(); !errors.Is(err, ErrLogStoreFailing) {
		t.Fatalf("Err = %v, want ErrLogStoreFailing", err)
	}
	n.Close()
	checkTasks(t, dir, acked)
}

// TestNode_DiskFullTmpfs fills a small tmpfs for real: raft-wal's segment
// rotation then fails with ENOSPC and leaves it answering "segment is
// sealed" to every write, which no amount of freed space heals. The node
// fails after the grace period; after space is freed a restart recovers
// with every acknowledged task.
func TestNode_DiskFullTmpfs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: skipping the tmpfs disk-full test")
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=72m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (needs root and mount rights): %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	dir := filepath.Join(mnt, "data")
	n := openNode(t, dir, func(c *Config) { c.storeFailGrace = time.Second })
	filler := filepath.Join(mnt, "filler")
	fillDisk(t, mnt, filler, 2<<20)
	pad := make([]byte, 256<<10)
	var acked []string
	for i := 0; i < 2000; i++ {
		id := fmt.Sprintf("t-%04d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		rs, err := n.ProposeAll(ctx, []*pb.Command{enqueue(raftfsm.SystemTenant, id), padCommand(pad)})
		cancel()
		if err == nil && rs[0].Err == nil {
			acked = append(acked, id)
		}
		select {
		case <-n.Failed():
			i = 2000
		default:
		}
	}
	select {
	case <-n.Failed():
	case <-time.After(30 * time.Second):
		t.Fatal("the node did not fail with a full disk")
	}
	t.Logf("%d tasks acknowledged before the disk filled; node failed: %v", len(acked), n.Err())
	if !errors.Is(n.Err(), ErrLogStoreFailing) {
		t.Fatalf("Err = %v, want ErrLogStoreFailing", n.Err())
	}
	n.Close()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	checkTasks(t, dir, acked)
}

// padCommand is a command the FSM rejects (no such tenant) whose entry
// still takes len(pad) bytes of log.
func padCommand(pad []byte) *pb.Command {
	return &pb.Command{Tenant: "no-such-tenant", Op: &pb.Command_Enqueue{Enqueue: &pb.EnqueueTasks{
		Tasks: []*pb.TaskSpec{{TaskId: "pad", ScanId: "s", TargetRef: pad}}}}}
}

// fillDisk writes path until the file system at mnt has about leave bytes
// free.
func fillDisk(t *testing.T, mnt, path string, leave int64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	if free <= leave {
		return
	}
	if err := os.WriteFile(path, make([]byte, free-leave), 0o600); err != nil {
		t.Fatal(err)
	}
}
