// Tests for the snapshot restored while Open checks the log
// (prefetch.go). Goal: a restart restores the newest snapshot once, not
// again in raft, and ends in the same state and applied index as before;
// when the newest snapshot does not restore, raft restores as it always
// did (here: falls back to the older snapshot). Method: real raft over
// raft-wal in a temp dir; raft's own log (Info level, through
// Config.RaftLogger) tells whether raft restored a snapshot itself.
package node

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/termivar/distributed/raftfsm"
)

// lockedBuffer is a bytes.Buffer safe for raft's concurrent log writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// twoSnapshots fills a node on dir with a snapshot, more commands, a
// second snapshot and one command after it, closes it and returns its
// exported state, its applied index and the newest snapshot's ID.
func twoSnapshots(t *testing.T, dir string) (state []byte, applied uint64, newest string) {
	t.Helper()
	n := openNode(t, dir, func(c *Config) { c.SnapshotBytes = -1 })
	mustPropose(t, n, enqueue(raftfsm.SystemTenant, "a"))
	if err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	mustPropose(t, n, enqueue(raftfsm.SystemTenant, "b"))
	if err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	mustPropose(t, n, enqueue(raftfsm.SystemTenant, "c"))
	state, err := n.FSM().ExportState()
	if err != nil {
		t.Fatal(err)
	}
	applied = n.Reads().AppliedIndex()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	store, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(dir, raftDir), 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	metas, err := store.List()
	if err != nil || len(metas) != 2 {
		t.Fatalf("%d snapshots (%v), want 2", len(metas), err)
	}
	return state, applied, metas[0].ID
}

// reopenLogged opens the node on dir with raft's log at Info level in buf.
func reopenLogged(t *testing.T, dir string, buf *lockedBuffer) *Node {
	t.Helper()
	return openNode(t, dir, func(c *Config) {
		c.SnapshotBytes = -1
		c.RaftLogger = hclog.New(&hclog.LoggerOptions{Name: "raft", Output: buf, Level: hclog.Info})
	})
}

// checkRestarted requires n's state and applied index to be those before
// the restart.
func checkRestarted(t *testing.T, n *Node, state []byte, applied uint64) {
	t.Helper()
	if got, _ := n.FSM().ExportState(); !bytes.Equal(got, state) {
		t.Fatal("state differs after the restart")
	}
	if got := n.Reads().AppliedIndex(); got != applied {
		t.Fatalf("applied index after the restart = %d, want %d", got, applied)
	}
}

func TestNode_RestartRestoresTheNewestSnapshotOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	state, applied, _ := twoSnapshots(t, dir)
	var buf lockedBuffer
	n := reopenLogged(t, dir, &buf)
	defer n.Close()
	checkRestarted(t, n, state, applied)
	if log := buf.String(); strings.Contains(log, "starting restore from snapshot") {
		t.Fatalf("raft restored the snapshot again after Open had:\n%s", log)
	}
}

func TestNode_RestartFallsBackWhenTheNewestSnapshotIsDamaged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	state, applied, newest := twoSnapshots(t, dir)
	path := filepath.Join(dir, raftDir, "snapshots", newest, "state.bin")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff // the snapshot store's CRC-64 refuses it
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	var buf lockedBuffer
	n := reopenLogged(t, dir, &buf)
	defer n.Close()
	checkRestarted(t, n, state, applied)
	log := buf.String()
	if !strings.Contains(log, "failed to open snapshot") || !strings.Contains(log, "restored from snapshot") {
		t.Fatalf("raft did not restore the older snapshot itself after the newest failed:\n%s", log)
	}
}
