package server

import (
	"cmp"
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/raftfsm"
)

type producerHandler struct{ s *Server }

// Paging bounds of ListTasks.
const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

func (h producerHandler) Enqueue(ctx context.Context, req *connect.Request[pb.EnqueueRequest]) (*connect.Response[pb.EnqueueResponse], error) {
	return call(ctx, h.s, req, true, h.enqueueOne)
}

// enqueueOne is one Enqueue request, checked and proposed: Enqueue's
// handler and each request of an EnqueueMany (enqueue_many.go).
func (h producerHandler) enqueueOne(ctx context.Context, p principal, m *pb.EnqueueRequest) (*pb.EnqueueResponse, uint64, error) {
	if err := checkEnqueue(m); err != nil {
		return nil, 0, err
	}
	if !m.GetSkipExisting() {
		return h.enqueue(ctx, p, m, m.GetTasks(), m.GetDeclaredTotal())
	}
	return h.enqueueSkipping(ctx, p, m)
}

// checkEnqueue checks what the API refuses before proposing: the batch
// size, targets the agent cannot run and the scheduling fields.
func checkEnqueue(m *pb.EnqueueRequest) error {
	if len(m.GetTasks()) == 0 || len(m.GetTasks()) > raftfsm.MaxEnqueueTasks {
		return errInvalid("enqueue needs 1 to 4096 tasks")
	}
	if err := checkRunnableTargets(m.GetTasks()); err != nil {
		return err
	}
	return checkSchedulingFields(m.GetTasks()) // schedule.go
}

// maxSkipRounds bounds how often enqueueSkipping re-reads the tenant after
// a concurrent enqueue took one of its IDs between the read and the apply.
const maxSkipRounds = 3

// enqueueSkipping enqueues the tasks of m the tenant does not hold yet and
// reports the others as existing (same scan and target) or collisions. The
// FSM still rejects any ID taken in between (the core checks every ID), so
// the read only decides what to send; a lost race is read again.
func (h producerHandler) enqueueSkipping(ctx context.Context, p principal, m *pb.EnqueueRequest) (*pb.EnqueueResponse, uint64, error) {
	for round := 1; ; round++ {
		tv, _ := h.s.node.Reads().Tenant(p.Tenant)
		keep, existing, collisions := splitExisting(tv, m.GetTasks())
		out := &pb.EnqueueResponse{Revision: tv.Counters().Revision}
		var rev uint64
		var err error
		if len(keep) > 0 {
			out, rev, err = h.enqueue(ctx, p, m, keep, lessCollisions(m.GetDeclaredTotal(), len(collisions)))
		} else if len(collisions) > 0 && m.GetDeclaredTotal() != 0 {
			rev, err = h.declareOnly(ctx, p, tv, m, lessCollisions(m.GetDeclaredTotal(), len(collisions)))
			out.Revision = max(out.Revision, rev)
		}
		if errors.Is(err, distributed.ErrTaskAlreadyExists) && round < maxSkipRounds {
			continue
		}
		if err != nil {
			return nil, rev, err
		}
		out.Existing, out.Collisions = existing, collisions
		return out, rev, nil
	}
}

// declareOnly replaces the declared total of the request's scan when a
// batch stores nothing but has collisions to take off it (EnqueueTasks
// with declare_scan_id): otherwise the scan would wait for them for ever.
// Nothing is proposed when the scan has no record or the total is
// unchanged; a batch over two scans is invalid.
func (h producerHandler) declareOnly(ctx context.Context, p principal, tv raftfsm.TenantView, m *pb.EnqueueRequest, declared uint64) (uint64, error) {
	scan := m.GetTasks()[0].GetScanId()
	for _, t := range m.GetTasks() {
		if t.GetScanId() != scan {
			return 0, errInvalid("a declared total needs every task in one scan")
		}
	}
	if st, ok := tv.Scan(scan); !ok || st.Declared == declared {
		return 0, nil // no record to declare on (nothing stored), or nothing to change
	}
	r, err := h.s.propose(ctx, p, nil, &pb.Command{Op: &pb.Command_Enqueue{Enqueue: &pb.EnqueueTasks{DeclareScanId: scan, DeclaredTotal: declared}}})
	return r.Revision, err
}

// lessCollisions takes the request's colliding targets off its declared
// total: they are not stored, and a re-run cannot store them, so a scan
// that counted them would never finish. The total stays at least 1 (0
// would mean no declaration).
func lessCollisions(declared uint64, collisions int) uint64 {
	if declared == 0 {
		return 0
	}
	return declared - min(declared-1, uint64(collisions))
}

// splitExisting sorts tasks into those to enqueue and, by position, those
// the tenant already holds: identical (same scan and target) or colliding.
func splitExisting(tv raftfsm.TenantView, tasks []*pb.NewTask) (keep []*pb.NewTask, existing []uint32, collisions []*pb.EnqueueCollision) {
	for i, t := range tasks {
		old, ok, _ := tv.GetTask(t.GetTaskId())
		switch {
		case !ok:
			keep = append(keep, t)
		case old.ScanID() == t.GetScanId() && old.TargetRef() == t.GetTargetRef():
			existing = append(existing, uint32(i))
		default:
			collisions = append(collisions, &pb.EnqueueCollision{Index: uint32(i), TaskId: t.GetTaskId(), ScanId: old.ScanID()})
		}
	}
	return keep, existing, collisions
}

// enqueue proposes tasks as one all-or-nothing batch, declaring the
// scan's total (0: none).
func (h producerHandler) enqueue(ctx context.Context, p principal, m *pb.EnqueueRequest, tasks []*pb.NewTask, declared uint64) (*pb.EnqueueResponse, uint64, error) {
	cmd, err := enqueueCommand(m, tasks, declared)
	if err != nil {
		return nil, 0, err
	}
	cmd.Tenant, cmd.Principal, cmd.ExpectedRevision = p.Tenant, p.KeyID, m.ExpectedRevision
	r, err := h.s.grantLease(ctx, cmd, p.Tenant, len(tasks))
	if err != nil {
		return nil, r.Revision, err
	}
	out, err := h.enqueued(p, r)
	return out, r.Revision, err
}

// enqueueCommand is the EnqueueTasks command of tasks (of request m),
// declaring the scan's total (0: none).
func enqueueCommand(m *pb.EnqueueRequest, tasks []*pb.NewTask, declared uint64) (*pb.Command, error) {
	e := &pb.EnqueueTasks{Tasks: make([]*pb.TaskSpec, len(tasks)), DeclaredTotal: declared}
	for i, t := range tasks {
		prio := parseEnum(t.GetPriority(), distributed.PriorityNormal, distributed.ParseTaskPriority)
		e.Tasks[i] = &pb.TaskSpec{TaskId: t.GetTaskId(), ScanId: t.GetScanId(), TargetRef: []byte(t.GetTargetRef()), Phases: t.GetPhases(), Priority: prio}
		e.Tasks[i].AttemptTimeoutSecs = cmp.Or(t.GetAttemptTimeoutSecs(), m.GetAttemptTimeoutSecs())
		if err := logSchedulingFields(i, t, e.Tasks[i]); err != nil { // checked by request position in Enqueue
			return nil, err
		}
	}
	return &pb.Command{Op: &pb.Command_Enqueue{Enqueue: e}}, nil
}

// enqueued is the EnqueueResponse of an applied EnqueueTasks.
func (h producerHandler) enqueued(p principal, r raftfsm.Response) (*pb.EnqueueResponse, error) {
	added, err := raftfsm.ValueAs[[]distributed.ScanTask](r, "EnqueueTasks")
	if err != nil {
		return nil, err
	}
	out := &pb.EnqueueResponse{Revision: r.Revision, Tasks: make([]*pb.EnqueuedTask, len(added))}
	for i, t := range added {
		et := &pb.EnqueuedTask{TaskId: t.TaskID()}
		if own, ok := t.Ownership(); ok {
			if f, ok := own.Fence(); ok {
				et.FenceToken = h.s.node.Codec().SealFence(p.Tenant, f)
			}
		}
		out.Tasks[i] = et
	}
	return out, nil
}

// checkRunnableTargets refuses targets the shipped worker agent cannot
// run: it hands a target to its command in the environment
// (TERMIVAR_TARGET), which cannot hold a NUL byte. NB: the core keeps
// target_ref opaque bytes (contract A.4); this is the API's policy, checked
// before anything is proposed. The message names the task by position and
// never quotes the target.
func checkRunnableTargets(tasks []*pb.NewTask) error {
	for i, t := range tasks {
		if strings.IndexByte(t.GetTargetRef(), 0) >= 0 {
			return errInvalid("tasks[" + strconv.Itoa(i) + "].target_ref contains a NUL byte, which the worker agent cannot pass to its command")
		}
	}
	return nil
}

func (h producerHandler) Cancel(ctx context.Context, req *connect.Request[pb.CancelRequest]) (*connect.Response[pb.CancelResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.CancelRequest) (*pb.CancelResponse, uint64, error) {
		if m.GetTaskId() != "" {
			return h.cancelByID(ctx, p, m)
		}
		own, err := h.s.node.Codec().OpenOwnership(p.Tenant, m.GetOwnershipToken())
		if err != nil {
			return nil, 0, err
		}
		ob, _ := own.MarshalBinary()
		v, rev, err := proposeAs[distributed.CancellationOutcome](ctx, h.s, p, m.ExpectedRevision, &pb.Command{Op: &pb.Command_CancelTask{CancelTask: &pb.CancelTask{Ownership: ob}}}, "CancelTask")
		if err != nil {
			return nil, rev, err
		}
		return &pb.CancelResponse{AlreadyCancelled: v.Kind == distributed.AlreadyCancelled, Revision: rev}, rev, nil
	})
}

// cancelByID cancels a task by ID: the FSM cancels it with the ownership
// it holds when the command is applied (queued, leased or running).
func (h producerHandler) cancelByID(ctx context.Context, p principal, m *pb.CancelRequest) (*pb.CancelResponse, uint64, error) {
	if len(m.GetOwnershipToken()) != 0 {
		return nil, 0, errInvalid("set either ownership_token or task_id, not both")
	}
	if err := distributed.CheckTaskCommandID(m.GetTaskId()); err != nil {
		return nil, 0, err
	}
	v, rev, err := proposeAs[raftfsm.CancelByIDValue](ctx, h.s, p, m.ExpectedRevision, &pb.Command{Op: &pb.Command_CancelTaskById{CancelTaskById: &pb.CancelTaskByID{TaskId: m.GetTaskId()}}}, "CancelTaskByID")
	if err != nil {
		return nil, rev, err
	}
	return &pb.CancelResponse{AlreadyCancelled: v.Outcome.Kind == distributed.AlreadyCancelled, PreviousStatus: v.PreviousStatus.String(), Revision: rev}, rev, nil
}

func (s *Server) taskInfo(p principal, tv raftfsm.TenantView, t distributed.ScanTask) *pb.TaskInfo {
	ti := &pb.TaskInfo{
		TaskId: t.TaskID(), ScanId: t.ScanID(), TargetRef: t.TargetRef(), Phases: t.Phases(),
		Priority: t.Priority().String(), Status: t.Status().String(), CreatedAt: t.CreatedAt(),
		RetryCount: t.RetryCount(), Attempt: t.Attempt(), TaskGeneration: t.TaskGeneration(), RecordVersion: t.RecordVersion(),
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
	fillAttempts(ti, t)
	if own, ok := t.Ownership(); ok {
		if f, ok := own.Fence(); ok {
			ti.FenceToken = s.node.Codec().SealFence(p.Tenant, f)
		}
	}
	if t.Status() == distributed.TaskCompleted {
		ti.HasResult = tv.HasResult(t.TaskID())
	}
	setSchedulingInfo(tv, t, ti)
	return ti
}

func (h producerHandler) GetTask(ctx context.Context, req *connect.Request[pb.GetTaskRequest]) (*connect.Response[pb.GetTaskResponse], error) {
	return call(ctx, h.s, req, false, func(ctx context.Context, p principal, m *pb.GetTaskRequest) (*pb.GetTaskResponse, uint64, error) {
		tv, _ := h.s.node.Reads().Tenant(p.Tenant)
		t, ok, err := tv.GetTask(m.GetTaskId())
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			return nil, 0, distributed.NewTaskNotFoundError(m.GetTaskId())
		}
		return &pb.GetTaskResponse{Task: h.s.taskInfo(p, tv, t)}, 0, nil
	})
}

func (h producerHandler) ListTasks(ctx context.Context, req *connect.Request[pb.ListTasksRequest]) (*connect.Response[pb.ListTasksResponse], error) {
	return call(ctx, h.s, req, false, func(ctx context.Context, p principal, m *pb.ListTasksRequest) (*pb.ListTasksResponse, uint64, error) {
		size := cmp.Or(int(m.GetPageSize()), defaultPageSize)
		if size > maxPageSize {
			return nil, 0, errInvalid("page_size is above 1000")
		}
		tv, _ := h.s.node.Reads().Tenant(p.Tenant)
		keep, err := keepStatus(tv, m.GetStatus()) // a status or "scheduled" (schedule.go)
		if err != nil {
			return nil, 0, err
		}
		if m.GetScanId() != "" {
			if err := distributed.CheckTaskCommandID(m.GetScanId()); err != nil {
				return nil, 0, err
			}
		}
		out := &pb.ListTasksResponse{}
		if m.GetScanId() != "" {
			// Scan order (enqueue order); the page token is an offset.
			off := 0
			if tok := m.GetPageToken(); tok != "" {
				v, err := strconv.Atoi(strings.TrimPrefix(tok, "o:"))
				if err != nil || v < 0 || !strings.HasPrefix(tok, "o:") {
					return nil, 0, errInvalid("page_token is invalid")
				}
				off = v
			}
			ids := tv.ScanTaskIDs(m.GetScanId())
			i := off
			for ; i < len(ids) && len(out.Tasks) < size; i++ {
				if t, ok, _ := tv.GetTask(ids[i]); ok && keep(t) {
					out.Tasks = append(out.Tasks, h.s.taskInfo(p, tv, t))
				}
			}
			if i < len(ids) {
				out.NextPageToken = "o:" + strconv.Itoa(i)
			}
			return out, 0, nil
		}
		// Task-ID order; the page token is the last ID returned.
		after, hasAfter := strings.CutPrefix(m.GetPageToken(), "k:")
		if m.GetPageToken() != "" && !hasAfter {
			return nil, 0, errInvalid("page_token is invalid")
		}
		// Page by IDs (no copy of every record under the core's lock); only
		// the tasks examined for this page are read.
		ids := tv.TaskIDs() // sorted: the page starts after the token's ID
		start := sort.Search(len(ids), func(i int) bool { return ids[i] > after })
		for _, id := range ids[start:] {
			if len(out.Tasks) == size {
				out.NextPageToken = "k:" + out.Tasks[len(out.Tasks)-1].GetTaskId()
				break
			}
			if t, ok, _ := tv.GetTask(id); ok && keep(t) {
				out.Tasks = append(out.Tasks, h.s.taskInfo(p, tv, t))
			}
		}
		return out, 0, nil
	})
}

// AggregateResults streams the scan's stored results in enqueue order,
// every completed task's result exactly once. It aggregates through the
// core in chunks that each respect the tenant's A.11 bounds: at most
// MaxAggregateItems results and MaxAggregateBytes bytes per chunk (a chunk
// is cut short when the next result would pass the byte bound). Only a
// single result larger than MaxAggregateBytes cannot be sent; the stream
// then ends with aggregate_bytes_exceeded. A task purged while the stream
// runs (retention, DeleteScan, PurgeTasks) is left out: it is no longer
// there, which is not an error (docs/adr/0002-purge.md).
func (h producerHandler) AggregateResults(ctx context.Context, req *connect.Request[pb.AggregateResultsRequest], stream *connect.ServerStream[pb.AggregateResultsResponse]) error {
	p, err := principalFrom(ctx)
	if err != nil {
		return toConnect(err)
	}
	if err := distributed.CheckTaskCommandID(req.Msg.GetScanId()); err != nil {
		return toConnect(err)
	}
	tv, _ := h.s.node.Reads().Tenant(p.Tenant)
	var ids []string
	targets := map[string]string{}
	for _, id := range tv.ScanTaskIDs(req.Msg.GetScanId()) {
		if t, ok, _ := tv.GetTask(id); ok && t.Status() == distributed.TaskCompleted {
			ids = append(ids, id)
			targets[id] = t.TargetRef()
		}
	}
	return streamResults(ctx, tv, ids, func(r distributed.AggregatedResult) error {
		return stream.Send(&pb.AggregateResultsResponse{TaskId: r.TaskID, Result: r.Result, TargetRef: targets[r.TaskID]})
	})
}

// streamResults sends the results of ids in order, a bounded chunk at a
// time (the tenant's MaxAggregateItems and MaxAggregateBytes).
func streamResults(ctx context.Context, tv raftfsm.TenantView, ids []string, send func(distributed.AggregatedResult) error) error {
	rl := tv.ResultLimits()
	for len(ids) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		// NB: a task purged since the IDs were read (retention, DeleteScan)
		// is simply no longer there: it is left out, never missing_result
		// (docs/adr/0002-purge.md).
		var n int
		if ids, n = dropPurged(tv, ids, min(rl.MaxAggregateItems, len(ids))); n == 0 {
			continue
		}
		res, err := tv.AggregateResults(ids[:n])
		if errors.Is(err, distributed.ErrAggregateBytesExceeded) {
			n = fitBytes(tv, ids[:n], rl.MaxAggregateBytes)
			res, err = tv.AggregateResults(ids[:n])
		}
		if errors.Is(err, distributed.ErrMissingResult) {
			continue // purged between the check and the read: check again
		}
		if err != nil {
			return toConnect(err)
		}
		for _, r := range res {
			if err := send(r); err != nil {
				return err
			}
		}
		ids = ids[n:]
	}
	return nil
}

// dropPurged drops the IDs without a result (purged) among the first w of
// ids, keeping the order, and returns the rest with how many of the first
// w were kept (they come first).
func dropPurged(tv raftfsm.TenantView, ids []string, w int) ([]string, int) {
	j := w
	for i := w - 1; i >= 0; i-- {
		if tv.HasResult(ids[i]) {
			j--
			ids[j] = ids[i]
		}
	}
	return ids[j:], w - j
}

// fitBytes returns the length of the longest prefix of ids whose results
// total at most maxBytes, and at least 1 (a single result above the bound
// is left for the core to reject).
func fitBytes(tv raftfsm.TenantView, ids []string, maxBytes int) int {
	total := 0
	for i, id := range ids {
		r, _, _ := tv.GetResult(id)
		total += len(r)
		if total > maxBytes {
			return max(i, 1)
		}
	}
	return len(ids)
}
