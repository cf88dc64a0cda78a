package server

import (
	"testing"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// TestServer_CancelByTaskID cancels queued, leased and running tasks by ID
// with a producer key (no token), checks that the running task's worker
// learns it on its next renewal (stale_ownership) and cannot complete, and
// that terminal tasks, both-or-neither inputs, worker keys and other
// tenants are rejected without changing anything.
func TestServer_CancelByTaskID(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.createTenant(t, "other", nil, nil)
	w := b.clients(b.createKey(t, "", "worker"))
	p := b.clients(b.createKey(t, "", "producer"))
	po := b.clients(b.createKey(t, "other", "producer"))
	if _, err := w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 8})); err != nil {
		t.Fatal(err)
	}
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s", "t1", "t2", "t3", "t4"))); err != nil {
		t.Fatal(err)
	}
	leased, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", MaxTasks: 1}))
	if err != nil || len(leased.Msg.GetTasks()) != 1 {
		t.Fatalf("acquire = %v, %v", leased, err)
	}
	running, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", MaxTasks: 2, Start: true}))
	if err != nil || len(running.Msg.GetTasks()) != 2 {
		t.Fatalf("acquire = %v, %v", running, err)
	}
	// t1 leased, t2 and t3 running, t4 queued.
	for _, c := range []struct{ id, prev string }{{"t4", "queued"}, {"t1", "leased"}, {"t2", "running"}} {
		res, err := p.producer.Cancel(ctx, req(&pb.CancelRequest{TaskId: c.id}))
		if err != nil || res.Msg.GetAlreadyCancelled() || res.Msg.GetPreviousStatus() != c.prev {
			t.Fatalf("cancel %s = %v, %v", c.id, res, err)
		}
		g, _ := p.producer.GetTask(ctx, req(&pb.GetTaskRequest{TaskId: c.id}))
		if g.Msg.GetTask().GetStatus() != "cancelled" {
			t.Fatalf("%s is %s", c.id, g.Msg.GetTask().GetStatus())
		}
	}
	// The worker of t2 learns it on its next renewal and cannot complete.
	t2 := running.Msg.GetTasks()[0]
	_, err = w.worker.RenewLease(ctx, req(&pb.RenewLeaseRequest{LeaseToken: t2.GetLeaseToken()}))
	mustCode(t, err, connect.CodeFailedPrecondition, "stale_ownership")
	_, err = w.worker.Complete(ctx, req(&pb.CompleteRequest{LeaseToken: t2.GetLeaseToken(), Result: []byte("late")}))
	mustCode(t, err, connect.CodeFailedPrecondition, "stale_ownership")
	// Again: already cancelled (a retry after a lost reply is harmless).
	res, err := p.producer.Cancel(ctx, req(&pb.CancelRequest{TaskId: "t2"}))
	if err != nil || !res.Msg.GetAlreadyCancelled() {
		t.Fatalf("second cancel = %v, %v", res, err)
	}
	// A completed task cannot be cancelled.
	t3 := running.Msg.GetTasks()[1]
	if _, err := w.worker.Complete(ctx, req(&pb.CompleteRequest{LeaseToken: t3.GetLeaseToken(), Result: []byte("r")})); err != nil {
		t.Fatal(err)
	}
	before := b.state(t)
	_, err = p.producer.Cancel(ctx, req(&pb.CancelRequest{TaskId: t3.GetTaskId()}))
	mustCode(t, err, connect.CodeFailedPrecondition, "invalid_transition")
	// Other tenants see no such task; workers may not cancel; exactly one
	// of task_id and ownership_token.
	_, err = po.producer.Cancel(ctx, req(&pb.CancelRequest{TaskId: "t1"}))
	mustCode(t, err, connect.CodeNotFound, "task_not_found")
	_, err = w.producer.Cancel(ctx, req(&pb.CancelRequest{TaskId: "t1"}))
	mustCode(t, err, connect.CodePermissionDenied, KindPermissionDenied)
	_, err = p.producer.Cancel(ctx, req(&pb.CancelRequest{TaskId: "t1", OwnershipToken: []byte("x")}))
	mustCode(t, err, connect.CodeInvalidArgument, KindInvalidArgument)
	_, err = p.producer.Cancel(ctx, req(&pb.CancelRequest{TaskId: "bad id"}))
	mustCode(t, err, connect.CodeInvalidArgument, "invalid_task")
	b.assertUnchanged(t, before, "rejected cancels")
}
