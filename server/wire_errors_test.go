// Goal: every core error a request can provoke reaches a remote caller as
// an equal *distributed.Error — kind and every detail field — through the
// real server and the real client, with the registry's Connect code, and
// errors.Is matches the core's sentinel. Method: a node with tenants and
// tasks in every state; for each case the request goes through
// client.Client over HTTP, and the same log command is proposed to the node
// in process (or, for read paths, the core's constructor gives the error);
// the client's errors.As result must equal the in-process error field for
// field (TestServer_WireErrorsRoundTripBounds does the same for the
// capacity and result bounds). Kinds not provoked here, each covered field
// for field by internal/wireerr's encode → decode table instead:
// logical_time_regression (the node's stamps never go back),
// counter_exhausted, state_invariant and invalid_state (not reachable by a
// request), no_queued_task (Acquire waits instead), no_available_worker and
// task_not_queued (no API call assigns a named task),
// aggregate_item_limit_exceeded, duplicate_aggregate_task and
// missing_result (the server builds aggregate requests itself),
// mismatched_result_receipt (reachable only with a receipt of another
// completion of the same task, not built here), task_not_leasable (no API
// call assigns a named task) and scan_capacity_reached (needs
// MaxTaskRecords configured scans; the core's TestWorkerPool_UpdateScanCapacity).
package server

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

type wireCase struct {
	name   string
	kind   distributed.ErrorKind
	api    func() error
	inproc func() error // the same command proposed in process
}

func TestServer_WireErrorsRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cx := context.Background()
	e := wireEnv{t: t, b: b, cx: cx}
	cl, who, prop, lease := e.client, e.principal, e.prop, e.lease
	adminKey, wk, pk := b.adminKey, b.createKey(t, "", "worker"), b.createKey(t, "", "producer")
	admin, w, p := cl(adminKey), cl(wk), cl(pk)
	adminP, wP, pP := who(adminKey, "Admin", "CreateTenant"), who(wk, "Worker", "Heartbeat"), who(pk, "Producer", "Enqueue")
	b.createTenant(t, "tiny", &pb.CoreLimits{MaxTaskRecords: 2, MaxActiveTasks: 2, MaxQueuedTasks: 2, MaxTerminalTasks: 2, MaxWorkers: 1,
		MaxRetries: 0, MaxLeaseTtlSecs: 60, MaxTaskTtlSecs: 3600, HeartbeatTimeoutSecs: 60},
		&pb.ResultLimits{MaxResults: 1, MaxResultBytes: 8, MaxTotalBytes: 8, MaxAggregateItems: 1, MaxAggregateBytes: 8})
	tpk, twk := b.createKey(t, "tiny", "producer"), b.createKey(t, "tiny", "worker")
	tinyP, tinyW := cl(tpk), cl(twk)
	tinyPP, tinyWP := who(tpk, "Producer", "Enqueue"), who(twk, "Worker", "Heartbeat")

	// Fixture in the default tenant: w1 with tasks done, running, leased
	// and queued; an offline worker; a lease that will expire.
	reg, err := w.RegisterWorker(cx, &pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 8})
	if err != nil {
		t.Fatal(err)
	}
	gen := reg.GetWorker().GetGeneration()
	if _, err := p.Enqueue(cx, enqueueReq("scan", "done", "running", "leased", "queued")); err != nil {
		t.Fatal(err)
	}
	acq, err := w.Acquire(cx, &pb.AcquireRequest{WorkerId: "w1", MaxTasks: 3})
	if err != nil || len(acq.GetTasks()) != 3 {
		t.Fatalf("acquire: %v %v", acq, err)
	}
	leaseDone, leaseRunning, leaseLeased := acq.GetTasks()[0].GetLeaseToken(), acq.GetTasks()[1].GetLeaseToken(), acq.GetTasks()[2].GetLeaseToken()
	for _, lt := range [][]byte{leaseDone, leaseRunning} {
		if _, err := w.Start(cx, &pb.StartRequest{LeaseToken: lt}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Complete(cx, &pb.CompleteRequest{LeaseToken: leaseDone, Result: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	offReg, err := admin.RegisterWorker(cx, &pb.RegisterWorkerRequest{WorkerId: "off", Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Deregister(cx, &pb.DeregisterRequest{WorkerId: "off", Generation: offReg.GetWorker().GetGeneration()}); err != nil {
		t.Fatal(err)
	}
	offGen := uint64(0)
	ws, err := admin.ListWorkers(cx, &pb.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, wi := range ws.GetWorkers() {
		if wi.GetWorkerId() == "off" {
			offGen = wi.GetGeneration()
		}
	}
	// Tenant tiny: full (2 records), its one worker at capacity 1.
	if _, err := tinyW.RegisterWorker(cx, &pb.RegisterWorkerRequest{WorkerId: "tw", Capacity: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := tinyP.Enqueue(cx, enqueueReq("scan", "a", "b")); err != nil {
		t.Fatal(err)
	}
	tacq, err := tinyW.Acquire(cx, &pb.AcquireRequest{WorkerId: "tw", Start: true})
	if err != nil || len(tacq.GetTasks()) != 1 {
		t.Fatalf("tiny acquire: %v %v", tacq, err)
	}
	tinyLease := tacq.GetTasks()[0].GetLeaseToken()

	regCmd := func(id string, capacity uint32) *pb.Command {
		return &pb.Command{Op: &pb.Command_RegisterWorker{RegisterWorker: &pb.RegisterWorker{Spec: &pb.WorkerSpec{WorkerId: id, Capacity: capacity, Tags: []uint32{}}}}}
	}
	hbCmd := func(id string, g uint64) *pb.Command {
		return &pb.Command{Op: &pb.Command_UpdateWorker{UpdateWorker: &pb.UpdateWorker{WorkerId: id, Generation: g, Status: uint32(distributed.WorkerHealthy)}}}
	}
	tenantCmd := func(lim *pb.CoreLimits) *pb.Command {
		return &pb.Command{Principal: adminP.KeyID, Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "z", Limits: lim,
			ResultLimits: &pb.ResultLimits{MaxResults: 1, MaxResultBytes: 8, MaxTotalBytes: 8, MaxAggregateItems: 1, MaxAggregateBytes: 8}}}}
	}
	createTenant := func(lim *pb.CoreLimits) wireCaseCalls {
		return wireCaseCalls{
			api: func() error {
				_, err := admin.CreateTenant(cx, &pb.CreateTenantRequest{Name: "z", Limits: lim, ResultLimits: tenantCmd(lim).GetCreateTenant().GetResultLimits()})
				return err
			},
			inproc: func() error {
				r, err := b.node.Propose(cx, tenantCmd(lim))
				if err != nil {
					return err
				}
				return r.Err
			},
		}
	}
	okLimits := func() *pb.CoreLimits {
		return &pb.CoreLimits{MaxTaskRecords: 4, MaxActiveTasks: 4, MaxQueuedTasks: 4, MaxTerminalTasks: 4, MaxWorkers: 1,
			MaxLeaseTtlSecs: 60, MaxTaskTtlSecs: 60, HeartbeatTimeoutSecs: 60}
	}
	with := func(mut func(*pb.CoreLimits)) *pb.CoreLimits { l := okLimits(); mut(l); return l }
	rev1 := uint64(1)

	var cases []wireCase
	add := func(name string, kind distributed.ErrorKind, c wireCaseCalls) {
		cases = append(cases, wireCase{name: name, kind: kind, api: c.api, inproc: c.inproc})
	}
	add("create tenant zero limit", distributed.KindInvalidLimit, createTenant(with(func(l *pb.CoreLimits) { l.MaxWorkers = 0 })))
	add("create tenant active above records", distributed.KindInvalidLimitRelationship, createTenant(with(func(l *pb.CoreLimits) { l.MaxActiveTasks = 5 })))
	add("create tenant records above ceiling", distributed.KindCountLimitExceedsMaximum, createTenant(with(func(l *pb.CoreLimits) { l.MaxTaskRecords = 1 << 30 })))
	add("create tenant lease ttl above ceiling", distributed.KindTimeLimitExceedsMaximum, createTenant(with(func(l *pb.CoreLimits) { l.MaxLeaseTtlSecs = 1 << 40 })))
	add("create tenant retries above ceiling", distributed.KindRetryLimitExceedsMaximum, createTenant(with(func(l *pb.CoreLimits) { l.MaxRetries = 33 })))
	add("enqueue invalid task id", distributed.KindInvalidTask, wireCaseCalls{
		api:    func() error { _, err := p.Enqueue(cx, enqueueReq("s", "a b")); return err },
		inproc: prop(pP, nil, enqueueCmd("a b")),
	})
	add("enqueue existing task", distributed.KindTaskAlreadyExists, wireCaseCalls{
		api:    func() error { _, err := p.Enqueue(cx, enqueueReq("s", "queued")); return err },
		inproc: prop(pP, nil, enqueueCmd("queued")),
	})
	add("enqueue stale revision", distributed.KindRevisionConflict, wireCaseCalls{
		api: func() error {
			_, err := p.Enqueue(cx, &pb.EnqueueRequest{Tasks: enqueueReq("s", "n1").Tasks, ExpectedRevision: &rev1})
			return err
		},
		inproc: prop(pP, &rev1, enqueueCmd("n1")),
	})
	add("enqueue into full tenant", distributed.KindTaskRecordCapacityReached, wireCaseCalls{
		api:    func() error { _, err := tinyP.Enqueue(cx, enqueueReq("s", "c")); return err },
		inproc: prop(tinyPP, nil, enqueueCmd("c")),
	})
	add("register capacity zero", distributed.KindInvalidWorker, wireCaseCalls{
		api: func() error {
			_, err := admin.RegisterWorker(cx, &pb.RegisterWorkerRequest{WorkerId: "nw", Capacity: 0})
			return err
		},
		inproc: prop(adminP, nil, regCmd("nw", 0)),
	})
	add("register existing worker", distributed.KindWorkerAlreadyExists, wireCaseCalls{
		api: func() error {
			_, err := w.RegisterWorker(cx, &pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 1})
			return err
		},
		inproc: prop(wP, nil, regCmd("w1", 1)),
	})
	add("register into full worker table", distributed.KindWorkerCapacityReached, wireCaseCalls{
		api: func() error {
			_, err := tinyW.RegisterWorker(cx, &pb.RegisterWorkerRequest{WorkerId: "tw2", Capacity: 1})
			return err
		},
		inproc: prop(tinyWP, nil, regCmd("tw2", 1)),
	})
	add("heartbeat stale generation", distributed.KindWorkerGenerationConflict, wireCaseCalls{
		api: func() error {
			_, err := w.Heartbeat(cx, &pb.HeartbeatRequest{WorkerId: "w1", Generation: gen + 5})
			return err
		},
		inproc: prop(wP, nil, hbCmd("w1", gen+5)),
	})
	add("heartbeat unknown worker", distributed.KindWorkerNotFound, wireCaseCalls{
		api: func() error {
			_, err := admin.Heartbeat(cx, &pb.HeartbeatRequest{WorkerId: "ghost", Generation: 1})
			return err
		},
		inproc: prop(adminP, nil, hbCmd("ghost", 1)),
	})
	add("heartbeat offline worker", distributed.KindWorkerUnavailable, wireCaseCalls{
		api: func() error {
			_, err := admin.Heartbeat(cx, &pb.HeartbeatRequest{WorkerId: "off", Generation: offGen})
			return err
		},
		inproc: prop(adminP, nil, hbCmd("off", offGen)),
	})
	add("acquire lease ttl above limit", distributed.KindLeaseTTLOutOfRange, wireCaseCalls{
		api: func() error {
			_, err := w.Acquire(cx, &pb.AcquireRequest{WorkerId: "w1", LeaseTtlSecs: 3601})
			return err
		},
		inproc: prop(wP, nil, &pb.Command{Op: &pb.Command_AcquireTasks{AcquireTasks: &pb.AcquireTasks{
			WorkerId: "w1", LeaseTtlSecs: 3601}}}),
	})
	add("acquire worker at capacity", distributed.KindWorkerAtCapacity, wireCaseCalls{
		api: func() error { _, err := tinyW.Acquire(cx, &pb.AcquireRequest{WorkerId: "tw"}); return err },
		inproc: prop(tinyWP, nil, &pb.Command{Op: &pb.Command_AcquireTasks{AcquireTasks: &pb.AcquireTasks{
			WorkerId: "tw", LeaseTtlSecs: b.api.cfg.DefaultLeaseTTLSecs}}}),
	})
	add("complete leased not started", distributed.KindInvalidTransition, wireCaseCalls{
		api: func() error {
			_, err := w.Complete(cx, &pb.CompleteRequest{LeaseToken: leaseLeased, Result: []byte("r")})
			return err
		},
		inproc: prop(wP, nil, &pb.Command{Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: lease(wP, leaseLeased), Result: []byte("r")}}}),
	})
	add("start done task", distributed.KindStaleOwnership, wireCaseCalls{
		api:    func() error { _, err := w.Start(cx, &pb.StartRequest{LeaseToken: leaseDone}); return err },
		inproc: prop(wP, nil, &pb.Command{Op: &pb.Command_StartTask{StartTask: &pb.StartTask{Lease: lease(wP, leaseDone)}}}),
	})
	add("complete conflicting result", distributed.KindConflictingResult, wireCaseCalls{
		api: func() error {
			_, err := w.Complete(cx, &pb.CompleteRequest{LeaseToken: leaseDone, Result: []byte("other")})
			return err
		},
		inproc: prop(wP, nil, &pb.Command{Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: lease(wP, leaseDone), Result: []byte("other")}}}),
	})
	add("complete oversize result", distributed.KindResultTooLarge, wireCaseCalls{
		api: func() error {
			_, err := tinyW.Complete(cx, &pb.CompleteRequest{LeaseToken: tinyLease, Result: make([]byte, 9)})
			return err
		},
		inproc: prop(tinyWP, nil, &pb.Command{Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: lease(tinyWP, tinyLease), Result: make([]byte, 9)}}}),
	})
	add("cancel unknown task by id", distributed.KindTaskNotFound, wireCaseCalls{
		api:    func() error { _, err := p.Cancel(cx, &pb.CancelRequest{TaskId: "ghost"}); return err },
		inproc: prop(pP, nil, &pb.Command{Op: &pb.Command_CancelTaskById{CancelTaskById: &pb.CancelTaskByID{TaskId: "ghost"}}}),
	})
	add("cancel completed task by id", distributed.KindInvalidTransition, wireCaseCalls{
		api:    func() error { _, err := p.Cancel(cx, &pb.CancelRequest{TaskId: "done"}); return err },
		inproc: prop(pP, nil, &pb.Command{Op: &pb.Command_CancelTaskById{CancelTaskById: &pb.CancelTaskByID{TaskId: "done"}}}),
	})
	// Read paths: the server answers with the core's constructors.
	add("get unknown task", distributed.KindTaskNotFound, wireCaseCalls{
		api:    func() error { _, err := p.GetTask(cx, &pb.GetTaskRequest{TaskId: "ghost"}); return err },
		inproc: func() error { return distributed.NewTaskNotFoundError("ghost") },
	})
	add("list invalid scan id", distributed.KindInvalidTask, wireCaseCalls{
		api:    func() error { _, err := p.ListTasks(cx, &pb.ListTasksRequest{ScanId: "a b"}); return err },
		inproc: func() error { return distributed.CheckTaskCommandID("a b") },
	})
	add("results of invalid scan id", distributed.KindInvalidTask, wireCaseCalls{
		api:    func() error { return p.Results(cx, "a/b", func(string, []byte) error { return nil }) },
		inproc: func() error { return distributed.CheckTaskCommandID("a/b") },
	})

	fields := map[string]bool{}
	for _, tc := range cases {
		apiErr, inErr := tc.api(), tc.inproc()
		checkWireError(t, tc.name, tc.kind, apiErr, inErr)
		markFields(fields, inErr)
	}
	// CompleteMany reports each item's error as a detail of its own.
	many, err := w.CompleteMany(cx, &pb.CompleteManyRequest{Items: []*pb.CompleteRequest{{LeaseToken: leaseDone, Result: []byte("other")}}})
	if err != nil || len(many.GetResults()) != 1 {
		t.Fatalf("CompleteMany: %v %v", many, err)
	}
	itemErr := client.ItemError(many.GetResults()[0])
	inErr := prop(wP, nil, &pb.Command{Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: lease(wP, leaseDone), Result: []byte("other")}}})()
	var got, want *distributed.Error
	if !errors.As(itemErr, &got) || !errors.As(inErr, &want) || *got != *want || !errors.Is(itemErr, distributed.ErrConflictingResult) {
		t.Errorf("CompleteMany item error = %v, in process %v", itemErr, inErr)
	}
	if err := client.ItemError(&pb.CompleteItemResult{Response: &pb.CompleteResponse{}}); err != nil {
		t.Errorf("ItemError(success) = %v, want nil", err)
	}
	leaseExpired(t, cx, w, p, wP, lease, prop, fields)

	// The cases must exercise the fields the old wire detail dropped.
	for _, f := range []string{"Name", "Reason", "TaskID", "WorkerID", "Status", "Expected", "Actual", "Limit", "Maximum"} {
		if !fields[f] {
			t.Errorf("no case sets distributed.Error.%s; the round trip of that field is untested here", f)
		}
	}
	t.Logf("%d cases; fields exercised: %v", len(cases)+1, slices.Sorted(maps.Keys(fields)))
}

// wireEnv builds clients, principals and in-process proposals on a test
// node.
type wireEnv struct {
	t  *testing.T
	b  *testBundle
	cx context.Context
}

// client is a client.Client for key that tries each call once.
func (e wireEnv) client(key string) *client.Client {
	c, err := client.New(client.Config{ServerURL: e.b.srv.URL, Key: key, HTTPClient: e.b.srv.Client(), MaxAttempts: 1})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(c.Close)
	return c
}

// principal is key's principal as the server authenticates it.
func (e wireEnv) principal(key, service, method string) principal {
	p, err := e.b.api.authenticate(http.Header{"Authorization": {"Bearer " + key}}, service, method)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// prop proposes cmd for p in process, as the handlers do.
func (e wireEnv) prop(p principal, expected *uint64, cmd *pb.Command) func() error {
	return func() error {
		_, err := e.b.api.propose(e.cx, p, expected, cmd)
		return err
	}
}

// lease opens a lease token as the handlers do.
func (e wireEnv) lease(p principal, tok []byte) []byte {
	lb, err := e.b.api.leaseBytes(p, tok)
	if err != nil {
		e.t.Fatal(err)
	}
	return lb
}

// enqueueCmd is the Enqueue command of the server for tasks ids of scan s.
func enqueueCmd(ids ...string) *pb.Command {
	e := &pb.EnqueueTasks{}
	for _, id := range ids {
		e.Tasks = append(e.Tasks, &pb.TaskSpec{TaskId: id, ScanId: "s", TargetRef: []byte("t"), Priority: uint32(distributed.PriorityNormal)})
	}
	return &pb.Command{Op: &pb.Command_Enqueue{Enqueue: e}}
}

type wireCaseCalls struct {
	api, inproc func() error
}

// leaseExpired provokes lease_expired: a 1 s lease renewed after its expiry
// (the ticker is off, so nothing recovers it meanwhile). It polls the
// renewal until the node's clock has passed the expiry.
func leaseExpired(t *testing.T, cx context.Context, w, p *client.Client, wP principal,
	lease func(principal, []byte) []byte, prop func(principal, *uint64, *pb.Command) func() error, fields map[string]bool) {
	t.Helper()
	if _, err := p.Enqueue(cx, enqueueReq("exp", "exp1")); err != nil {
		t.Fatal(err)
	}
	acq, err := w.Acquire(cx, &pb.AcquireRequest{WorkerId: "w1", LeaseTtlSecs: 1, MaxTasks: 4, Start: true})
	if err != nil || len(acq.GetTasks()) == 0 {
		t.Fatalf("acquire: %v %v", acq, err)
	}
	var tok []byte
	var expiresAt uint64
	for _, lt := range acq.GetTasks() {
		if lt.GetTaskId() == "exp1" {
			tok, expiresAt = lt.GetLeaseToken(), lt.GetExpiresAt()
		}
	}
	if tok == nil {
		t.Fatalf("exp1 not acquired: %v", acq.GetTasks())
	}
	// NB: a renewal before the expiry would extend the lease, so wait until
	// the wall clock (which the node's stamp never falls behind) is past
	// the expiry, then renew once.
	waitUntil(t, "the wall clock to pass the 1 s lease's expiry", func() bool { return uint64(time.Now().Unix()) > expiresAt })
	_, err = w.RenewLease(cx, &pb.RenewLeaseRequest{LeaseToken: tok, LeaseTtlSecs: 1})
	inErr := prop(wP, nil, &pb.Command{Op: &pb.Command_RenewLease{RenewLease: &pb.RenewLease{Lease: lease(wP, tok), LeaseTtlSecs: 1}}})()
	checkWireError(t, "renew expired lease", distributed.KindLeaseExpired, err, inErr)
	markFields(fields, inErr)
}

// checkWireError asserts that apiErr, received by the client, carries a
// *distributed.Error equal to the in-process error inErr, of kind, with the
// registry's code, matched by errors.Is against the kind's sentinel.
func checkWireError(t *testing.T, name string, kind distributed.ErrorKind, apiErr, inErr error) {
	t.Helper()
	var want *distributed.Error
	if !errors.As(inErr, &want) || want.Kind != kind {
		t.Errorf("%s: in-process error = %v, want kind %v", name, inErr, kind)
		return
	}
	var got *distributed.Error
	if !errors.As(apiErr, &got) {
		t.Errorf("%s: client error %v has no *distributed.Error", name, apiErr)
		return
	}
	if *got != *want {
		t.Errorf("%s: client's error = %+v, in process %+v", name, *got, *want)
	}
	if !errors.Is(apiErr, &distributed.Error{Kind: kind}) {
		t.Errorf("%s: errors.Is(%v, sentinel of %v) = false", name, apiErr, kind)
	}
	var ce *client.Error
	if !errors.As(apiErr, &ce) || ce.Code != kindCodes[kind.String()] || ce.Kind != kind.String() {
		t.Errorf("%s: client error %v, want code %v kind %v", name, apiErr, kindCodes[kind.String()], kind)
	}
	if connect.CodeOf(apiErr) != kindCodes[kind.String()] {
		t.Errorf("%s: connect.CodeOf = %v, want %v", name, connect.CodeOf(apiErr), kindCodes[kind.String()])
	}
}

// markFields records which detail fields of err are non-zero (Status
// counts when the kind reports one).
func markFields(seen map[string]bool, err error) {
	var e *distributed.Error
	if !errors.As(err, &e) {
		return
	}
	v := reflect.ValueOf(*e)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if !v.Field(i).IsZero() || (name == "Status" && (e.Kind == distributed.KindInvalidTransition || e.Kind == distributed.KindTaskNotQueued)) {
			seen[name] = true
		}
	}
}

// TestServer_WireErrorsRoundTripBounds: the capacity and result-bound kinds
// (results, total result bytes, queue, terminal reservation, active tasks,
// aggregate bytes) round-trip equal, in tenants small enough to reach each
// bound.
func TestServer_WireErrorsRoundTripBounds(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cx := context.Background()
	e := wireEnv{t: t, b: b, cx: cx}
	b.createTenant(t, "res", &pb.CoreLimits{MaxTaskRecords: 16, MaxActiveTasks: 4, MaxQueuedTasks: 2, MaxTerminalTasks: 4, MaxWorkers: 1,
		MaxLeaseTtlSecs: 60, MaxTaskTtlSecs: 3600, HeartbeatTimeoutSecs: 60},
		&pb.ResultLimits{MaxResults: 1, MaxResultBytes: 16, MaxTotalBytes: 64, MaxAggregateItems: 4, MaxAggregateBytes: 8})
	pk, wk := b.createKey(t, "res", "producer"), b.createKey(t, "res", "worker")
	p, w := e.client(pk), e.client(wk)
	pP, wP := e.principal(pk, "Producer", "Enqueue"), e.principal(wk, "Worker", "Heartbeat")
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	startAll := func(n int) []*pb.LeasedTask {
		t.Helper()
		acq, err := w.Acquire(cx, &pb.AcquireRequest{WorkerId: "rw", MaxTasks: uint32(n), Start: true})
		if err != nil || len(acq.GetTasks()) != n {
			t.Fatalf("acquire %d: %v %v", n, acq, err)
		}
		return acq.GetTasks()
	}
	must(w.RegisterWorker(cx, &pb.RegisterWorkerRequest{WorkerId: "rw", Capacity: 4}))
	must(p.Enqueue(cx, enqueueReq("rs", "r1", "r2")))
	leases := startAll(2)
	must(w.Complete(cx, &pb.CompleteRequest{LeaseToken: leases[0].GetLeaseToken(), Result: []byte("0123456789")}))
	r2 := leases[1].GetLeaseToken()

	check := func(name string, kind distributed.ErrorKind, apiErr, inErr error) {
		t.Helper()
		checkWireError(t, name, kind, apiErr, inErr)
	}
	_, err := w.Complete(cx, &pb.CompleteRequest{LeaseToken: r2, Result: []byte("x")})
	check("complete beyond MaxResults", distributed.KindResultCapacityReached, err,
		e.prop(wP, nil, &pb.Command{Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: e.lease(wP, r2), Result: []byte("x")}}})())

	err = p.Results(cx, "rs", func(string, []byte) error { return nil })
	tv, _ := b.node.FSM().Tenant("res")
	_, inErr := tv.AggregateResults([]string{"r1"})
	check("aggregate a result above MaxAggregateBytes", distributed.KindAggregateBytesExceeded, err, inErr)

	must(p.Enqueue(cx, enqueueReq("rs", "q1", "q2")))
	_, err = p.Enqueue(cx, enqueueReq("rs", "q3"))
	check("enqueue beyond MaxQueuedTasks", distributed.KindQueuedTaskCapacityReached, err, e.prop(pP, nil, enqueueCmd("q3"))())

	startAll(2) // terminal r1, active r2 q1 q2: one more breaks the reservation of 4
	_, err = p.Enqueue(cx, enqueueReq("rs", "q3"))
	check("enqueue into the terminal reservation", distributed.KindTerminalCapacityReserved, err, e.prop(pP, nil, enqueueCmd("q3"))())

	// Tenant act: two active tasks fill it long before any other bound.
	b.createTenant(t, "act", &pb.CoreLimits{MaxTaskRecords: 8, MaxActiveTasks: 2, MaxQueuedTasks: 2, MaxTerminalTasks: 4, MaxWorkers: 1,
		MaxLeaseTtlSecs: 60, MaxTaskTtlSecs: 3600, HeartbeatTimeoutSecs: 60}, nil)
	apk := b.createKey(t, "act", "producer")
	ap, apP := e.client(apk), e.principal(apk, "Producer", "Enqueue")
	must(ap.Enqueue(cx, enqueueReq("as", "a1", "a2")))
	_, err = ap.Enqueue(cx, enqueueReq("as", "a3"))
	check("enqueue beyond MaxActiveTasks", distributed.KindActiveTaskCapacityReached, err, e.prop(apP, nil, enqueueCmd("a3"))())

	// Tenant tot: room for results by count, not by total bytes.
	b.createTenant(t, "tot", nil, &pb.ResultLimits{MaxResults: 4, MaxResultBytes: 8, MaxTotalBytes: 8, MaxAggregateItems: 4, MaxAggregateBytes: 8})
	tpk, twk := b.createKey(t, "tot", "producer"), b.createKey(t, "tot", "worker")
	tp, tw, twP := e.client(tpk), e.client(twk), e.principal(twk, "Worker", "Heartbeat")
	must(tw.RegisterWorker(cx, &pb.RegisterWorkerRequest{WorkerId: "tw", Capacity: 2}))
	must(tp.Enqueue(cx, enqueueReq("ts", "t1", "t2")))
	tacq, err := tw.Acquire(cx, &pb.AcquireRequest{WorkerId: "tw", MaxTasks: 2, Start: true})
	if err != nil || len(tacq.GetTasks()) != 2 {
		t.Fatalf("tot acquire: %v %v", tacq, err)
	}
	must(tw.Complete(cx, &pb.CompleteRequest{LeaseToken: tacq.GetTasks()[0].GetLeaseToken(), Result: []byte("01234567")}))
	t2 := tacq.GetTasks()[1].GetLeaseToken()
	_, err = tw.Complete(cx, &pb.CompleteRequest{LeaseToken: t2, Result: []byte("x")})
	check("complete beyond MaxTotalBytes", distributed.KindTotalResultBytesExceeded, err,
		e.prop(twP, nil, &pb.Command{Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: e.lease(twP, t2), Result: []byte("x")}}})())
}
