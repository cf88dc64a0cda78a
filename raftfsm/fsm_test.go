// Tests for the FSM without raft. Goal: commands reach the core with the
// stamped time and the current revision, domain errors come back in the
// response and change nothing, enqueue batches are all-or-nothing, complete
// stores the result in the same command, authorization binds workers to
// keys, and ExportState/RestoreState round-trip exactly. Method: drive
// ApplyCommand directly with hand-built commands.
package raftfsm

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"go.uber.org/goleak"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testBundle struct {
	f   *FSM
	now uint64
}

func setup(t testing.TB) *testBundle {
	t.Helper()
	b := &testBundle{f: New(Options{}), now: 100}
	b.must(t, &pb.Command{Op: &pb.Command_InitCluster{InitCluster: &pb.InitCluster{EpochId: bytes.Repeat([]byte{1}, 16)}}})
	b.must(t, &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "acme"}}})
	b.must(t, &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "other"}}})
	for _, k := range []struct{ id, role, tenant string }{{"kadmin", RoleAdmin, "acme"}, {"kprod", RoleProducer, "acme"}, {"kw1", RoleWorker, "acme"}, {"kw2", RoleWorker, "acme"}, {"kother", RoleAdmin, "other"}} {
		b.must(t, &pb.Command{Op: &pb.Command_CreateKey{CreateKey: &pb.CreateKey{KeyId: k.id, SecretHash: make([]byte, 32), KeyTenant: k.tenant, Role: k.role}}})
	}
	// NB: every operation of this binary (version.go); setupV1 for the
	// previous release's cluster.
	b.must(t, &pb.Command{Op: &pb.Command_SetClusterVersion{SetClusterVersion: &pb.SetClusterVersion{Version: SupportedVersion}}})
	return b
}

func (b *testBundle) apply(cmd *pb.Command) Response {
	cmd.Version = CommandVersion
	if cmd.NowSecs == 0 {
		cmd.NowSecs = b.now
	}
	if cmd.Tenant == "" {
		cmd.Tenant = "acme"
	}
	return b.f.ApplyCommand(cmd).(Response)
}

// valueOf is ValueAs for tests: a value of another type fails t.
func valueOf[T any](t testing.TB, r Response) T {
	t.Helper()
	v, err := ValueAs[T](r, "test")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (b *testBundle) must(t testing.TB, cmd *pb.Command) Response {
	t.Helper()
	r := b.apply(cmd)
	if r.Err != nil {
		t.Fatalf("apply %T: %v", cmd.GetOp(), r.Err)
	}
	mustPublished(t, b.f)
	return r
}

func enqueueCmd(principal string, ids ...string) *pb.Command {
	e := &pb.EnqueueTasks{}
	for _, id := range ids {
		e.Tasks = append(e.Tasks, &pb.TaskSpec{TaskId: id, ScanId: "s1", TargetRef: []byte("target-" + id), Priority: 1})
	}
	return &pb.Command{Principal: principal, Op: &pb.Command_Enqueue{Enqueue: e}}
}

func registerCmd(principal, id string) *pb.Command {
	return &pb.Command{Principal: principal, Op: &pb.Command_RegisterWorker{RegisterWorker: &pb.RegisterWorker{Spec: &pb.WorkerSpec{WorkerId: id, Capacity: 8}}}}
}

func acquireCmd(principal, id string, n uint32) *pb.Command {
	return &pb.Command{Principal: principal, Op: &pb.Command_AcquireTasks{AcquireTasks: &pb.AcquireTasks{WorkerId: id, LeaseTtlSecs: 30, MaxTasks: n, Start: true}}}
}

func completeCmd(principal string, l distributed.TaskLease, result []byte) *pb.Command {
	lb, _ := l.MarshalBinary()
	return &pb.Command{Principal: principal, Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: lb, Result: result}}}
}

func TestFSM_Lifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, registerCmd("kw1", "w1"))
	r := b.must(t, enqueueCmd("kprod", "t1", "t2", "t3"))
	if got := len(valueOf[[]distributed.ScanTask](t, r)); got != 3 {
		t.Fatalf("enqueue value has %d tasks, want 3", got)
	}
	acq := valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", 2)))
	if len(acq) != 2 || !acq[0].Started || acq[0].Task.TaskID() != "t1" || acq[0].Task.TargetRef() != "target-t1" {
		t.Fatalf("acquire = %+v", acq)
	}
	cr := b.must(t, completeCmd("kw1", acq[0].Lease, []byte("result-1")))
	cv := valueOf[CompleteValue](t, cr)
	if cv.Completion.Kind != distributed.Completed || cv.Store.Kind != distributed.Stored {
		t.Fatalf("complete value = %+v", cv)
	}
	// Replay: same lease and bytes → AlreadyCompleted, AlreadyStored, no change.
	before, _ := b.f.ExportState()
	cv = valueOf[CompleteValue](t, b.must(t, completeCmd("kw1", acq[0].Lease, []byte("result-1"))))
	if cv.Completion.Kind != distributed.AlreadyCompleted || cv.Store.Kind != distributed.AlreadyStored {
		t.Fatalf("replay value = %+v", cv)
	}
	after, _ := b.f.ExportState()
	if !bytes.Equal(before, after) {
		t.Fatal("replay changed the state")
	}
	tv, _ := b.f.Tenant("acme")
	if res, ok, _ := tv.GetResult("t1"); !ok || string(res) != "result-1" {
		t.Fatalf("GetResult(t1) = %q, %v", res, ok)
	}
	if got := tv.ScanTaskIDs("s1"); fmt.Sprint(got) != "[t1 t2 t3]" {
		t.Fatalf("ScanTaskIDs = %v", got)
	}
}

func TestFSM_EnqueueAllOrNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, enqueueCmd("kprod", "t1"))
	before, _ := b.f.ExportState()
	cases := []struct {
		name string
		cmd  *pb.Command
		want error
	}{
		{"duplicate existing", enqueueCmd("kprod", "t2", "t1"), distributed.ErrTaskAlreadyExists},
		{"duplicate in batch", enqueueCmd("kprod", "t2", "t2"), distributed.ErrTaskAlreadyExists},
		{"invalid id last", enqueueCmd("kprod", "t2", "bad id"), distributed.ErrInvalidTask},
		{"worker key", enqueueCmd("kw1", "t2"), ErrPermissionDenied},
		{"foreign key", enqueueCmd("kother", "t2"), ErrPermissionDenied},
	}
	for _, tc := range cases {
		r := b.apply(tc.cmd)
		if !errors.Is(r.Err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, r.Err, tc.want)
		}
	}
	after, _ := b.f.ExportState()
	if !bytes.Equal(before, after) {
		t.Fatal("a rejected enqueue changed the state")
	}
}

func TestFSM_WorkerKeyBinding(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, enqueueCmd("kprod", "t1"))
	if r := b.apply(acquireCmd("kw2", "w1", 1)); !errors.Is(r.Err, ErrPermissionDenied) {
		t.Fatalf("acquire by another worker key = %v, want permission denied", r.Err)
	}
	if r := b.apply(registerCmd("kw2", "w1")); !errors.Is(r.Err, ErrPermissionDenied) {
		t.Fatalf("re-register by another key = %v, want permission denied", r.Err)
	}
	acq := valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", 1)))
	if r := b.apply(completeCmd("kw2", acq[0].Lease, nil)); !errors.Is(r.Err, ErrPermissionDenied) {
		t.Fatalf("complete by another worker key = %v, want permission denied", r.Err)
	}
	b.must(t, completeCmd("kadmin", acq[0].Lease, nil))
}

func TestFSM_CompleteResultPrecheck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "small",
		ResultLimits: &pb.ResultLimits{MaxResults: 1, MaxResultBytes: 4, MaxTotalBytes: 4, MaxAggregateItems: 4, MaxAggregateBytes: 4}}}})
	b.must(t, &pb.Command{Tenant: "small", Op: registerCmd("", "w").Op})
	b.must(t, &pb.Command{Tenant: "small", Op: enqueueCmd("", "a", "b").Op})
	acq := valueOf[[]Acquired](t, b.must(t, &pb.Command{Tenant: "small", Op: acquireCmd("", "w", 2).Op}))
	before, _ := b.f.ExportState()
	r := b.apply(&pb.Command{Tenant: "small", Op: completeCmd("", acq[0].Lease, []byte("12345")).Op})
	if !errors.Is(r.Err, distributed.ErrResultTooLarge) {
		t.Fatalf("oversize result = %v, want ErrResultTooLarge", r.Err)
	}
	after, _ := b.f.ExportState()
	if !bytes.Equal(before, after) {
		t.Fatal("rejected completion changed the state")
	}
	b.must(t, &pb.Command{Tenant: "small", Op: completeCmd("", acq[0].Lease, []byte("1234")).Op})
	if r := b.apply(&pb.Command{Tenant: "small", Op: completeCmd("", acq[1].Lease, []byte("1")).Op}); !errors.Is(r.Err, distributed.ErrResultCapacityReached) {
		t.Fatalf("second result = %v, want ErrResultCapacityReached", r.Err)
	}
	tv, _ := b.f.Tenant("small")
	if task, _, _ := tv.GetTask("b"); task.Status() != distributed.TaskRunning {
		t.Fatalf("task b status = %v, want running (nothing changed)", task.Status())
	}
}

func TestFSM_TimeNeverRegresses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, &pb.Command{NowSecs: 500, Op: registerCmd("", "w").Op})
	// A command stamped earlier (e.g. by a new leader with a slow clock)
	// runs at the last applied time instead of failing.
	r := b.must(t, &pb.Command{NowSecs: 400, Op: enqueueCmd("", "t").Op})
	if got := valueOf[[]distributed.ScanTask](t, r)[0].CreatedAt(); got != 500 {
		t.Fatalf("CreatedAt = %d, want 500", got)
	}
}

func TestFSM_SnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, enqueueCmd("kprod", "t1", "t2"))
	acq := valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", 1)))
	b.must(t, completeCmd("kw1", acq[0].Lease, []byte("r")))
	st, err := b.f.ExportState()
	if err != nil {
		t.Fatal(err)
	}
	g := New(Options{})
	if err := g.RestoreState(st); err != nil {
		t.Fatal(err)
	}
	st2, _ := g.ExportState()
	if !bytes.Equal(st, st2) {
		t.Fatal("restored state exports differently")
	}
	if o, _ := (TenantView{f: g, t: g.tenants["acme"]}).WorkerOwner("w1"); o != "kw1" {
		t.Fatalf("owner after restore = %q", o)
	}
	if err := g.RestoreState(st[:len(st)/2]); err == nil {
		t.Fatal("RestoreState(truncated) = nil")
	}
	if err := g.RestoreState([]byte("garbage")); err == nil {
		t.Fatal("RestoreState(garbage) = nil")
	}
	st3, _ := g.ExportState()
	if !bytes.Equal(st, st3) {
		t.Fatal("failed restore changed the state")
	}
}

func TestFSM_Batch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := b.f.ApplyCommand(&pb.Command{Version: 1, NowSecs: 200, Op: &pb.Command_Batch{Batch: &pb.Batch{Commands: []*pb.Command{
		{Version: 1, Tenant: "acme", Op: registerCmd("", "w").Op},
		{Version: 1, Tenant: "nope", Op: registerCmd("", "w").Op},
		{Version: 1, Tenant: "acme", Op: enqueueCmd("", "t").Op},
	}}}}).([]Response)
	if len(out) != 3 || out[0].Err != nil || !errors.Is(out[1].Err, ErrUnknownTenant) || out[2].Err != nil {
		t.Fatalf("batch responses = %+v", out)
	}
	if out[2].Revision != 2 {
		t.Fatalf("revision after batch = %d, want 2", out[2].Revision)
	}
}
