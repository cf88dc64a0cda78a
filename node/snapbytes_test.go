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
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termivar/distributed/raftfsm"
)

func TestSnapTrigger_KicksAtThreshold(t *testing.T) {
	t.Parallel()
	if newSnapTrigger(0) != nil || newSnapTrigger(-1) != nil {
		t.Fatal("a threshold <= 0 must turn the trigger off")
	}
	var off *snapTrigger
	off.add(1 << 30) // a nil trigger ignores everything
	off.failed(off.captured())
	off.restored()

	tr := newSnapTrigger(100)
	kicked := func() bool {
		select {
		case <-tr.kick:
			return true
		default:
			return false
		}
	}
	tr.add(99)
	if kicked() {
		t.Fatal("kicked below the threshold")
	}
	tr.add(1)
	if !kicked() {
		t.Fatal("not kicked at the threshold")
	}
	if got := tr.captured(); got != 100 {
		t.Fatalf("captured() = %d, want 100", got)
	}
	tr.add(50)
	if kicked() {
		t.Fatal("kicked below the threshold after a snapshot")
	}
	tr.failed(60) // a snapshot that was not written gives its bytes back
	if kicked() {
		t.Fatal("a failed snapshot must not ask again by itself")
	}
	tr.add(1) // the next applied entry does
	if !kicked() {
		t.Fatal("not kicked by the entry after a failed snapshot gave its bytes back")
	}
	tr.restored()
	if tr.applied.Load() != 0 {
		t.Fatal("restored() must start the count again")
	}
}

func lastSnapshotIndex(t *testing.T, n *Node) uint64 {
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
