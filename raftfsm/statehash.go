package raftfsm

import "crypto/sha256"

// StateHash is a digest of the whole FSM state and the raft index it was
// taken at. Replicas that applied the same log prefix have equal hashes
// at equal indexes; a difference means the replicas diverged.
type StateHash struct {
	// Sum is the SHA-256 of ExportState (the deterministic snapshot
	// encoding).
	Sum [sha256.Size]byte
	// Index is the raft index of the last entry applied to that state.
	Index uint64
	// IndexKnown is false when the state was restored from a snapshot and
	// no entry has been applied since: the FSM is not told a snapshot's
	// index, so Sum is then not tied to Index.
	IndexKnown bool
}

// StateHash encodes the state and hashes it, holding Apply off meanwhile
// so that Sum and Index belong together. It costs a full ExportState and
// stalls Apply for that long: for diagnostics and tests, not hot paths.
func (f *FSM) StateHash() (StateHash, error) {
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	b, err := f.ExportState()
	if err != nil {
		return StateHash{}, err
	}
	return StateHash{Sum: sha256.Sum256(b), Index: f.appliedIndex.Load(), IndexKnown: f.indexKnown}, nil
}

// markApplied records index as applied; Apply calls it under applyMu.
func (f *FSM) markApplied(index uint64) {
	f.appliedIndex.Store(index)
	f.indexKnown = true
}

// SetRestoredIndex records index, the raft index of the snapshot Restore
// just installed, as the applied index (AppliedIndex, Admin.Status); raft
// does not pass it to Restore, so the node reads it from its snapshot
// store (node/snapbytes.go). IndexKnown stays false until the next Apply:
// a snapshot's index can be a no-op or configuration entry past the last
// command, which a replica that applied the log does not count, so Sum is
// still not tied to Index for comparisons. Call it from the goroutine that
// called Restore, before the next Apply.
func (f *FSM) SetRestoredIndex(index uint64) {
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	f.appliedIndex.Store(index)
}
