package raftfsm

import (
	"bufio"
	"io"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wire"
)

// Streamed snapshots (issue 15). The snapshot encoding is unchanged —
// the deterministic protobuf FSMState that ExportState returned before —
// but it is no longer built as one message and marshalled whole: that
// held every tenant's core state twice (the core's ExportState bytes in
// the message, and the marshalled copy), so a snapshot doubled the memory
// of the state it wrote. A capture is the encoding as consecutive parts:
// small, already marshalled pieces (the FSM's own records, under its lock)
// and, for each tenant, the core's pool state bytes exactly as the core's
// ExportState returned them, and its result state as the core's
// ExportStateParts returns it — every result of 1 KiB or more is the
// stored slice itself (results are never modified in place) — never
// copied again. Persist writes
// the parts in order; ExportState joins them. Protobuf-go writes a
// message's fields in field-number order, so a message split into fields
// below a bytes field, the field, and fields above it encodes to the same
// bytes as the whole (TestFSM_SnapshotStreamEqualsWholeMessage pins this
// against proto.Marshal of the whole FSMState).

// FSMState and TenantState field numbers the parts are cut at
// (proto/termivar/v1/command.proto).
const (
	fieldFSMTenants        = 5
	fieldTenantPoolState   = 4
	fieldTenantResultState = 5
)

var deterministic = proto.MarshalOptions{Deterministic: true}

// stateParts is one captured FSM state: its encoding is the parts joined.
// Invariant: no part is modified after the capture (the core's ExportState
// returns fresh slices, ExportStateParts fresh ones and stored results,
// which are immutable; the rest is marshalled at capture).
type stateParts struct {
	parts [][]byte
	size  int
}

func (s *stateParts) add(b []byte) {
	if len(b) > 0 {
		s.parts = append(s.parts, b)
		s.size += len(b)
	}
}

// addMessage marshals m deterministically and adds it.
func (s *stateParts) addMessage(m proto.Message) error {
	b, err := deterministic.Marshal(m)
	s.add(b)
	return err
}

// join returns the encoding as one slice.
func (s *stateParts) join() []byte {
	out := make([]byte, 0, s.size)
	for _, p := range s.parts {
		out = append(out, p...)
	}
	return out
}

// snapshotBufferBytes is the buffer writeTo gathers parts in.
const snapshotBufferBytes = 256 << 10

// writeTo writes the encoding to w through a buffer. NB: every part goes
// through it, stored results too, although they could be handed to w as
// they are: raft's file sink then makes one write call per 64 KiB result,
// and those calls cost more CPU than the copy into the buffer saves
// (BenchmarkStateParts_WriteToFile; docs/benchmarks.md, "64 KiB results,
// session 7").
func (s *stateParts) writeTo(w io.Writer) error {
	bw := bufio.NewWriterSize(w, snapshotBufferBytes)
	for _, p := range s.parts {
		if _, err := bw.Write(p); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// captureState encodes the state as parts: FSMState fields 1-4, each
// tenant as field 5, then fields 20 and above. The caller must not hold
// f.mu.
func (f *FSM) captureState() (*stateParts, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := &stateParts{}
	live, revoked := f.exportKeys()
	if err := s.addMessage(&pb.FSMState{Version: StateVersion, EpochId: f.epoch, LastTime: f.lastTime, Keys: live}); err != nil {
		return nil, err
	}
	for _, name := range sortedKeys(f.tenants) {
		if err := f.tenants[name].capture(s); err != nil {
			return nil, err
		}
	}
	err := s.addMessage(&pb.FSMState{Nodes: f.exportNodes(), RevokedKeys: revoked,
		ClusterVersion: f.clusterVersion.Load(), LastBackup: f.lastBackup})
	return s, err
}

// capture adds the tenant as one FSMState.tenants element: TenantState
// fields 1-3, the core's pool and result states as fields 4 and 5, then
// fields 6 and above. The caller holds the FSM's lock.
func (t *Tenant) capture(s *stateParts) error {
	ps, err := t.pool.ExportState()
	if err != nil {
		return err
	}
	rs, err := t.results.ExportStateParts() // results of 1 KiB and more: the stored slices, not copies
	if err != nil {
		return err
	}
	head, err := deterministic.Marshal(&pb.TenantState{Name: t.name, Limits: wire.LimitsToProto(t.limits), ResultLimits: wire.ResultLimitsToProto(t.resultLimits)})
	if err != nil {
		return err
	}
	ts := &pb.TenantState{ResultRetentionSecs: t.retentionSecs, Schedules: exportSchedules(t)}
	for _, w := range sortedKeys(t.owners) {
		ts.WorkerOwners = append(ts.WorkerOwners, &pb.WorkerOwner{WorkerId: w, KeyId: t.owners[w]})
	}
	for _, id := range sortedKeys(t.scans) {
		ts.Scans = append(ts.Scans, t.exportScan(id))
	}
	tail, err := deterministic.Marshal(ts)
	if err != nil {
		return err
	}
	n := len(head) + bytesFieldSize(fieldTenantPoolState, ps) + bytesFieldSize(fieldTenantResultState, rs...) + len(tail)
	s.add(protowire.AppendVarint(protowire.AppendTag(nil, fieldFSMTenants, protowire.BytesType), uint64(n)))
	s.add(head)
	addBytesField(s, fieldTenantPoolState, ps)
	addBytesField(s, fieldTenantResultState, rs...)
	s.add(tail)
	return nil
}

// bytesFieldSize is the encoded size of a proto3 bytes field whose value
// is the parts joined (0 when empty: proto3 leaves it out).
func bytesFieldSize(num protowire.Number, parts ...[]byte) int {
	n := partsLen(parts)
	if n == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// addBytesField adds a bytes field: its tag and length, then the parts of
// its value themselves.
func addBytesField(s *stateParts, num protowire.Number, parts ...[]byte) {
	n := partsLen(parts)
	if n == 0 {
		return
	}
	s.add(protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.BytesType), uint64(n)))
	for _, p := range parts {
		s.add(p)
	}
}

func partsLen(parts [][]byte) int {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	return n
}

// streamedSnapshot is a captured state that Persist writes part by part.
type streamedSnapshot struct {
	state *stateParts
}

// Persist writes the captured parts to the sink.
func (s *streamedSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.state.writeTo(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release drops the captured parts.
func (s *streamedSnapshot) Release() { s.state = nil }

// coreStates are one TenantState's pool and result state fields, aliasing
// the snapshot buffer.
type coreStates struct {
	pool, results       []byte
	hasPool, hasResults bool
}

// unmarshalState is proto.Unmarshal(b, st) without copying the tenants'
// core states: protobuf-go copies every bytes field, and those two are
// nearly the whole snapshot. It unmarshals b with those fields cut out of
// every tenant, then points them into b (the core's restore copies what it
// keeps). Every other field, unknown ones included, and every malformed
// input go through proto.Unmarshal as before: a field of an unexpected
// wire type is left in place for it to judge.
func unmarshalState(b []byte, st *pb.FSMState) error {
	rest := make([]byte, 0, 4096)
	var cores []coreStates
	for len(b) > 0 {
		num, typ, v, n := nextField(b) // frame_results.go
		if n < 0 {
			return protowire.ParseError(n)
		}
		if num == fieldFSMTenants && typ == protowire.BytesType {
			inner, cs, err := cutCoreStates(v)
			if err != nil {
				return err
			}
			rest = protowire.AppendBytes(protowire.AppendTag(rest, num, typ), inner)
			cores = append(cores, cs)
		} else {
			rest = append(rest, b[:n]...)
		}
		b = b[n:]
	}
	if err := proto.Unmarshal(rest, st); err != nil {
		return err
	}
	if len(st.GetTenants()) != len(cores) {
		return ErrInvalidState // NB: every field 5 is one element
	}
	for i, ts := range st.GetTenants() {
		if cores[i].hasPool {
			ts.PoolState = cores[i].pool
		}
		if cores[i].hasResults {
			ts.ResultState = cores[i].results
		}
	}
	return nil
}

// cutCoreStates returns a TenantState encoding without its pool and result
// state fields, and those fields (the last of each, as protobuf merges a
// repeated scalar field).
func cutCoreStates(b []byte) ([]byte, coreStates, error) {
	var cs coreStates
	inner := make([]byte, 0, 1024)
	for len(b) > 0 {
		num, typ, v, n := nextField(b)
		if n < 0 {
			return nil, cs, protowire.ParseError(n)
		}
		switch {
		case typ == protowire.BytesType && num == fieldTenantPoolState:
			cs.pool, cs.hasPool = v, true
		case typ == protowire.BytesType && num == fieldTenantResultState:
			cs.results, cs.hasResults = v, true
		default:
			inner = append(inner, b[:n]...)
		}
		b = b[n:]
	}
	return inner, cs, nil
}
