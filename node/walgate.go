package node

import "sync"

// walGate tells the proposer when the log store has finished a write
// that began after a given point, so that the next entry is formed when
// the WAL is free instead of one fsync earlier (propose.go, run; issue
// 15: docs/benchmarks.md, "One task per call, session 7"). raft's leader
// loop writes serially: an entry handed to raft while the previous one is
// being synced waits for that sync and then its own, and the proposals
// that arrive during the wait make the entry after it. Formed when the
// write ends, an entry carries every proposal that arrived during the
// write and is written at once: the same commands per fsync, one fsync
// less of waiting per proposal.
//
// NB: a pacing hint only: answers come from raft's futures. A write of
// raft's own entries (a no-op, a configuration) may open the gate early,
// and the proposer stops waiting once the previous entry is answered, so
// nothing waits on a write that never comes.
type walGate struct {
	mu      sync.Mutex
	started uint64        // writes begun
	done    uint64        // the latest begun write that has ended; Invariant: done ≤ started
	changed chan struct{} // closed and replaced when done moves
}

func newWALGate() *walGate { return &walGate{changed: make(chan struct{})} }

// begin records the start of a write and returns its sequence number.
func (g *walGate) begin() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.started++
	return g.started
}

// end records the end of write seq (begin's).
func (g *walGate) end(seq uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if seq > g.done {
		g.done = seq
		close(g.changed)
		g.changed = make(chan struct{})
	}
}

// mark is the number of writes begun so far.
func (g *walGate) mark() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.started
}

// writtenAfter reports whether a write begun after mark has ended, and
// returns the channel closed at the next end.
func (g *walGate) writtenAfter(mark uint64) (bool, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.done > mark, g.changed
}
