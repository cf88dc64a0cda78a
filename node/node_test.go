// Tests for the raft shell. Goal: a node bootstraps itself, applies commands
// durably, survives a clean restart with an identical state, applies
// every one of many concurrent proposals, and its ticker recovers without client calls.
// Method: real raft over raft-wal in a temp dir, loopback transport.
package node

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/raftfsm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openNode(t testing.TB, dir string, mut func(*Config)) *Node {
	t.Helper()
	n, err := openNodeErr(dir, mut)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return n
}

// openNodeErr opens a test node on dir (loopback raft on a free port, no
// ticker) and returns Open's error.
func openNodeErr(dir string, mut func(*Config)) (*Node, error) {
	cfg := Config{DataDir: dir, RaftAddr: "127.0.0.1:0", TickInterval: -1}
	if mut != nil {
		mut(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return Open(ctx, cfg)
}

func mustPropose(t testing.TB, n *Node, cmd *pb.Command) raftfsm.Response {
	t.Helper()
	r, err := n.Propose(context.Background(), cmd)
	if err != nil {
		t.Fatalf("Propose: %v", err)
	}
	if r.Err != nil {
		t.Fatalf("Propose %T: %v", cmd.GetOp(), r.Err)
	}
	return r
}

func enqueue(tenant string, ids ...string) *pb.Command {
	e := &pb.EnqueueTasks{}
	for _, id := range ids {
		e.Tasks = append(e.Tasks, &pb.TaskSpec{TaskId: id, ScanId: "s", TargetRef: []byte("x"), Priority: 1})
	}
	return &pb.Command{Tenant: tenant, Op: &pb.Command_Enqueue{Enqueue: e}}
}

func TestNode_BootstrapAndRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := openNode(t, dir, nil)
	if n.FSM().Epoch() == nil || n.Codec() == nil {
		t.Fatal("no epoch after bootstrap")
	}
	mustPropose(t, n, &pb.Command{Tenant: raftfsm.SystemTenant, Op: &pb.Command_RegisterWorker{RegisterWorker: &pb.RegisterWorker{Spec: &pb.WorkerSpec{WorkerId: "w", Capacity: 4}}}})
	mustPropose(t, n, enqueue(raftfsm.SystemTenant, "a", "b", "c"))
	before, _ := n.FSM().ExportState()
	epoch := n.FSM().Epoch()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n2 := openNode(t, dir, nil)
	defer n2.Close()
	after, _ := n2.FSM().ExportState()
	if !bytes.Equal(before, after) || !bytes.Equal(epoch, n2.FSM().Epoch()) {
		t.Fatal("state differs after restart")
	}
	// And again through a snapshot.
	if err := n2.Snapshot(); err != nil {
		t.Fatal(err)
	}
}

func TestNode_RestartFromSnapshot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := openNode(t, dir, nil)
	mustPropose(t, n, enqueue(raftfsm.SystemTenant, "a"))
	if err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	mustPropose(t, n, enqueue(raftfsm.SystemTenant, "b"))
	before, _ := n.FSM().ExportState()
	n.Close()
	n2 := openNode(t, dir, nil)
	defer n2.Close()
	after, _ := n2.FSM().ExportState()
	if !bytes.Equal(before, after) {
		t.Fatal("state differs after restart from snapshot")
	}
}

// TestNode_ConcurrentProposals checks end to end, through real raft, that
// every one of many concurrent proposals is applied once. How they are
// coalesced depends on timing here; propose_test.go pins the coalescing,
// the batch bound and the failure fan-out through a stub raft.
func TestNode_ConcurrentProposals(t *testing.T) {
	t.Parallel()
	n := openNode(t, t.TempDir(), nil)
	defer n.Close()
	const workers, per = 16, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				r, err := n.Propose(context.Background(), enqueue(raftfsm.SystemTenant, fmt.Sprintf("t%d-%d", w, i)))
				if err != nil || r.Err != nil {
					t.Errorf("propose: %v %v", err, r.Err)
					return
				}
			}
		}()
	}
	wg.Wait()
	tv, _ := n.FSM().Tenant(raftfsm.SystemTenant)
	if got := tv.Counters().TaskRecords; got != workers*per {
		t.Fatalf("TaskRecords = %d, want %d", got, workers*per)
	}
}

func TestNode_TickRecoversExpiredLeases(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	clock := time.Unix(1_000_000, 0)
	n := openNode(t, t.TempDir(), func(c *Config) {
		c.NowFunc = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	})
	defer n.Close()
	mustPropose(t, n, &pb.Command{Tenant: raftfsm.SystemTenant, Op: &pb.Command_RegisterWorker{RegisterWorker: &pb.RegisterWorker{Spec: &pb.WorkerSpec{WorkerId: "w", Capacity: 4}}}})
	mustPropose(t, n, enqueue(raftfsm.SystemTenant, "a"))
	mustPropose(t, n, &pb.Command{Tenant: raftfsm.SystemTenant, Op: &pb.Command_AcquireTasks{AcquireTasks: &pb.AcquireTasks{WorkerId: "w", LeaseTtlSecs: 5}}})
	mu.Lock()
	clock = clock.Add(10 * time.Second)
	mu.Unlock()
	n.Tick(context.Background())
	tv, _ := n.FSM().Tenant(raftfsm.SystemTenant)
	task, _, _ := tv.GetTask("a")
	if task.Status() != distributed.TaskQueued || task.RetryCount() != 1 {
		t.Fatalf("task after tick: status %v retries %d, want queued 1", task.Status(), task.RetryCount())
	}
	// Nothing to do: no command is proposed.
	idx := n.FSM().AppliedIndex()
	n.Tick(context.Background())
	if n.FSM().AppliedIndex() != idx {
		t.Fatal("idle tick proposed a command")
	}
}

// The leader applies its own entries without computing their checksum a
// second time (raftfsm/own.go): through real raft, every entry the
// proposer recorded is taken by Apply, and none is left recorded.
func TestNode_LeaderTakesItsOwnEntries(t *testing.T) {
	t.Parallel()
	n := openNode(t, t.TempDir(), nil)
	defer n.Close()
	before := n.own.Taken()
	for i := range 5 {
		mustPropose(t, n, enqueue(raftfsm.SystemTenant, fmt.Sprintf("t%d", i)))
	}
	// NB: at least: the node's own loops may propose in the background.
	if got := n.own.Taken() - before; got < 5 {
		t.Fatalf("Apply took %d of the 5 entries proposed one after another, want every one", got)
	}
	waitFor(t, "no entry recorded once answered", func() bool { return n.own.Len() == 0 })
	tv, _ := n.FSM().Tenant(raftfsm.SystemTenant)
	if got := tv.Counters().TaskRecords; got != 5 {
		t.Fatalf("TaskRecords = %d, want 5", got)
	}
}
