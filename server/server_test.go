// End-to-end tests of the API over HTTP against a real node. Goal: the
// worker and producer flows work through tokens; tokens, keys, roles and
// tenants are enforced; every mutating call is audited without secrets;
// Acquire long-polls; the background ticker recovers a silent worker's
// leases. Method: httptest server, Connect clients, FSM state compared
// byte for byte before and after rejected calls.
package server

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/node"
)

var ctx = context.Background()

func req[T any](m *T) *connect.Request[T] { return connect.NewRequest(m) }

func enqueueReq(scan string, ids ...string) *pb.EnqueueRequest {
	r := &pb.EnqueueRequest{}
	for _, id := range ids {
		r.Tasks = append(r.Tasks, &pb.NewTask{TaskId: id, ScanId: scan, TargetRef: "secret-target-" + id})
	}
	return r
}

func TestServer_WorkerProducerFlow(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	w := b.clients(b.createKey(t, "", "worker"))
	p := b.clients(b.createKey(t, "", "producer"))

	reg, err := w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 4, Tags: []string{"linux"}}))
	if err != nil {
		t.Fatal(err)
	}
	if reg.Msg.GetWorker().GetGeneration() != 1 {
		t.Fatalf("generation = %d", reg.Msg.GetWorker().GetGeneration())
	}
	if got, want := reg.Msg.GetMaxResultBytes(), uint64(distributed.DefaultResultLimits().MaxResultBytes); got != want {
		t.Fatalf("max_result_bytes = %d, want the tenant's %d", got, want)
	}
	enq, err := p.producer.Enqueue(ctx, req(enqueueReq("scan1", "t1", "t2", "t3")))
	if err != nil {
		t.Fatal(err)
	}
	if len(enq.Msg.GetTasks()) != 3 || len(enq.Msg.GetTasks()[0].GetFenceToken()) == 0 {
		t.Fatalf("enqueue = %v", enq.Msg)
	}
	acq, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", MaxTasks: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if len(acq.Msg.GetTasks()) != 2 || acq.Msg.GetTasks()[0].GetTargetRef() != "secret-target-t1" {
		t.Fatalf("acquire = %v", acq.Msg)
	}
	lt := acq.Msg.GetTasks()[0].GetLeaseToken()
	if _, err := w.worker.Start(ctx, req(&pb.StartRequest{LeaseToken: lt})); err != nil {
		t.Fatal(err)
	}
	ren, err := w.worker.RenewLease(ctx, req(&pb.RenewLeaseRequest{LeaseToken: lt, LeaseTtlSecs: 120}))
	if err != nil {
		t.Fatal(err)
	}
	// The old lease token is stale after renewal.
	_, err = w.worker.Complete(ctx, req(&pb.CompleteRequest{LeaseToken: lt, Result: []byte("r1")}))
	mustCode(t, err, connect.CodeFailedPrecondition, "stale_ownership")
	comp, err := w.worker.Complete(ctx, req(&pb.CompleteRequest{LeaseToken: ren.Msg.GetLeaseToken(), Result: []byte("secret-result-1")}))
	if err != nil || len(comp.Msg.GetReceiptToken()) == 0 {
		t.Fatalf("complete = %v, %v", comp, err)
	}
	// Exact replay is idempotent.
	again, err := w.worker.Complete(ctx, req(&pb.CompleteRequest{LeaseToken: ren.Msg.GetLeaseToken(), Result: []byte("secret-result-1")}))
	if err != nil || !again.Msg.GetAlreadyCompleted() || !again.Msg.GetAlreadyStored() {
		t.Fatalf("replay = %v, %v", again, err)
	}
	// Second task: Fail requeues it.
	lt2 := acq.Msg.GetTasks()[1].GetLeaseToken()
	w.worker.Start(ctx, req(&pb.StartRequest{LeaseToken: lt2}))
	fr, err := w.worker.Fail(ctx, req(&pb.FailRequest{LeaseToken: lt2}))
	if err != nil || !fr.Msg.GetRequeued() {
		t.Fatalf("fail = %v, %v", fr, err)
	}
	// Cancel the third task with its fence token.
	if _, err := p.producer.Cancel(ctx, req(&pb.CancelRequest{OwnershipToken: enq.Msg.GetTasks()[2].GetFenceToken()})); err != nil {
		t.Fatal(err)
	}
	gt, err := p.producer.GetTask(ctx, req(&pb.GetTaskRequest{TaskId: "t1"}))
	if err != nil || gt.Msg.GetTask().GetStatus() != "completed" || !gt.Msg.GetTask().GetHasResult() {
		t.Fatalf("get task = %v, %v", gt, err)
	}
	prog, err := p.producer.ScanProgress(ctx, req(&pb.ScanProgressRequest{ScanId: "scan1"}))
	if err != nil || prog.Msg.GetTotal() != 3 || prog.Msg.GetCompleted() != 1 || prog.Msg.GetQueued() != 1 || prog.Msg.GetCancelled() != 1 || prog.Msg.GetResults() != 1 {
		t.Fatalf("progress = %v, %v", prog, err)
	}
	lst, err := p.producer.ListTasks(ctx, req(&pb.ListTasksRequest{ScanId: "scan1", PageSize: 2}))
	if err != nil || len(lst.Msg.GetTasks()) != 2 || lst.Msg.GetNextPageToken() == "" {
		t.Fatalf("list = %v, %v", lst, err)
	}
	lst2, err := p.producer.ListTasks(ctx, req(&pb.ListTasksRequest{ScanId: "scan1", PageSize: 2, PageToken: lst.Msg.GetNextPageToken()}))
	if err != nil || len(lst2.Msg.GetTasks()) != 1 || lst2.Msg.GetTasks()[0].GetTaskId() != "t3" {
		t.Fatalf("list page 2 = %v, %v", lst2, err)
	}
	stream, err := p.producer.AggregateResults(ctx, req(&pb.AggregateResultsRequest{ScanId: "scan1"}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for stream.Receive() {
		got = append(got, stream.Msg().GetTaskId()+"="+string(stream.Msg().GetResult()))
	}
	if stream.Err() != nil || strings.Join(got, ",") != "t1=secret-result-1" {
		t.Fatalf("aggregate = %v, %v", got, stream.Err())
	}
	st, err := p.admin.Status(ctx, req(&pb.StatusRequest{}))
	if err != nil || st.Msg.GetRaftState() != "Leader" || st.Msg.GetTaskRecords() != 3 {
		t.Fatalf("status = %v, %v", st, err)
	}
	if _, err := w.worker.Deregister(ctx, req(&pb.DeregisterRequest{WorkerId: "w1", Generation: 1})); err != nil {
		t.Fatal(err)
	}
}

func TestServer_TokensRejected(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.createTenant(t, "other", nil, nil)
	w := b.clients(b.createKey(t, "", "worker"))
	wOther := b.clients(b.createKey(t, "other", "worker"))
	p := b.clients(b.createKey(t, "", "producer"))
	w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 4}))
	wOther.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 4}))
	enq, _ := p.producer.Enqueue(ctx, req(enqueueReq("s", "t1")))
	acq, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", Start: true}))
	if err != nil {
		t.Fatal(err)
	}
	good := acq.Msg.GetTasks()[0].GetLeaseToken()
	before := b.state(t)

	altered := bytes.Clone(good)
	altered[len(altered)/2] ^= 0x40
	cases := map[string][]byte{
		"altered":   altered,
		"truncated": good[:len(good)-3],
		"empty":     nil,
		"garbage":   []byte("not a token at all"),
		"fence":     enq.Msg.GetTasks()[0].GetFenceToken(),
	}
	for name, tok := range cases {
		_, err := w.worker.Complete(ctx, req(&pb.CompleteRequest{LeaseToken: tok, Result: []byte("x")}))
		mustCode(t, err, connect.CodePermissionDenied, KindInvalidToken)
		_ = name
	}
	// Cross-tenant: a genuine token of tenant default presented by a key of
	// tenant other.
	_, err = wOther.worker.Complete(ctx, req(&pb.CompleteRequest{LeaseToken: good, Result: []byte("x")}))
	mustCode(t, err, connect.CodePermissionDenied, KindInvalidToken)
	b.assertUnchanged(t, before, "rejected tokens")

	// Cross-cluster: a token from another cluster (other secret and epoch).
	b2 := setup(t, nil)
	w2 := b2.clients(b2.createKey(t, "", "worker"))
	p2 := b2.clients(b2.createKey(t, "", "producer"))
	w2.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 4}))
	p2.producer.Enqueue(ctx, req(enqueueReq("s", "t1")))
	acq2, err := w2.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", Start: true}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.worker.Complete(ctx, req(&pb.CompleteRequest{LeaseToken: acq2.Msg.GetTasks()[0].GetLeaseToken(), Result: []byte("x")}))
	mustCode(t, err, connect.CodePermissionDenied, KindInvalidToken)
	b.assertUnchanged(t, before, "cross-cluster token")
}

func TestServer_Auth(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	pk := b.createKey(t, "", "producer")
	wk := b.createKey(t, "", "worker")
	before := b.state(t)
	_, err := b.clients("").producer.Enqueue(ctx, req(enqueueReq("s", "t1")))
	mustCode(t, err, connect.CodeUnauthenticated, KindUnauthenticated)
	_, err = b.clients("tvk_0123456789abcdef_wrongsecret").producer.Enqueue(ctx, req(enqueueReq("s", "t1")))
	mustCode(t, err, connect.CodeUnauthenticated, KindUnauthenticated)
	_, err = b.clients(pk+"x").producer.Enqueue(ctx, req(enqueueReq("s", "t1")))
	mustCode(t, err, connect.CodeUnauthenticated, KindUnauthenticated)
	_, err = b.clients(wk).producer.Enqueue(ctx, req(enqueueReq("s", "t1")))
	mustCode(t, err, connect.CodePermissionDenied, KindPermissionDenied)
	_, err = b.clients(pk).worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w", Capacity: 1}))
	mustCode(t, err, connect.CodePermissionDenied, KindPermissionDenied)
	_, err = b.clients(pk).admin.CreateKey(ctx, req(&pb.CreateKeyRequest{Role: "admin"}))
	mustCode(t, err, connect.CodePermissionDenied, KindPermissionDenied)
	b.assertUnchanged(t, before, "unauthorised calls")
	// A worker key may act only for the workers it registered.
	wk2 := b.createKey(t, "", "worker")
	if _, err := b.clients(wk).worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 1})); err != nil {
		t.Fatal(err)
	}
	before = b.state(t)
	_, err = b.clients(wk2).worker.Heartbeat(ctx, req(&pb.HeartbeatRequest{WorkerId: "w1", Generation: 1}))
	mustCode(t, err, connect.CodePermissionDenied, "permission_denied")
	_, err = b.clients(wk2).worker.Deregister(ctx, req(&pb.DeregisterRequest{WorkerId: "w1", Generation: 1}))
	mustCode(t, err, connect.CodePermissionDenied, "permission_denied")
	b.assertUnchanged(t, before, "foreign worker key")
}

func TestServer_TenantIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.createTenant(t, "a", nil, nil)
	b.createTenant(t, "b", nil, nil)
	pa := b.clients(b.createKey(t, "a", "producer"))
	pb2 := b.clients(b.createKey(t, "b", "producer"))
	adminA := b.clients(b.createKey(t, "a", "admin"))
	if _, err := pa.producer.Enqueue(ctx, req(enqueueReq("s", "t1"))); err != nil {
		t.Fatal(err)
	}
	// b sees nothing of a.
	_, err := pb2.producer.GetTask(ctx, req(&pb.GetTaskRequest{TaskId: "t1"}))
	mustCode(t, err, connect.CodeNotFound, "task_not_found")
	prog, _ := pb2.producer.ScanProgress(ctx, req(&pb.ScanProgressRequest{ScanId: "s"}))
	if prog.Msg.GetTotal() != 0 {
		t.Fatal("tenant b sees tenant a's scan")
	}
	// The same task ID is free in b.
	if _, err := pb2.producer.Enqueue(ctx, req(enqueueReq("s", "t1"))); err != nil {
		t.Fatal(err)
	}
	// a's fence cannot cancel b's task.
	ga, _ := pa.producer.GetTask(ctx, req(&pb.GetTaskRequest{TaskId: "t1"}))
	_, err = pb2.producer.Cancel(ctx, req(&pb.CancelRequest{OwnershipToken: ga.Msg.GetTask().GetFenceToken()}))
	mustCode(t, err, connect.CodePermissionDenied, KindInvalidToken)
	// A tenant admin may not create keys elsewhere or tenants.
	_, err = adminA.admin.CreateKey(ctx, req(&pb.CreateKeyRequest{Tenant: "b", Role: "producer"}))
	mustCode(t, err, connect.CodePermissionDenied, KindPermissionDenied)
	_, err = adminA.admin.CreateTenant(ctx, req(&pb.CreateTenantRequest{Name: "c"}))
	mustCode(t, err, connect.CodePermissionDenied, KindPermissionDenied)
	sa, _ := adminA.admin.Status(ctx, req(&pb.StatusRequest{}))
	if sa.Msg.GetTenant() != "a" || sa.Msg.GetTaskRecords() != 1 {
		t.Fatalf("status of a = %v", sa.Msg)
	}
}

func TestServer_AuditLog(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	pk := b.createKey(t, "", "producer")
	p := b.clients(pk)
	p.producer.Enqueue(ctx, req(enqueueReq("s", "t1")))
	p.producer.Enqueue(ctx, req(enqueueReq("s", "t1"))) // duplicate: rejected
	b.clients("").producer.Enqueue(ctx, req(enqueueReq("s", "t2")))
	p.producer.GetTask(ctx, req(&pb.GetTaskRequest{TaskId: "t1"})) // read: not audited
	b.api.failures.Flush(time.Now())                               // failed authentications: aggregated
	data, err := os.ReadFile(b.auditLog)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(b.auditLog)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("audit.log mode %v", st.Mode().Perm())
	}
	log := string(data)
	for _, want := range []string{`"method":"Producer.Enqueue","outcome":"ok"`, `"outcome":"task_already_exists"`, `"event":"auth_failures","source":"127.0.0.1","failures":1,"throttled":0`} {
		if !strings.Contains(log, want) {
			t.Errorf("audit log lacks %s:\n%s", want, log)
		}
	}
	if strings.Contains(log, "GetTask") || strings.Contains(log, "secret-target") || strings.Contains(log, pk) || strings.Contains(log, b.adminKey) {
		t.Fatalf("audit log has reads, targets or keys:\n%s", log)
	}
}

func TestServer_AcquireLongPoll(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	w := b.clients(b.createKey(t, "", "worker"))
	p := b.clients(b.createKey(t, "", "producer"))
	w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 4}))
	// Empty queue, no wait: empty answer at once.
	res, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1"}))
	if err != nil || len(res.Msg.GetTasks()) != 0 {
		t.Fatalf("acquire(no wait) = %v, %v", res, err)
	}
	var wg sync.WaitGroup
	var got *pb.AcquireResponse
	var elapsed time.Duration
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		r, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", WaitSecs: 10}))
		elapsed = time.Since(start)
		if err == nil {
			got = r.Msg
		}
	}()
	// NB: enqueue only once the poll waits in the handler, so the task
	// must come through the wake-up, not a first look at the queue.
	waitUntil(t, "the Acquire to wait", func() bool { return b.api.LongPollsWaiting() == 1 })
	p.producer.Enqueue(ctx, req(enqueueReq("s", "t1")))
	wg.Wait()
	if got == nil || len(got.GetTasks()) != 1 || elapsed >= 10*time.Second {
		t.Fatalf("long poll = %v after %v (woken by the enqueue, not its 10 s wait)", got, elapsed)
	}
	if n := b.api.LongPollsWaiting(); n != 0 {
		t.Fatalf("LongPollsWaiting after the poll answered = %d", n)
	}
	// Timeout without work: empty after about wait_secs.
	start := time.Now()
	res, err = w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", WaitSecs: 1}))
	if err != nil || len(res.Msg.GetTasks()) != 0 || time.Since(start) < 900*time.Millisecond {
		t.Fatalf("acquire timeout = %v, %v after %v", res, err, time.Since(start))
	}
}

func TestServer_BackgroundRecovery(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *node.Config) { c.TickInterval = 100 * time.Millisecond })
	lim := distributed.DefaultLimits()
	lim.HeartbeatTimeoutSecs = 2
	b.createTenant(t, "fast", &pb.CoreLimits{MaxTaskRecords: 64, MaxActiveTasks: 64, MaxQueuedTasks: 64, MaxTerminalTasks: 64, MaxWorkers: 8,
		MaxRetries: 3, MaxLeaseTtlSecs: 3600, MaxTaskTtlSecs: 86400, HeartbeatTimeoutSecs: 2}, nil)
	w1 := b.clients(b.createKey(t, "fast", "worker"))
	w2 := b.clients(b.createKey(t, "fast", "worker"))
	p := b.clients(b.createKey(t, "fast", "producer"))
	w1.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 4}))
	p.producer.Enqueue(ctx, req(enqueueReq("s", "t1")))
	if r, err := w1.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", Start: true, LeaseTtlSecs: 3600})); err != nil || len(r.Msg.GetTasks()) != 1 {
		t.Fatalf("acquire w1 = %v, %v", r, err)
	}
	// w1 goes silent. w2 registers and keeps heartbeating; it gets the task
	// once the ticker prunes w1, with no client call about w1.
	reg, _ := w2.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w2", Capacity: 4}))
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		w2.worker.Heartbeat(ctx, req(&pb.HeartbeatRequest{WorkerId: "w2", Generation: reg.Msg.GetWorker().GetGeneration()}))
		r, err := w2.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w2", WaitSecs: 1}))
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Msg.GetTasks()) == 1 {
			if r.Msg.GetTasks()[0].GetTaskId() != "t1" || r.Msg.GetTasks()[0].GetAttempt() != 2 {
				t.Fatalf("w2 got %v", r.Msg.GetTasks()[0])
			}
			return
		}
	}
	t.Fatal("w1's lease was never recovered")
}

// TestServer_ListTasksPagesByTaskID: without a scan, ListTasks pages through
// every task in task-ID order, each exactly once, with and without a status
// filter, and an unknown position token resumes after it.
func TestServer_ListTasksPagesByTaskID(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := b.clients(b.createKey(t, "", "producer"))
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s2", "t5", "t1", "t3"))); err != nil {
		t.Fatal(err)
	}
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s1", "t4", "t2", "t6", "t7"))); err != nil {
		t.Fatal(err)
	}
	if _, err := p.producer.Cancel(ctx, req(&pb.CancelRequest{TaskId: "t3"})); err != nil {
		t.Fatal(err)
	}
	pages := func(status string, size uint32) (ids []string, n int) {
		tok := ""
		for {
			r, err := p.producer.ListTasks(ctx, req(&pb.ListTasksRequest{Status: status, PageSize: size, PageToken: tok}))
			if err != nil {
				t.Fatal(err)
			}
			n++
			for _, ti := range r.Msg.GetTasks() {
				ids = append(ids, ti.GetTaskId())
			}
			if tok = r.Msg.GetNextPageToken(); tok == "" {
				return ids, n
			}
			if n > 10 {
				t.Fatal("paging does not end")
			}
		}
	}
	if ids, n := pages("", 2); strings.Join(ids, " ") != "t1 t2 t3 t4 t5 t6 t7" || n != 4 {
		t.Fatalf("all tasks = %v in %d pages", ids, n)
	}
	if ids, _ := pages("queued", 2); strings.Join(ids, " ") != "t1 t2 t4 t5 t6 t7" {
		t.Fatalf("queued tasks = %v", ids)
	}
	r, err := p.producer.ListTasks(ctx, req(&pb.ListTasksRequest{PageSize: 2, PageToken: "k:t35"}))
	if err != nil || len(r.Msg.GetTasks()) != 2 || r.Msg.GetTasks()[0].GetTaskId() != "t4" {
		t.Fatalf("resume after t35 = %v, %v", r.Msg.GetTasks(), err)
	}
}

// waitUntil polls cond until it holds (10 s at most).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
