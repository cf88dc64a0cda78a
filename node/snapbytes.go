package node

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// DefaultSnapshotBytes is Config.SnapshotBytes' default: a snapshot once
// 64 MiB of log entries were applied since the last one.
const DefaultSnapshotBytes = 64 << 20

// snapTrigger takes a snapshot by log bytes as well as by entry count.
// hashicorp/raft triggers snapshots only by entry count
// (SnapshotThreshold), so a log of few, large entries (batched enqueues,
// 64 KiB results) grows without one and a restart replays all of it. The
// FSM goroutine counts the bytes of every applied entry (add); once they
// reach the threshold it kicks snapshotLoop, the one goroutine that asks
// raft for a snapshot (raft serializes it with its own threshold
// snapshots). Capturing a snapshot (captured) starts the count again.
type snapTrigger struct {
	threshold int64 // Invariant: > 0; a nil *snapTrigger is off
	applied   atomic.Int64
	kick      chan struct{} // capacity 1: one pending request is enough
}

func newSnapTrigger(threshold int64) *snapTrigger {
	if threshold <= 0 {
		return nil
	}
	return &snapTrigger{threshold: threshold, kick: make(chan struct{}, 1)}
}

// add counts an applied entry of n bytes and kicks the loop once the
// count reaches the threshold. It never blocks (FSM goroutine).
func (t *snapTrigger) add(n int64) {
	if t == nil || t.applied.Add(n) < t.threshold {
		return
	}
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// captured is called when a snapshot captures the state (FSM goroutine):
// the bytes applied so far are covered by it. It returns them, for
// failed to give back if the snapshot is not written.
func (t *snapTrigger) captured() int64 {
	if t == nil {
		return 0
	}
	return t.applied.Swap(0)
}

// failed gives back the bytes of a snapshot that was not written; the
// next applied entry asks again (snapshotLoop waits snapshotRetryDelay
// after a failure, so a failing disk is not asked in a loop).
func (t *snapTrigger) failed(n int64) {
	if t != nil {
		t.applied.Add(n)
	}
}

// restored starts the count again: the state is a snapshot's.
func (t *snapTrigger) restored() {
	if t != nil {
		t.applied.Store(0)
	}
}

// snapshotLoop takes a raft snapshot whenever the trigger asks, until ctx
// (the node's lifetime) ends. It is the only caller of raft.Snapshot for
// the trigger, so byte-triggered snapshots never overlap each other.
func (n *Node) snapshotLoop(ctx context.Context) {
	t := n.snapTrig
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.kick:
		}
		err := n.raft.Snapshot().Error()
		if err == nil || errors.Is(err, raft.ErrNothingNewToSnapshot) || errors.Is(err, raft.ErrRaftShutdown) {
			continue
		}
		n.log.Warn("raft snapshot by log bytes failed", "error", err, "retry_in", snapshotRetryDelay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(snapshotRetryDelay):
		}
	}
}

// snapshotRetryDelay is how long snapshotLoop waits after a failed
// snapshot before it takes the next request: every attempt captures the
// whole state.
const snapshotRetryDelay = 10 * time.Second

// snapshotChan returns a channel closed after the next snapshot is
// written (tests wait on it).
func (n *Node) snapshotChan() <-chan struct{} { return n.snapshots.Wait("") }

// indexedSnapshots is the node's snapshot store: it remembers the raft
// index of the snapshot raft opened last. raft opens a snapshot right
// before it hands it to FSM.Restore (at start and when a leader installs
// one), from the goroutine that then restores it, and the node opens
// none itself, so observedFSM.Restore reads the index of the snapshot it
// installs here, and its size, so that Restore reads it into one buffer.
type indexedSnapshots struct {
	raft.SnapshotStore
	index atomic.Uint64
	size  atomic.Int64
}

// Open opens the snapshot and records its index and size.
func (s *indexedSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.SnapshotStore.Open(id)
	if err == nil {
		s.index.Store(meta.Index)
		s.size.Store(meta.Size)
	}
	return meta, rc, err
}

// lastIndex is the index of the snapshot opened last (0: none).
func (s *indexedSnapshots) lastIndex() uint64 { return s.index.Load() }

// lastSize is the size in bytes of the snapshot opened last (0: none).
func (s *indexedSnapshots) lastSize() int64 { return s.size.Load() }
