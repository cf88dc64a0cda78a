package raftfsm

// Goal: close the raftfsm gaps that mutation testing found (issue 14). Each
// test names the single-line mutant it kills. Method: build a state that
// holds every kind of FSM record, then check what the mutant would break —
// a semantic comparison of every table after snapshot → restore (a byte
// comparison alone passes when a table is dropped on both sides), hostile
// snapshots, and rejected commands that must not move time.

import (
	"bytes"
	"errors"
	"maps"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wire"
)

// richState builds an FSM with tenants (one with custom limits and result
// limits), keys, bound workers, scans, results and the node table.
func richState(t *testing.T) *testBundle {
	t.Helper()
	b := setup(t)
	b.must(t, &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "custom",
		Limits:       wire.LimitsToProto(distributed.Limits{MaxTaskRecords: 100, MaxActiveTasks: 50, MaxQueuedTasks: 50, MaxTerminalTasks: 100, MaxWorkers: 5, MaxRetries: 2, MaxLeaseTTLSecs: 120, MaxTaskTTLSecs: 600, HeartbeatTimeoutSecs: 30}),
		ResultLimits: &pb.ResultLimits{MaxResults: 7, MaxResultBytes: 64, MaxTotalBytes: 256, MaxAggregateItems: 7, MaxAggregateBytes: 256}}}})
	b.must(t, &pb.Command{Op: &pb.Command_SetNodeInfo{SetNodeInfo: &pb.SetNodeInfo{NodeId: "n1", ApiUrl: "http://127.0.0.1:1", Incarnation: bytes.Repeat([]byte{3}, 16)}}})
	for _, tenant := range []string{"acme", "custom"} {
		b.must(t, &pb.Command{Tenant: tenant, Principal: "", Op: registerCmd("", "wa").Op})
		b.must(t, &pb.Command{Tenant: tenant, Op: enqueueCmd("", "t1", "t2", "t3").Op})
	}
	declared := enqueueCmd("", "t4")
	declared.GetEnqueue().DeclaredTotal = 9
	b.must(t, declared)
	b.must(t, registerCmd("kw1", "w1"))
	acq := valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", 2)))
	b.must(t, completeCmd("kw1", acq[0].Lease, []byte("result-1")))
	return b
}

// fsmTables is every table of the FSM in comparable form.
type fsmTables struct {
	Epoch    []byte
	LastTime uint64
	Keys     map[string]KeyRecord
	Nodes    map[string]nodeRecord
	Tenants  map[string]tenantTables
}

type tenantTables struct {
	Limits       distributed.Limits
	ResultLimits distributed.ResultLimits
	Pool         []byte
	Results      []byte
	Owners       map[string]string
	Scans        map[string][]string
	Declared     map[string]uint64
}

func tablesOf(t *testing.T, f *FSM) fsmTables {
	t.Helper()
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := fsmTables{Epoch: f.epoch, LastTime: f.lastTime, Keys: maps.Clone(f.keys), Nodes: maps.Clone(f.nodes), Tenants: map[string]tenantTables{}}
	for name, tn := range f.tenants {
		ps, _ := tn.pool.ExportState()
		rs, _ := tn.results.ExportState()
		out.Tenants[name] = tenantTables{Limits: tn.limits, ResultLimits: tn.resultLimits, Pool: ps, Results: rs,
			Owners: maps.Clone(tn.owners), Scans: maps.Clone(tn.scans), Declared: declaredOf(tn)}
	}
	return out
}

// declaredOf maps the tenant's scans that have a declared total to it.
func declaredOf(tn *Tenant) map[string]uint64 {
	out := map[string]uint64{}
	for id, m := range tn.meta {
		if m.declared != 0 {
			out[id] = m.declared
		}
	}
	return out
}

// Mutants: the scan index, the tenant's ResultLimits, worker owners or the
// node table left out of the snapshot (snapshot.go). Every table must be
// equal after snapshot → restore, not only the bytes.
func TestFSM_SnapshotKeepsEveryTable(t *testing.T) {
	t.Parallel()
	b := richState(t)
	want := tablesOf(t, b.f)
	if len(want.Tenants["acme"].Scans) == 0 || len(want.Tenants["acme"].Owners) == 0 || len(want.Nodes) == 0 || len(want.Tenants["acme"].Declared) == 0 {
		t.Fatal("the rich state lacks a table it should exercise")
	}
	st, err := b.f.ExportState()
	if err != nil {
		t.Fatal(err)
	}
	g := New(Options{})
	if err := g.RestoreState(st); err != nil {
		t.Fatalf("RestoreState: %v", err)
	}
	got := tablesOf(t, g)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("tables after snapshot → restore differ:\n got %+v\nwant %+v", got, want)
	}
	// The reads built on them answer the same.
	tv, _ := g.Tenant("acme")
	if ids := tv.ScanTaskIDs("s1"); len(ids) != 4 || tv.ScanDeclaredTotal("s1") != 9 {
		t.Fatalf("ScanTaskIDs(s1), ScanDeclaredTotal(s1) after restore = %v, %d", ids, tv.ScanDeclaredTotal("s1"))
	}
	var done []string
	for _, id := range tv.ScanTaskIDs("s1") {
		if tv.HasResult(id) {
			done = append(done, id)
		}
	}
	if agg, err := tv.AggregateResults(done); err != nil || len(agg) != 1 || len(done) != 1 {
		t.Fatalf("AggregateResults after restore = %v, %v", agg, err)
	}
}

// Mutant: RestoreState no longer checks that a key's secret hash is 32
// bytes (snapshot.go). A hostile snapshot is refused and changes nothing.
func TestFSM_RestoreRefusesMalformedKeyTable(t *testing.T) {
	t.Parallel()
	b := richState(t)
	st, _ := b.f.ExportState()
	for name, mut := range map[string]func(*pb.FSMState){
		"short hash":   func(s *pb.FSMState) { s.Keys[0].SecretHash = s.Keys[0].SecretHash[:31] },
		"long hash":    func(s *pb.FSMState) { s.Keys[0].SecretHash = append(s.Keys[0].SecretHash, 0) },
		"unknown role": func(s *pb.FSMState) { s.Keys[0].Role = "root" },
		"no tenant":    func(s *pb.FSMState) { s.Keys[0].Tenant = "nowhere" },
		"duplicate":    func(s *pb.FSMState) { s.Keys = append(s.Keys, s.Keys[0]) },
		"owner is not a worker key": func(s *pb.FSMState) {
			s.Tenants[0].WorkerOwners = append(s.Tenants[0].WorkerOwners, &pb.WorkerOwner{WorkerId: "wx", KeyId: "kadmin"})
		},
		"owner key missing": func(s *pb.FSMState) {
			s.Tenants[0].WorkerOwners = append(s.Tenants[0].WorkerOwners, &pb.WorkerOwner{WorkerId: "wx", KeyId: "nokey"})
		},
		"duplicate scan": func(s *pb.FSMState) { s.Tenants[0].Scans = append(s.Tenants[0].Scans, s.Tenants[0].Scans[0]) },
		"scan lists an unknown task": func(s *pb.FSMState) {
			s.Tenants[0].Scans[0].TaskIds = append(s.Tenants[0].Scans[0].TaskIds, "ghost")
		},
	} {
		checkRestoreRefused(t, name, st, mut)
	}
}

// Mutant: RegisterWorker binds the caller's key even when the core refuses
// the registration (fsm.go). A worker key must not take over a worker that
// another principal registered.
func TestFSM_FailedRegisterDoesNotBind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, registerCmd("kadmin", "w1"))
	b.must(t, enqueueCmd("kprod", "t1"))
	before, _ := b.f.ExportState()
	if r := b.apply(registerCmd("kw2", "w1")); !errors.Is(r.Err, distributed.ErrWorkerAlreadyExists) {
		t.Fatalf("second RegisterWorker(w1) = %v, want WorkerAlreadyExists", r.Err)
	}
	if after, _ := b.f.ExportState(); !bytes.Equal(before, after) {
		t.Fatal("a refused registration changed the state")
	}
	if r := b.apply(acquireCmd("kw2", "w1", 1)); !errors.Is(r.Err, ErrPermissionDenied) {
		t.Fatalf("acquire by the refused key = %v, want permission denied", r.Err)
	}
}

// Mutant: logical time advances on a rejected command (fsm.go). A rejected
// command stamped later than the last applied time changes nothing, time
// included; the next accepted command moves it.
func TestFSM_RejectedCommandKeepsTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, &pb.Command{NowSecs: 500, Op: registerCmd("", "w").Op})
	before, _ := b.f.ExportState()
	for _, cmd := range []*pb.Command{
		{NowSecs: 900, Op: registerCmd("", "w").Op},                          // already exists
		{NowSecs: 900, Principal: "kw1", Op: acquireCmd("kw1", "w", 1).Op},   // not bound to kw1
		{NowSecs: 900, Tenant: "nowhere", Op: enqueueCmd("", "x").Op},        // unknown tenant
		{NowSecs: 900, Op: &pb.Command_Enqueue{Enqueue: &pb.EnqueueTasks{}}}, // empty batch
	} {
		if r := b.apply(cmd); r.Err == nil {
			t.Fatalf("%T was accepted", cmd.GetOp())
		}
		if b.f.LastTime() != 500 {
			t.Fatalf("a rejected %T moved logical time to %d", cmd.GetOp(), b.f.LastTime())
		}
	}
	if after, _ := b.f.ExportState(); !bytes.Equal(before, after) {
		t.Fatal("rejected commands changed the state")
	}
	b.must(t, &pb.Command{NowSecs: 900, Op: enqueueCmd("", "t").Op})
	if b.f.LastTime() != 900 {
		t.Fatalf("an accepted command left logical time at %d", b.f.LastTime())
	}
}

// checkRestoreRefused applies mut to the FSMState encoded in st and
// requires RestoreState to refuse the result without changing a rich
// state.
func checkRestoreRefused(t *testing.T, name string, st []byte, mut func(*pb.FSMState)) {
	t.Helper()
	var s pb.FSMState
	if err := proto.Unmarshal(st, &s); err != nil {
		t.Fatal(err)
	}
	mut(&s)
	bad, err := proto.MarshalOptions{Deterministic: true}.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	g := richState(t)
	before, _ := g.f.ExportState()
	if err := g.f.RestoreState(bad); err == nil {
		t.Errorf("%s: RestoreState = nil, want an error", name)
	}
	if after, _ := g.f.ExportState(); !bytes.Equal(before, after) {
		t.Errorf("%s: a refused restore changed the state", name)
	}
}
