// Bad-input catalogue. Goal: every malformed, oversized, unauthorised,
// stale, foreign or out-of-policy request gets a clear typed error (Connect
// code plus ErrorDetail kind) and changes nothing. Method: one fixture
// (tasks queued, leased, running and completed; a worker bound to a worker
// key; a second tenant; a tiny full tenant), then a table of requests, each
// checked for its code and kind and for byte-identical FSM state before and
// after.
package server

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

type catalogueCase struct {
	name string
	call func() error
	code connect.Code
	kind string
}

func TestServer_BadInputCatalogue(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cx := context.Background()
	admin := b.clients(b.adminKey)
	wk := b.createKey(t, "", "worker")
	w := b.clients(wk)
	w2 := b.clients(b.createKey(t, "", "worker"))
	p := b.clients(b.createKey(t, "", "producer"))
	b.createTenant(t, "other", nil, nil)
	tenantAdmin := b.clients(b.createKey(t, "other", "admin"))
	otherW := b.clients(b.createKey(t, "other", "worker"))
	otherP := b.clients(b.createKey(t, "other", "producer"))
	b.createTenant(t, "tiny", &pb.CoreLimits{MaxTaskRecords: 2, MaxActiveTasks: 2, MaxQueuedTasks: 2, MaxTerminalTasks: 2, MaxWorkers: 1,
		MaxRetries: 0, MaxLeaseTtlSecs: 60, MaxTaskTtlSecs: 3600, HeartbeatTimeoutSecs: 60},
		&pb.ResultLimits{MaxResults: 1, MaxResultBytes: 8, MaxTotalBytes: 8, MaxAggregateItems: 1, MaxAggregateBytes: 8})
	tinyP := b.clients(b.createKey(t, "tiny", "producer"))
	tinyW := b.clients(b.createKey(t, "tiny", "worker"))

	// Fixture in tenant default: w1 (bound to wk), tasks done, running,
	// leased, queued.
	reg, err := w.worker.RegisterWorker(cx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 8}))
	if err != nil {
		t.Fatal(err)
	}
	gen := reg.Msg.GetWorker().GetGeneration()
	enq, err := p.producer.Enqueue(cx, req(enqueueReq("scan", "done", "running", "leased", "queued")))
	if err != nil {
		t.Fatal(err)
	}
	staleFence := enq.Msg.GetTasks()[2].GetFenceToken() // "leased" when it was queued
	acq, err := w.worker.Acquire(cx, req(&pb.AcquireRequest{WorkerId: "w1", MaxTasks: 3}))
	if err != nil || len(acq.Msg.GetTasks()) != 3 {
		t.Fatalf("acquire: %v %v", acq, err)
	}
	leaseDone, leaseRunning, leaseLeased := acq.Msg.GetTasks()[0].GetLeaseToken(), acq.Msg.GetTasks()[1].GetLeaseToken(), acq.Msg.GetTasks()[2].GetLeaseToken()
	for _, lt := range [][]byte{leaseDone, leaseRunning} {
		if _, err := w.worker.Start(cx, req(&pb.StartRequest{LeaseToken: lt})); err != nil {
			t.Fatal(err)
		}
	}
	comp, err := w.worker.Complete(cx, req(&pb.CompleteRequest{LeaseToken: leaseDone, Result: []byte("ok")}))
	if err != nil {
		t.Fatal(err)
	}
	receipt := comp.Msg.GetReceiptToken()
	gq, _ := p.producer.GetTask(cx, req(&pb.GetTaskRequest{TaskId: "queued"}))
	queuedFence := gq.Msg.GetTask().GetFenceToken()
	// Tenant other: a lease of its own, for cross-tenant presentation.
	otherW.worker.RegisterWorker(cx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 8}))
	otherP.producer.Enqueue(cx, req(enqueueReq("scan", "x1")))
	oacq, err := otherW.worker.Acquire(cx, req(&pb.AcquireRequest{WorkerId: "w1", Start: true}))
	if err != nil || len(oacq.Msg.GetTasks()) != 1 {
		t.Fatalf("other acquire: %v %v", oacq, err)
	}
	otherLease := oacq.Msg.GetTasks()[0].GetLeaseToken()
	// Tenant tiny: full (2 records), worker at capacity 1 with a running task.
	tinyW.worker.RegisterWorker(cx, req(&pb.RegisterWorkerRequest{WorkerId: "tw", Capacity: 1}))
	tinyP.producer.Enqueue(cx, req(enqueueReq("scan", "a", "b")))
	tacq, err := tinyW.worker.Acquire(cx, req(&pb.AcquireRequest{WorkerId: "tw", Start: true}))
	if err != nil || len(tacq.Msg.GetTasks()) != 1 {
		t.Fatalf("tiny acquire: %v %v", tacq, err)
	}
	tinyLease := tacq.Msg.GetTasks()[0].GetLeaseToken()

	flip := func(tok []byte, i int) []byte { c := bytes.Clone(tok); c[i%len(c)] ^= 0x01; return c }
	enqOne := func(task *pb.NewTask) func() error {
		return func() error {
			_, err := p.producer.Enqueue(cx, req(&pb.EnqueueRequest{Tasks: []*pb.NewTask{task}}))
			return err
		}
	}
	var cases []catalogueCase
	add := func(name string, code connect.Code, kind string, call func() error) {
		cases = append(cases, catalogueCase{name: name, call: call, code: code, kind: kind})
	}

	// 1. Invalid identifiers on every path that takes one.
	badIDs := map[string]string{
		"empty": "", "too long": strings.Repeat("a", 257), "space": "a b", "slash": "a/b", "dotdot": "../x",
		"unicode": "tä", "nul": "a\x00b", "semicolon": "a;b", "newline": "a\nb",
	}
	for name, id := range badIDs {
		add("enqueue task_id "+name, connect.CodeInvalidArgument, "invalid_task", enqOne(&pb.NewTask{TaskId: id, ScanId: "s", TargetRef: "t"}))
		add("enqueue scan_id "+name, connect.CodeInvalidArgument, "invalid_task", enqOne(&pb.NewTask{TaskId: "new", ScanId: id, TargetRef: "t"}))
		add("register worker_id "+name, connect.CodeInvalidArgument, "invalid_worker", func() error {
			_, err := admin.worker.RegisterWorker(cx, req(&pb.RegisterWorkerRequest{WorkerId: id, Capacity: 1}))
			return err
		})
		add("heartbeat worker_id "+name, connect.CodeInvalidArgument, "invalid_worker", func() error {
			_, err := admin.worker.Heartbeat(cx, req(&pb.HeartbeatRequest{WorkerId: id, Generation: 1}))
			return err
		})
		add("acquire worker_id "+name, connect.CodeInvalidArgument, "invalid_worker", func() error {
			_, err := admin.worker.Acquire(cx, req(&pb.AcquireRequest{WorkerId: id}))
			return err
		})
		add("deregister worker_id "+name, connect.CodeInvalidArgument, "invalid_worker", func() error {
			_, err := admin.worker.Deregister(cx, req(&pb.DeregisterRequest{WorkerId: id, Generation: 1}))
			return err
		})
		add("get task_id "+name, connect.CodeInvalidArgument, "invalid_task", func() error {
			_, err := p.producer.GetTask(cx, req(&pb.GetTaskRequest{TaskId: id}))
			return err
		})
	}

	// 2. Forged, altered, truncated, wrong-kind and foreign tokens.
	tokens := map[string][]byte{
		"empty": nil, "garbage": []byte("definitely-not-a-token"), "truncated": leaseRunning[:len(leaseRunning)-1],
		"flip head": flip(leaseRunning, 3), "flip mac": flip(leaseRunning, len(leaseRunning)-2),
		"cross tenant": otherLease, "receipt": receipt,
	}
	for name, tok := range tokens {
		add("start token "+name, connect.CodePermissionDenied, KindInvalidToken, func() error {
			_, err := w.worker.Start(cx, req(&pb.StartRequest{LeaseToken: tok}))
			return err
		})
		add("renew token "+name, connect.CodePermissionDenied, KindInvalidToken, func() error {
			_, err := w.worker.RenewLease(cx, req(&pb.RenewLeaseRequest{LeaseToken: tok}))
			return err
		})
		add("complete token "+name, connect.CodePermissionDenied, KindInvalidToken, func() error {
			_, err := w.worker.Complete(cx, req(&pb.CompleteRequest{LeaseToken: tok, Result: []byte("r")}))
			return err
		})
		add("fail token "+name, connect.CodePermissionDenied, KindInvalidToken, func() error {
			_, err := w.worker.Fail(cx, req(&pb.FailRequest{LeaseToken: tok}))
			return err
		})
		add("cancel token "+name, connect.CodePermissionDenied, KindInvalidToken, func() error {
			_, err := p.producer.Cancel(cx, req(&pb.CancelRequest{OwnershipToken: tok}))
			return err
		})
	}
	add("complete with fence token", connect.CodePermissionDenied, KindInvalidToken, func() error {
		_, err := w.worker.Complete(cx, req(&pb.CompleteRequest{LeaseToken: queuedFence}))
		return err
	})

	// 3. Authentication and roles.
	authCases := []struct {
		name string
		c    clients
		code connect.Code
		kind string
	}{
		{"no key", b.clients(""), connect.CodeUnauthenticated, KindUnauthenticated},
		{"malformed key", b.clients("hello"), connect.CodeUnauthenticated, KindUnauthenticated},
		{"unknown key", b.clients("tvk_0000000000000000_secret"), connect.CodeUnauthenticated, KindUnauthenticated},
		{"wrong secret", b.clients(wk[:len(wk)-2] + "zz"), connect.CodeUnauthenticated, KindUnauthenticated},
	}
	for _, a := range authCases {
		add("enqueue "+a.name, a.code, a.kind, func() error { _, err := a.c.producer.Enqueue(cx, req(enqueueReq("s", "n1"))); return err })
		add("status "+a.name, a.code, a.kind, func() error { _, err := a.c.admin.Status(cx, req(&pb.StatusRequest{})); return err })
	}
	add("producer registers worker", connect.CodePermissionDenied, KindPermissionDenied, func() error {
		_, err := p.worker.RegisterWorker(cx, req(&pb.RegisterWorkerRequest{WorkerId: "pw", Capacity: 1}))
		return err
	})
	add("worker enqueues", connect.CodePermissionDenied, KindPermissionDenied, func() error { _, err := w.producer.Enqueue(cx, req(enqueueReq("s", "n1"))); return err })
	add("worker lists tasks", connect.CodePermissionDenied, KindPermissionDenied, func() error { _, err := w.producer.ListTasks(cx, req(&pb.ListTasksRequest{})); return err })
	add("producer creates key", connect.CodePermissionDenied, KindPermissionDenied, func() error {
		_, err := p.admin.CreateKey(cx, req(&pb.CreateKeyRequest{Role: "admin"}))
		return err
	})
	add("worker lists workers", connect.CodePermissionDenied, KindPermissionDenied, func() error { _, err := w.admin.ListWorkers(cx, req(&pb.ListWorkersRequest{})); return err })
	add("producer creates tenant", connect.CodePermissionDenied, KindPermissionDenied, func() error {
		_, err := p.admin.CreateTenant(cx, req(&pb.CreateTenantRequest{Name: "z"}))
		return err
	})
	add("tenant admin creates tenant", connect.CodePermissionDenied, KindPermissionDenied, func() error {
		_, err := tenantAdmin.admin.CreateTenant(cx, req(&pb.CreateTenantRequest{Name: "z"}))
		return err
	})
	add("tenant admin creates foreign key", connect.CodePermissionDenied, KindPermissionDenied, func() error {
		_, err := tenantAdmin.admin.CreateKey(cx, req(&pb.CreateKeyRequest{Tenant: "default", Role: "admin"}))
		return err
	})
	add("create key bad role", connect.CodeInvalidArgument, KindInvalidArgument, func() error {
		_, err := admin.admin.CreateKey(cx, req(&pb.CreateKeyRequest{Role: "root"}))
		return err
	})
	add("create key unknown tenant", connect.CodeNotFound, "unknown_tenant", func() error {
		_, err := admin.admin.CreateKey(cx, req(&pb.CreateKeyRequest{Tenant: "nope", Role: "worker"}))
		return err
	})
	add("create tenant bad name", connect.CodeInvalidArgument, "invalid_command", func() error {
		_, err := admin.admin.CreateTenant(cx, req(&pb.CreateTenantRequest{Name: "bad name"}))
		return err
	})
	add("create tenant exists", connect.CodeAlreadyExists, "tenant_exists", func() error {
		_, err := admin.admin.CreateTenant(cx, req(&pb.CreateTenantRequest{Name: "other"}))
		return err
	})
	add("create tenant zero limit", connect.CodeInvalidArgument, "invalid_limit", func() error {
		_, err := admin.admin.CreateTenant(cx, req(&pb.CreateTenantRequest{Name: "z", Limits: &pb.CoreLimits{}}))
		return err
	})
	add("create tenant limit above ceiling", connect.CodeInvalidArgument, "count_limit_exceeds_maximum", func() error {
		_, err := admin.admin.CreateTenant(cx, req(&pb.CreateTenantRequest{Name: "z", Limits: &pb.CoreLimits{MaxTaskRecords: 1 << 20, MaxActiveTasks: 1, MaxQueuedTasks: 1, MaxTerminalTasks: 1, MaxWorkers: 1, MaxLeaseTtlSecs: 1, MaxTaskTtlSecs: 1, HeartbeatTimeoutSecs: 1}}))
		return err
	})
	add("foreign worker key heartbeat", connect.CodePermissionDenied, "permission_denied", func() error {
		_, err := w2.worker.Heartbeat(cx, req(&pb.HeartbeatRequest{WorkerId: "w1", Generation: gen}))
		return err
	})
	add("foreign worker key completes", connect.CodePermissionDenied, "permission_denied", func() error {
		_, err := w2.worker.Complete(cx, req(&pb.CompleteRequest{LeaseToken: leaseRunning, Result: []byte("r")}))
		return err
	})
	add("foreign worker key registers bound id", connect.CodePermissionDenied, "permission_denied", func() error {
		_, err := w2.worker.RegisterWorker(cx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 1}))
		return err
	})
	add("foreign worker key acquires", connect.CodePermissionDenied, "permission_denied", func() error {
		_, err := w2.worker.Acquire(cx, req(&pb.AcquireRequest{WorkerId: "w1"}))
		return err
	})

	// 4. Specs, sizes and policies.
	add("enqueue no tasks", connect.CodeInvalidArgument, KindInvalidArgument, func() error { _, err := p.producer.Enqueue(cx, req(&pb.EnqueueRequest{})); return err })
	add("enqueue 4097 tasks", connect.CodeInvalidArgument, KindInvalidArgument, func() error {
		r := &pb.EnqueueRequest{}
		for i := range 4097 {
			r.Tasks = append(r.Tasks, &pb.NewTask{TaskId: fmt.Sprint("m", i), ScanId: "s", TargetRef: "t"})
		}
		_, err := p.producer.Enqueue(cx, req(r))
		return err
	})
	add("enqueue oversized request", connect.CodeResourceExhausted, "", func() error {
		r := &pb.EnqueueRequest{}
		for i := range 4000 {
			r.Tasks = append(r.Tasks, &pb.NewTask{TaskId: fmt.Sprint("m", i), ScanId: "s", TargetRef: strings.Repeat("t", 3000)})
		}
		_, err := p.producer.Enqueue(cx, req(r))
		return err
	})
	add("enqueue empty target", connect.CodeInvalidArgument, "invalid_task", enqOne(&pb.NewTask{TaskId: "n", ScanId: "s"}))
	add("enqueue target too long", connect.CodeInvalidArgument, "invalid_task", enqOne(&pb.NewTask{TaskId: "n", ScanId: "s", TargetRef: strings.Repeat("t", 1025)}))
	add("enqueue target with NUL", connect.CodeInvalidArgument, KindInvalidArgument, enqOne(&pb.NewTask{TaskId: "n", ScanId: "s", TargetRef: "a\x00b"}))
	add("enqueue valid then NUL target", connect.CodeInvalidArgument, KindInvalidArgument, func() error {
		r := enqueueReq("s", "n1", "n2")
		r.Tasks[1].TargetRef = "\x00"
		_, err := p.producer.Enqueue(cx, req(r))
		return err
	})
	add("enqueue too many phases", connect.CodeInvalidArgument, "invalid_task", enqOne(&pb.NewTask{TaskId: "n", ScanId: "s", TargetRef: "t", Phases: make([]byte, 257)}))
	add("enqueue bad priority", connect.CodeInvalidArgument, "invalid_task", enqOne(&pb.NewTask{TaskId: "n", ScanId: "s", TargetRef: "t", Priority: "urgent"}))
	add("enqueue duplicate existing", connect.CodeAlreadyExists, "task_already_exists", enqOne(&pb.NewTask{TaskId: "queued", ScanId: "s", TargetRef: "t"}))
	add("enqueue duplicate in batch", connect.CodeAlreadyExists, "task_already_exists", func() error { _, err := p.producer.Enqueue(cx, req(enqueueReq("s", "n1", "n2", "n1"))); return err })
	add("enqueue valid then invalid", connect.CodeInvalidArgument, "invalid_task", func() error { _, err := p.producer.Enqueue(cx, req(enqueueReq("s", "n1", "bad id"))); return err })
	add("enqueue stale revision", connect.CodeAborted, "revision_conflict", func() error {
		rev := uint64(1)
		_, err := p.producer.Enqueue(cx, req(&pb.EnqueueRequest{Tasks: enqueueReq("s", "n1").Tasks, ExpectedRevision: &rev}))
		return err
	})
	add("enqueue into full tenant", connect.CodeResourceExhausted, "task_record_capacity_reached", func() error {
		_, err := tinyP.producer.Enqueue(cx, req(enqueueReq("s", "c")))
		return err
	})
	add("register capacity zero", connect.CodeInvalidArgument, "invalid_worker", func() error {
		_, err := admin.worker.RegisterWorker(cx, req(&pb.RegisterWorkerRequest{WorkerId: "nw", Capacity: 0}))
		return err
	})
	add("register capacity above max", connect.CodeInvalidArgument, "invalid_worker", func() error {
		_, err := admin.worker.RegisterWorker(cx, req(&pb.RegisterWorkerRequest{WorkerId: "nw", Capacity: 4097}))
		return err
	})
	add("register utilization above 10000", connect.CodeInvalidArgument, "invalid_worker", func() error {
		_, err := admin.worker.RegisterWorker(cx, req(&pb.RegisterWorkerRequest{WorkerId: "nw", Capacity: 1, CpuBasisPoints: 10001}))
		return err
	})
	add("register utilization above uint16", connect.CodeInvalidArgument, "invalid_worker", func() error {
		_, err := admin.worker.RegisterWorker(cx, req(&pb.RegisterWorkerRequest{WorkerId: "nw", Capacity: 1, MemoryBasisPoints: 70000}))
		return err
	})
	add("register unknown tag", connect.CodeInvalidArgument, "invalid_worker", func() error {
		_, err := admin.worker.RegisterWorker(cx, req(&pb.RegisterWorkerRequest{WorkerId: "nw", Capacity: 1, Tags: []string{"solaris"}}))
		return err
	})
	add("register existing worker", connect.CodeAlreadyExists, "worker_already_exists", func() error {
		_, err := w.worker.RegisterWorker(cx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 1}))
		return err
	})
	add("register into full worker table", connect.CodeResourceExhausted, "worker_capacity_reached", func() error {
		_, err := tinyW.worker.RegisterWorker(cx, req(&pb.RegisterWorkerRequest{WorkerId: "tw2", Capacity: 1}))
		return err
	})
	add("reactivate healthy worker", connect.CodeAlreadyExists, "worker_already_exists", func() error {
		g := gen
		_, err := w.worker.RegisterWorker(cx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 1, ReactivateGeneration: &g}))
		return err
	})
	add("heartbeat offline status", connect.CodeInvalidArgument, "invalid_worker", func() error {
		_, err := w.worker.Heartbeat(cx, req(&pb.HeartbeatRequest{WorkerId: "w1", Generation: gen, Status: "offline"}))
		return err
	})
	add("heartbeat unknown status", connect.CodeInvalidArgument, "invalid_worker", func() error {
		_, err := w.worker.Heartbeat(cx, req(&pb.HeartbeatRequest{WorkerId: "w1", Generation: gen, Status: "zombie"}))
		return err
	})
	add("heartbeat stale generation", connect.CodeAborted, "worker_generation_conflict", func() error {
		_, err := w.worker.Heartbeat(cx, req(&pb.HeartbeatRequest{WorkerId: "w1", Generation: gen + 5}))
		return err
	})
	add("heartbeat unknown worker", connect.CodeNotFound, "worker_not_found", func() error {
		_, err := admin.worker.Heartbeat(cx, req(&pb.HeartbeatRequest{WorkerId: "ghost", Generation: 1}))
		return err
	})
	add("heartbeat stale revision", connect.CodeAborted, "revision_conflict", func() error {
		rev := uint64(0)
		_, err := w.worker.Heartbeat(cx, req(&pb.HeartbeatRequest{WorkerId: "w1", Generation: gen, ExpectedRevision: &rev}))
		return err
	})
	add("deregister stale generation", connect.CodeAborted, "worker_generation_conflict", func() error {
		_, err := w.worker.Deregister(cx, req(&pb.DeregisterRequest{WorkerId: "w1", Generation: gen + 1}))
		return err
	})
	add("acquire wait above 60", connect.CodeInvalidArgument, KindInvalidArgument, func() error {
		_, err := w.worker.Acquire(cx, req(&pb.AcquireRequest{WorkerId: "w1", WaitSecs: 61}))
		return err
	})
	add("acquire max_tasks above 256", connect.CodeInvalidArgument, KindInvalidArgument, func() error {
		_, err := w.worker.Acquire(cx, req(&pb.AcquireRequest{WorkerId: "w1", MaxTasks: 257}))
		return err
	})
	add("acquire lease ttl above limit", connect.CodeInvalidArgument, "lease_ttl_out_of_range", func() error {
		_, err := w.worker.Acquire(cx, req(&pb.AcquireRequest{WorkerId: "w1", LeaseTtlSecs: 3601}))
		return err
	})
	add("acquire unknown worker", connect.CodeNotFound, "worker_not_found", func() error {
		_, err := admin.worker.Acquire(cx, req(&pb.AcquireRequest{WorkerId: "ghost"}))
		return err
	})
	add("acquire worker at capacity", connect.CodeResourceExhausted, "worker_at_capacity", func() error {
		// tiny has one queued task ("b") and tw holds its only slot.
		_, err := tinyW.worker.Acquire(cx, req(&pb.AcquireRequest{WorkerId: "tw"}))
		return err
	})
	add("renew ttl above limit", connect.CodeInvalidArgument, "lease_ttl_out_of_range", func() error {
		_, err := w.worker.RenewLease(cx, req(&pb.RenewLeaseRequest{LeaseToken: leaseRunning, LeaseTtlSecs: 3601}))
		return err
	})
	add("complete leased not started", connect.CodeFailedPrecondition, "invalid_transition", func() error {
		_, err := w.worker.Complete(cx, req(&pb.CompleteRequest{LeaseToken: leaseLeased, Result: []byte("r")}))
		return err
	})
	add("fail leased not started", connect.CodeFailedPrecondition, "invalid_transition", func() error {
		_, err := w.worker.Fail(cx, req(&pb.FailRequest{LeaseToken: leaseLeased}))
		return err
	})
	add("complete conflicting result", connect.CodeAlreadyExists, "conflicting_result", func() error {
		_, err := w.worker.Complete(cx, req(&pb.CompleteRequest{LeaseToken: leaseDone, Result: []byte("other")}))
		return err
	})
	add("complete oversize result", connect.CodeResourceExhausted, "result_too_large", func() error {
		_, err := w.worker.Complete(cx, req(&pb.CompleteRequest{LeaseToken: leaseRunning, Result: make([]byte, 1<<20+1)}))
		return err
	})
	add("complete oversize result tiny", connect.CodeResourceExhausted, "result_too_large", func() error {
		_, err := tinyW.worker.Complete(cx, req(&pb.CompleteRequest{LeaseToken: tinyLease, Result: make([]byte, 9)}))
		return err
	})
	add("complete stale revision", connect.CodeAborted, "revision_conflict", func() error {
		rev := uint64(2)
		_, err := w.worker.Complete(cx, req(&pb.CompleteRequest{LeaseToken: leaseRunning, Result: []byte("r"), ExpectedRevision: &rev}))
		return err
	})
	add("start done task", connect.CodeFailedPrecondition, "stale_ownership", func() error {
		_, err := w.worker.Start(cx, req(&pb.StartRequest{LeaseToken: leaseDone}))
		return err
	})
	add("fail done task", connect.CodeFailedPrecondition, "stale_ownership", func() error {
		_, err := w.worker.Fail(cx, req(&pb.FailRequest{LeaseToken: leaseDone}))
		return err
	})
	add("cancel with stale fence", connect.CodeFailedPrecondition, "stale_ownership", func() error {
		_, err := p.producer.Cancel(cx, req(&pb.CancelRequest{OwnershipToken: staleFence}))
		return err
	})
	add("complete many empty", connect.CodeInvalidArgument, KindInvalidArgument, func() error {
		_, err := w.worker.CompleteMany(cx, req(&pb.CompleteManyRequest{}))
		return err
	})
	add("complete many too many", connect.CodeInvalidArgument, KindInvalidArgument, func() error {
		items := make([]*pb.CompleteRequest, 1025)
		for i := range items {
			items[i] = &pb.CompleteRequest{LeaseToken: leaseRunning}
		}
		_, err := w.worker.CompleteMany(cx, req(&pb.CompleteManyRequest{Items: items}))
		return err
	})
	add("get unknown task", connect.CodeNotFound, "task_not_found", func() error {
		_, err := p.producer.GetTask(cx, req(&pb.GetTaskRequest{TaskId: "ghost"}))
		return err
	})
	add("list page size above 1000", connect.CodeInvalidArgument, KindInvalidArgument, func() error {
		_, err := p.producer.ListTasks(cx, req(&pb.ListTasksRequest{PageSize: 1001}))
		return err
	})
	add("list bad status", connect.CodeInvalidArgument, KindInvalidArgument, func() error {
		_, err := p.producer.ListTasks(cx, req(&pb.ListTasksRequest{Status: "sleeping"}))
		return err
	})
	add("list bad page token", connect.CodeInvalidArgument, KindInvalidArgument, func() error {
		_, err := p.producer.ListTasks(cx, req(&pb.ListTasksRequest{ScanId: "scan", PageToken: "x:1"}))
		return err
	})
	add("list bad scan id", connect.CodeInvalidArgument, "invalid_task", func() error {
		_, err := p.producer.ListTasks(cx, req(&pb.ListTasksRequest{ScanId: "a b"}))
		return err
	})
	add("progress bad scan id", connect.CodeInvalidArgument, "invalid_task", func() error {
		_, err := p.producer.ScanProgress(cx, req(&pb.ScanProgressRequest{ScanId: ""}))
		return err
	})
	add("aggregate bad scan id", connect.CodeInvalidArgument, "invalid_task", func() error {
		s, err := p.producer.AggregateResults(cx, req(&pb.AggregateResultsRequest{ScanId: "a/b"}))
		if err != nil {
			return err
		}
		for s.Receive() {
		}
		return s.Err()
	})
	add("worker lists scans", connect.CodePermissionDenied, KindPermissionDenied, func() error {
		_, err := w.producer.ListScans(cx, req(&pb.ListScansRequest{}))
		return err
	})
	add("list scans page size above 1000", connect.CodeInvalidArgument, KindInvalidArgument, func() error {
		_, err := p.producer.ListScans(cx, req(&pb.ListScansRequest{PageSize: 1001}))
		return err
	})
	add("list scans bad page token", connect.CodeInvalidArgument, KindInvalidArgument, func() error {
		_, err := p.producer.ListScans(cx, req(&pb.ListScansRequest{PageToken: "a b"}))
		return err
	})
	add("worker follows results", connect.CodePermissionDenied, KindPermissionDenied, func() error {
		_, err := w.producer.FollowResults(cx, req(&pb.FollowResultsRequest{ScanId: "scan"}))
		return err
	})
	add("follow bad scan id", connect.CodeInvalidArgument, "invalid_task", func() error {
		_, err := p.producer.FollowResults(cx, req(&pb.FollowResultsRequest{ScanId: "a/b"}))
		return err
	})
	add("follow unknown scan", connect.CodeNotFound, KindScanNotFound, func() error {
		_, err := p.producer.FollowResults(cx, req(&pb.FollowResultsRequest{ScanId: "ghost"}))
		return err
	})
	add("follow cursor of the other order", connect.CodeInvalidArgument, KindInvalidArgument, func() error {
		_, err := p.producer.FollowResults(cx, req(&pb.FollowResultsRequest{ScanId: "scan", Cursor: "e:0", CompletionOrder: true}))
		return err
	})
	add("follow cursor past the end", connect.CodeInvalidArgument, KindInvalidArgument, func() error {
		_, err := p.producer.FollowResults(cx, req(&pb.FollowResultsRequest{ScanId: "scan", Cursor: "e:5"}))
		return err
	})
	add("follow wait above 60", connect.CodeInvalidArgument, KindInvalidArgument, func() error {
		_, err := p.producer.FollowResults(cx, req(&pb.FollowResultsRequest{ScanId: "scan", WaitSecs: 61}))
		return err
	})
	add("follow max_results above 4096", connect.CodeInvalidArgument, KindInvalidArgument, func() error {
		_, err := p.producer.FollowResults(cx, req(&pb.FollowResultsRequest{ScanId: "scan", MaxResults: 4097}))
		return err
	})

	// 5. Failure reasons, attempt timeouts and Retry (contract Part F).
	for name, id := range badIDs {
		add("retry scan_id "+name, connect.CodeInvalidArgument, "invalid_task", func() error {
			_, err := p.producer.Retry(cx, req(&pb.RetryRequest{ScanId: id}))
			return err
		})
		add("retry task_id "+name, connect.CodeInvalidArgument, "invalid_task", func() error {
			_, err := p.producer.Retry(cx, req(&pb.RetryRequest{ScanId: "scan", TaskIds: []string{id}}))
			return err
		})
	}
	add("retry status completed", connect.CodeInvalidArgument, KindInvalidArgument, func() error {
		_, err := p.producer.Retry(cx, req(&pb.RetryRequest{ScanId: "scan", Statuses: []string{"completed"}}))
		return err
	})
	add("retry unknown status", connect.CodeInvalidArgument, KindInvalidArgument, func() error {
		_, err := p.producer.Retry(cx, req(&pb.RetryRequest{ScanId: "scan", Statuses: []string{"bogus"}}))
		return err
	})
	add("retry unknown scan", connect.CodeNotFound, "task_not_found", func() error {
		_, err := p.producer.Retry(cx, req(&pb.RetryRequest{ScanId: "no-such-scan"}))
		return err
	})
	// Another tenant's task does not exist in this tenant (as a purged one).
	add("retry other tenant's task", connect.CodeNotFound, "task_not_found", func() error {
		_, err := p.producer.Retry(cx, req(&pb.RetryRequest{ScanId: "scan", TaskIds: []string{"x1"}}))
		return err
	})
	add("retry as worker", connect.CodePermissionDenied, KindPermissionDenied, func() error {
		_, err := w.producer.Retry(cx, req(&pb.RetryRequest{ScanId: "scan"}))
		return err
	})
	add("retry repeated task", connect.CodeInvalidArgument, "invalid_task", func() error {
		_, err := p.producer.Retry(cx, req(&pb.RetryRequest{ScanId: "scan", TaskIds: []string{"done", "done"}}))
		return err
	})
	add("fail reason 513 bytes", connect.CodeInvalidArgument, "failure_reason_too_long", func() error {
		_, err := w.worker.Fail(cx, req(&pb.FailRequest{LeaseToken: leaseRunning, Reason: strings.Repeat("r", 513)}))
		return err
	})
	add("enqueue attempt timeout above ceiling", connect.CodeInvalidArgument, "invalid_task", func() error {
		_, err := p.producer.Enqueue(cx, req(&pb.EnqueueRequest{AttemptTimeoutSecs: 31*86400 + 1, Tasks: []*pb.NewTask{{TaskId: "n", ScanId: "s", TargetRef: "t"}}}))
		return err
	})

	if len(cases) < 100 {
		t.Fatalf("catalogue has %d cases, want at least 100", len(cases))
	}
	for _, tc := range cases {
		before := b.state(t)
		err := tc.call()
		code, kind := errKind(err)
		if err == nil || code != tc.code || (tc.kind != "" && kind != tc.kind) {
			t.Errorf("%s: err = %v (code %v, kind %q), want code %v kind %q", tc.name, err, code, kind, tc.code, tc.kind)
			continue
		}
		if !bytes.Equal(before, b.state(t)) {
			t.Errorf("%s: state changed", tc.name)
		}
	}
	t.Logf("%d bad-input cases checked", len(cases))
}
