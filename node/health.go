package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/termivar/distributed/internal/metrics"
	"github.com/termivar/distributed/raftfsm"
)

// ErrLogStoreFailing is returned (wrapped) by Err and CommitHealth while
// the raft log store fails its writes (a full disk, an I/O error).
var ErrLogStoreFailing = errors.New("node: the raft log store fails its writes")

// defaultStoreFailGrace is how long the log store may fail every write
// before the node gives up (Err is set and Failed closes). Shorter failures
// (a disk briefly full) heal by themselves: raft steps down, re-elects and
// retries. raft-wal cannot heal some failures (ENOSPC while it rotates a
// segment leaves it answering "segment is sealed" forever), and a restart
// does heal those, so the node exits and leaves the restart to its
// supervisor; nothing acknowledged is lost, since an entry is acknowledged
// only after raft-wal fsynced it.
const defaultStoreFailGrace = 10 * time.Second

// health is the node's ability to go on: a fatal error (a corrupt
// committed entry, a log store that keeps failing) and the log store's
// current failure streak.
type health struct {
	failed     chan struct{} // closed with the first fatal error
	once       sync.Once
	fatal      atomic.Pointer[error]
	mu         sync.Mutex
	storeErr   error     // last failed write of the current streak
	storeSince time.Time // first failed write of the current streak; zero: healthy
}

func newHealth() *health { return &health{failed: make(chan struct{})} }

func (h *health) setFatal(err error) {
	h.once.Do(func() {
		h.fatal.Store(&err)
		close(h.failed)
	})
}

func (h *health) fatalErr() error {
	if p := h.fatal.Load(); p != nil {
		return *p
	}
	return nil
}

func (h *health) storeResult(err error, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.storeErr, h.storeSince = nil, time.Time{}
		return
	}
	if h.storeSince.IsZero() {
		h.storeSince = now
	}
	h.storeErr = err
}

// storeFailure returns the current failure streak's error and start.
func (h *health) storeFailure() (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.storeSince, h.storeErr
}

// Failed returns a channel that is closed when the node cannot go on: a
// committed log entry failed its integrity check, or the log store failed
// every write for longer than its grace period. Err then says why; the
// caller should Close the node and exit non-zero (serve exits 2).
func (n *Node) Failed() <-chan struct{} { return n.hl.failed }

// Err returns why the node failed (see Failed), or nil. A corrupt entry
// gives a *DataDirError (errors.Is ErrDamagedDataDir) naming the index; a
// failing log store gives an error wrapping ErrLogStoreFailing.
func (n *Node) Err() error { return n.hl.fatalErr() }

// CommitHealth returns nil when the node can commit as far as it knows: it
// has not failed and its last log store write succeeded. /readyz uses it.
func (n *Node) CommitHealth() error {
	if err := n.Err(); err != nil {
		return err
	}
	if since, err := n.hl.storeFailure(); err != nil {
		return fmt.Errorf("%w since %s: %w", ErrLogStoreFailing, since.UTC().Format(time.RFC3339), err)
	}
	return nil
}

// onFSMFatal is the FSM's FatalFunc: a committed entry is corrupt.
func (n *Node) onFSMFatal(err error) {
	remedy := remedyCorruptLog
	if errors.Is(err, raftfsm.ErrUnsupportedVersion) {
		remedy = remedyUpgrade
	}
	n.hl.setFatal(dataDirErr(filepath.Join(n.cfg.DataDir, raftDir, "wal"), err.Error(), remedy))
}

// remedyUpgrade is the repair of a node that met an entry of a newer
// release (raftfsm/version.go): its data dir is intact.
const remedyUpgrade = "start this data dir with a binary that supports the cluster's version " +
	"(docs/operations.md, \"Upgrade\"); nothing of it was applied, the data dir is intact"

// storeWatchLoop turns a log store failure streak longer than the grace
// period into a fatal error, until ctx (the node's lifetime) ends.
func (n *Node) storeWatchLoop(ctx context.Context) {
	grace := cmp.Or(max(n.cfg.storeFailGrace, 0), defaultStoreFailGrace)
	t := time.NewTicker(min(grace/10, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.hl.failed:
			return
		case <-t.C:
		}
		if since, err := n.hl.storeFailure(); err != nil && time.Since(since) > grace {
			n.log.Error("the raft log store failed every write; giving up", "since", since, "error", err)
			n.hl.setFatal(fmt.Errorf("%w for %s (last error: %w); exiting so that a supervisor restarts the node (free disk space first if the disk is full)",
				ErrLogStoreFailing, grace, err))
		}
	}
}

// watchedLogStore reports the outcome of every write to the node's health.
// It also times every write (raft-wal's append with its fsync) into the
// node's metrics.
type watchedLogStore struct {
	raft.LogStore
	h    *health
	m    *metrics.Node
	gate *walGate // the proposer's pacing (walgate.go); nil: none
}

var _ raft.MonotonicLogStore = (*watchedLogStore)(nil)

func (s *watchedLogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *watchedLogStore) StoreLogs(logs []*raft.Log) error {
	start := time.Now()
	var seq uint64
	if s.gate != nil {
		seq = s.gate.begin()
	}
	err := s.LogStore.StoreLogs(logs)
	if s.gate != nil {
		s.gate.end(seq)
	}
	end := time.Now()
	s.m.ObserveStore(end.Sub(start))
	s.h.storeResult(err, end)
	return err
}

// IsMonotonic passes the wrapped store's answer on: raft clears a
// monotonic store after installing a snapshot instead of compacting it.
func (s *watchedLogStore) IsMonotonic() bool {
	m, ok := s.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// fsmOptions are the FSM options of a node.
func (n *Node) fsmOptions() raftfsm.Options {
	return raftfsm.Options{Logger: n.cfg.Logger, WakeFunc: n.wake.Notify, ProgressFunc: n.progress.Notify, FatalFunc: n.onFSMFatal,
		MaxVersion: n.cfg.MaxVersion(), OwnEntries: n.own}
}
