// Goal: the two calls that save round trips on the per-call path (issue
// 15) keep every request independent. EnqueueMany answers each of its
// requests exactly as that request's own Enqueue would (a bad one fails
// alone with its own code, kind and message; the others are committed),
// with one audit line per request; an Acquire carrying completions applies
// them first, each alone as CompleteMany does (a fenced or invalid item
// fails alone and changes nothing), and a completion it acknowledges is
// still there after the node restarts. Method: a real node behind the
// API; outcomes are compared with the single calls and with GetTask, and
// failed items with the exported state before and after.
package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/node"
)

func TestProducer_EnqueueManyIndependent(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := b.clients(b.createKey(t, "", "producer"))
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s", "held"))); err != nil {
		t.Fatal(err)
	}
	stale := uint64(1)
	staleReq := enqueueReq("s", "r1")
	staleReq.ExpectedRevision = &stale
	skip := enqueueReq("s", "held", "k1")
	skip.SkipExisting = true
	reqs := []*pb.EnqueueRequest{
		enqueueReq("s", "g1", "g2"),
		enqueueReq("s", "c1", "held"), // collision: all-or-nothing, c1 not stored
		enqueueReq("s", "bad id"),     // invalid task ID
		staleReq,                      // revision conflict
		{},                            // no tasks
		skip,                          // held is existing, k1 stored
		enqueueReq("s", "g3"),
		enqueueReq("s", "d1"), // applied in order: the first d1 is stored,
		enqueueReq("s", "d1"), // the second fails as a second Enqueue would
	}
	before := auditCounts(t, b.auditLog)[methodEnqueueMany]
	res, err := p.producer.EnqueueMany(ctx, req(&pb.EnqueueManyRequest{Requests: reqs}))
	if err != nil {
		t.Fatal(err)
	}
	out := res.Msg.GetResults()
	if len(out) != len(reqs) {
		t.Fatalf("%d results for %d requests", len(out), len(reqs))
	}
	for _, i := range []int{0, 5, 6, 7} {
		if out[i].GetError() != nil || out[i].GetResponse() == nil {
			t.Fatalf("request %d: %v, want a response", i, out[i])
		}
	}
	if ex := out[5].GetResponse().GetExisting(); len(ex) != 1 || ex[0] != 0 {
		t.Fatalf("skip_existing request: existing %v, want [0]", ex)
	}
	// Each failed request carries what its own Enqueue answers (the
	// conflict's actual revision aside: the state moved on since).
	if d := out[3].GetError(); d.GetKind() != "revision_conflict" || d.GetExpected() != 1 {
		t.Fatalf("stale request = %v", out[3])
	}
	for _, i := range []int{1, 2, 4, 8} {
		_, alone := p.producer.Enqueue(ctx, req(reqs[i]))
		code, kind := errKind(alone)
		got := out[i]
		var ce *connect.Error
		if !errors.As(alone, &ce) || connect.Code(got.GetCode()) != code || got.GetError().GetKind() != kind || got.GetMessage() != ce.Message() {
			t.Fatalf("request %d = %v; alone: %v (code %v, kind %q)", i, got, alone, code, kind)
		}
	}
	for id, want := range map[string]bool{"g1": true, "g2": true, "g3": true, "k1": true, "d1": true, "c1": false, "r1": false} {
		_, err := p.producer.GetTask(ctx, req(&pb.GetTaskRequest{TaskId: id}))
		if got := err == nil; got != want {
			t.Errorf("GetTask(%s) = %v, want stored %v", id, err, want)
		}
	}
	if got := auditCounts(t, b.auditLog)[methodEnqueueMany] - before; got != len(reqs) {
		t.Fatalf("%d audit lines for %d requests", got, len(reqs))
	}
}

func TestProducer_EnqueueManyRejectedWhole(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := b.clients(b.createKey(t, "", "producer"))
	w := b.clients(b.createKey(t, "", "worker"))
	st := b.state(t)
	_, err := p.producer.EnqueueMany(ctx, req(&pb.EnqueueManyRequest{}))
	mustCode(t, err, connect.CodeInvalidArgument, KindInvalidArgument)
	many := &pb.EnqueueManyRequest{}
	for range MaxEnqueueMany + 1 {
		many.Requests = append(many.Requests, enqueueReq("s", "x"))
	}
	_, err = p.producer.EnqueueMany(ctx, req(many))
	mustCode(t, err, connect.CodeInvalidArgument, KindInvalidArgument)
	_, err = w.producer.EnqueueMany(ctx, req(&pb.EnqueueManyRequest{Requests: []*pb.EnqueueRequest{enqueueReq("s", "x")}}))
	mustCode(t, err, connect.CodePermissionDenied, KindPermissionDenied)
	b.assertUnchanged(t, st, "a refused EnqueueMany")
}

// acquireOne enqueues id and leases it to worker w1 (registered here).
func acquireOne(t *testing.T, w, p clients, id string) *pb.LeasedTask {
	t.Helper()
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s", id))); err != nil {
		t.Fatal(err)
	}
	acq, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", Start: true}))
	if err != nil || len(acq.Msg.GetTasks()) != 1 {
		t.Fatalf("acquire = %v, %v", acq, err)
	}
	return acq.Msg.GetTasks()[0]
}

func TestWorker_AcquireCompletesFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.createTenant(t, "t15", nil, nil)
	w := b.clients(b.createKey(t, "t15", "worker"))
	p := b.clients(b.createKey(t, "t15", "producer"))
	if _, err := w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 1})); err != nil {
		t.Fatal(err)
	}
	first := acquireOne(t, w, p, "a1")
	cancelled := acquireOneAfter(t, w, p, first, "a2")
	if _, err := p.producer.Cancel(ctx, req(&pb.CancelRequest{TaskId: "a2"})); err != nil {
		t.Fatal(err)
	}
	// Only failing items and nothing to lease: nothing changes.
	bad := []*pb.CompleteRequest{{LeaseToken: cancelled.GetLeaseToken(), Result: []byte("r")}, {LeaseToken: []byte("not a token"), Result: []byte("r")}}
	st := b.state(t)
	res, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", Complete: bad}))
	if err != nil || len(res.Msg.GetTasks()) != 0 || len(res.Msg.GetCompleted()) != 2 {
		t.Fatalf("acquire with fenced items = %v, %v", res, err)
	}
	for i, want := range []string{"stale_ownership", KindInvalidToken} {
		if k := res.Msg.GetCompleted()[i].GetError().GetKind(); k != want {
			t.Fatalf("item %d kind = %q, want %q", i, k, want)
		}
	}
	b.assertUnchanged(t, st, "an Acquire completing only fenced items")
	if _, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", WaitSecs: 61, Complete: bad})); err == nil {
		t.Fatal("an invalid Acquire with items was accepted")
	}
	b.assertUnchanged(t, st, "an invalid Acquire with items")
	_ = b.restartAndCheck(t, "t15", "a3", func() {
		if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s", "a3"))); err != nil {
			t.Fatal(err)
		}
		// Capacity 1: a3 can be leased only once a1's completion, applied
		// first, has freed the slot.
		items := append([]*pb.CompleteRequest{{LeaseToken: first.GetLeaseToken(), Result: []byte("secret-result-a1")}}, bad...)
		res, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", Complete: items}))
		if err != nil || len(res.Msg.GetTasks()) != 1 || res.Msg.GetTasks()[0].GetTaskId() != "a3" {
			t.Fatalf("acquire after completing = %v, %v", res, err)
		}
		c := res.Msg.GetCompleted()
		if len(c) != 3 || c[0].GetResponse() == nil || c[1].GetError().GetKind() != "stale_ownership" || c[2].GetError() == nil {
			t.Fatalf("completed = %v", c)
		}
	})
}

// acquireOneAfter is acquireOne while prev holds the worker's one slot:
// it completes nothing, so it raises capacity to two first.
func acquireOneAfter(t *testing.T, w, p clients, prev *pb.LeasedTask, id string) *pb.LeasedTask {
	t.Helper()
	if _, err := w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w2", Capacity: 1})); err != nil {
		t.Fatal(err)
	}
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s", id))); err != nil {
		t.Fatal(err)
	}
	acq, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w2"}))
	if err != nil || len(acq.Msg.GetTasks()) != 1 || prev.GetTaskId() == id {
		t.Fatalf("acquire = %v, %v", acq, err)
	}
	return acq.Msg.GetTasks()[0]
}

// restartAndCheck runs fn, closes the node, opens it again from its data
// directory and checks that task a1 of tenant is completed with its
// result and task leased is leased: what fn's answers acknowledged is
// durable.
func (b *testBundle) restartAndCheck(t *testing.T, tenant, leased string, fn func()) *node.Node {
	t.Helper()
	fn()
	b.srv.Close()
	if err := b.node.Close(); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := node.Open(cctx, node.Config{DataDir: b.dir, RaftAddr: "127.0.0.1:0", TickInterval: -1, DefaultScheduling: &distributed.SchedulingOptions{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	tv, ok := n.Reads().Tenant(tenant)
	if !ok {
		t.Fatalf("tenant %s lost", tenant)
	}
	a1, ok, err := tv.GetTask("a1")
	if err != nil || !ok || a1.Status() != distributed.TaskCompleted || !tv.HasResult("a1") {
		t.Fatalf("a1 after restart: %v, %v, %v", a1.Status(), ok, err)
	}
	l, ok, err := tv.GetTask(leased)
	if err != nil || !ok || l.Status() == distributed.TaskQueued {
		t.Fatalf("%s after restart: %v, %v, %v", leased, l.Status(), ok, err)
	}
	return n
}
