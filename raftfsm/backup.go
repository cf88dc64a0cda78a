package raftfsm

import (
	"crypto/sha256"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// ExportedState is the whole FSM state (ExportState's encoding) with the
// raft index it was taken at: what a backup holds.
type ExportedState struct {
	// State is the deterministic FSMState encoding.
	State []byte
	// Index is the raft index of the last applied entry in State;
	// IndexKnown is false right after a snapshot restore (statehash.go).
	Index      uint64
	IndexKnown bool
	// Epoch is the cluster epoch of State; LastTime its logical time.
	Epoch    []byte
	LastTime uint64
}

// ExportAt encodes the state and reads the applied index as one pair,
// holding Apply off meanwhile (like StateHash): a consistent point for a
// backup. It costs a full ExportState.
func (f *FSM) ExportAt() (ExportedState, error) {
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	b, err := f.ExportState()
	if err != nil {
		return ExportedState{}, err
	}
	return ExportedState{State: b, Index: f.appliedIndex.Load(), IndexKnown: f.indexKnown, Epoch: f.Epoch(), LastTime: f.LastTime()}, nil
}

// ExportAt returns the whole state at one applied index (FSM.ExportAt).
func (r Reader) ExportAt() (ExportedState, error) { return r.f.ExportAt() }

// ErrRestoreRefused is returned (wrapped, with the reason) by
// PrepareRestore for a state that cannot start a new cluster.
var ErrRestoreRefused = errors.New("raftfsm: state cannot be restored")

// PrepareRestore turns a backed-up state into the first state of a new
// cluster: the state must restore (RestoreState's full validation: every
// tenant's core invariants, keys, owners, scans), and gets the new epoch
// (so every token issued by the old cluster is refused: docs/operations.md,
// "Restore") and an empty node table (the old members are not members of
// the new cluster; each registers itself). Tenants, keys, revoked keys,
// logical time and every tenant's core state are kept byte for byte. It
// returns the new state's encoding, which restores to an FSM whose
// ExportState is exactly those bytes.
func PrepareRestore(state, newEpoch []byte) ([]byte, error) {
	if len(newEpoch) != EpochBytes {
		return nil, fmt.Errorf("%w: the new epoch must be %d bytes", ErrRestoreRefused, EpochBytes)
	}
	if err := New(Options{}).RestoreState(state); err != nil {
		return nil, fmt.Errorf("%w: the backed-up state is not a valid FSM state: %w", ErrRestoreRefused, err)
	}
	var st pb.FSMState
	if err := proto.Unmarshal(state, &st); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRestoreRefused, err)
	}
	if len(st.GetEpochId()) != EpochBytes {
		return nil, fmt.Errorf("%w: the backed-up state has no cluster epoch", ErrRestoreRefused)
	}
	st.EpochId = newEpoch
	st.Nodes = nil
	st.ClusterVersion = max(st.GetClusterVersion(), MinClusterVersion)
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(&st)
	if err != nil {
		return nil, err
	}
	f := New(Options{})
	if err := f.RestoreState(out); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRestoreRefused, err)
	}
	again, err := f.ExportState()
	if err != nil {
		return nil, err
	}
	if sha256.Sum256(again) != sha256.Sum256(out) {
		// Invariant: ExportState(RestoreState(b)) == b for every state
		// ExportState wrote (TestFSM_SnapshotRoundTrip).
		return nil, fmt.Errorf("%w: the state does not re-encode to itself", ErrRestoreRefused)
	}
	return out, nil
}
