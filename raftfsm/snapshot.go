package raftfsm

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wire"
)

// StateVersion is the FSMState.version this package writes and reads.
const StateVersion = 1

// MaxSnapshotBytes bounds a snapshot read by Restore.
const MaxSnapshotBytes = 8 << 30

// Snapshot captures the whole state (raft calls it on the FSM goroutine,
// so the capture is a consistent point; Persist then only writes). The
// capture holds the encoding once, as parts that Persist streams to the
// sink (snapshot_stream.go), not a second, marshalled copy.
//
// A fatal FSM (fatal.go) refuses: its state stops before the corrupt entry,
// and a snapshot would claim it covers indexes it never applied.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.Fatal(); err != nil {
		return nil, err
	}
	s, err := f.captureState()
	if err != nil {
		return nil, err
	}
	return &streamedSnapshot{state: s}, nil
}

// ExportState encodes the FSM deterministically: tenants and keys sorted by
// name, each tenant's core state from ExportState. Equal states give equal
// bytes, the bytes a snapshot of the state persists.
func (f *FSM) ExportState() ([]byte, error) {
	s, err := f.captureState()
	if err != nil {
		return nil, err
	}
	return s.join(), nil
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// Restore replaces the state with a snapshot written by Persist. Corrupt
// input fails without changing anything.
func (f *FSM) Restore(rc io.ReadCloser) error { return f.RestoreSized(rc, 0) }

// RestoreSized is Restore told the snapshot's size (0: unknown; the node's
// snapshot store knows it): the snapshot is read into one buffer of that
// size instead of one grown by doubling, which allocated and copied the
// snapshot about four times over.
func (f *FSM) RestoreSized(rc io.ReadCloser, size int64) error {
	defer rc.Close()
	b, err := readSnapshot(io.LimitReader(rc, MaxSnapshotBytes), size)
	if err != nil {
		return err
	}
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	if err := f.RestoreState(b); err != nil {
		if errors.Is(err, ErrUnsupportedVersion) {
			// NB: raft reports only "failed to load any existing
			// snapshots"; the node asks for the reason (UnsupportedState).
			f.unsupportedState.Store(&err)
		}
		return err
	}
	f.indexKnown = false
	return nil
}

// readSnapshot reads r to its end into a buffer of size bytes (plus one,
// to see the end without growing), doubling it only if r is longer.
func readSnapshot(r io.Reader, size int64) ([]byte, error) {
	b := make([]byte, 0, min(max(size, 0), MaxSnapshotBytes)+512)
	for {
		if len(b) == cap(b) {
			b = append(make([]byte, 0, 2*cap(b)), b...) // NB: doubling, not append's 1.25×
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// UnsupportedState returns the error of the last snapshot Restore refused
// because it needs a newer binary (ErrUnsupportedVersion), or nil.
func (f *FSM) UnsupportedState() error {
	if p := f.unsupportedState.Load(); p != nil {
		return *p
	}
	return nil
}

// ErrInvalidState is returned by RestoreState for bytes that are not a
// consistent FSM state.
var ErrInvalidState = errors.New("raftfsm: invalid snapshot state")

// RestoreState replaces the state with bytes from ExportState, validating
// everything first. The core states are decoded from b in place (the core
// copies what it keeps); b is not retained. A state of a cluster version above the FSM's
// MaxVersion is refused with ErrUnsupportedVersion (upgrade the binary).
func (f *FSM) RestoreState(b []byte) error {
	var st pb.FSMState
	if err := unmarshalState(b, &st); err != nil || st.GetVersion() != StateVersion {
		return ErrInvalidState
	}
	cv := max(st.GetClusterVersion(), MinClusterVersion)
	if cv > f.maxVersion {
		return fmt.Errorf("%w: the state is of cluster version %d; this binary supports up to %d: upgrade it", ErrUnsupportedVersion, cv, f.maxVersion)
	}
	if lb := st.GetLastBackup(); lb != nil && (len(lb.GetBackupId()) != BackupIDBytes || !validNodeInfo(lb.GetNodeId(), "")) {
		return ErrInvalidState
	}
	if st.EpochId != nil && len(st.GetEpochId()) != EpochBytes {
		return ErrInvalidState
	}
	nodes, ok := restoreNodes(st.GetNodes())
	if !ok {
		return ErrInvalidState
	}
	tenants, ok := restoreTenants(st.GetTenants())
	if !ok {
		return ErrInvalidState
	}
	keys, revoked, ok := restoreKeys(&st, tenants)
	if !ok {
		return ErrInvalidState
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.epoch = slices.Clone(st.GetEpochId())
	f.lastTime = st.GetLastTime()
	f.keys = keys
	f.revoked = revoked
	f.tenants = tenants
	f.nodes = nodes
	f.clusterVersion.Store(cv)
	f.lastBackup = st.GetLastBackup()
	f.publishAll() // published.go P1
	return nil
}

// restoreTenants validates and restores every tenant: names first (valid,
// no duplicates), then the tenants themselves in parallel, one goroutine
// per CPU — each tenant's core state restores on its own, and a state of
// many full tenants (1 M tasks are 64 tenants at their queue ceiling)
// otherwise restores on one core while a restart waits. All or nothing: a
// single invalid tenant fails the whole state.
func restoreTenants(states []*pb.TenantState) (map[string]*Tenant, bool) {
	tenants := make(map[string]*Tenant, len(states))
	for _, ts := range states {
		if _, dup := tenants[ts.GetName()]; dup || !distributed.ValidIdentifier(ts.GetName()) {
			return nil, false
		}
		tenants[ts.GetName()] = nil
	}
	out := make([]*Tenant, len(states))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(states)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(states); i = int(next.Add(1) - 1) {
				out[i], _ = restoreTenant(states[i]) // nil when invalid
			}
		})
	}
	wg.Wait()
	for _, t := range out {
		if t == nil {
			return nil, false
		}
		tenants[t.name] = t
	}
	return tenants, true
}

// restoreTenant validates one tenant: limits, the core's pool and result
// states under those limits, unique worker owners (restoreKeys checks that
// each is a worker key of this tenant), and scans listing tasks of the
// pool.
func restoreTenant(ts *pb.TenantState) (*Tenant, bool) {
	lim, err := wire.LimitsFromProto(ts.GetLimits())
	if err != nil {
		return nil, false
	}
	rl, err := wire.ResultLimitsFromProto(ts.GetResultLimits())
	if err != nil {
		return nil, false
	}
	pool, err := distributed.RestoreWorkerPool(ts.GetPoolState())
	if err != nil || pool.Limits() != lim {
		return nil, false
	}
	res, err := distributed.RestoreResultAggregator(ts.GetResultState())
	if err != nil || res.Limits() != rl {
		return nil, false
	}
	if checkRetention(ts.GetResultRetentionSecs()) != nil {
		return nil, false
	}
	t := &Tenant{name: ts.GetName(), limits: lim, resultLimits: rl, pool: pool, results: res,
		owners: map[string]string{}, scans: map[string][]string{}, meta: map[string]*scanMeta{},
		retentionSecs: ts.GetResultRetentionSecs(), schedules: map[string]*pb.Schedule{}}
	if !restoreSchedules(t, ts.GetSchedules()) { // recurring.go
		return nil, false
	}
	for _, o := range ts.GetWorkerOwners() {
		if _, dup := t.owners[o.GetWorkerId()]; dup {
			return nil, false
		}
		t.owners[o.GetWorkerId()] = o.GetKeyId()
	}
	var briefs []distributed.TaskBrief
	for _, sc := range ts.GetScans() {
		if _, dup := t.scans[sc.GetScanId()]; dup || !distributed.ValidIdentifier(sc.GetScanId()) {
			return nil, false
		}
		// NB: each task is read once, in one call per scan; restoreScanMeta
		// reads these.
		var ok bool
		if briefs, ok = scanBriefs(pool, sc, briefs); !ok {
			return nil, false
		}
		m, ok := restoreScanMeta(pool, res, sc, briefs)
		if !ok {
			return nil, false
		}
		t.scans[sc.GetScanId()] = scanTaskIDs(briefs)
		t.meta[sc.GetScanId()] = m
	}
	return t, true
}
