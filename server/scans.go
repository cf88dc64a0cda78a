package server

import (
	"cmp"
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/raftfsm"
)

// This file holds the scan reads: ListScans, the counts ScanProgress and
// ListScans share, and the FollowResults long-poll.

// Bounds of FollowResults.
const (
	defaultFollowResults = 256
	maxFollowResults     = 4096
)

// KindScanNotFound: ListScans, FollowResults or ScanProgress' stall facts
// name a scan the tenant has no task of. It is the FSM's kind of the same
// name (DeleteScan of such a scan), so the registry lists it once.
const KindScanNotFound = "scan_not_found"

// Scan states of ScanInfo.state.
const (
	ScanRunning          = "running"
	ScanDone             = "done"
	ScanDoneWithFailures = "done_with_failures"
	ScanCancelled        = "cancelled"
)

// scanCounts counts a scan's tasks per status, its results and the
// earliest expiry of its leases, one task record at a time (no copy of
// every record under the core's lock).
func scanCounts(tv raftfsm.TenantView, scanID string) (*pb.ScanProgressResponse, uint64) {
	out := &pb.ScanProgressResponse{}
	var nextExpiry uint64
	for _, id := range tv.ScanTaskIDs(scanID) {
		t, ok, _ := tv.GetTask(id)
		if !ok {
			continue
		}
		out.Total++
		out.Reruns += t.Reruns()
		switch t.Status() {
		case distributed.TaskQueued:
			out.Queued++
		case distributed.TaskLeased:
			out.Leased++
		case distributed.TaskRunning:
			out.Running++
		case distributed.TaskCompleted:
			out.Completed++
			if tv.HasResult(id) {
				out.Results++
			}
		case distributed.TaskFailed:
			out.Failed++
		case distributed.TaskCancelled:
			out.Cancelled++
		case distributed.TaskExpired:
			out.Expired++
		}
		if l, ok := t.Lease(); ok && !t.Status().Terminal() && (nextExpiry == 0 || l.ExpiresAt() < nextExpiry) {
			nextExpiry = l.ExpiresAt()
		}
	}
	return out, nextExpiry
}

// scanState names the state of a scan from its counts and whether every
// task is terminal: cancelled wins over failures, failures over done.
func scanState(c *pb.ScanProgressResponse, finished bool) string {
	switch {
	case !finished:
		return ScanRunning
	case c.GetCancelled() > 0:
		return ScanCancelled
	case c.GetFailed()+c.GetExpired() > 0:
		return ScanDoneWithFailures
	}
	return ScanDone
}

// stallFacts fills the tenant-wide facts a stalled scan may wait on: the
// result store's fill and limits, the live workers and their free slots,
// and the node's time in the leader's time base.
func (s *Server) stallFacts(tv raftfsm.TenantView, out *pb.ScanProgressResponse) {
	rl := tv.ResultLimits()
	out.TenantResults, out.MaxResults = uint32(tv.ResultCount()), uint32(rl.MaxResults)
	out.TenantResultBytes, out.MaxResultTotalBytes = uint64(tv.ResultBytes()), uint64(rl.MaxTotalBytes)
	now := max(s.node.Reads().LastTime(), uint64(max(s.cfg.Now().Unix(), 0)))
	out.NowSecs = now
	timeout := tv.Limits().HeartbeatTimeoutSecs
	for _, w := range tv.Workers() {
		if w.Status() == distributed.WorkerOffline || now-min(now, w.LastHeartbeat()) >= timeout {
			continue
		}
		out.LiveWorkers++
		out.FreeSlots += w.AvailableSlots()
	}
}

func (h producerHandler) ScanProgress(ctx context.Context, req *connect.Request[pb.ScanProgressRequest]) (*connect.Response[pb.ScanProgressResponse], error) {
	return call(ctx, h.s, req, false, func(ctx context.Context, p principal, m *pb.ScanProgressRequest) (*pb.ScanProgressResponse, uint64, error) {
		if err := distributed.CheckTaskCommandID(m.GetScanId()); err != nil {
			return nil, 0, err
		}
		tv, _ := h.s.node.Reads().Tenant(p.Tenant)
		out, next := scanCounts(tv, m.GetScanId())
		out.NextLeaseExpiry = next
		if st, ok := tv.Scan(m.GetScanId()); ok {
			out.DeclaredTotal, out.Pending = st.Declared, st.Pending
			if st.Finished {
				out.FinishedAt = st.FinishedAt
			}
		}
		h.s.stallFacts(tv, out)
		return out, 0, nil
	})
}

func (h producerHandler) ListScans(ctx context.Context, req *connect.Request[pb.ListScansRequest]) (*connect.Response[pb.ListScansResponse], error) {
	return call(ctx, h.s, req, false, func(ctx context.Context, p principal, m *pb.ListScansRequest) (*pb.ListScansResponse, uint64, error) {
		size := cmp.Or(int(m.GetPageSize()), defaultPageSize)
		if size > maxPageSize {
			return nil, 0, errInvalid("page_size is above 1000")
		}
		if tok := m.GetPageToken(); tok != "" && !distributed.ValidIdentifier(tok) {
			return nil, 0, errInvalid("page_token is invalid")
		}
		tv, _ := h.s.node.Reads().Tenant(p.Tenant)
		ids := tv.ScanIDs() // sorted: the page starts after the token's ID
		start := sort.Search(len(ids), func(i int) bool { return ids[i] > m.GetPageToken() })
		out := &pb.ListScansResponse{}
		for _, id := range ids[start:] {
			if len(out.Scans) == size {
				out.NextPageToken = out.Scans[len(out.Scans)-1].GetScanId()
				break
			}
			if si, ok := scanInfo(tv, id); ok {
				out.Scans = append(out.Scans, si)
			}
		}
		return out, 0, nil
	})
}

// scanInfo reads one scan: the FSM's record of it and its counts.
func scanInfo(tv raftfsm.TenantView, id string) (*pb.ScanInfo, bool) {
	st, ok := tv.Scan(id)
	if !ok {
		return nil, false
	}
	c, _ := scanCounts(tv, id)
	si := &pb.ScanInfo{
		ScanId: id, State: scanState(c, st.Finished), CreatedAt: st.CreatedAt, Admitted: c.GetTotal(),
		Queued: c.GetQueued(), Leased: c.GetLeased(), Running: c.GetRunning(), Completed: c.GetCompleted(),
		Failed: c.GetFailed(), Cancelled: c.GetCancelled(), Expired: c.GetExpired(), Results: c.GetResults(),
		ResultBytes: st.ResultBytes, DeclaredTotal: st.Declared, Pending: st.Pending,
	}
	if st.Finished {
		si.FinishedAt = st.FinishedAt
	}
	si.RetentionDeadline = retentionDeadline(st, tv.ResultRetentionSecs())
	return si, true
}

// retentionDeadline is when the tenant's retention policy purges the last
// of a finished scan's tasks: its finish time plus the retention (tasks
// that finished earlier go earlier; the leader's ticker purges soon after,
// docs/adr/0002-purge.md). nil when the policy is off, the scan runs, or
// its finish time is unknown.
func retentionDeadline(st raftfsm.ScanState, retention uint64) *uint64 {
	if retention == 0 || !st.Finished || st.FinishedAt == 0 {
		return nil
	}
	d := st.FinishedAt + retention
	return &d
}

// followCursor is a FollowResults position: the scan's tasks (enqueue
// order) or completions (completion order) whose ordinal is below pos were
// passed. Ordinals are numbered per scan from 0 and a purge never
// renumbers them (raftfsm scanMeta), so a cursor means the same after
// tasks before it were purged; without purges the ordinal is the position.
type followCursor struct {
	completion bool
	pos        uint64
}

func (c followCursor) String() string {
	if c.completion {
		return "c:" + strconv.FormatUint(c.pos, 10)
	}
	return "e:" + strconv.FormatUint(c.pos, 10)
}

// parseFollowCursor reads a cursor of the requested order ("" is the
// start).
func parseFollowCursor(s string, completion bool) (followCursor, error) {
	c := followCursor{completion: completion}
	if s == "" {
		return c, nil
	}
	prefix := c.String()[:2]
	n, err := strconv.ParseUint(strings.TrimPrefix(s, prefix), 10, 64)
	if !strings.HasPrefix(s, prefix) || err != nil {
		return c, errInvalid("cursor is invalid for this order")
	}
	c.pos = n
	return c, nil
}

func (h producerHandler) FollowResults(ctx context.Context, req *connect.Request[pb.FollowResultsRequest]) (*connect.Response[pb.FollowResultsResponse], error) {
	return call(ctx, h.s, req, false, func(ctx context.Context, p principal, m *pb.FollowResultsRequest) (*pb.FollowResultsResponse, uint64, error) {
		if err := distributed.CheckTaskCommandID(m.GetScanId()); err != nil {
			return nil, 0, err
		}
		if m.GetWaitSecs() > MaxWaitSecs {
			return nil, 0, errInvalid("wait_secs is above 60")
		}
		if m.GetMaxResults() > maxFollowResults {
			return nil, 0, errInvalid("max_results is above 4096")
		}
		cur, err := parseFollowCursor(m.GetCursor(), m.GetCompletionOrder())
		if err != nil {
			return nil, 0, err
		}
		n := cmp.Or(int(m.GetMaxResults()), defaultFollowResults)
		var purged uint32
		if m.GetDeleteAfterRead() && cur.pos > 0 {
			if purged, err = h.purgeAcknowledged(ctx, p, m.GetScanId(), cur); err != nil {
				return nil, 0, err
			}
		}
		out, err := h.follow(ctx, p, m.GetScanId(), cur, n, time.Duration(m.GetWaitSecs())*time.Second)
		if purged > 0 && kindOf(err) == KindScanNotFound {
			// NB: the acknowledgement purged the scan's last tasks: the
			// follower has every result and the scan is gone.
			out, err = &pb.FollowResultsResponse{NextCursor: cur.String(), Done: true}, nil
		}
		if out != nil {
			out.Purged = purged
		}
		return out, 0, err
	})
}

// follow answers a FollowResults: the results after cur, waiting up to
// wait for one (a long-poll on the node's ProgressChan).
func (h producerHandler) follow(ctx context.Context, p principal, scanID string, cur followCursor, n int, wait time.Duration) (*pb.FollowResultsResponse, error) {
	tv, _ := h.s.node.Reads().Tenant(p.Tenant)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		// NB: take the wake channel before looking, so a completion between
		// the look and the wait still wakes us.
		wake := h.s.node.ProgressChan(p.Tenant)
		out, err := followPage(tv, scanID, cur, n)
		if err != nil || len(out.GetResults()) > 0 || out.GetDone() || wait == 0 || out.GetNextCursor() != cur.String() {
			// NB: a page that only passed tasks without a result answers
			// at once too, so a long run of them costs no waits.
			return out, err
		}
		if !h.s.waitFor(ctx, wake, deadline.C) {
			return out, nil
		}
	}
}

// waitFor blocks a FollowResults long-poll until wake is closed (true) or its wait ends:
// deadline, caller gone or server shutting down (false).
func (s *Server) waitFor(ctx context.Context, wake <-chan struct{}, deadline <-chan time.Time) bool {
	s.followsWaiting.Add(1)
	defer s.followsWaiting.Add(-1)
	select {
	case <-wake:
		return true
	case <-deadline:
	case <-ctx.Done():
	case <-s.stopping:
	}
	return false
}

// followPage reads at most n results after cur, and at most the tenant's
// MaxAggregateBytes of them (at least one). In enqueue order it stops at
// the first task that is not terminal, so results come in enqueue order
// and a cursor never passes a task that may still complete; terminal
// tasks without a result are passed, and so is a task purged since the
// window was read (a purge takes terminal tasks only, and a purged task is
// simply no longer there: docs/adr/0002-purge.md). The scan's record is
// read before its tasks, so done (finished, every ordinal passed) is never
// claimed before the last result was returned. A scan whose every task
// was purged has no record: scan_not_found.
func followPage(tv raftfsm.TenantView, scanID string, cur followCursor, n int) (*pb.FollowResultsResponse, error) {
	st, ok := tv.Scan(scanID)
	if !ok {
		return nil, &apiError{KindScanNotFound, "scan " + scanID + " has no tasks"}
	}
	end := st.NextOrdinal
	var win []raftfsm.ScanEntry
	if cur.completion {
		end = st.NextCompletion
		win = tv.ScanCompletedWindow(scanID, cur.pos, n)
	} else {
		win = tv.ScanTaskWindow(scanID, cur.pos, n)
	}
	if cur.pos > end {
		return nil, errInvalid("cursor is past the end of the scan")
	}
	out := &pb.FollowResultsResponse{}
	switch passed, ok := followEntries(tv, win, cur.completion, out); {
	case ok:
		cur.pos = passed
	case len(win) == 0:
		cur.pos = end // every ordinal from cur.pos on was purged
	default:
		cur.pos = win[0].Ord // the ordinals before the first entry were purged
	}
	out.NextCursor = cur.String()
	out.Done = st.Finished && cur.pos >= end
	return out, nil
}

// followEntries appends the results of the entries until the first task
// that is not terminal or the byte bound; it returns the ordinal after the
// last entry passed (ok: at least one passed).
func followEntries(tv raftfsm.TenantView, win []raftfsm.ScanEntry, completion bool, out *pb.FollowResultsResponse) (uint64, bool) {
	maxBytes, size := tv.ResultLimits().MaxAggregateBytes, 0
	var passed uint64
	ok := false
	for _, e := range win {
		t, found, _ := tv.GetTask(e.ID)
		if found && !t.Status().Terminal() {
			break // NB: a purged and re-enqueued ID is a new life: not passed
		}
		r, has, _ := tv.GetResult(e.ID)
		if has && len(out.Results) > 0 && size+len(r) > maxBytes {
			break
		}
		passed, ok = e.Ord+1, true
		if has && found {
			size += len(r)
			out.Results = append(out.Results, &pb.FollowedResult{TaskId: e.ID, TargetRef: t.TargetRef(), Result: r,
				Cursor: followCursor{completion: completion, pos: passed}.String()})
		}
	}
	return passed, ok
}
