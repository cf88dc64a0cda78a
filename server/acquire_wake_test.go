// Acquire long-polls and the node's Acquirers queue (issue 15): one new
// task wakes one waiting Acquire, not all of them; a task that the woken
// worker cannot lease (tags) still reaches the waiter that can; a wake-up
// never leaves a task queued while a suitable Acquire waits. Waits are on
// events (waitUntil); each Acquire's own wait_secs only bounds a failure.
package server

import (
	"context"
	"strconv"
	"sync"
	"testing"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/raftfsm"
)

// pollAll starts one long-polling Acquire (max 1 task, 30 s) per worker
// ID and returns their answers once all have answered.
func pollAll(c clients, ids []string) (wait func() map[string]*pb.AcquireResponse) {
	var mu sync.Mutex
	got := map[string]*pb.AcquireResponse{}
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			r, err := c.worker.Acquire(context.Background(), req(&pb.AcquireRequest{WorkerId: id, MaxTasks: 1, WaitSecs: 30}))
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				got[id] = r.Msg
			}
		})
	}
	return func() map[string]*pb.AcquireResponse { wg.Wait(); return got }
}

func TestServer_AcquireWakesOnePerTask(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	w := b.clients(b.createKey(t, "", "worker"))
	p := b.clients(b.createKey(t, "", "producer"))
	var ids []string
	for i := range 4 {
		id := "w" + strconv.Itoa(i)
		ids = append(ids, id)
		if _, err := w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: id, Capacity: 1})); err != nil {
			t.Fatal(err)
		}
	}
	wait := pollAll(w, ids)
	waitUntil(t, "4 Acquires to wait", func() bool { return b.api.LongPollsWaiting() == 4 })
	q := b.node.Acquirers()
	before := q.Woken()
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s", "t1"))); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "one Acquire to answer", func() bool { return b.api.LongPollsWaiting() == 3 && q.Waiting(raftfsm.SystemTenant) == 3 })
	if n := q.Woken() - before; n != 1 {
		t.Fatalf("one enqueued task woke %d Acquires, want 1", n)
	}
	// Three more tasks wake the other three, each of which leases one.
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s", "t2", "t3", "t4"))); err != nil {
		t.Fatal(err)
	}
	got := wait()
	leased := map[string]bool{}
	for id, r := range got {
		if len(r.GetTasks()) != 1 {
			t.Fatalf("Acquire of %s = %v, want one task", id, r)
		}
		leased[r.GetTasks()[0].GetTaskId()] = true
	}
	if len(got) != 4 || len(leased) != 4 {
		t.Fatalf("answers %v, tasks leased %v: want 4 distinct", got, leased)
	}
	if n := q.Woken() - before; n != 4 {
		t.Fatalf("four tasks woke %d Acquires, want 4", n)
	}
}

func TestServer_AcquireWakeReachesTaggedWorker(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	w := b.clients(b.createKey(t, "", "worker"))
	p := b.clients(b.createKey(t, "", "producer"))
	// plain registers (and waits) first, so the one wake-up goes to it.
	for _, r := range []*pb.RegisterWorkerRequest{{WorkerId: "plain", Capacity: 1}, {WorkerId: "gpu", Capacity: 1, Tags: []string{"gpu"}}} {
		if _, err := w.worker.RegisterWorker(ctx, req(r)); err != nil {
			t.Fatal(err)
		}
	}
	waitPlain := pollAll(w, []string{"plain"})
	waitUntil(t, "plain to wait", func() bool { return b.api.LongPollsWaiting() == 1 })
	waitGPU := pollAll(w, []string{"gpu"})
	waitUntil(t, "gpu to wait", func() bool { return b.api.LongPollsWaiting() == 2 })
	er := enqueueReq("s", "t1")
	er.Tasks[0].RequiredTags = []string{"gpu"}
	if _, err := p.producer.Enqueue(ctx, req(er)); err != nil {
		t.Fatal(err)
	}
	got := waitGPU()["gpu"]
	if len(got.GetTasks()) != 1 || got.GetTasks()[0].GetTaskId() != "t1" {
		t.Fatalf("gpu's Acquire = %v, want t1 (the plain worker's wake-up must reach it)", got)
	}
	// plain is still waiting (it could not take t1); a plain task wakes it.
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s", "t2"))); err != nil {
		t.Fatal(err)
	}
	if r := waitPlain()["plain"]; len(r.GetTasks()) != 1 || r.GetTasks()[0].GetTaskId() != "t2" {
		t.Fatalf("plain's Acquire = %v, want t2", r)
	}
}

// TestServer_AcquireEmptyQueueProposesNothing: an Acquire that finds no
// leasable task, at once or after its long-poll, appends no log entry;
// one that leases does.
func TestServer_AcquireEmptyQueueProposesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	w := b.clients(b.createKey(t, "", "worker"))
	p := b.clients(b.createKey(t, "", "producer"))
	if _, err := w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 4})); err != nil {
		t.Fatal(err)
	}
	before := b.node.Reads().AppliedIndex()
	for _, wait := range []uint32{0, 1} {
		r, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", WaitSecs: wait}))
		if err != nil || len(r.Msg.GetTasks()) != 0 {
			t.Fatalf("Acquire(wait %d) on an empty queue = %v, %v", wait, r, err)
		}
	}
	if after := b.node.Reads().AppliedIndex(); after != before {
		t.Fatalf("empty Acquires moved the applied index %d → %d", before, after)
	}
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s", "t1"))); err != nil {
		t.Fatal(err)
	}
	enqueued := b.node.Reads().AppliedIndex()
	if r, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1"})); err != nil || len(r.Msg.GetTasks()) != 1 {
		t.Fatalf("Acquire with a queued task = %v, %v", r, err)
	}
	if got := b.node.Reads().AppliedIndex(); got != enqueued+1 {
		t.Fatalf("a lease appended %d entries, want 1", got-enqueued)
	}
}

// TestServer_CompletionWakesOnlyWhenLeasable: a completion that frees the
// room a queued task needs (its scan's max_in_flight) wakes one waiting
// Acquire, which leases it; a completion that leaves no leasable task
// wakes none (with 1 024 idle workers each completion woke one for
// nothing).
func TestServer_CompletionWakesOnlyWhenLeasable(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	w := b.clients(b.createKey(t, "", "worker"))
	p := b.clients(b.createKey(t, "", "producer"))
	for _, id := range []string{"busy", "idle"} {
		if _, err := w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: id, Capacity: 4})); err != nil {
			t.Fatal(err)
		}
	}
	enqueue := func(id string) {
		t.Helper()
		if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s", id))); err != nil {
			t.Fatal(err)
		}
	}
	complete := func(token []byte) { // starts the leased task, then completes it
		t.Helper()
		if _, err := w.worker.Start(ctx, req(&pb.StartRequest{LeaseToken: token})); err != nil {
			t.Fatal(err)
		}
		if _, err := w.worker.Complete(ctx, req(&pb.CompleteRequest{LeaseToken: token})); err != nil {
			t.Fatal(err)
		}
	}
	leased := func(r *pb.AcquireResponse, want string) []byte {
		t.Helper()
		if len(r.GetTasks()) != 1 || r.GetTasks()[0].GetTaskId() != want {
			t.Fatalf("Acquire = %v, want %s", r, want)
		}
		return r.GetTasks()[0].GetLeaseToken()
	}
	enqueue("t1")
	r1, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "busy", MaxTasks: 1}))
	if err != nil {
		t.Fatal(err)
	}
	t1 := leased(r1.Msg, "t1")
	one := uint32(1)
	if _, err := p.producer.UpdateScan(ctx, req(&pb.UpdateScanRequest{ScanId: "s", MaxInFlight: &one})); err != nil {
		t.Fatal(err)
	}
	enqueue("t2") // not leasable while t1 holds the scan's one slot
	q := b.node.Acquirers()
	waitIdle := pollAll(w, []string{"idle"})
	waitUntil(t, "idle to wait", func() bool { return b.api.LongPollsWaiting() == 1 && q.Waiting(raftfsm.SystemTenant) == 1 })
	before := q.Woken()
	complete(t1)
	t2 := leased(waitIdle()["idle"], "t2")
	if n := q.Woken() - before; n != 1 {
		t.Fatalf("a completion that made a task leasable woke %d Acquires, want 1", n)
	}
	waitBusy := pollAll(w, []string{"busy"})
	waitUntil(t, "busy to wait", func() bool { return b.api.LongPollsWaiting() == 1 && q.Waiting(raftfsm.SystemTenant) == 1 })
	before = q.Woken()
	complete(t2)
	if n, waiting := q.Woken()-before, q.Waiting(raftfsm.SystemTenant); n != 0 || waiting != 1 {
		t.Fatalf("a completion with no leasable task woke %d Acquires (%d still waiting), want 0 (1)", n, waiting)
	}
	enqueue("t3")
	leased(waitBusy()["busy"], "t3")
}
