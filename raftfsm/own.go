package raftfsm

import (
	"sync"
	"sync/atomic"
)

// OwnEntries is the set of log entries this node's proposer framed
// (MarshalEntry) and that raft still holds in memory only. The leader
// applies its own entries from the very slices it proposed — hashicorp/raft
// takes an entry it has a future for from that future, never reading it
// back from the log store — so Apply would recompute the CRC-32C that
// MarshalEntry computed over the same bytes moments before. The frame's
// checksum catches storage damage (frame.go, I-log-1 in docs/node.md) and
// these bytes were not read from storage, so for them Apply checks the
// frame's version and length and decodes, but computes the checksum only
// once, at MarshalEntry (issue 15: 64 KiB results were checksummed twice
// on the leader; docs/benchmarks.md, "64 KiB results, session 7"). Every
// entry read from the log store or received from a peer is another buffer
// and is checked in full. Safe for concurrent use; a nil *OwnEntries holds
// nothing.
type OwnEntries struct {
	mu sync.Mutex
	// m maps an entry's first byte to its length. Invariant: an entry is
	// in m from Add until Apply takes it or its proposer Forgets it, and
	// nothing writes it in between (nothing writes an entry once proposed).
	m     map[*byte]int
	taken atomic.Uint64 // entries Apply took: applied without a second checksum
}

// Add records data, an entry MarshalEntry returned, as about to be
// proposed. An empty data is not recorded.
func (o *OwnEntries) Add(data []byte) {
	if o == nil || len(data) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[*byte]int{}
	}
	o.m[&data[0]] = len(data)
}

// Forget drops data once its proposal has its answer (applied or failed).
func (o *OwnEntries) Forget(data []byte) {
	if o == nil || len(data) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, &data[0])
}

// Len is how many entries are recorded.
func (o *OwnEntries) Len() int {
	if o == nil {
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.m)
}

// Taken is how many entries Apply took (applied without computing their
// checksum a second time).
func (o *OwnEntries) Taken() uint64 {
	if o == nil {
		return 0
	}
	return o.taken.Load()
}

// take reports whether data is exactly a recorded entry (the same bytes in
// memory, not an equal copy) and drops it: an entry is applied once.
func (o *OwnEntries) take(data []byte) bool {
	if o == nil || len(data) == 0 {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	n, ok := o.m[&data[0]]
	if !ok || n != len(data) {
		return false
	}
	delete(o.m, &data[0])
	o.taken.Add(1)
	return true
}
