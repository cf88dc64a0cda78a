package raftfsm

import (
	"bytes"
	"errors"
	"io"
	"slices"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// StateVersion is the FSMState.version this package writes and reads.
const StateVersion = 1

// MaxSnapshotBytes bounds a snapshot read by Restore.
const MaxSnapshotBytes = 8 << 30

// Snapshot captures the whole state as bytes (raft calls it on the FSM
// goroutine, so the capture is a consistent point; Persist then only writes).
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	b, err := f.ExportState()
	if err != nil {
		return nil, err
	}
	return &snapshot{data: b}, nil
}

// ExportState encodes the FSM deterministically: tenants and keys sorted by
// name, each tenant's core state from ExportState. Equal states give equal
// bytes.
func (f *FSM) ExportState() ([]byte, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	st := &pb.FSMState{Version: StateVersion, EpochId: f.epoch, LastTime: f.lastTime, Nodes: f.exportNodes()}
	for _, id := range sortedKeys(f.keys) {
		k := f.keys[id]
		st.Keys = append(st.Keys, &pb.KeyRecord{KeyId: k.ID, SecretHash: k.Hash, Tenant: k.Tenant, Role: k.Role})
	}
	for _, name := range sortedKeys(f.tenants) {
		t := f.tenants[name]
		ps, err := t.pool.ExportState()
		if err != nil {
			return nil, err
		}
		rs, err := t.results.ExportState()
		if err != nil {
			return nil, err
		}
		ts := &pb.TenantState{Name: name, Limits: LimitsToProto(t.limits), ResultLimits: ResultLimitsToProto(t.resultLimits), PoolState: ps, ResultState: rs}
		for _, w := range sortedKeys(t.owners) {
			ts.WorkerOwners = append(ts.WorkerOwners, &pb.WorkerOwner{WorkerId: w, KeyId: t.owners[w]})
		}
		for _, s := range sortedKeys(t.scans) {
			ts.Scans = append(ts.Scans, &pb.ScanIndex{ScanId: s, TaskIds: t.scans[s]})
		}
		st.Tenants = append(st.Tenants, ts)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(st)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Restore replaces the state with a snapshot written by Persist. Corrupt
// input fails without changing anything.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, io.LimitReader(rc, MaxSnapshotBytes)); err != nil {
		return err
	}
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	if err := f.RestoreState(buf.Bytes()); err != nil {
		return err
	}
	f.indexKnown = false
	return nil
}

// ErrInvalidState is returned by RestoreState for bytes that are not a
// consistent FSM state.
var ErrInvalidState = errors.New("raftfsm: invalid snapshot state")

// RestoreState replaces the state with bytes from ExportState, validating
// everything first.
func (f *FSM) RestoreState(b []byte) error {
	var st pb.FSMState
	if err := proto.Unmarshal(b, &st); err != nil || st.GetVersion() != StateVersion {
		return ErrInvalidState
	}
	if st.EpochId != nil && len(st.GetEpochId()) != EpochBytes {
		return ErrInvalidState
	}
	nodes, ok := restoreNodes(st.GetNodes())
	if !ok {
		return ErrInvalidState
	}
	keys := map[string]KeyRecord{}
	tenants := map[string]*Tenant{}
	for _, ts := range st.GetTenants() {
		if _, dup := tenants[ts.GetName()]; dup || !distributed.ValidIdentifier(ts.GetName()) {
			return ErrInvalidState
		}
		lim, err := LimitsFromProto(ts.GetLimits())
		if err != nil {
			return ErrInvalidState
		}
		rl, err := ResultLimitsFromProto(ts.GetResultLimits())
		if err != nil {
			return ErrInvalidState
		}
		pool, err := distributed.RestoreWorkerPool(ts.GetPoolState())
		if err != nil || pool.Limits() != lim {
			return ErrInvalidState
		}
		res, err := distributed.RestoreResultAggregator(ts.GetResultState())
		if err != nil || res.Limits() != rl {
			return ErrInvalidState
		}
		t := &Tenant{name: ts.GetName(), limits: lim, resultLimits: rl, pool: pool, results: res,
			owners: map[string]string{}, scans: map[string][]string{}}
		for _, o := range ts.GetWorkerOwners() {
			t.owners[o.GetWorkerId()] = o.GetKeyId()
		}
		for _, s := range ts.GetScans() {
			t.scans[s.GetScanId()] = slices.Clone(s.GetTaskIds())
		}
		tenants[t.name] = t
	}
	for _, k := range st.GetKeys() {
		if _, ok := tenants[k.GetTenant()]; !ok || len(k.GetSecretHash()) != 32 {
			return ErrInvalidState
		}
		keys[k.GetKeyId()] = KeyRecord{ID: k.GetKeyId(), Hash: slices.Clone(k.GetSecretHash()), Tenant: k.GetTenant(), Role: k.GetRole()}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epoch = slices.Clone(st.GetEpochId())
	f.lastTime = st.GetLastTime()
	f.keys = keys
	f.tenants = tenants
	f.nodes = nodes
	return nil
}

type snapshot struct {
	data []byte
}

// Persist writes the captured bytes to the sink.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s.data); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release drops the captured bytes.
func (s *snapshot) Release() { s.data = nil }
