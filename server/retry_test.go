package server

// Goal: the API's failure reasons, attempt history, Retry and attempt
// timeouts (docs/contract.md Part F): a worker's reason reaches GetTask and
// ListTasks, a bad reason is refused before anything is proposed, Retry
// re-runs a scan's terminal tasks as a new generation whose old lease
// token stays stale, counts re-runs in ScanProgress, is audited, and a
// renewal past the attempt timeout is refused with attempt_timed_out.

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func TestServer_FailReasonAndRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	w := b.clients(b.createKey(t, "", "worker"))
	p := b.clients(b.createKey(t, "", "producer"))
	if _, err := w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 8})); err != nil {
		t.Fatal(err)
	}
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s", "t1", "t2"))); err != nil {
		t.Fatal(err)
	}
	// Four failed attempts exhaust the default three retries of t1; t2
	// completes in between.
	var lastToken []byte
	for i := range 5 {
		acq, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", MaxTasks: 1, Start: true}))
		if err != nil || len(acq.Msg.GetTasks()) != 1 {
			t.Fatalf("acquire %d = %v, %v", i, acq, err)
		}
		lt := acq.Msg.GetTasks()[0]
		if lt.GetTaskId() != "t1" {
			// t2 runs once and completes.
			if _, err := w.worker.Complete(ctx, req(&pb.CompleteRequest{LeaseToken: lt.GetLeaseToken(), Result: []byte("ok")})); err != nil {
				t.Fatal(err)
			}
			continue
		}
		before := b.state(t)
		_, err = w.worker.Fail(ctx, req(&pb.FailRequest{LeaseToken: lt.GetLeaseToken(), Reason: strings.Repeat("x", 513)}))
		mustCode(t, err, connect.CodeInvalidArgument, "failure_reason_too_long")
		_, err = w.worker.Fail(ctx, req(&pb.FailRequest{LeaseToken: lt.GetLeaseToken(), Reason: "bad \xff"}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument && connect.CodeOf(err) != connect.CodeInternal {
			t.Fatalf("invalid UTF-8 reason: %v", err)
		}
		b.assertUnchanged(t, before, "rejected fail reasons")
		if _, err := w.worker.Fail(ctx, req(&pb.FailRequest{LeaseToken: lt.GetLeaseToken(), Reason: "exit status 7; stderr: boom"})); err != nil {
			t.Fatal(err)
		}
		lastToken = lt.GetLeaseToken()
	}
	g, err := p.producer.GetTask(ctx, req(&pb.GetTaskRequest{TaskId: "t1"}))
	if err != nil {
		t.Fatal(err)
	}
	ti := g.Msg.GetTask()
	if ti.GetStatus() != "failed" || ti.GetLastFailureReason() != "exit status 7; stderr: boom" || len(ti.GetAttempts()) == 0 {
		t.Fatalf("task = %v", ti)
	}
	last := ti.GetAttempts()[len(ti.GetAttempts())-1]
	if last.GetOutcome() != "failed" || last.GetWorkerId() != "w1" || last.GetStartedAt() == 0 || last.GetReason() != "exit status 7; stderr: boom" {
		t.Fatalf("last attempt = %v", last)
	}
	list, err := p.producer.ListTasks(ctx, req(&pb.ListTasksRequest{ScanId: "s", Status: "failed"}))
	if err != nil || len(list.Msg.GetTasks()) != 1 || list.Msg.GetTasks()[0].GetLastFailureReason() == "" {
		t.Fatalf("list failed = %v, %v", list, err)
	}

	// Retry: bad input first, changing nothing.
	before := b.state(t)
	_, err = p.producer.Retry(ctx, req(&pb.RetryRequest{ScanId: "s", Statuses: []string{"completed"}}))
	mustCode(t, err, connect.CodeInvalidArgument, KindInvalidArgument)
	_, err = p.producer.Retry(ctx, req(&pb.RetryRequest{ScanId: "nope"}))
	mustCode(t, err, connect.CodeNotFound, "task_not_found")
	_, err = p.producer.Retry(ctx, req(&pb.RetryRequest{ScanId: "s", TaskIds: []string{"bad id"}}))
	mustCode(t, err, connect.CodeInvalidArgument, "invalid_task")
	_, err = w.producer.Retry(ctx, req(&pb.RetryRequest{ScanId: "s"}))
	mustCode(t, err, connect.CodePermissionDenied, KindPermissionDenied)
	b.assertUnchanged(t, before, "rejected retries")

	res, err := p.producer.Retry(ctx, req(&pb.RetryRequest{ScanId: "s"}))
	if err != nil || len(res.Msg.GetRequeued()) != 1 || res.Msg.GetRequeued()[0] != "t1" || res.Msg.GetUnchanged() != 1 {
		t.Fatalf("retry = %v, %v", res, err)
	}
	again, err := p.producer.Retry(ctx, req(&pb.RetryRequest{ScanId: "s"}))
	if err != nil || len(again.Msg.GetRequeued()) != 0 || again.Msg.GetUnchanged() != 2 {
		t.Fatalf("repeated retry = %v, %v", again, err)
	}
	prog, err := p.producer.ScanProgress(ctx, req(&pb.ScanProgressRequest{ScanId: "s"}))
	if err != nil || prog.Msg.GetQueued() != 1 || prog.Msg.GetCompleted() != 1 || prog.Msg.GetReruns() != 1 {
		t.Fatalf("progress = %v, %v", prog, err)
	}
	// The old generation's lease token is stale; the new one runs.
	_, err = w.worker.Fail(ctx, req(&pb.FailRequest{LeaseToken: lastToken, Reason: "late"}))
	mustCode(t, err, connect.CodeFailedPrecondition, "stale_ownership")
	acq, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", MaxTasks: 1, Start: true}))
	if err != nil || len(acq.Msg.GetTasks()) != 1 || acq.Msg.GetTasks()[0].GetAttempt() != 5 {
		t.Fatalf("acquire after retry = %v, %v", acq, err)
	}
	if _, err := w.worker.Complete(ctx, req(&pb.CompleteRequest{LeaseToken: acq.Msg.GetTasks()[0].GetLeaseToken(), Result: []byte("ok")})); err != nil {
		t.Fatal(err)
	}
	if n := auditCounts(t, b.auditLog)["Producer.Retry"]; n != 6 {
		t.Fatalf("audit lines for Producer.Retry = %d, want 6 (every call, rejected ones included)", n)
	}
}

func TestServer_AttemptTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	w := b.clients(b.createKey(t, "", "worker"))
	p := b.clients(b.createKey(t, "", "producer"))
	if _, err := w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 8})); err != nil {
		t.Fatal(err)
	}
	e := enqueueReq("s", "t1", "t2")
	e.AttemptTimeoutSecs = 1
	e.Tasks[1].AttemptTimeoutSecs = 3600
	if _, err := p.producer.Enqueue(ctx, req(e)); err != nil {
		t.Fatal(err)
	}
	acq, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", MaxTasks: 2, Start: true, LeaseTtlSecs: 30}))
	if err != nil || len(acq.Msg.GetTasks()) != 2 {
		t.Fatalf("acquire = %v, %v", acq, err)
	}
	byID := map[string]*pb.LeasedTask{}
	for _, lt := range acq.Msg.GetTasks() {
		byID[lt.GetTaskId()] = lt
	}
	if byID["t1"].GetAttemptTimeoutSecs() != 1 || byID["t2"].GetAttemptTimeoutSecs() != 3600 {
		t.Fatalf("leased tasks = %v", acq.Msg.GetTasks())
	}
	// The leader's clock moves in whole seconds: wait until the deadline
	// (acquired + 1 s) has passed, polling the renewal itself.
	var renewErr error
	tok := byID["t1"].GetLeaseToken()
	waitUntil(t, "the attempt timeout", func() bool {
		var r *connect.Response[pb.RenewLeaseResponse]
		r, renewErr = w.worker.RenewLease(ctx, req(&pb.RenewLeaseRequest{LeaseToken: tok, LeaseTtlSecs: 30}))
		if renewErr == nil {
			tok = r.Msg.GetLeaseToken()
		}
		return renewErr != nil
	})
	mustCode(t, renewErr, connect.CodeFailedPrecondition, "attempt_timed_out")
	if _, err := w.worker.RenewLease(ctx, req(&pb.RenewLeaseRequest{LeaseToken: byID["t2"].GetLeaseToken(), LeaseTtlSecs: 30})); err != nil {
		t.Fatalf("renewal within the timeout: %v", err)
	}
	// The lease is still valid: the worker reports the timeout.
	if _, err := w.worker.Fail(ctx, req(&pb.FailRequest{LeaseToken: tok, Reason: "timeout: killed after 1s"})); err != nil {
		t.Fatal(err)
	}
	g, _ := p.producer.GetTask(ctx, req(&pb.GetTaskRequest{TaskId: "t1"}))
	if g.Msg.GetTask().GetStatus() != "queued" || !strings.HasPrefix(g.Msg.GetTask().GetLastFailureReason(), "timeout") || g.Msg.GetTask().GetAttemptTimeoutSecs() != 1 {
		t.Fatalf("task after timeout = %v", g.Msg.GetTask())
	}
}
