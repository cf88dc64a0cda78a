// Tests for streamed snapshots (snapshot_stream.go). Goal: the parts a
// snapshot streams join to exactly the bytes the whole FSMState message
// marshals to (the encoding before streaming, so snapshots written before
// restore unchanged), Persist writes exactly them, and Restore reads a
// snapshot written the old way. Method: a state touching every FSMState
// and TenantState field (tenants, live and revoked keys, nodes, the last
// backup, cluster version, worker owners, scans with a purge, schedules,
// retention, results), encoded by the old whole-message code kept here as
// legacyExportState.
package raftfsm

import (
	"bytes"
	"io"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wire"
)

// legacyExportState is ExportState before streaming: one FSMState message,
// every tenant's core state in it, marshalled whole.
func legacyExportState(f *FSM) ([]byte, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	st := &pb.FSMState{Version: StateVersion, EpochId: f.epoch, LastTime: f.lastTime, Nodes: f.exportNodes(),
		ClusterVersion: f.clusterVersion.Load(), LastBackup: f.lastBackup}
	st.Keys, st.RevokedKeys = f.exportKeys()
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
		ts := &pb.TenantState{Name: name, Limits: wire.LimitsToProto(t.limits), ResultLimits: wire.ResultLimitsToProto(t.resultLimits), PoolState: ps, ResultState: rs, ResultRetentionSecs: t.retentionSecs}
		for _, w := range sortedKeys(t.owners) {
			ts.WorkerOwners = append(ts.WorkerOwners, &pb.WorkerOwner{WorkerId: w, KeyId: t.owners[w]})
		}
		ts.Schedules = exportSchedules(t)
		for _, s := range sortedKeys(t.scans) {
			ts.Scans = append(ts.Scans, t.exportScan(s))
		}
		st.Tenants = append(st.Tenants, ts)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(st)
}

// everyFieldState builds a state that sets every snapshot field.
func everyFieldState(t *testing.T) *testBundle {
	t.Helper()
	b := setup(t)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, enqueueCmd("kprod", "t1", "t2", "t3", "t4"))
	finishAll(t, b, 2)
	b.must(t, purgeCmd("kprod", &pb.PurgeTasks{TaskIds: []string{"t1"}}))
	b.must(t, revokeCmd("kadmin", "kw2"))
	b.must(t, &pb.Command{Op: &pb.Command_SetNodeInfo{SetNodeInfo: &pb.SetNodeInfo{NodeId: "n1", ApiUrl: "http://127.0.0.1:1", Incarnation: bytes.Repeat([]byte{3}, 16)}}})
	b.must(t, backupCmd(t))
	b.must(t, createScheduleCmd("nightly", 3600, "a", "b"))
	b.must(t, &pb.Command{Op: &pb.Command_UpdateTenant{UpdateTenant: &pb.UpdateTenant{Name: "other", ResultRetentionSecs: 60}}})
	return b
}

func TestFSM_SnapshotStreamEqualsWholeMessage(t *testing.T) {
	t.Parallel()
	b := everyFieldState(t)
	want, err := legacyExportState(b.f)
	if err != nil {
		t.Fatal(err)
	}
	var st pb.FSMState
	if err := proto.Unmarshal(want, &st); err != nil {
		t.Fatal(err)
	}
	// The state must set what the cuts are between, or the test proves little.
	ts := st.GetTenants()[0]
	if len(st.GetTenants()) != 2 || len(st.GetKeys()) == 0 || len(st.GetRevokedKeys()) == 0 || len(st.GetNodes()) == 0 ||
		st.GetLastBackup() == nil || len(ts.GetWorkerOwners()) == 0 || len(ts.GetScans()) == 0 || len(ts.GetSchedules()) == 0 ||
		len(ts.GetScans()[0].GetTaskOrdinals()) == 0 || st.GetTenants()[1].GetResultRetentionSecs() == 0 {
		t.Fatalf("the state misses a field: %v", &st)
	}
	got, err := b.f.ExportState()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("ExportState (%d bytes) differs from the whole-message encoding (%d bytes)", len(got), len(want))
	}
	s, err := b.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &bufferSink{}
	if err := s.Persist(sink); err != nil {
		t.Fatal(err)
	}
	s.Release()
	if !sink.closed || !bytes.Equal(sink.buf.Bytes(), want) {
		t.Fatalf("Persist wrote %d bytes (closed %v), want the %d of the whole message", sink.buf.Len(), sink.closed, len(want))
	}
}

func TestFSM_RestoresSnapshotWrittenWhole(t *testing.T) {
	t.Parallel()
	b := everyFieldState(t)
	old, err := legacyExportState(b.f)
	if err != nil {
		t.Fatal(err)
	}
	g := New(Options{})
	if err := g.Restore(io.NopCloser(bytes.NewReader(old))); err != nil {
		t.Fatalf("Restore(a snapshot written whole) = %v", err)
	}
	again, err := g.ExportState()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, old) {
		t.Fatal("a snapshot written whole restores to a different state")
	}
}

// bufferSink is a raft.SnapshotSink writing to memory.
type bufferSink struct {
	buf              bytes.Buffer
	closed, canceled bool
}

func (s *bufferSink) Write(p []byte) (int, error) { return s.buf.Write(p) }
func (s *bufferSink) Close() error                { s.closed = true; return nil }
func (s *bufferSink) ID() string                  { return "test" }
func (s *bufferSink) Cancel() error               { s.canceled = true; return nil }

// TestUnmarshalState_AgreesWithProto checks that the aliasing decode
// accepts exactly what proto.Unmarshal accepts and gives an equal message:
// on a state with every field, on every truncation of it, on every byte of
// it flipped, and on a tenant whose core states come twice or with another
// wire type.
func TestUnmarshalState_AgreesWithProto(t *testing.T) {
	t.Parallel()
	b := everyFieldState(t)
	enc, err := b.f.ExportState()
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, in []byte) {
		t.Helper()
		var want, got pb.FSMState
		werr := proto.Unmarshal(in, &want)
		gerr := unmarshalState(in, &got)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%s: proto.Unmarshal = %v, unmarshalState = %v", what, werr, gerr)
		}
		if werr == nil && !proto.Equal(&want, &got) {
			t.Fatalf("%s: the decoded states differ", what)
		}
	}
	check("whole", enc)
	for i := range enc {
		check("truncated", enc[:i])
		flipped := bytes.Clone(enc)
		flipped[i] ^= 0x5a
		check("flipped", flipped)
	}
	twice := protowire.AppendBytes(protowire.AppendTag(nil, fieldTenantPoolState, protowire.BytesType), []byte("first"))
	twice = protowire.AppendBytes(protowire.AppendTag(twice, fieldTenantPoolState, protowire.BytesType), []byte("second"))
	twice = protowire.AppendVarint(protowire.AppendTag(twice, fieldTenantResultState, protowire.VarintType), 7)
	odd := protowire.AppendBytes(protowire.AppendTag(bytes.Clone(enc), fieldFSMTenants, protowire.BytesType), twice)
	check("a tenant with its pool state twice and a varint result state", odd)
	var got pb.FSMState
	if err := unmarshalState(odd, &got); err != nil || string(got.GetTenants()[2].GetPoolState()) != "second" {
		t.Fatalf("the last pool state must win: %v %q", err, got.GetTenants()[2].GetPoolState())
	}
}
