// Package clienttest is a test-only, in-memory stand-in for a termivar node:
// it serves the Worker, Producer and Admin Connect services over one core
// WorkerPool with no raft, no durability and unauthenticated tokens (lease
// and fence tokens are the core's plain binary encodings, and any non-empty
// bearer key is accepted). It lets the client, the agent and the CLI be
// tested in milliseconds without a node.
//
// Do not use it outside tests: it trusts every token it is given.
package clienttest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
)

// Options configures a Server. Zero values take the core's defaults.
type Options struct {
	// Limits are the pool's limits (default distributed.DefaultLimits).
	Limits distributed.Limits
	// MaxResultBytes bounds one result (default 1 MiB).
	MaxResultBytes int
	// TickInterval is the cadence of lease recovery and dead-worker pruning
	// (default 100 ms).
	TickInterval time.Duration
}

// Server is a running fake node. Its methods are safe for concurrent use.
type Server struct {
	// URL is the base URL to give client.Config.ServerURL.
	URL string

	opts    Options
	http    *httptest.Server
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	pool    *distributed.WorkerPool
	results map[string][]byte
	scans   map[string][]string
	wake    chan struct{} // closed and replaced when tasks are enqueued or requeued
	start   time.Time
	offset  uint64 // added to the logical clock by Advance
	// Renewals counts RenewLease calls; tests read it.
	renewals int
}

// New starts a fake node on a loopback port. Close it when done.
func New(opts Options) (*Server, error) {
	if opts.Limits == (distributed.Limits{}) {
		opts.Limits = distributed.DefaultLimits()
	}
	if opts.MaxResultBytes == 0 {
		opts.MaxResultBytes = 1 << 20
	}
	if opts.TickInterval == 0 {
		opts.TickInterval = 100 * time.Millisecond
	}
	pool, err := distributed.NewWorkerPoolWithLimits(opts.Limits)
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts: opts, pool: pool, stop: make(chan struct{}),
		results: make(map[string][]byte), scans: make(map[string][]string),
		wake: make(chan struct{}), start: time.Now(),
	}
	mux := http.NewServeMux()
	h := &handler{s: s}
	mux.Handle(termivarv1connect.NewWorkerHandler(h))
	mux.Handle(termivarv1connect.NewProducerHandler(h))
	mux.Handle(termivarv1connect.NewAdminHandler(h))
	s.http = httptest.NewServer(requireBearer(mux))
	s.URL = s.http.URL
	s.wg.Add(1)
	go s.tickLoop()
	return s, nil
}

// Close stops the server.
func (s *Server) Close() {
	close(s.stop)
	s.wg.Wait()
	s.http.CloseClientConnections()
	s.http.Close()
}

// Advance moves the logical clock forward (to expire leases or heartbeats
// without waiting).
func (s *Server) Advance(d time.Duration) {
	s.mu.Lock()
	s.offset += uint64(d / time.Second)
	s.mu.Unlock()
	s.tick()
}

// Renewals returns how many RenewLease calls succeeded.
func (s *Server) Renewals() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewals
}

// Pool runs fn on the pool under the server's lock (tests inspect or mutate
// state with it; pass Rev() and Now() to mutations).
func (s *Server) Pool(fn func(p *distributed.WorkerPool, rev, now uint64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s.pool, s.rev(), s.now())
	s.wakeLocked()
}

func requireBearer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); !ok || k == "" {
			http.Error(w, "unauthenticated", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// now is the logical time in whole seconds; callers hold mu. It never goes
// below the pool's logical time.
func (s *Server) now() uint64 {
	n := uint64(time.Since(s.start)/time.Second) + 1 + s.offset
	return max(n, s.pool.Snapshot().LogicalTime)
}

func (s *Server) rev() uint64 { return s.pool.Snapshot().Revision }

func (s *Server) wakeLocked() {
	close(s.wake)
	s.wake = make(chan struct{})
}

func (s *Server) tickLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.tick()
		}
	}
}

func (s *Server) tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, _ := s.pool.RecoverExpiredLeases(s.rev(), s.now())
	b, _ := s.pool.PruneDeadWorkers(s.rev(), s.now())
	if a.Value.TasksRequeued+b.Value.TasksRequeued > 0 {
		s.wakeLocked()
	}
}

// toConnect maps a core error to a Connect error with an ErrorDetail.
func toConnect(err error) error {
	var e *distributed.Error
	if !errors.As(err, &e) {
		return connect.NewError(connect.CodeInternal, err)
	}
	code := connect.CodeFailedPrecondition
	switch e.Kind {
	case distributed.KindTaskNotFound, distributed.KindWorkerNotFound:
		code = connect.CodeNotFound
	case distributed.KindTaskAlreadyExists, distributed.KindWorkerAlreadyExists:
		code = connect.CodeAlreadyExists
	case distributed.KindInvalidTask, distributed.KindInvalidWorker, distributed.KindLeaseTTLOutOfRange:
		code = connect.CodeInvalidArgument
	case distributed.KindRevisionConflict, distributed.KindStaleOwnership, distributed.KindWorkerGenerationConflict:
		code = connect.CodeAborted
	case distributed.KindResultTooLarge, distributed.KindQueuedTaskCapacityReached, distributed.KindTaskRecordCapacityReached:
		code = connect.CodeResourceExhausted
	}
	ce := connect.NewError(code, errors.New(e.Kind.String()))
	if d, derr := connect.NewErrorDetail(&pb.ErrorDetail{Kind: e.Kind.String(), Reason: e.Reason, Expected: e.Expected, Actual: e.Actual, Limit: e.Limit}); derr == nil {
		ce.AddDetail(d)
	}
	return ce
}

func invalidArg(msg string) error {
	ce := connect.NewError(connect.CodeInvalidArgument, errors.New(msg))
	if d, err := connect.NewErrorDetail(&pb.ErrorDetail{Kind: "invalid_argument", Reason: msg}); err == nil {
		ce.AddDetail(d)
	}
	return ce
}

func leaseFrom(b []byte) (distributed.TaskLease, error) {
	var l distributed.TaskLease
	if err := l.UnmarshalBinary(b); err != nil {
		return l, invalidArg("bad lease token")
	}
	return l, nil
}

func mustMarshal(m interface{ MarshalBinary() ([]byte, error) }) []byte {
	b, err := m.MarshalBinary()
	if err != nil {
		panic("clienttest: marshal of a core proof failed: " + err.Error())
	}
	return b
}

func workerInfo(w distributed.WorkerNode) *pb.WorkerInfo {
	tags := make([]string, 0, len(w.Tags()))
	for _, t := range w.Tags() {
		tags = append(tags, t.String())
	}
	return &pb.WorkerInfo{
		WorkerId: w.WorkerID(), Generation: w.Generation(), Status: w.Status().String(), Capacity: w.Capacity(),
		CurrentTasks: w.CurrentTasks(), CompletedTasks: w.CompletedTasks(), LastHeartbeat: w.LastHeartbeat(),
		CpuBasisPoints: uint32(w.CPUBasisPoints()), MemoryBasisPoints: uint32(w.MemoryBasisPoints()),
		NetworkBasisPoints: uint32(w.NetworkBasisPoints()), Tags: tags, AvailableSlots: w.AvailableSlots(),
	}
}

func (s *Server) taskInfo(t distributed.ScanTask) *pb.TaskInfo {
	ti := &pb.TaskInfo{
		TaskId: t.TaskID(), ScanId: t.ScanID(), TargetRef: t.TargetRef(), Phases: t.Phases(), Priority: t.Priority().String(),
		Status: t.Status().String(), CreatedAt: t.CreatedAt(), RetryCount: t.RetryCount(), Attempt: t.Attempt(),
		TaskGeneration: t.TaskGeneration(), RecordVersion: t.RecordVersion(),
	}
	if v, ok := t.StartedAt(); ok {
		ti.StartedAt = &v
	}
	if v, ok := t.CompletedAt(); ok {
		ti.CompletedAt = &v
	}
	if l, ok := t.Lease(); ok {
		ti.AssignedTo, ti.LeaseId, ti.LeaseExpiresAt = l.WorkerID(), l.LeaseID(), l.ExpiresAt()
	}
	if o, ok := t.Ownership(); ok {
		if f, isFence := o.Fence(); isFence {
			ti.FenceToken = mustMarshal(f)
		}
	}
	_, ti.HasResult = s.results[t.TaskID()]
	return ti
}

func spec(r *pb.RegisterWorkerRequest) (distributed.WorkerSpec, error) {
	sp := distributed.WorkerSpec{
		WorkerID: r.GetWorkerId(), Capacity: r.GetCapacity(), CPUBasisPoints: uint16(r.GetCpuBasisPoints()),
		MemoryBasisPoints: uint16(r.GetMemoryBasisPoints()), NetworkBasisPoints: uint16(r.GetNetworkBasisPoints()),
	}
	for _, t := range r.GetTags() {
		tag, ok := distributed.ParseWorkerTag(t)
		if !ok {
			return sp, invalidArg("unknown tag")
		}
		sp.Tags = append(sp.Tags, tag)
	}
	return sp, nil
}

// handler implements the three services.
type handler struct {
	termivarv1connect.UnimplementedWorkerHandler
	termivarv1connect.UnimplementedProducerHandler
	termivarv1connect.UnimplementedAdminHandler
	s *Server
}

func (h *handler) RegisterWorker(_ context.Context, req *connect.Request[pb.RegisterWorkerRequest]) (*connect.Response[pb.RegisterWorkerResponse], error) {
	s := h.s
	sp, err := spec(req.Msg)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var tr distributed.Transition[distributed.WorkerNode]
	if req.Msg.ReactivateGeneration != nil {
		tr, err = s.pool.ReactivateWorker(s.rev(), s.now(), req.Msg.GetReactivateGeneration(), sp)
	} else {
		tr, err = s.pool.RegisterWorker(s.rev(), s.now(), sp)
	}
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.RegisterWorkerResponse{Worker: workerInfo(tr.Value), Revision: tr.Revision, MaxResultBytes: uint64(s.opts.MaxResultBytes)}), nil
}

func (h *handler) Heartbeat(_ context.Context, req *connect.Request[pb.HeartbeatRequest]) (*connect.Response[pb.HeartbeatResponse], error) {
	s := h.s
	st := distributed.WorkerHealthy
	if req.Msg.GetStatus() != "" {
		var ok bool
		if st, ok = distributed.ParseWorkerStatus(req.Msg.GetStatus()); !ok {
			return nil, invalidArg("unknown status")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tr, err := s.pool.UpdateWorker(s.rev(), s.now(), req.Msg.GetWorkerId(), req.Msg.GetGeneration(), distributed.WorkerObservation{
		Status: st, CPUBasisPoints: uint16(req.Msg.GetCpuBasisPoints()), MemoryBasisPoints: uint16(req.Msg.GetMemoryBasisPoints()),
	})
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.HeartbeatResponse{Worker: workerInfo(tr.Value), Revision: tr.Revision}), nil
}

func (h *handler) Acquire(ctx context.Context, req *connect.Request[pb.AcquireRequest]) (*connect.Response[pb.AcquireResponse], error) {
	s := h.s
	maxTasks := max(int(req.Msg.GetMaxTasks()), 1)
	ttl := req.Msg.GetLeaseTtlSecs()
	if ttl == 0 {
		ttl = 30
	}
	wait := time.NewTimer(time.Duration(min(req.Msg.GetWaitSecs(), 60)) * time.Second)
	defer wait.Stop()
	for {
		s.mu.Lock()
		var out []*pb.LeasedTask
		var err error
		for len(out) < maxTasks {
			var tr distributed.Transition[distributed.TaskLease]
			tr, err = s.pool.AssignNext(s.rev(), s.now(), req.Msg.GetWorkerId(), ttl)
			if err != nil {
				break
			}
			l := tr.Value
			started := false
			if req.Msg.GetStart() {
				if _, serr := s.pool.StartTask(s.rev(), s.now(), l); serr == nil {
					started = true
				}
			}
			t, _, _ := s.pool.GetTask(l.TaskID())
			out = append(out, &pb.LeasedTask{
				LeaseToken: mustMarshal(l), TaskId: l.TaskID(), ScanId: t.ScanID(), TargetRef: t.TargetRef(), Phases: t.Phases(),
				Priority: uint32(t.Priority()), Attempt: l.Attempt(), LeaseId: l.LeaseID(), ExpiresAt: l.ExpiresAt(), Started: started,
			})
		}
		wake := s.wake
		rev := s.rev()
		s.mu.Unlock()
		if len(out) > 0 {
			return connect.NewResponse(&pb.AcquireResponse{Tasks: out, Revision: rev}), nil
		}
		if !errors.Is(err, distributed.ErrNoQueuedTask) && !errors.Is(err, distributed.ErrWorkerAtCapacity) {
			return nil, toConnect(err)
		}
		select {
		case <-ctx.Done():
			return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
		case <-wait.C:
			return connect.NewResponse(&pb.AcquireResponse{Revision: rev}), nil
		case <-wake:
		}
	}
}

func (h *handler) Start(_ context.Context, req *connect.Request[pb.StartRequest]) (*connect.Response[pb.StartResponse], error) {
	s := h.s
	l, err := leaseFrom(req.Msg.GetLeaseToken())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tr, err := s.pool.StartTask(s.rev(), s.now(), l)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.StartResponse{StartedAt: tr.Value.StartedAt, AlreadyStarted: tr.Value.Kind == distributed.StartAlreadyStarted, Revision: tr.Revision}), nil
}

func (h *handler) RenewLease(_ context.Context, req *connect.Request[pb.RenewLeaseRequest]) (*connect.Response[pb.RenewLeaseResponse], error) {
	s := h.s
	l, err := leaseFrom(req.Msg.GetLeaseToken())
	if err != nil {
		return nil, err
	}
	ttl := req.Msg.GetLeaseTtlSecs()
	if ttl == 0 {
		ttl = 30
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tr, err := s.pool.RenewLease(s.rev(), s.now(), l, ttl)
	if err != nil {
		return nil, toConnect(err)
	}
	s.renewals++
	return connect.NewResponse(&pb.RenewLeaseResponse{LeaseToken: mustMarshal(tr.Value), LeaseId: tr.Value.LeaseID(), ExpiresAt: tr.Value.ExpiresAt(), Revision: tr.Revision}), nil
}

func (h *handler) Complete(_ context.Context, req *connect.Request[pb.CompleteRequest]) (*connect.Response[pb.CompleteResponse], error) {
	s := h.s
	l, err := leaseFrom(req.Msg.GetLeaseToken())
	if err != nil {
		return nil, err
	}
	if len(req.Msg.GetResult()) > s.opts.MaxResultBytes {
		return nil, toConnect(&distributed.Error{Kind: distributed.KindResultTooLarge, Limit: uint64(s.opts.MaxResultBytes), Actual: uint64(len(req.Msg.GetResult()))})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tr, err := s.pool.CompleteTask(s.rev(), s.now(), l)
	if err != nil {
		return nil, toConnect(err)
	}
	_, had := s.results[l.TaskID()]
	if !had {
		s.results[l.TaskID()] = slices.Clone(req.Msg.GetResult())
	}
	s.wakeLocked() // a slot is free
	return connect.NewResponse(&pb.CompleteResponse{
		ReceiptToken: mustMarshal(tr.Value.Receipt), AlreadyCompleted: tr.Value.Kind == distributed.AlreadyCompleted,
		AlreadyStored: had, Revision: tr.Revision,
	}), nil
}

func (h *handler) Fail(_ context.Context, req *connect.Request[pb.FailRequest]) (*connect.Response[pb.FailResponse], error) {
	s := h.s
	l, err := leaseFrom(req.Msg.GetLeaseToken())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tr, err := s.pool.FailTask(s.rev(), s.now(), l)
	if err != nil {
		return nil, toConnect(err)
	}
	s.wakeLocked()
	return connect.NewResponse(&pb.FailResponse{
		Requeued: tr.Value.Kind == distributed.Requeued, RetryExhausted: tr.Value.Kind == distributed.RetryExhausted,
		TaskGeneration: tr.Value.TaskGeneration, RetryCount: tr.Value.RetryCount, Revision: tr.Revision,
	}), nil
}

func (h *handler) Deregister(_ context.Context, req *connect.Request[pb.DeregisterRequest]) (*connect.Response[pb.DeregisterResponse], error) {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	tr, err := s.pool.DeregisterWorker(s.rev(), s.now(), req.Msg.GetWorkerId(), req.Msg.GetGeneration())
	if err != nil {
		return nil, toConnect(err)
	}
	s.wakeLocked()
	v := tr.Value
	return connect.NewResponse(&pb.DeregisterResponse{Summary: &pb.RecoverySummary{
		WorkersAffected: uint32(v.WorkersAffected), TasksRequeued: uint32(v.TasksRequeued), TasksFailed: uint32(v.TasksFailed),
	}, Revision: tr.Revision}), nil
}

func (h *handler) Enqueue(_ context.Context, req *connect.Request[pb.EnqueueRequest]) (*connect.Response[pb.EnqueueResponse], error) {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range req.Msg.GetTasks() {
		if _, ok, _ := s.pool.GetTask(t.GetTaskId()); ok {
			return nil, toConnect(&distributed.Error{Kind: distributed.KindTaskAlreadyExists, TaskID: t.GetTaskId()})
		}
	}
	out := make([]*pb.EnqueuedTask, 0, len(req.Msg.GetTasks()))
	for _, t := range req.Msg.GetTasks() {
		prio := distributed.PriorityNormal
		if t.GetPriority() != "" {
			var ok bool
			if prio, ok = distributed.ParseTaskPriority(t.GetPriority()); !ok {
				return nil, invalidArg("unknown priority")
			}
		}
		tr, err := s.pool.Enqueue(s.rev(), s.now(), distributed.TaskSpec{TaskID: t.GetTaskId(), ScanID: t.GetScanId(), TargetRef: t.GetTargetRef(), Phases: t.GetPhases(), Priority: prio})
		if err != nil {
			return nil, toConnect(err)
		}
		s.scans[t.GetScanId()] = append(s.scans[t.GetScanId()], t.GetTaskId())
		o, _ := tr.Value.Ownership()
		f, _ := o.Fence()
		out = append(out, &pb.EnqueuedTask{TaskId: t.GetTaskId(), FenceToken: mustMarshal(f)})
	}
	s.wakeLocked()
	return connect.NewResponse(&pb.EnqueueResponse{Tasks: out, Revision: s.rev()}), nil
}

func (h *handler) Cancel(_ context.Context, req *connect.Request[pb.CancelRequest]) (*connect.Response[pb.CancelResponse], error) {
	s := h.s
	if id := req.Msg.GetTaskId(); id != "" {
		return s.cancelByID(id)
	}
	var own distributed.TaskOwnership
	var f distributed.QueuedTaskFence
	if err := f.UnmarshalBinary(req.Msg.GetOwnershipToken()); err == nil {
		own = distributed.OwnershipFromFence(f)
	} else {
		l, err := leaseFrom(req.Msg.GetOwnershipToken())
		if err != nil {
			return nil, err
		}
		own = distributed.OwnershipFromLease(l)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tr, err := s.pool.CancelTask(s.rev(), s.now(), own)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.CancelResponse{AlreadyCancelled: tr.Value.Kind == distributed.AlreadyCancelled, Revision: tr.Revision}), nil
}

// cancelByID mirrors the node's cancel by task ID: the core's
// CancelTaskByID cancels with the task's current ownership, an expired lease
// included.
func (s *Server) cancelByID(id string) (*connect.Response[pb.CancelResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := distributed.TaskStatus(0)
	if t, ok, err := s.pool.GetTask(id); err == nil && ok {
		prev = t.Status()
	}
	tr, err := s.pool.CancelTaskByID(s.rev(), s.now(), id)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.CancelResponse{AlreadyCancelled: tr.Value.Kind == distributed.AlreadyCancelled, PreviousStatus: prev.String(), Revision: tr.Revision}), nil
}

func (h *handler) GetTask(_ context.Context, req *connect.Request[pb.GetTaskRequest]) (*connect.Response[pb.GetTaskResponse], error) {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok, err := s.pool.GetTask(req.Msg.GetTaskId())
	if err != nil {
		return nil, toConnect(err)
	}
	if !ok {
		return nil, toConnect(&distributed.Error{Kind: distributed.KindTaskNotFound})
	}
	return connect.NewResponse(&pb.GetTaskResponse{Task: s.taskInfo(t)}), nil
}

func (h *handler) ListTasks(_ context.Context, req *connect.Request[pb.ListTasksRequest]) (*connect.Response[pb.ListTasksResponse], error) {
	s := h.s
	size := int(req.Msg.GetPageSize())
	if size == 0 {
		size = 100
	}
	size = min(size, 1000)
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*pb.TaskInfo
	next := ""
	for _, t := range s.pool.Tasks() { // sorted by task ID
		if t.TaskID() <= req.Msg.GetPageToken() ||
			(req.Msg.GetScanId() != "" && t.ScanID() != req.Msg.GetScanId()) ||
			(req.Msg.GetStatus() != "" && t.Status().String() != req.Msg.GetStatus()) {
			continue
		}
		if len(out) == size {
			next = out[len(out)-1].GetTaskId()
			break
		}
		out = append(out, s.taskInfo(t))
	}
	return connect.NewResponse(&pb.ListTasksResponse{Tasks: out, NextPageToken: next}), nil
}

func (h *handler) ScanProgress(_ context.Context, req *connect.Request[pb.ScanProgressRequest]) (*connect.Response[pb.ScanProgressResponse], error) {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	p := &pb.ScanProgressResponse{}
	for _, id := range s.scans[req.Msg.GetScanId()] {
		t, ok, _ := s.pool.GetTask(id)
		if !ok {
			continue
		}
		p.Total++
		switch t.Status() {
		case distributed.TaskQueued:
			p.Queued++
		case distributed.TaskLeased:
			p.Leased++
		case distributed.TaskRunning:
			p.Running++
		case distributed.TaskCompleted:
			p.Completed++
		case distributed.TaskFailed:
			p.Failed++
		case distributed.TaskCancelled:
			p.Cancelled++
		case distributed.TaskExpired:
			p.Expired++
		}
		if _, ok := s.results[id]; ok {
			p.Results++
		}
	}
	return connect.NewResponse(p), nil
}

func (h *handler) AggregateResults(_ context.Context, req *connect.Request[pb.AggregateResultsRequest], stream *connect.ServerStream[pb.AggregateResultsResponse]) error {
	s := h.s
	s.mu.Lock()
	var out []*pb.AggregateResultsResponse
	for _, id := range s.scans[req.Msg.GetScanId()] {
		if r, ok := s.results[id]; ok {
			out = append(out, &pb.AggregateResultsResponse{TaskId: id, Result: slices.Clone(r)})
		}
	}
	s.mu.Unlock()
	for _, m := range out {
		if err := stream.Send(m); err != nil {
			return err
		}
	}
	return nil
}

func (h *handler) Status(_ context.Context, _ *connect.Request[pb.StatusRequest]) (*connect.Response[pb.StatusResponse], error) {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	sn := s.pool.Snapshot()
	return connect.NewResponse(&pb.StatusResponse{
		Tenant: "system", Revision: sn.Revision, LogicalTime: sn.LogicalTime, TaskRecords: uint32(sn.TaskRecords),
		ActiveTasks: uint32(sn.ActiveTasks), QueuedTasks: uint32(sn.QueuedTasks), TerminalTasks: uint32(sn.TerminalTasks),
		Workers: uint32(sn.Workers), Results: uint32(len(s.results)), RaftState: "Leader", NodeId: "clienttest",
	}), nil
}

func (h *handler) ListWorkers(_ context.Context, _ *connect.Request[pb.ListWorkersRequest]) (*connect.Response[pb.ListWorkersResponse], error) {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*pb.WorkerInfo
	for _, w := range s.pool.Workers() {
		out = append(out, workerInfo(w))
	}
	return connect.NewResponse(&pb.ListWorkersResponse{Workers: out}), nil
}
