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

// DefaultSnapshotGrowth is Config.SnapshotGrowth's default: a log of
// results may grow to once the results the last snapshot holds before the
// next snapshot.
const DefaultSnapshotGrowth = 1

// MaxSnapshotGrowth bounds Config.SnapshotGrowth (a restart may replay up
// to that many times its snapshot's results of result log).
const MaxSnapshotGrowth = 16

// snapTrigger takes a snapshot by log bytes as well as by entry count.
// hashicorp/raft triggers snapshots only by entry count
// (SnapshotThreshold), so a log of few, large entries (batched enqueues,
// 64 KiB results) grows without one and a restart replays all of it. The
// FSM goroutine counts the bytes of every applied entry and, of them, the
// bytes that are not results (add); it kicks snapshotLoop, the one
// goroutine that asks raft for a snapshot (raft serializes it with its own
// threshold snapshots), once
//
//   - the log bytes that are not results reach threshold: what a restart
//     replays of commands stays bounded as before, whatever the state; or
//   - all log bytes reach max(threshold, growth × the result bytes the
//     last snapshot holds): a snapshot rewrites every stored result, so a
//     store of results is rewritten once per growth × its size of log, not
//     once per threshold, and the result bytes snapshots write per byte of
//     result log stay bounded by about (1 + growth) / growth however large
//     the store grows — etcd's "snapshot when the log since the last one
//     exceeds k × its size", with the results as the size. A restart
//     replays at most growth × its snapshot's results of result log on
//     top of restoring them (docs/benchmarks.md measures a replayed result
//     byte at about the cost of a restored one), and a node without
//     results keeps the threshold alone.
//
// Capturing a snapshot (captured) starts both counts again; writing one
// (written) or restoring one (restored) records the result bytes it holds.
type snapTrigger struct {
	threshold   int64         // Invariant: > 0; a nil *snapTrigger is off
	growth      int64         // Invariant: 0 (the threshold alone) to MaxSnapshotGrowth
	applied     atomic.Int64  // log bytes applied since the last capture
	commands    atomic.Int64  // of applied, the bytes that are not results
	lastResults atomic.Int64  // result bytes of the snapshot written or restored last
	kick        chan struct{} // capacity 1: one pending request is enough
}

// snapCount is what a captured snapshot covers of the log.
type snapCount struct{ applied, commands int64 }

func newSnapTrigger(threshold, growth int64) *snapTrigger {
	if threshold <= 0 {
		return nil
	}
	return &snapTrigger{threshold: threshold, growth: min(max(growth, 0), MaxSnapshotGrowth), kick: make(chan struct{}, 1)}
}

// limit is the log bytes, results included, that ask for a snapshot.
func (t *snapTrigger) limit() int64 { return max(t.threshold, t.growth*t.lastResults.Load()) }

// add counts an applied entry of n bytes, results of them result bytes,
// and kicks the loop once either count reaches its bound. It never blocks
// (FSM goroutine).
func (t *snapTrigger) add(n, results int64) {
	if t == nil {
		return
	}
	t.applied.Add(n)
	t.commands.Add(n - results)
	if !t.due() {
		return
	}
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// due reports whether either count has reached its bound. snapshotLoop
// asks again before it takes a snapshot: a kick may be stale, sent while
// the previous snapshot was written and the limit still the one before it.
func (t *snapTrigger) due() bool {
	return t.commands.Load() >= t.threshold || t.applied.Load() >= t.limit()
}

// captured is called when a snapshot captures the state (FSM goroutine):
// the bytes applied so far are covered by it. It returns them, for
// failed to give back if the snapshot is not written.
func (t *snapTrigger) captured() snapCount {
	if t == nil {
		return snapCount{}
	}
	return snapCount{applied: t.applied.Swap(0), commands: t.commands.Swap(0)}
}

// failed gives back the bytes of a snapshot that was not written; the
// next applied entry asks again (snapshotLoop waits snapshotRetryDelay
// after a failure, so a failing disk is not asked in a loop).
func (t *snapTrigger) failed(c snapCount) {
	if t != nil {
		t.applied.Add(c.applied)
		t.commands.Add(c.commands)
	}
}

// written records the result bytes of a snapshot just written.
func (t *snapTrigger) written(results int64) {
	if t != nil {
		t.lastResults.Store(results)
	}
}

// restored starts the counts again: the state is a snapshot's, holding
// results result bytes.
func (t *snapTrigger) restored(results int64) {
	if t != nil {
		t.applied.Store(0)
		t.commands.Store(0)
		t.lastResults.Store(results)
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
		if !t.due() {
			continue // NB: the next add that makes it due kicks again
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
