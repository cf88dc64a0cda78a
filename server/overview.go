package server

import (
	"cmp"
	"slices"
	"strconv"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/raftfsm"
)

// Bounds of the dashboard's view (OverviewResponse): every list is cut to
// these lengths and carries its full count beside it.
const (
	overviewScans     = 20
	overviewQueueHead = 20
	overviewWorkers   = 200
	overviewLeases    = 50
	overviewFailures  = 20
	// throughputWindowSecs is the window of a scan's completion rate.
	throughputWindowSecs = 60
)

// overview builds the dashboard view of p's tenant. It reads every task
// record once (raftfsm.TenantView.Tasks, one lock of the core) and copies
// no target, result, token or key into the view.
func (s *Server) overview(p principal) *pb.OverviewResponse {
	reads := s.node.Reads()
	tv, _ := reads.Tenant(p.Tenant)
	snap := tv.Counters()
	now := max(uint64(s.now().Unix()), snap.LogicalTime, reads.LastTime())
	out := &pb.OverviewResponse{
		Tenant: p.Tenant, Role: p.Role.String(), Revision: snap.Revision, NowSecs: now, LogicalTime: snap.LogicalTime,
		HeartbeatTimeoutSecs: tv.Limits().HeartbeatTimeoutSecs,
		ResultRecords:        uint32(tv.ResultCount()), ResultBytes: uint64(tv.ResultBytes()),
		Cluster: s.clusterSummary(),
	}
	b := overviewBuilder{tv: tv}
	b.init(now)
	for _, t := range tv.Tasks() {
		b.add(t)
	}
	b.finish(out)
	s.addWorkers(out, tv, now)
	return out
}

// overviewBuilder accumulates the task-derived parts of the view in one
// pass.
type overviewBuilder struct {
	tv       raftfsm.TenantView
	now      uint64
	totals   *pb.TaskCounts
	scans    map[string]*pb.ScanSummary
	firstAt  map[string]uint64    // scan ID → oldest CreatedAt
	queue    [4]*pb.PriorityQueue // by priority
	head     []queuedRef          // the overviewQueueHead first queued tasks, in order
	leases   []*pb.LeaseSummary
	failures []*pb.FailureSummary
}

func (b *overviewBuilder) init(now uint64) {
	b.now = now
	b.scans = map[string]*pb.ScanSummary{}
	b.firstAt = map[string]uint64{}
	b.totals = &pb.TaskCounts{}
	for p := range b.queue {
		b.queue[p] = &pb.PriorityQueue{Priority: distributed.TaskPriority(p).String()}
	}
}

func (b *overviewBuilder) add(t distributed.ScanTask) {
	countStatus(b.totals, t.Status())
	sc, ok := b.scans[t.ScanID()]
	if !ok {
		sc = &pb.ScanSummary{ScanId: t.ScanID(), Counts: &pb.TaskCounts{}}
		b.scans[t.ScanID()] = sc
		b.firstAt[t.ScanID()] = t.CreatedAt()
	}
	countStatus(sc.Counts, t.Status())
	sc.CreatedAt = max(sc.CreatedAt, t.CreatedAt())
	b.firstAt[t.ScanID()] = min(b.firstAt[t.ScanID()], t.CreatedAt())
	switch t.Status() {
	case distributed.TaskQueued:
		b.addQueued(t)
	case distributed.TaskLeased, distributed.TaskRunning:
		b.addLease(t)
	case distributed.TaskCompleted:
		if at, ok := t.CompletedAt(); ok && at+throughputWindowSecs > b.now {
			sc.CompletedLastMinute++
		}
		if b.tv.HasResult(t.TaskID()) {
			sc.Results++
		}
	}
	if f, ok := failureOf(t); ok {
		b.failures = append(b.failures, f)
	}
}

func (b *overviewBuilder) addQueued(t distributed.ScanTask) {
	q := b.queue[t.Priority()]
	if q.Queued == 0 || t.CreatedAt() < q.OldestCreatedAt {
		q.OldestCreatedAt = t.CreatedAt()
	}
	q.Queued++
	b.head = keepFirst(b.head, queuedRef{prio: t.Priority(), createdAt: t.CreatedAt(), retries: t.RetryCount(), taskID: t.TaskID(), scanID: t.ScanID()})
}

// keepFirst inserts r into head (sorted by queuedBefore) if it is among
// the overviewQueueHead first: O(overviewQueueHead) per task at most, no
// allocation once head is full.
func keepFirst(head []queuedRef, r queuedRef) []queuedRef {
	if len(head) == overviewQueueHead && queuedBefore(head[len(head)-1], r) <= 0 {
		return head
	}
	i, _ := slices.BinarySearchFunc(head, r, queuedBefore)
	if len(head) < overviewQueueHead {
		head = append(head, queuedRef{})
	}
	copy(head[i+1:], head[i:len(head)-1])
	head[i] = r
	return head
}

// queuedBefore orders queued tasks: priority descending, then age, then
// task ID.
func queuedBefore(a, c queuedRef) int {
	return cmp.Or(cmp.Compare(c.prio, a.prio), cmp.Compare(a.createdAt, c.createdAt), cmp.Compare(a.taskID, c.taskID))
}

// queuedRef is a queued task while the view is built (no allocation per
// task; only the head becomes messages).
type queuedRef struct {
	prio           distributed.TaskPriority
	createdAt      uint64
	retries        uint32
	taskID, scanID string
}

func (b *overviewBuilder) addLease(t distributed.ScanTask) {
	l, ok := t.Lease()
	if !ok {
		return
	}
	b.leases = append(b.leases, &pb.LeaseSummary{TaskId: t.TaskID(), ScanId: t.ScanID(), WorkerId: l.WorkerID(),
		Status: t.Status().String(), Attempt: l.Attempt(), LeaseId: l.LeaseID(), AcquiredAt: l.AcquiredAt(), ExpiresAt: l.ExpiresAt()})
}

// finish sorts, ranks and cuts the lists into out.
func (b *overviewBuilder) finish(out *pb.OverviewResponse) {
	out.Totals = b.totals
	scans := make([]*pb.ScanSummary, 0, len(b.scans))
	for id, sc := range b.scans {
		rate(sc, b.now, b.firstAt[id])
		scans = append(scans, sc)
	}
	slices.SortFunc(scans, func(a, c *pb.ScanSummary) int {
		return cmp.Or(cmp.Compare(c.CreatedAt, a.CreatedAt), cmp.Compare(a.ScanId, c.ScanId))
	})
	out.ScansTotal = uint32(len(scans))
	out.Scans = scans[:min(len(scans), overviewScans)]
	for _, sc := range out.Scans {
		b.scanRecord(sc)
	}
	for p := len(b.queue) - 1; p >= 0; p-- {
		out.Queue = append(out.Queue, b.queue[p])
	}
	for _, q := range b.head {
		out.QueueHead = append(out.QueueHead, &pb.QueuedTask{TaskId: q.taskID, ScanId: q.scanID, Priority: q.prio.String(),
			CreatedAt: q.createdAt, RetryCount: q.retries})
	}
	slices.SortFunc(b.leases, func(a, c *pb.LeaseSummary) int {
		return cmp.Or(cmp.Compare(a.ExpiresAt, c.ExpiresAt), cmp.Compare(a.TaskId, c.TaskId))
	})
	out.LeasesTotal = uint32(len(b.leases))
	out.Leases = b.leases[:min(len(b.leases), overviewLeases)]
	slices.SortFunc(b.failures, func(a, c *pb.FailureSummary) int {
		return cmp.Or(cmp.Compare(c.FailedAt, a.FailedAt), cmp.Compare(a.TaskId, c.TaskId))
	})
	out.FailuresTotal = uint32(len(b.failures))
	out.Failures = b.failures[:min(len(b.failures), overviewFailures)]
}

// scanRecord adds what the scan's record says (its state and times) to a
// listed scan.
func (b *overviewBuilder) scanRecord(sc *pb.ScanSummary) {
	c := sc.Counts
	finished := c.Queued+c.Leased+c.Running == 0
	if st, ok := b.tv.Scan(sc.ScanId); ok {
		sc.StartedAt, finished = st.CreatedAt, st.Finished
		if st.Finished {
			sc.FinishedAt = st.FinishedAt
		}
	}
	sc.State = scanState(&pb.ScanProgressResponse{Cancelled: c.Cancelled, Failed: c.Failed, Expired: c.Expired}, finished)
	if set, err := b.tv.ScanSettings(sc.ScanId); err == nil {
		sc.Paused = set.Paused
	}
}

// rate sets a scan's throughput (completions per second over the last
// throughputWindowSecs, or since its first task when that is shorter) and
// the ETA of its non-terminal tasks at that rate.
func rate(sc *pb.ScanSummary, now, firstAt uint64) {
	window := uint64(throughputWindowSecs)
	if now > firstAt && now-firstAt < window {
		window = now - firstAt
	}
	if window == 0 || sc.CompletedLastMinute == 0 {
		return
	}
	sc.ThroughputPerSec = float64(sc.CompletedLastMinute) / float64(window)
	c := sc.Counts
	if left := c.Queued + c.Leased + c.Running; left > 0 {
		eta := uint64(float64(left)/sc.ThroughputPerSec + 0.5)
		sc.EtaSecs = &eta
	}
}

func countStatus(c *pb.TaskCounts, st distributed.TaskStatus) {
	c.Total++
	switch st {
	case distributed.TaskQueued:
		c.Queued++
	case distributed.TaskLeased:
		c.Leased++
	case distributed.TaskRunning:
		c.Running++
	case distributed.TaskCompleted:
		c.Completed++
	case distributed.TaskFailed:
		c.Failed++
	case distributed.TaskCancelled:
		c.Cancelled++
	case distributed.TaskExpired:
		c.Expired++
	}
}

// failureOf reports a task for the failures list: its newest ended
// attempt failed (it is retried or failed for good), or it expired. The
// reason is the worker's, or what the node recorded; an expired task's
// says so first and then what its last failed attempt said.
func failureOf(t distributed.ScanTask) (*pb.FailureSummary, bool) {
	st := t.Status()
	if st == distributed.TaskCompleted || st == distributed.TaskCancelled {
		return nil, false
	}
	h := t.Attempts()
	var last *distributed.AttemptRecord
	if n := len(h); n > 0 && failedOutcome(h[n-1].Outcome()) {
		last = &h[n-1]
	}
	if last == nil && st != distributed.TaskExpired {
		return nil, false
	}
	f := &pb.FailureSummary{TaskId: t.TaskID(), ScanId: t.ScanID(), Status: st.String(), Attempt: t.Attempt(), RetryCount: t.RetryCount()}
	if last != nil {
		f.Attempt, f.FailedAt, f.WorkerId, f.Outcome, f.Reason = last.Attempt(), last.EndedAt(), last.WorkerID(), last.Outcome().String(), attemptReason(*last)
	}
	if st == distributed.TaskExpired && (last == nil || last.Outcome() != distributed.AttemptTaskExpired) {
		f.FailedAt, _ = t.FinishedAt()
		f.Outcome = distributed.AttemptTaskExpired.String()
		if last != nil {
			f.Reason = outcomeReason(distributed.AttemptTaskExpired) + "; last attempt: " + f.Reason
		} else {
			f.Reason = outcomeReason(distributed.AttemptTaskExpired)
		}
	}
	return f, true
}

// attemptReason is the reason the worker gave, or the node's explanation.
func attemptReason(a distributed.AttemptRecord) string {
	if r := a.Reason(); r != "" {
		return r
	}
	return outcomeReason(a.Outcome())
}

// failedOutcome reports whether an attempt that ended so failed.
func failedOutcome(o distributed.AttemptOutcome) bool {
	switch o {
	case distributed.AttemptFailed, distributed.AttemptLeaseExpired, distributed.AttemptTimedOut,
		distributed.AttemptWorkerLost, distributed.AttemptTaskExpired:
		return true
	}
	return false
}

// outcomeReason explains a failed attempt the worker gave no reason for.
func outcomeReason(o distributed.AttemptOutcome) string {
	switch o {
	case distributed.AttemptFailed:
		return "failed (the worker gave no reason)"
	case distributed.AttemptLeaseExpired:
		return "lease expired (the worker stopped renewing it)"
	case distributed.AttemptTimedOut:
		return "attempt timed out"
	case distributed.AttemptWorkerLost:
		return "worker lost (deregistered or declared dead)"
	}
	return "task TTL expired"
}

// addWorkers fills the workers (by worker ID, cut to overviewWorkers).
func (s *Server) addWorkers(out *pb.OverviewResponse, tv raftfsm.TenantView, now uint64) {
	ws := tv.Workers()
	out.WorkersTotal = uint32(len(ws))
	timeout := tv.Limits().HeartbeatTimeoutSecs
	for _, w := range ws[:min(len(ws), overviewWorkers)] {
		out.Workers = append(out.Workers, &pb.WorkerSummary{
			WorkerId: w.WorkerID(), Status: w.Status().String(), Generation: w.Generation(),
			DeclaredSlots: w.Capacity(), EffectiveSlots: w.EffectiveCapacity(), CurrentTasks: w.CurrentTasks(),
			CompletedTasks: w.CompletedTasks(), CpuBasisPoints: uint32(w.CPUBasisPoints()),
			MemoryBasisPoints: uint32(w.MemoryBasisPoints()), NetworkBasisPoints: uint32(w.NetworkBasisPoints()),
			LastHeartbeat: w.LastHeartbeat(),
			Dead:          w.Status() != distributed.WorkerOffline && now >= w.LastHeartbeat()+timeout,
		})
	}
}

// clusterSummary is the cluster as this node sees it.
func (s *Server) clusterSummary() *pb.ClusterSummary {
	addr, id := s.node.Leader()
	c := &pb.ClusterSummary{NodeId: s.node.NodeID(), RaftState: s.node.RaftState(), LeaderId: id, LeaderAddr: addr,
		AppliedIndex: s.node.Reads().AppliedIndex(), Members: s.members()}
	if rs, ok := s.node.(raftStatser); ok {
		st := rs.RaftStats()
		c.Term = statUint(st, "term")
		c.CommitIndex = statUint(st, "commit_index")
		c.LastLogIndex = statUint(st, "last_log_index")
	}
	return c
}

func statUint(st map[string]string, key string) uint64 {
	v, _ := strconv.ParseUint(st[key], 10, 64)
	return v
}
