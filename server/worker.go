package server

import (
	"cmp"
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/notify"
	"github.com/termivar/distributed/raftfsm"
)

type workerHandler struct{ s *Server }

func workerInfo(w distributed.WorkerNode) *pb.WorkerInfo {
	tags := make([]string, 0, len(w.Tags()))
	for _, t := range w.Tags() {
		tags = append(tags, t.String())
	}
	return &pb.WorkerInfo{
		WorkerId: w.WorkerID(), Generation: w.Generation(), Status: w.Status().String(),
		Capacity: w.Capacity(), CurrentTasks: w.CurrentTasks(), CompletedTasks: w.CompletedTasks(),
		LastHeartbeat: w.LastHeartbeat(), CpuBasisPoints: uint32(w.CPUBasisPoints()),
		MemoryBasisPoints: uint32(w.MemoryBasisPoints()), NetworkBasisPoints: uint32(w.NetworkBasisPoints()),
		Tags: tags, AvailableSlots: w.AvailableSlots(), EffectiveCapacity: w.EffectiveCapacity(),
	}
}

// invalidEnum is a value no core enum declares, so the core rejects it with
// its own reason.
const invalidEnum = 255

// parseEnum parses an enum name: def when it is empty, invalidEnum when
// parse does not know it.
func parseEnum[T ~uint8](name string, def T, parse func(string) (T, bool)) uint32 {
	if name == "" {
		return uint32(def)
	}
	if v, ok := parse(name); ok {
		return uint32(v)
	}
	return invalidEnum
}

func parseTags(names []string) []uint32 {
	out := make([]uint32, 0, len(names))
	for _, n := range names {
		out = append(out, parseEnum(n, invalidEnum, distributed.ParseWorkerTag))
	}
	return out
}

func (h workerHandler) RegisterWorker(ctx context.Context, req *connect.Request[pb.RegisterWorkerRequest]) (*connect.Response[pb.RegisterWorkerResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.RegisterWorkerRequest) (*pb.RegisterWorkerResponse, uint64, error) {
		spec := &pb.WorkerSpec{WorkerId: m.GetWorkerId(), Capacity: m.GetCapacity(), CpuBasisPoints: m.GetCpuBasisPoints(),
			MemoryBasisPoints: m.GetMemoryBasisPoints(), NetworkBasisPoints: m.GetNetworkBasisPoints(), Tags: parseTags(m.GetTags())}
		cmd := &pb.Command{Op: &pb.Command_RegisterWorker{RegisterWorker: &pb.RegisterWorker{Spec: spec}}}
		if m.ReactivateGeneration != nil {
			cmd.Op = &pb.Command_ReactivateWorker{ReactivateWorker: &pb.ReactivateWorker{OfflineGeneration: m.GetReactivateGeneration(), Spec: spec}}
		}
		w, rev, err := proposeAs[distributed.WorkerNode](ctx, h.s, p, m.ExpectedRevision, cmd, "RegisterWorker")
		if err != nil {
			return nil, rev, err
		}
		resp := &pb.RegisterWorkerResponse{Worker: workerInfo(w), Revision: rev}
		if tv, ok := h.s.node.Reads().Tenant(p.Tenant); ok {
			resp.MaxResultBytes = uint64(tv.ResultLimits().MaxResultBytes)
		}
		return resp, rev, nil
	})
}

func (h workerHandler) Heartbeat(ctx context.Context, req *connect.Request[pb.HeartbeatRequest]) (*connect.Response[pb.HeartbeatResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.HeartbeatRequest) (*pb.HeartbeatResponse, uint64, error) {
		status := parseEnum(m.GetStatus(), distributed.WorkerHealthy, distributed.ParseWorkerStatus)
		w, rev, err := proposeAs[distributed.WorkerNode](ctx, h.s, p, m.ExpectedRevision, &pb.Command{Op: &pb.Command_UpdateWorker{UpdateWorker: &pb.UpdateWorker{
			WorkerId: m.GetWorkerId(), Generation: m.GetGeneration(), Status: status, CpuBasisPoints: m.GetCpuBasisPoints(),
			MemoryBasisPoints: m.GetMemoryBasisPoints(), NetworkBasisPoints: m.GetNetworkBasisPoints()}}}, "UpdateWorker")
		if err != nil {
			return nil, rev, err
		}
		return &pb.HeartbeatResponse{Worker: workerInfo(w), Revision: rev}, rev, nil
	})
}

func (h workerHandler) Acquire(ctx context.Context, req *connect.Request[pb.AcquireRequest]) (*connect.Response[pb.AcquireResponse], error) {
	return call(ctx, h.s, req, true, h.acquire(nil))
}

// acquire is Acquire's work. early, when not nil, answers the carried
// completions of an Acquire that is about to long-poll at once (a worker
// session's interim answer); the final answer then has none.
func (h workerHandler) acquire(early func([]*pb.CompleteItemResult)) func(ctx context.Context, p principal, m *pb.AcquireRequest) (*pb.AcquireResponse, uint64, error) {
	return func(ctx context.Context, p principal, m *pb.AcquireRequest) (*pb.AcquireResponse, uint64, error) {
		if m.GetWaitSecs() > MaxWaitSecs {
			return nil, 0, errInvalid("wait_secs is above 60")
		}
		if m.GetMaxTasks() > raftfsm.MaxAcquireTasks {
			return nil, 0, errInvalid("max_tasks is above 256")
		}
		if len(m.GetComplete()) > MaxCompleteMany {
			return nil, 0, errInvalid("acquire completes at most 1024 items")
		}
		if len(m.GetComplete()) > 0 {
			return h.completeThenAcquire(ctx, p, m, early)
		}
		return h.acquireWithin(ctx, p, m)
	}
}

// acquireWithin is acquireOrWait bounded by the request's wait. An
// Acquire with no wait (a worker's carrying Acquire) only looks: a wait
// on a timer of 0 parked the handler once more per call for nothing
// (issue 15, low rates).
func (h workerHandler) acquireWithin(ctx context.Context, p principal, m *pb.AcquireRequest) (*pb.AcquireResponse, uint64, error) {
	if m.GetWaitSecs() == 0 {
		return h.acquireOrWait(ctx, p, m, nil)
	}
	deadline := time.NewTimer(time.Duration(m.GetWaitSecs()) * time.Second)
	defer deadline.Stop()
	return h.acquireOrWait(ctx, p, m, deadline.C)
}

// completeThenAcquire applies an Acquire's complete items before it
// leases, so the completions free the worker's capacity and are durable
// when the response reports them. When the tenant has a leasable task the
// AcquireTasks command is proposed with them (after them in the log: one
// entry when the proposer has room); when it has none, or that command
// finds none, the Acquire long-polls as without items.
func (h workerHandler) completeThenAcquire(ctx context.Context, p principal, m *pb.AcquireRequest, early func([]*pb.CompleteItemResult)) (*pb.AcquireResponse, uint64, error) {
	completed, cmds, idx := h.completeCommands(p, m.GetComplete())
	tv, _ := h.s.node.Reads().Tenant(p.Tenant)
	leasable := tv.HasLeasable()
	if leasable {
		cmds = append(cmds, h.acquireCommand(p, m))
	}
	var crev uint64
	if len(cmds) > 0 {
		rs, err := h.s.node.ProposeAll(ctx, cmds)
		if err != nil {
			return nil, 0, err
		}
		nc := len(idx)
		if crev, err = h.completeResults(p, completed, rs[:nc], idx); err != nil {
			return nil, crev, err
		}
		if leasable {
			if out, rev, done, err := h.acquiredWith(p, m, rs[nc], tv); done {
				return withCompleted(out, completed), max(rev, crev), err
			}
		}
	}
	if early != nil && m.GetWaitSecs() > 0 {
		early(completed)
		completed = nil
	}
	out, rev, err := h.acquireWithin(ctx, p, m)
	return withCompleted(out, completed), max(rev, crev), err
}

// acquiredWith answers an Acquire from the response r of its AcquireTasks
// (as acquireOrWait does); done is false when the command found no task,
// and the Acquire long-polls.
func (h workerHandler) acquiredWith(p principal, m *pb.AcquireRequest, r raftfsm.Response, tv raftfsm.TenantView) (*pb.AcquireResponse, uint64, bool, error) {
	if errors.Is(r.Err, distributed.ErrNoQueuedTask) {
		return nil, 0, false, nil
	}
	if r.Err != nil {
		return nil, r.Revision, true, r.Err
	}
	out, err := h.acquired(p, r)
	h.passRemainder(p.Tenant, cmp.Or(int(m.GetMaxTasks()), 1), len(out.GetTasks()), tv)
	return out, r.Revision, true, err
}

// withCompleted is out with its completed items (nil out: the call
// failed).
func withCompleted(out *pb.AcquireResponse, completed []*pb.CompleteItemResult) *pb.AcquireResponse {
	if out != nil {
		out.Completed = completed
	}
	return out
}

// acquireOrWait leases queued tasks to the caller, long-polling until the
// deadline while there are none (a nil deadline: no wait). It proposes
// only when the applied state has a leasable task (or answers from the
// lease an enqueue proposed for it: grantLeases), and waits in the
// node's Acquirers queue, which wakes about one waiter per new task; its
// side of the queue's contract (internal/notify.Queue) is here: a wake-up
// it does not use is passed on, work it cannot take wakes the waiters a
// broadcast would have woken, and taking less than it asked for while
// work is left wakes waiters for the difference.
func (h workerHandler) acquireOrWait(ctx context.Context, p principal, m *pb.AcquireRequest, deadline <-chan time.Time) (*pb.AcquireResponse, uint64, error) {
	q := h.s.node.Acquirers()
	tv, _ := h.s.node.Reads().Tenant(p.Tenant)
	want := cmp.Or(int(m.GetMaxTasks()), 1) // the FSM's default, too
	offer := acquireOffer{p: p, m: m}
	var woke uint64           // the bound of the wake-up that ended the last wait (0: none yet)
	refused := 0              // refusals since the last wait that saw a leasable task
	var granted *acquireGrant // the answer of an AcquireTasks an enqueue proposed for us (grantLeases)
	for {
		// NB: register before looking, so an enqueue between the look and
		// the wait still wakes us.
		w := q.Wait(p.Tenant, want)
		r, err := granted.orLook(func() (raftfsm.Response, error) { return h.tryAcquire(ctx, p, m, tv) })
		granted = nil
		switch {
		case err == nil:
			w.Cancel()
			out, err := h.acquired(p, r)
			h.passRemainder(p.Tenant, want, len(out.GetTasks()), tv)
			return out, r.Revision, err
		case !errors.Is(err, distributed.ErrNoQueuedTask):
			w.Leave()
			return nil, r.Revision, err
		case tv.HasLeasable():
			// Refused while tasks are leasable. When no task was leasable
			// at the refusal itself (raftfsm.AcquireRefused), other
			// Acquires took them first and these came since: look again.
			// One refused with a leasable task: the first time, look
			// again at once; the second, they are not for this worker
			// (tags). NB: counting races as refusals woke every waiter
			// several times a second with 1 024 workers (issue 15).
			if !raftfsm.RefusedLeasable(r) {
				w.Cancel()
				continue
			}
			if refused++; refused == 1 {
				w.Cancel()
				continue
			}
			if woke != 0 {
				q.WakeBefore(p.Tenant, woke) // the waiters a broadcast would have woken
			}
		}
		if deadline == nil || !h.wait(ctx, w, deadline, offer) {
			w.Leave()
			rev := cmp.Or(r.Revision, tv.Counters().Revision)
			return &pb.AcquireResponse{Revision: rev}, rev, nil
		}
		woke, refused = w.Gen(), 0
		granted, _ = w.Granted().(*acquireGrant)
	}
}

// acquireOffer is what a waiting Acquire offers an enqueue (notify.Queue
// Offer and Claim): what its AcquireTasks command is made of
// (acquireCommand), proposed by the enqueue in its own call, after the
// EnqueueTasks (grantLeases, on the same Server).
type acquireOffer struct {
	p principal
	m *pb.AcquireRequest
}

// acquireGrant is the answer of the AcquireTasks an enqueue proposed for
// a waiting Acquire, as tryAcquire answers its own.
type acquireGrant struct {
	r   raftfsm.Response
	err error
}

// orLook is g's answer, or look's when g is nil (no grant).
func (g *acquireGrant) orLook(look func() (raftfsm.Response, error)) (raftfsm.Response, error) {
	if g == nil {
		return look()
	}
	return g.r, g.err
}

// grantLeases proposes enqs, EnqueueTasks commands of n tasks in all,
// and an AcquireTasks for each Acquire long-poll that offered to wait for
// them (notify.Queue.Claim, the longest-waiting first, until their
// max_tasks cover n; grantShare), together: one log entry (one group for
// the proposer, node.ProposeAll) instead of the enqueue's entry and then
// one more per woken Acquire proposing its own (issue 15: at 2 000
// tasks/s in batches of 20 that was a third of the entries). Each
// claimed Acquire gets its command's
// response as if it had proposed it (acquireOrWait: leases, or a refusal
// it handles as its own). The responses of enqs come back as ProposeAll
// returns them.
//
// NB: with a claimed Acquire the commands are proposed without the
// enqueue caller's cancellation: the Acquire waits for its grant, and
// every proposal gets an answer (node: applied, failed, or ErrClosed).
func (s *Server) grantLeases(ctx context.Context, enqs []*pb.Command, tenant string, n int) ([]raftfsm.Response, error) {
	ws := s.node.Acquirers().Claim(tenant, n, n*grantShare)
	if len(ws) == 0 {
		return s.node.ProposeAll(ctx, enqs)
	}
	cmds := append(make([]*pb.Command, 0, len(enqs)+len(ws)), enqs...)
	for _, w := range ws {
		o := w.Offered().(acquireOffer)
		cmds = append(cmds, workerHandler{s}.acquireCommand(o.p, o.m))
	}
	rs, err := s.node.ProposeAll(context.WithoutCancel(ctx), cmds)
	for i, w := range ws {
		g := &acquireGrant{err: err}
		if err == nil {
			g.r = rs[len(enqs)+i]
			g.err = g.r.Err
		}
		w.Grant(g)
	}
	if err != nil {
		return nil, err
	}
	return rs[:len(enqs)], nil
}

// grantShare: an enqueue of n tasks claims only Acquires asking for at
// most grantShare × n (their max_tasks). One that would get less than an
// eighth of what it asks for is left to the wake-up: its own lease
// proposal comes an entry later and takes what further enqueues added
// meanwhile. NB: with one task per Enqueue at 2 000 tasks/s (coalesced
// into calls of a few requests) granting to every waiter answered each
// Acquire of 128 with 1–4 tasks, 0.61–0.89 API calls per task against
// 0.43–0.45 (docs/benchmarks.md, "2 000 tasks/s, session 7"); batches of
// 20 still go to workers asking for 128.
const grantShare = 8

// grantLease is grantLeases of one EnqueueTasks of n tasks, answered as
// Server.propose answers.
func (s *Server) grantLease(ctx context.Context, enq *pb.Command, tenant string, n int) (raftfsm.Response, error) {
	if s.node.Acquirers().Waiting(tenant) == 0 {
		r, err := s.node.Propose(ctx, enq)
		return r, raftfsm.ProposalErr(r, err)
	}
	rs, err := s.grantLeases(ctx, []*pb.Command{enq}, tenant, n)
	if err != nil {
		return raftfsm.Response{}, err
	}
	return rs[0], rs[0].Err
}

// passRemainder wakes waiters for the tasks an Acquire that asked for
// want leased fewer of (got; capacity, limits) while tasks are still
// leasable: its wake-up covered want of them.
func (h workerHandler) passRemainder(tenant string, want, got int, tv raftfsm.TenantView) {
	if got < want && tv.HasLeasable() {
		h.s.node.Acquirers().Notify(tenant, want-got)
	}
}

// tryAcquire proposes one AcquireTasks when the tenant has a leasable
// task (not only queued: due, and its scan not paused or full); without
// one it answers ErrNoQueuedTask without proposing.
func (h workerHandler) tryAcquire(ctx context.Context, p principal, m *pb.AcquireRequest, tv raftfsm.TenantView) (raftfsm.Response, error) {
	if !tv.HasLeasable() {
		return raftfsm.Response{}, distributed.ErrNoQueuedTask
	}
	return h.s.propose(ctx, p, nil, h.acquireCommand(p, m))
}

// acquireCommand is the AcquireTasks command of m (for p's tenant).
func (h workerHandler) acquireCommand(p principal, m *pb.AcquireRequest) *pb.Command {
	ttl := cmp.Or(m.GetLeaseTtlSecs(), h.s.cfg.DefaultLeaseTTLSecs)
	return &pb.Command{Tenant: p.Tenant, Principal: p.KeyID, Op: &pb.Command_AcquireTasks{AcquireTasks: &pb.AcquireTasks{
		WorkerId: m.GetWorkerId(), LeaseTtlSecs: ttl, MaxTasks: m.GetMaxTasks(), Start: m.GetStart()}}}
}

// wait blocks an Acquire until it is woken (true) or its wait ends:
// deadline, caller gone or server shutting down (false). While it blocks
// it offers its AcquireTasks to enqueues (grantLeases); one that claimed
// it is waited for (true) even when the wait ended: its leases are ours.
func (h workerHandler) wait(ctx context.Context, w *notify.Waiter, deadline <-chan time.Time, offer acquireOffer) bool {
	w.Offer(offer) // NB: before it counts as waiting (LongPollsWaiting), which tests wait for
	h.s.addLongPoll(1)
	defer h.s.addLongPoll(-1)
	select {
	case <-w.C():
		return true
	case <-deadline:
	case <-ctx.Done():
	case <-h.s.stopping: // shutting down: answer now, empty
	}
	if w.Withdraw() {
		<-w.C() // NB: grantLeases grants every waiter it claimed
		return true
	}
	return false
}

func (h workerHandler) acquired(p principal, r raftfsm.Response) (*pb.AcquireResponse, error) {
	acq, err := raftfsm.ValueAs[[]raftfsm.Acquired](r, "AcquireTasks")
	if err != nil {
		return nil, err
	}
	out := &pb.AcquireResponse{Revision: r.Revision, Tasks: make([]*pb.LeasedTask, 0, len(acq))}
	codec := h.s.node.Codec()
	for _, a := range acq {
		out.Tasks = append(out.Tasks, &pb.LeasedTask{
			LeaseToken: codec.SealLease(p.Tenant, a.Lease), TaskId: a.Task.TaskID(), ScanId: a.Task.ScanID(),
			TargetRef: a.Task.TargetRef(), Phases: a.Task.Phases(), Priority: uint32(a.Task.Priority()),
			Attempt: a.Lease.Attempt(), LeaseId: a.Lease.LeaseID(), ExpiresAt: a.Lease.ExpiresAt(), Started: a.Started,
			AttemptTimeoutSecs: a.Task.AttemptTimeoutSecs(),
		})
	}
	return out, nil
}

func (s *Server) leaseBytes(p principal, tok []byte) ([]byte, error) {
	l, err := s.node.Codec().OpenLease(p.Tenant, tok)
	if err != nil {
		return nil, err
	}
	b, _ := l.MarshalBinary()
	return b, nil
}

func (h workerHandler) Start(ctx context.Context, req *connect.Request[pb.StartRequest]) (*connect.Response[pb.StartResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.StartRequest) (*pb.StartResponse, uint64, error) {
		lb, err := h.s.leaseBytes(p, m.GetLeaseToken())
		if err != nil {
			return nil, 0, err
		}
		v, rev, err := proposeAs[distributed.StartOutcome](ctx, h.s, p, m.ExpectedRevision, &pb.Command{Op: &pb.Command_StartTask{StartTask: &pb.StartTask{Lease: lb}}}, "StartTask")
		if err != nil {
			return nil, rev, err
		}
		return &pb.StartResponse{StartedAt: v.StartedAt, AlreadyStarted: v.Kind == distributed.StartAlreadyStarted, Revision: rev}, rev, nil
	})
}

func (h workerHandler) RenewLease(ctx context.Context, req *connect.Request[pb.RenewLeaseRequest]) (*connect.Response[pb.RenewLeaseResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.RenewLeaseRequest) (*pb.RenewLeaseResponse, uint64, error) {
		lb, err := h.s.leaseBytes(p, m.GetLeaseToken())
		if err != nil {
			return nil, 0, err
		}
		ttl := cmp.Or(m.GetLeaseTtlSecs(), h.s.cfg.DefaultLeaseTTLSecs)
		l, rev, err := proposeAs[distributed.TaskLease](ctx, h.s, p, m.ExpectedRevision, &pb.Command{Op: &pb.Command_RenewLease{RenewLease: &pb.RenewLease{Lease: lb, LeaseTtlSecs: ttl}}}, "RenewLease")
		if err != nil {
			return nil, rev, err
		}
		return &pb.RenewLeaseResponse{LeaseToken: h.s.node.Codec().SealLease(p.Tenant, l), LeaseId: l.LeaseID(), ExpiresAt: l.ExpiresAt(), Revision: rev}, rev, nil
	})
}

func (s *Server) completeResponse(p principal, r raftfsm.Response) (*pb.CompleteResponse, error) {
	v, err := raftfsm.ValueAs[raftfsm.CompleteValue](r, "CompleteTask")
	if err != nil {
		return nil, err
	}
	return &pb.CompleteResponse{
		ReceiptToken:     s.node.Codec().SealReceipt(p.Tenant, v.Completion.Receipt),
		AlreadyCompleted: v.Completion.Kind == distributed.AlreadyCompleted,
		AlreadyStored:    v.Store.Kind == distributed.AlreadyStored,
		Revision:         r.Revision,
	}, nil
}

func (h workerHandler) Complete(ctx context.Context, req *connect.Request[pb.CompleteRequest]) (*connect.Response[pb.CompleteResponse], error) {
	return call(ctx, h.s, req, true, h.complete)
}

// complete is Complete's work.
func (h workerHandler) complete(ctx context.Context, p principal, m *pb.CompleteRequest) (*pb.CompleteResponse, uint64, error) {
	lb, err := h.s.leaseBytes(p, m.GetLeaseToken())
	if err != nil {
		return nil, 0, err
	}
	r, err := h.s.propose(ctx, p, m.ExpectedRevision, &pb.Command{Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: lb, Result: m.GetResult()}}})
	if err != nil {
		return nil, r.Revision, err
	}
	out, err := h.s.completeResponse(p, r)
	return out, r.Revision, err
}

func (h workerHandler) CompleteMany(ctx context.Context, req *connect.Request[pb.CompleteManyRequest]) (*connect.Response[pb.CompleteManyResponse], error) {
	return call(ctx, h.s, req, true, h.completeMany)
}

// completeMany is CompleteMany's work.
func (h workerHandler) completeMany(ctx context.Context, p principal, m *pb.CompleteManyRequest) (*pb.CompleteManyResponse, uint64, error) {
	items := m.GetItems()
	if len(items) == 0 || len(items) > MaxCompleteMany {
		return nil, 0, errInvalid("complete_many needs 1 to 1024 items")
	}
	res, rev, err := h.completeItems(ctx, p, items)
	if err != nil {
		return nil, rev, err
	}
	return &pb.CompleteManyResponse{Results: res}, rev, nil
}

// completeItems completes each item alone (CompleteMany, and Acquire's
// complete items), proposed together, and answers them by position once
// applied: an item's failure (an invalid token, a fenced lease) is its own
// result; only an infrastructure error fails the whole call.
func (h workerHandler) completeItems(ctx context.Context, p principal, items []*pb.CompleteRequest) ([]*pb.CompleteItemResult, uint64, error) {
	out, cmds, idx := h.completeCommands(p, items)
	if len(cmds) == 0 {
		return out, 0, nil
	}
	rs, err := h.s.node.ProposeAll(ctx, cmds)
	if err != nil {
		return nil, 0, err
	}
	rev, err := h.completeResults(p, out, rs, idx)
	return out, rev, err
}

// completeCommands are the CompleteTask commands of items; out holds the
// results of the items refused before proposing, idx each command's item.
func (h workerHandler) completeCommands(p principal, items []*pb.CompleteRequest) (out []*pb.CompleteItemResult, cmds []*pb.Command, idx []int) {
	out = make([]*pb.CompleteItemResult, len(items))
	cmds = make([]*pb.Command, 0, len(items)+1) // NB: room for Acquire's own command
	idx = make([]int, 0, len(items))
	for i, it := range items {
		lb, err := h.s.leaseBytes(p, it.GetLeaseToken())
		if err != nil {
			_, d := classify(err)
			out[i] = &pb.CompleteItemResult{Error: d}
			continue
		}
		cmds = append(cmds, &pb.Command{Tenant: p.Tenant, Principal: p.KeyID, ExpectedRevision: it.ExpectedRevision,
			Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: lb, Result: it.GetResult()}}})
		idx = append(idx, i)
	}
	return out, cmds, idx
}

// completeResults fills out from the responses rs of the commands at idx
// and returns the highest revision.
func (h workerHandler) completeResults(p principal, out []*pb.CompleteItemResult, rs []raftfsm.Response, idx []int) (uint64, error) {
	var rev uint64
	for j, r := range rs {
		rev = max(rev, r.Revision)
		if r.Err != nil {
			_, d := classify(r.Err)
			out[idx[j]] = &pb.CompleteItemResult{Error: d}
			continue
		}
		cr, err := h.s.completeResponse(p, r)
		if err != nil {
			return rev, err
		}
		out[idx[j]] = &pb.CompleteItemResult{Response: cr}
	}
	return rev, nil
}

func (h workerHandler) Fail(ctx context.Context, req *connect.Request[pb.FailRequest]) (*connect.Response[pb.FailResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.FailRequest) (*pb.FailResponse, uint64, error) {
		lb, err := h.s.leaseBytes(p, m.GetLeaseToken())
		if err != nil {
			return nil, 0, err
		}
		if err := distributed.ValidateFailureReason(m.GetReason()); err != nil {
			return nil, 0, err
		}
		v, rev, err := proposeAs[distributed.FailureOutcome](ctx, h.s, p, m.ExpectedRevision, &pb.Command{Op: &pb.Command_FailTask{FailTask: &pb.FailTask{Lease: lb, Reason: m.GetReason()}}}, "FailTask")
		if err != nil {
			return nil, rev, err
		}
		return &pb.FailResponse{Requeued: v.Kind == distributed.Requeued, RetryExhausted: v.Kind == distributed.RetryExhausted,
			TaskGeneration: v.TaskGeneration, RetryCount: v.RetryCount, Revision: rev}, rev, nil
	})
}

func summary(s distributed.RecoverySummary) *pb.RecoverySummary {
	return &pb.RecoverySummary{WorkersAffected: uint32(s.WorkersAffected), TasksRequeued: uint32(s.TasksRequeued), TasksFailed: uint32(s.TasksFailed)}
}

func (h workerHandler) Deregister(ctx context.Context, req *connect.Request[pb.DeregisterRequest]) (*connect.Response[pb.DeregisterResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.DeregisterRequest) (*pb.DeregisterResponse, uint64, error) {
		sum, rev, err := proposeAs[distributed.RecoverySummary](ctx, h.s, p, m.ExpectedRevision, &pb.Command{Op: &pb.Command_DeregisterWorker{DeregisterWorker: &pb.DeregisterWorker{WorkerId: m.GetWorkerId(), Generation: m.GetGeneration()}}}, "DeregisterWorker")
		if err != nil {
			return nil, rev, err
		}
		return &pb.DeregisterResponse{Summary: summary(sum), Revision: rev}, rev, nil
	})
}
