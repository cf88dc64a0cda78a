// Tests for snapshots by log bytes and the applied index after a restore
// (snapbytes.go). Goal: a node whose log grows by few, large entries takes
// a snapshot once the bytes applied since the last one reach
// Config.SnapshotBytes, not before; a node restarted from a snapshot
// reports the snapshot's index as its applied index before any command.
// Method: real raft over raft-wal in a temp dir; tests wait on the node's
// snapshot-written event, never sleep.
package node

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wire"
	"github.com/termivar/distributed/raftfsm"
)

func TestSnapTrigger_KicksAtThreshold(t *testing.T) {
	t.Parallel()
	if newSnapTrigger(0, 1) != nil || newSnapTrigger(-1, 1) != nil {
		t.Fatal("a threshold <= 0 must turn the trigger off")
	}
	var off *snapTrigger
	off.add(1<<30, 0) // a nil trigger ignores everything
	off.failed(off.captured())
	off.written(1 << 40)
	off.restored(1 << 40)

	tr := newSnapTrigger(100, 1)
	tr.add(99, 0)
	if kicked(tr) {
		t.Fatal("kicked below the threshold")
	}
	tr.add(1, 0)
	if !kicked(tr) {
		t.Fatal("not kicked at the threshold")
	}
	if got := tr.captured(); got != (snapCount{applied: 100, commands: 100}) {
		t.Fatalf("captured() = %+v, want 100 bytes, all commands", got)
	}
	tr.add(50, 0)
	if kicked(tr) {
		t.Fatal("kicked below the threshold after a snapshot")
	}
	tr.failed(snapCount{applied: 60, commands: 60}) // a snapshot that was not written gives its bytes back
	if kicked(tr) {
		t.Fatal("a failed snapshot must not ask again by itself")
	}
	tr.add(1, 0) // the next applied entry does
	if !kicked(tr) {
		t.Fatal("not kicked by the entry after a failed snapshot gave its bytes back")
	}
	tr.restored(0)
	if tr.applied.Load() != 0 || tr.commands.Load() != 0 {
		t.Fatal("restored() must start the counts again")
	}
}

func kicked(tr *snapTrigger) bool {
	select {
	case <-tr.kick:
		return true
	default:
		return false
	}
}

// TestSnapTrigger_ResultsWaitForTheSnapshotsResults: log bytes that are
// results ask for a snapshot at max(threshold, growth × the result bytes
// of the last snapshot), the rest at the threshold whatever they are.
func TestSnapTrigger_ResultsWaitForTheSnapshotsResults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		growth, lastResults int64 // lastResults < 0: no snapshot written
		resultsUntilKicked  int64 // result bytes (in entries of 10) that kick
	}{
		{"no snapshot yet", 2, -1, 100},
		{"a snapshot without results", 2, 0, 100},
		{"a snapshot's results below the threshold", 2, 40, 100},
		{"growth 1", 1, 1000, 1000},
		{"growth 2", 2, 1000, 2000},
		{"growth 0: the threshold alone", 0, 1000, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newSnapTrigger(100, tc.growth)
			if tc.lastResults >= 0 {
				tr.written(tc.lastResults)
			}
			for sum := int64(10); sum < tc.resultsUntilKicked; sum += 10 {
				tr.add(10, 10)
				if kicked(tr) {
					t.Fatalf("kicked after %d result bytes, want at %d", sum, tc.resultsUntilKicked)
				}
			}
			tr.add(10, 10)
			if !kicked(tr) {
				t.Fatalf("not kicked after %d result bytes", tc.resultsUntilKicked)
			}
			// Bytes that are not results still kick at the threshold:
			// 99 of them (with results that keep the sum 101 below the
			// limit) do not, one more does, below the limit.
			tr.captured()
			results := max(0, tc.resultsUntilKicked-200)
			tr.add(99+results, results)
			if kicked(tr) {
				t.Fatal("kicked below both bounds")
			}
			tr.add(1, 0)
			if !kicked(tr) {
				t.Fatal("not kicked by the threshold's worth of non-result bytes")
			}
		})
	}
	// A kick sent while a snapshot was written is stale once its results
	// are known: due() (which snapshotLoop asks first) says no until the
	// log reaches the new limit.
	tr := newSnapTrigger(100, 1)
	tr.add(150, 150)
	if !kicked(tr) || !tr.due() {
		t.Fatal("not due at the threshold with no snapshot yet")
	}
	tr.written(400)
	if tr.due() {
		t.Fatal("due at 150 bytes of results after a snapshot of 400 bytes of results")
	}
	tr.add(250, 250)
	if !kicked(tr) || !tr.due() {
		t.Fatal("not due at the results of the last snapshot")
	}
	tr = newSnapTrigger(100, 3)
	tr.restored(500) // a restored snapshot's results count as a written one's
	if got := tr.limit(); got != 1500 {
		t.Fatalf("limit() after restoring 500 bytes of results = %d, want 1500", got)
	}
	if got := newSnapTrigger(100, 1000).growth; got != MaxSnapshotGrowth {
		t.Fatalf("growth 1000 taken as %d, want MaxSnapshotGrowth", got)
	}
	if got := newSnapTrigger(100, -1).limit(); got != 100 {
		t.Fatalf("negative growth: limit() = %d, want the threshold", got)
	}
}

func lastSnapshotIndex(t testing.TB, n *Node) uint64 {
	t.Helper()
	i, err := strconv.ParseUint(n.RaftStats()["last_snapshot_index"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// commandLogBytes sums the data of the node's command entries: the bytes
// its FSM applied (a quiet node: every entry is applied).
func commandLogBytes(t *testing.T, n *Node) int64 {
	t.Helper()
	first, err := n.wal.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := n.wal.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for i := max(first, 1); i <= last; i++ {
		var l raft.Log
		if err := n.wal.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if l.Type == raft.LogCommand {
			sum += int64(len(l.Data))
		}
	}
	return sum
}

func TestNode_SnapshotByLogBytes(t *testing.T) {
	t.Parallel()
	const threshold, padBytes = 64 << 10, 12 << 10 // 5 entries stay below, 6 reach it
	n := openNode(t, t.TempDir(), func(c *Config) { c.SnapshotBytes = threshold })
	defer n.Close()
	// NB: the bootstrap entries count too; they are far below padBytes.
	pad := make([]byte, padBytes)
	if _, err := rand.Read(pad); err != nil {
		t.Fatal(err)
	}
	snapped := n.snapshotChan()
	for range 4 {
		if _, err := n.Propose(t.Context(), padCommand(pad)); err != nil {
			t.Fatal(err)
		}
	}
	if i := lastSnapshotIndex(t, n); i != 0 {
		t.Fatalf("snapshot at index %d after %d of %d bytes, want none yet", i, 4*padBytes, threshold)
	}
	// NB: exact, so a snapshot taken too early fails here even while it
	// is still being written (capturing it restarts the count).
	if got, want := n.snapTrig.applied.Load(), commandLogBytes(t, n); got != want || want >= threshold {
		t.Fatalf("trigger counts %d bytes, the log holds %d of commands (threshold %d)", got, want, threshold)
	}
	for range 2 {
		if _, err := n.Propose(t.Context(), padCommand(pad)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-snapped:
	case <-time.After(20 * time.Second):
		t.Fatalf("no snapshot after %d bytes of log with a %d-byte threshold", 6*padBytes, threshold)
	}
	waitFor(t, "the snapshot recorded by raft", func() bool { return lastSnapshotIndex(t, n) > 0 })
}

func TestNode_RestartFromSnapshotReportsAppliedIndex(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := openNode(t, dir, func(c *Config) { c.SnapshotBytes = -1 })
	mustPropose(t, n, enqueue(raftfsm.SystemTenant, "a"))
	if err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	snapIndex := lastSnapshotIndex(t, n)
	if snapIndex == 0 {
		t.Fatal("no snapshot index after Snapshot")
	}
	n.Close()
	n2 := openNode(t, dir, nil)
	defer n2.Close()
	if got := n2.Reads().AppliedIndex(); got != snapIndex {
		t.Fatalf("applied index after a restart from the snapshot = %d, want the snapshot's %d", got, snapIndex)
	}
	// The next command moves it on.
	mustPropose(t, n2, enqueue(raftfsm.SystemTenant, "b"))
	if got := n2.Reads().AppliedIndex(); got <= snapIndex {
		t.Fatalf("applied index after a command = %d, want above %d", got, snapIndex)
	}
}

// TestNode_InstalledSnapshotSetsAppliedIndex restores a snapshot into a
// running node through raft (raft.Restore: the runFSM restore path a
// follower's InstallSnapshot takes, not the one at start): the applied
// index is the installed snapshot's, past every command applied before,
// with no command after it.
func TestNode_InstalledSnapshotSetsAppliedIndex(t *testing.T) {
	t.Parallel()
	n := openNode(t, t.TempDir(), func(c *Config) { c.SnapshotBytes = -1 })
	defer n.Close()
	mustPropose(t, n, enqueue(raftfsm.SystemTenant, "a"))
	state, err := n.FSM().ExportState()
	if err != nil {
		t.Fatal(err)
	}
	mustPropose(t, n, enqueue(raftfsm.SystemTenant, "b"))
	before := n.Reads().AppliedIndex()
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: 1, Term: 1, Size: int64(len(state))}
	if err := n.raft.Restore(meta, bytes.NewReader(state), 10*time.Second); err != nil {
		t.Fatalf("raft.Restore: %v", err)
	}
	snapIndex := lastSnapshotIndex(t, n)
	if snapIndex <= before {
		t.Fatalf("installed snapshot at index %d, want past the applied %d", snapIndex, before)
	}
	if got := n.Reads().AppliedIndex(); got != snapIndex {
		t.Fatalf("applied index after installing a snapshot = %d, want the snapshot's %d (was %d)", got, snapIndex, before)
	}
	if tv, _ := n.FSM().Tenant(raftfsm.SystemTenant); func() bool { _, ok, _ := tv.GetTask("b"); return ok }() {
		t.Fatal("the installed snapshot's state must not hold task b")
	}
}

// TestNode_SnapshotByLogBytesGrowsWithTheSnapshot: once a snapshot holds
// more result bytes than Config.SnapshotBytes, a log of results takes the
// next one at SnapshotGrowth × them, not at SnapshotBytes; the applied
// counts tell results from the rest of each entry exactly; and a restart
// restores the allowance.
func TestNode_SnapshotByLogBytesGrowsWithTheSnapshot(t *testing.T) {
	t.Parallel()
	const threshold, growth, resultBytes = 64 << 10, 3, 12 << 10
	dir := t.TempDir()
	mut := func(c *Config) { c.SnapshotBytes, c.SnapshotGrowth = threshold, growth }
	n := openNode(t, dir, mut)
	defer func() { n.Close() }()
	result := make([]byte, resultBytes)
	if _, err := rand.Read(result); err != nil {
		t.Fatal(err)
	}
	// Six stored results of 12 KiB: their log reaches the threshold (no
	// results in a snapshot yet) and the snapshot holds all six.
	snapped := n.snapshotChan()
	leases := runningTasks(t, n, 6)
	for _, lease := range leases {
		mustPropose(t, n, &pb.Command{Tenant: "big", Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: lease, Result: result}}})
	}
	waitSnapshot(t, snapped, "after 6 results")
	if got := n.snapTrig.lastResults.Load(); got != 6*resultBytes || n.snapTrig.limit() != growth*got {
		t.Fatalf("first snapshot holds %d result bytes, limit %d: want %d and %d× it", got, n.snapTrig.limit(), 6*resultBytes, growth)
	}
	// Completions refused by the FSM (their entries are mostly result
	// bytes, and the store does not grow): far past the threshold, no
	// snapshot until the log reaches growth × the snapshot's results.
	snapped = n.snapshotChan()
	var entries int
	for n.snapTrig.applied.Load()+int64(len(result))+512 < n.snapTrig.limit() {
		if _, err := n.Propose(t.Context(), resultCommand(result)); err != nil {
			t.Fatal(err)
		}
		entries++
		applied, cmds := n.snapTrig.applied.Load(), n.snapTrig.commands.Load()
		if applied-cmds != int64(entries*len(result)) || cmds >= threshold {
			t.Fatalf("after %d results of %d bytes the trigger counts %d bytes, %d of them not results", entries, len(result), applied, cmds)
		}
		// NB: the written snapshot's notification, not raft's
		// last_snapshot_index: Persist notifies before raft records the
		// first snapshot's index, so the stats could still read 0 here.
		select {
		case <-snapped:
			t.Fatalf("a snapshot after %d of %d log bytes", applied, n.snapTrig.limit())
		default:
		}
	}
	if applied := n.snapTrig.applied.Load(); applied < 2*threshold {
		t.Fatalf("only %d log bytes below the limit; the test needs the threshold far behind", applied)
	}
	for range 2 {
		if _, err := n.Propose(t.Context(), resultCommand(result)); err != nil {
			t.Fatal(err)
		}
	}
	waitSnapshot(t, snapped, "at growth × the last snapshot's results")
	n.Close()
	n = openNode(t, dir, mut)
	if got := n.snapTrig.lastResults.Load(); got != 6*resultBytes {
		t.Fatalf("after a restart the trigger counts %d result bytes in the snapshot, want %d", got, 6*resultBytes)
	}
}

// runningTasks creates tenant "big" (results up to 64 KiB), enqueues count
// tasks and starts them; it returns their leases.
func runningTasks(t *testing.T, n *Node, count int) [][]byte {
	t.Helper()
	rl := distributed.DefaultResultLimits()
	rl.MaxResultBytes, rl.MaxTotalBytes = 64<<10, 64<<20
	mustPropose(t, n, &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "big",
		Limits: wire.LimitsToProto(distributed.DefaultLimits()), ResultLimits: wire.ResultLimitsToProto(rl)}}})
	mustPropose(t, n, &pb.Command{Tenant: "big", Op: &pb.Command_RegisterWorker{RegisterWorker: &pb.RegisterWorker{Spec: &pb.WorkerSpec{WorkerId: "w", Capacity: uint32(count)}}}})
	e := &pb.EnqueueTasks{}
	for i := range count {
		e.Tasks = append(e.Tasks, &pb.TaskSpec{TaskId: fmt.Sprintf("t%d", i), ScanId: "s", TargetRef: []byte("x"), Priority: 1})
	}
	mustPropose(t, n, &pb.Command{Tenant: "big", Op: &pb.Command_Enqueue{Enqueue: e}})
	r := mustPropose(t, n, &pb.Command{Tenant: "big", Op: &pb.Command_AcquireTasks{AcquireTasks: &pb.AcquireTasks{
		WorkerId: "w", LeaseTtlSecs: 600, MaxTasks: uint32(count), Start: true}}})
	var out [][]byte
	for _, a := range r.Value.([]raftfsm.Acquired) {
		lb, err := a.Lease.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, lb)
	}
	if len(out) != count {
		t.Fatalf("acquired %d tasks, want %d", len(out), count)
	}
	return out
}

func waitSnapshot(t *testing.T, snapped <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-snapped:
	case <-time.After(20 * time.Second):
		t.Fatalf("no snapshot %s", what)
	}
}

// resultCommand is a completion with a result for a tenant that does not
// exist: refused when applied, but an entry that is mostly result bytes.
func resultCommand(result []byte) *pb.Command {
	return &pb.Command{Tenant: "no-such-tenant", Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: []byte("no-lease"), Result: result}}}
}
