// Leases granted with the enqueue (issue 15, low rates): an Enqueue that
// finds Acquire long-polls waiting proposes their AcquireTasks with its
// EnqueueTasks (Server.grantLeases), so the tasks are leased when the
// Enqueue call answers, and the waiting Acquire answers with them without
// proposing an entry of its own. Waits are on events (waitUntil).
package server

import (
	"testing"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/raftfsm"
)

// grantBundle registers worker w1 (capacity 4) and starts its long-poll
// Acquire (up to 4 tasks, not started), once it waits; poll starts the
// next one the same way.
func grantBundle(t *testing.T) (b *testBundle, p clients, acquired func() *pb.AcquireResponse, poll func() func() *pb.AcquireResponse) {
	t.Helper()
	b = setup(t, nil)
	w := b.clients(b.createKey(t, "", "worker"))
	p = b.clients(b.createKey(t, "", "producer"))
	if _, err := w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 4})); err != nil {
		t.Fatal(err)
	}
	poll = func() func() *pb.AcquireResponse {
		t.Helper()
		waiting := b.api.LongPollsWaiting()
		done := make(chan *pb.AcquireResponse, 1)
		go func() {
			r, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", MaxTasks: 4, WaitSecs: 30}))
			if err != nil {
				t.Error(err)
				done <- nil
				return
			}
			done <- r.Msg
		}()
		waitUntil(t, "the Acquire to wait", func() bool { return b.api.LongPollsWaiting() == waiting+1 })
		return func() *pb.AcquireResponse { return <-done }
	}
	return b, p, poll(), poll
}

// checkLeasedNow fails unless every one of ids is leased at once after
// the call that enqueued them answered, and the waiting Acquire answers
// with exactly them.
func checkLeasedNow(t *testing.T, p clients, acquired func() *pb.AcquireResponse, ids ...string) {
	t.Helper()
	for _, id := range ids {
		r, err := p.producer.GetTask(ctx, req(&pb.GetTaskRequest{TaskId: id}))
		if err != nil {
			t.Fatal(err)
		}
		if st := r.Msg.GetTask().GetStatus(); st != distributed.TaskLeased.String() {
			t.Fatalf("%s is %s when its Enqueue answered, want %s (leased in the enqueue's proposal)", id, st, distributed.TaskLeased)
		}
	}
	got := acquired()
	if len(got.GetTasks()) != len(ids) {
		t.Fatalf("the waiting Acquire answered %v, want %v", got, ids)
	}
	for i, lt := range got.GetTasks() {
		if lt.GetTaskId() != ids[i] || len(lt.GetLeaseToken()) == 0 {
			t.Fatalf("task %d = %v, want %s with a lease token", i, lt, ids[i])
		}
	}
}

func TestServer_EnqueueLeasesToWaitingAcquire(t *testing.T) {
	t.Parallel()
	b, p, acquired, _ := grantBundle(t)
	q := b.node.Acquirers()
	before, applied := q.Woken(), b.node.Reads().AppliedIndex()
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s", "t1", "t2", "t3"))); err != nil {
		t.Fatal(err)
	}
	checkLeasedNow(t, p, acquired, "t1", "t2", "t3")
	if n := q.Woken() - before; n != 1 {
		t.Fatalf("the enqueue woke %d Acquires, want 1 (its grant)", n)
	}
	// The enqueue and the lease go to the proposer as one group (one
	// entry); the woken Acquire's own proposal was a second entry.
	if n := b.node.Reads().AppliedIndex() - applied; n != 1 {
		t.Fatalf("enqueue and lease appended %d entries, want 1", n)
	}
}

func TestServer_EnqueueManyLeasesToWaitingAcquire(t *testing.T) {
	t.Parallel()
	_, p, acquired, _ := grantBundle(t)
	r, err := p.producer.EnqueueMany(ctx, req(&pb.EnqueueManyRequest{Requests: []*pb.EnqueueRequest{enqueueReq("s", "t1"), enqueueReq("s", "t2")}}))
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range r.Msg.GetResults() {
		if res.GetError() != nil {
			t.Fatalf("request %d: %v", i, res.GetError())
		}
	}
	checkLeasedNow(t, p, acquired, "t1", "t2")
}

// An Enqueue refused as a whole (a task ID taken) still answers the
// Acquire it claimed: its AcquireTasks finds nothing, and the Acquire
// waits on and leases the next task that comes.
func TestServer_RefusedEnqueueLeavesClaimedAcquireWaiting(t *testing.T) {
	t.Parallel()
	b, p, acquired, poll := grantBundle(t)
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s", "t1"))); err != nil {
		t.Fatal(err)
	}
	checkLeasedNow(t, p, acquired, "t1")
	acquired = poll()
	q := b.node.Acquirers()
	before := q.Woken()
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s", "t1"))); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("a second enqueue of t1 = %v, want task_already_exists", err)
	}
	if n := q.Woken() - before; n != 1 {
		t.Fatalf("the refused enqueue granted %d Acquires, want 1 (it claimed the waiting one)", n)
	}
	waitUntil(t, "the claimed Acquire to wait again", func() bool {
		return b.api.LongPollsWaiting() == 1 && q.Waiting(raftfsm.SystemTenant) == 1
	})
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s", "t2"))); err != nil {
		t.Fatal(err)
	}
	checkLeasedNow(t, p, acquired, "t2")
}

// An Acquire without wait_secs (a worker's carrying Acquire) that finds
// nothing answers at once without long-polling: it never counts as
// waiting (the wait on a timer of 0 parked the handler once per call).
func TestServer_AcquireWithoutWaitDoesNotLongPoll(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	w := b.clients(b.createKey(t, "", "worker"))
	if _, err := w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 1})); err != nil {
		t.Fatal(err)
	}
	changed := b.api.LongPollsChanged()
	r, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1"}))
	if err != nil || len(r.Msg.GetTasks()) != 0 {
		t.Fatalf("Acquire on an empty queue = %v, %v", r, err)
	}
	select {
	case <-changed:
		t.Fatal("an Acquire without wait long-polled")
	default:
	}
	if q := b.node.Acquirers(); q.Waiting(raftfsm.SystemTenant) != 0 {
		t.Fatalf("%d waiters left queued", q.Waiting(raftfsm.SystemTenant))
	}
}
