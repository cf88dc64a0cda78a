// Tests for the tenant command table. Goal: every operation of
// pb.Command's op oneof is either a cluster command (applyOneAt) or has
// exactly one tenantOps entry, each entry declares the authorization this
// test pins, and the FSM enforces it: a principal below the need gets
// permission_denied and the state (ExportState) is unchanged, a principal
// that meets it is not refused for permission. Method: enumerate the oneof
// through protoreflect; apply one valid command per operation as every kind
// of principal on a fresh FSM.
package raftfsm

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"testing"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// clusterOps are the operations applyOneAt dispatches itself: they act on
// the cluster, not inside one tenant.
var clusterOps = map[reflect.Type]bool{
	reflect.TypeFor[*pb.Command_Batch]():             true,
	reflect.TypeFor[*pb.Command_InitCluster]():       true,
	reflect.TypeFor[*pb.Command_CreateTenant]():      true,
	reflect.TypeFor[*pb.Command_CreateKey]():         true,
	reflect.TypeFor[*pb.Command_RevokeKey]():         true,
	reflect.TypeFor[*pb.Command_RotateKey]():         true,
	reflect.TypeFor[*pb.Command_SetNodeInfo]():       true,
	reflect.TypeFor[*pb.Command_SetClusterVersion](): true,
	reflect.TypeFor[*pb.Command_RecordBackup]():      true,
	reflect.TypeFor[*pb.Command_UpdateTenant]():      true,
}

// opTypes returns the wrapper type of every field of pb.Command's op oneof.
func opTypes(t *testing.T) []reflect.Type {
	t.Helper()
	m := (&pb.Command{}).ProtoReflect()
	od := m.Descriptor().Oneofs().ByName("op")
	if od == nil {
		t.Fatal("pb.Command has no op oneof")
	}
	var out []reflect.Type
	for i := range od.Fields().Len() {
		fd := od.Fields().Get(i)
		c := &pb.Command{}
		c.ProtoReflect().Set(fd, c.ProtoReflect().NewField(fd))
		out = append(out, reflect.TypeOf(c.GetOp()))
	}
	return out
}

// TestTenantOps_EveryTenantCommand: each op of the oneof is a cluster op or
// has a complete tenantOps entry, never both; the table has no entry for a
// type outside the oneof.
func TestTenantOps_EveryTenantCommand(t *testing.T) {
	types := opTypes(t)
	inOneof := map[reflect.Type]bool{}
	for _, ty := range types {
		inOneof[ty] = true
		op, tenant := tenantOps[ty]
		switch {
		case clusterOps[ty] && tenant:
			t.Errorf("%v is a cluster op and has a tenantOps entry", ty)
		case !clusterOps[ty] && !tenant:
			t.Errorf("%v has no tenantOps entry", ty)
		case tenant && (op.apply == nil || op.need < needAdmin || op.need > needBind):
			t.Errorf("tenantOps[%v] = need %v, apply set %v: incomplete", ty, op.need, op.apply != nil)
		}
	}
	for ty := range tenantOps {
		if !inOneof[ty] {
			t.Errorf("tenantOps has %v, which is not in pb.Command's op oneof", ty)
		}
	}
	if len(types) != len(tenantOps)+len(clusterOps) {
		t.Errorf("oneof has %d ops, tenantOps %d + cluster %d", len(types), len(tenantOps), len(clusterOps))
	}
}

// roleFixture is setup's FSM with worker w1 registered by worker key kw1,
// tasks t1..t3 enqueued and t1 leased (started) to w1.
func roleFixture(t *testing.T) (*testBundle, distributed.TaskLease) {
	t.Helper()
	b := setup(t)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, enqueueCmd("kprod", "t1", "t2", "t3"))
	acq := valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", 1)))
	return b, acq[0].Lease
}

// roleCase is one tenant operation with a command that passes its target
// decoding and acts for worker w1.
type roleCase struct {
	op   reflect.Type
	need need // the authorization the table must declare
	cmd  func(l distributed.TaskLease) *pb.Command
}

func roleCases() []roleCase {
	lease := func(l distributed.TaskLease) []byte { b, _ := l.MarshalBinary(); return b }
	own := func(l distributed.TaskLease) []byte {
		b, _ := distributed.OwnershipFromLease(l).MarshalBinary()
		return b
	}
	spec := &pb.WorkerSpec{WorkerId: "w1", Capacity: 8}
	c := func(op any) func(distributed.TaskLease) *pb.Command {
		return func(distributed.TaskLease) *pb.Command { return cmdOf(op) }
	}
	return []roleCase{
		{reflect.TypeFor[*pb.Command_Enqueue](), needProducer, func(distributed.TaskLease) *pb.Command { return enqueueCmd("", "t9") }},
		{reflect.TypeFor[*pb.Command_RegisterWorker](), needBind, c(&pb.Command_RegisterWorker{RegisterWorker: &pb.RegisterWorker{Spec: spec}})},
		{reflect.TypeFor[*pb.Command_ReactivateWorker](), needBind, c(&pb.Command_ReactivateWorker{ReactivateWorker: &pb.ReactivateWorker{Spec: spec, OfflineGeneration: 1}})},
		{reflect.TypeFor[*pb.Command_UpdateWorker](), needWorker, c(&pb.Command_UpdateWorker{UpdateWorker: &pb.UpdateWorker{WorkerId: "w1", Generation: 1}})},
		{reflect.TypeFor[*pb.Command_DeregisterWorker](), needWorker, c(&pb.Command_DeregisterWorker{DeregisterWorker: &pb.DeregisterWorker{WorkerId: "w1", Generation: 1}})},
		{reflect.TypeFor[*pb.Command_PruneDeadWorkers](), needAdmin, c(&pb.Command_PruneDeadWorkers{PruneDeadWorkers: &pb.PruneDeadWorkers{}})},
		{reflect.TypeFor[*pb.Command_RecoverExpiredLeases](), needAdmin, c(&pb.Command_RecoverExpiredLeases{RecoverExpiredLeases: &pb.RecoverExpiredLeases{}})},
		{reflect.TypeFor[*pb.Command_ExpireOldTasks](), needAdmin, c(&pb.Command_ExpireOldTasks{ExpireOldTasks: &pb.ExpireOldTasks{MaxAgeSecs: 1}})},
		{reflect.TypeFor[*pb.Command_AssignNextAvailable](), needAdmin, c(&pb.Command_AssignNextAvailable{AssignNextAvailable: &pb.AssignNextAvailable{LeaseTtlSecs: 30}})},
		{reflect.TypeFor[*pb.Command_AssignNext](), needWorker, c(&pb.Command_AssignNext{AssignNext: &pb.AssignNext{WorkerId: "w1", LeaseTtlSecs: 30}})},
		{reflect.TypeFor[*pb.Command_AssignTask](), needAdmin, c(&pb.Command_AssignTask{AssignTask: &pb.AssignTask{TaskId: "t2", WorkerId: "w1", LeaseTtlSecs: 30}})},
		{reflect.TypeFor[*pb.Command_AcquireTasks](), needWorker, func(distributed.TaskLease) *pb.Command { return acquireCmd("", "w1", 1) }},
		{reflect.TypeFor[*pb.Command_StartTask](), needWorker, func(l distributed.TaskLease) *pb.Command {
			return cmdOf(&pb.Command_StartTask{StartTask: &pb.StartTask{Lease: lease(l)}})
		}},
		{reflect.TypeFor[*pb.Command_CompleteTask](), needWorker, func(l distributed.TaskLease) *pb.Command { return completeCmd("", l, []byte("r")) }},
		{reflect.TypeFor[*pb.Command_FailTask](), needWorker, func(l distributed.TaskLease) *pb.Command {
			return cmdOf(&pb.Command_FailTask{FailTask: &pb.FailTask{Lease: lease(l)}})
		}},
		{reflect.TypeFor[*pb.Command_RenewLease](), needWorker, func(l distributed.TaskLease) *pb.Command { return renewCmd("", l) }},
		{reflect.TypeFor[*pb.Command_CancelTask](), needProducer, func(l distributed.TaskLease) *pb.Command {
			return cmdOf(&pb.Command_CancelTask{CancelTask: &pb.CancelTask{Ownership: own(l)}})
		}},
		{reflect.TypeFor[*pb.Command_CancelTaskById](), needProducer, func(distributed.TaskLease) *pb.Command { return cancelByIDCmd("", "t1") }},
		{reflect.TypeFor[*pb.Command_RerunTasks](), needProducer, c(&pb.Command_RerunTasks{RerunTasks: &pb.RerunTasks{TaskIds: []string{"t2"}}})},
		{reflect.TypeFor[*pb.Command_PurgeTasks](), needProducer, c(&pb.Command_PurgeTasks{PurgeTasks: &pb.PurgeTasks{}})},
	}
}

// cmdOf wraps one op wrapper (a *pb.Command_X) in a command.
func cmdOf(op any) *pb.Command {
	c := &pb.Command{}
	reflect.ValueOf(c).Elem().FieldByName("Op").Set(reflect.ValueOf(op))
	return c
}

// allowed lists, per need, the principals of setup/roleFixture that meet
// it for worker w1 (registered by kw1). "" is the node itself; "nobody"
// holds no key; kother is an admin of another tenant.
var allowed = map[need][]string{
	needAdmin:    {"", "kadmin"},
	needProducer: {"", "kadmin", "kprod"},
	needWorker:   {"", "kadmin", "kw1"},
	needBind:     {"", "kadmin", "kw1"},
}

// TestFSM_TenantCommandRoles applies every tenant operation as every kind
// of principal: the table declares the pinned need, principals that do not
// meet it are refused with permission_denied and change nothing, the
// others are not refused for permission.
func TestFSM_TenantCommandRoles(t *testing.T) {
	principals := []string{"", "kadmin", "kprod", "kw1", "kw2", "kother", "nobody"}
	cases := roleCases()
	if len(cases) != len(tenantOps) {
		t.Fatalf("%d role cases for %d tenantOps entries", len(cases), len(tenantOps))
	}
	for _, rc := range cases {
		t.Run(rc.op.Elem().Name(), func(t *testing.T) {
			if got := tenantOps[rc.op].need; got != rc.need {
				t.Fatalf("tenantOps[%v].need = %v, want %v", rc.op, got, rc.need)
			}
			for _, p := range principals {
				b, l := roleFixture(t)
				cmd := rc.cmd(l)
				cmd.Principal = p
				before, err := b.f.ExportState()
				if err != nil {
					t.Fatal(err)
				}
				r := b.apply(cmd)
				denied := errors.Is(r.Err, ErrPermissionDenied)
				if want := !slices.Contains(allowed[rc.need], p); denied != want {
					t.Errorf("principal %q: err = %v, want denied %v", p, r.Err, want)
				}
				after, _ := b.f.ExportState()
				if denied && !bytes.Equal(before, after) {
					t.Errorf("principal %q: refused command changed the state", p)
				}
			}
		})
	}
}

// TestFSM_BindUnboundWorker: a worker key may register an unbound worker
// ID, and registering it binds it, so another worker key is refused after.
func TestFSM_BindUnboundWorker(t *testing.T) {
	b, _ := roleFixture(t)
	b.must(t, registerCmd("kw2", "w2"))
	b.mustReject(t, registerCmd("kw1", "w2"), ErrPermissionDenied)
	b.mustReject(t, &pb.Command{Principal: "kw1", Op: &pb.Command_AssignNext{AssignNext: &pb.AssignNext{WorkerId: "w2", LeaseTtlSecs: 30}}}, ErrPermissionDenied)
}
