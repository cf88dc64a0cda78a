package raftfsm

import (
	"bytes"
	"errors"
	"testing"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wire"
)

func cancelByIDCmd(principal, id string) *pb.Command {
	return &pb.Command{Principal: principal, Op: &pb.Command_CancelTaskById{CancelTaskById: &pb.CancelTaskByID{TaskId: id}}}
}

func renewCmd(principal string, l distributed.TaskLease) *pb.Command {
	lb, _ := l.MarshalBinary()
	return &pb.Command{Principal: principal, Op: &pb.Command_RenewLease{RenewLease: &pb.RenewLease{Lease: lb, LeaseTtlSecs: 30}}}
}

func (b *testBundle) status(t *testing.T, tenant, id string) distributed.ScanTask {
	t.Helper()
	tv, _ := b.f.Tenant(tenant)
	st, ok, err := tv.GetTask(id)
	if err != nil || !ok {
		t.Fatalf("GetTask(%s) = %v, %v", id, ok, err)
	}
	return st
}

// mustUnchanged applies cmd, expects an error of kind want and no change to
// the FSM state.
func (b *testBundle) mustReject(t *testing.T, cmd *pb.Command, want error) {
	t.Helper()
	before, _ := b.f.ExportState()
	r := b.apply(cmd)
	if !errors.Is(r.Err, want) {
		t.Fatalf("apply %T = %v, want %v", cmd.GetOp(), r.Err, want)
	}
	after, _ := b.f.ExportState()
	if !bytes.Equal(before, after) {
		t.Fatalf("rejected %T changed the state", cmd.GetOp())
	}
	mustPublished(t, b.f)
}

// TestFSM_CancelByID cancels queued, leased and running tasks by ID with
// whatever ownership they hold at apply time, recovers an expired lease by
// the retry rule in the same command before cancelling, and rejects
// terminal tasks, wrong roles, other tenants and stale revisions without
// changing anything.
func TestFSM_CancelByID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, enqueueCmd("kprod", "q1", "l1", "r1", "x1", "x2", "c1"))

	// Queued.
	v := valueOf[CancelByIDValue](t, b.must(t, cancelByIDCmd("kprod", "q1")))
	if v.Outcome.Kind != distributed.Cancelled || v.PreviousStatus != distributed.TaskQueued {
		t.Fatalf("cancel queued = %+v", v)
	}
	// Leased (not started) and running.
	acq := valueOf[[]Acquired](t, b.must(t, &pb.Command{Principal: "kw1", Op: &pb.Command_AcquireTasks{AcquireTasks: &pb.AcquireTasks{WorkerId: "w1", LeaseTtlSecs: 30, MaxTasks: 1}}}))
	if len(acq) != 1 || acq[0].Task.TaskID() != "l1" || acq[0].Started {
		t.Fatalf("acquire = %+v", acq)
	}
	v = valueOf[CancelByIDValue](t, b.must(t, cancelByIDCmd("kadmin", "l1")))
	if v.Outcome.Kind != distributed.Cancelled || v.PreviousStatus != distributed.TaskLeased {
		t.Fatalf("cancel leased = %+v", v)
	}
	running := valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", 1)))
	if running[0].Task.TaskID() != "r1" {
		t.Fatalf("acquire = %+v", running)
	}
	v = valueOf[CancelByIDValue](t, b.must(t, cancelByIDCmd("kprod", "r1")))
	if v.Outcome.Kind != distributed.Cancelled || v.PreviousStatus != distributed.TaskRunning {
		t.Fatalf("cancel running = %+v", v)
	}
	// The worker learns it on its next renewal, and cannot complete.
	b.mustReject(t, renewCmd("kw1", running[0].Lease), distributed.ErrStaleOwnership)
	b.mustReject(t, completeCmd("kw1", running[0].Lease, []byte("late")), distributed.ErrStaleOwnership)
	if st := b.status(t, "acme", "r1"); st.Status() != distributed.TaskCancelled {
		t.Fatalf("r1 is %s", st.Status())
	}
	tv, _ := b.f.Tenant("acme")
	if w, _, _ := tv.GetWorker("w1"); w.CurrentTasks() != 0 {
		t.Fatalf("w1 still holds %d tasks", w.CurrentTasks())
	}

	// Expired leases: x1 and x2 run, time passes their expiry; cancelling
	// x1 cancels it with its expired lease in one core command, and leaves
	// x2 to the recovery ticker.
	exp := valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", 2)))
	if len(exp) != 2 {
		t.Fatalf("acquire = %+v", exp)
	}
	b.now += 31
	v = valueOf[CancelByIDValue](t, b.must(t, cancelByIDCmd("kprod", "x1")))
	if v.Outcome.Kind != distributed.Cancelled || v.PreviousStatus != distributed.TaskRunning {
		t.Fatalf("cancel expired = %+v", v)
	}
	if st := b.status(t, "acme", "x1"); st.Status() != distributed.TaskCancelled || st.RetryCount() != 0 {
		t.Fatalf("x1 is %s after %d retries", st.Status(), st.RetryCount())
	}
	if st := b.status(t, "acme", "x2"); st.Status() != distributed.TaskRunning {
		t.Fatalf("x2 is %s", st.Status())
	}
	b.mustReject(t, renewCmd("kw1", exp[0].Lease), distributed.ErrStaleOwnership)

	// Already cancelled: idempotent, no change.
	tv, _ = b.f.Tenant("acme")
	rev := tv.Counters().Revision
	v = valueOf[CancelByIDValue](t, b.must(t, cancelByIDCmd("kprod", "x1")))
	if v.Outcome.Kind != distributed.AlreadyCancelled || v.PreviousStatus != distributed.TaskCancelled || tv.Counters().Revision != rev {
		t.Fatalf("cancel cancelled = %+v", v)
	}

	// Terminal (completed) task: invalid transition, nothing changes.
	c := valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", 1)))
	b.must(t, completeCmd("kw1", c[0].Lease, []byte("done")))
	b.mustReject(t, cancelByIDCmd("kprod", c[0].Task.TaskID()), distributed.ErrInvalidTransition)

	// Wrong role, other tenant, unknown task, invalid ID, stale revision.
	b.mustReject(t, cancelByIDCmd("kw1", "x2"), ErrPermissionDenied)
	b.mustReject(t, cancelByIDCmd("kother", "x2"), ErrPermissionDenied)
	b.mustReject(t, cancelByIDCmd("kprod", "nope"), distributed.ErrTaskNotFound)
	b.mustReject(t, cancelByIDCmd("kprod", ""), distributed.ErrInvalidTask)
	stale := uint64(1)
	cmd := cancelByIDCmd("kprod", "x2")
	cmd.ExpectedRevision = &stale
	b.mustReject(t, cmd, distributed.ErrRevisionConflict)
	cmd = cancelByIDCmd("kprod", "x1")
	cmd.ExpectedRevision = &stale
	b.mustReject(t, cmd, distributed.ErrRevisionConflict)
}

// TestFSM_CancelByIDExpiredNoRetries: a task whose lease expired with no
// retries left is cancelled by a producer's cancel (not failed by the retry
// rule first): the producer asked for cancellation, and the worker's lease is
// stale from then on.
func TestFSM_CancelByIDExpiredNoRetries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	lim := distributed.DefaultLimits()
	lim.MaxRetries = 0
	b.must(t, &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "strict", Limits: wire.LimitsToProto(lim)}}})
	b.must(t, &pb.Command{Tenant: "strict", Op: &pb.Command_RegisterWorker{RegisterWorker: &pb.RegisterWorker{Spec: &pb.WorkerSpec{WorkerId: "w1", Capacity: 8}}}})
	e := enqueueCmd("", "t1")
	e.Tenant = "strict"
	b.must(t, e)
	a := acquireCmd("", "w1", 1)
	a.Tenant = "strict"
	b.must(t, a)
	b.now += 31
	c := cancelByIDCmd("", "t1")
	c.Tenant = "strict"
	v := valueOf[CancelByIDValue](t, b.must(t, c))
	if v.Outcome.Kind != distributed.Cancelled || v.PreviousStatus != distributed.TaskRunning {
		t.Fatalf("cancel = %+v", v)
	}
	if st := b.status(t, "strict", "t1"); st.Status() != distributed.TaskCancelled || st.RetryCount() != 0 {
		t.Fatalf("t1 is %s after %d retries", st.Status(), st.RetryCount())
	}
}
