package server

import (
	"context"
	"strconv"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/raftfsm"
)

// Scheduling in the API (contract Part F): the enqueue fields, pause,
// resume and in-flight limits (Producer.UpdateScan), the tenant's backoff
// and fairness (Admin.SetSchedulingOptions), and what GetTask, ListTasks
// and ScanProgress show of them.

// statusScheduled is the ListTasks filter for queued tasks that wait for
// their not-before time (not a core status: they are queued).
const statusScheduled = "scheduled"

// checkSchedulingFields refuses a request whose task's scheduling fields
// are invalid, naming it by its request position (before skip_existing
// takes any task out).
func checkSchedulingFields(tasks []*pb.NewTask) error {
	for i, t := range tasks {
		if err := logSchedulingFields(i, t, &pb.TaskSpec{}); err != nil {
			return err
		}
	}
	return nil
}

// logSchedulingFields copies a NewTask's scheduling fields into the log
// TaskSpec; a tag name that is not a worker tag is refused by position.
func logSchedulingFields(i int, t *pb.NewTask, out *pb.TaskSpec) error {
	out.NotBeforeSecs, out.DelaySecs = t.GetNotBeforeSecs(), t.GetDelaySecs()
	out.BackoffBaseSecs, out.BackoffCapSecs = t.GetBackoffBaseSecs(), t.GetBackoffCapSecs()
	if len(t.GetRequiredTags()) > distributed.MaxWorkerTags {
		return errInvalid("tasks[" + strconv.Itoa(i) + "].required_tags has more than 5 tags")
	}
	for _, name := range t.GetRequiredTags() {
		tag, ok := distributed.ParseWorkerTag(name)
		if !ok {
			return errInvalid("tasks[" + strconv.Itoa(i) + "].required_tags names an unknown tag")
		}
		out.RequiredTags = append(out.RequiredTags, uint32(tag))
	}
	return nil
}

// setSchedulingInfo fills a TaskInfo's scheduling fields.
func setSchedulingInfo(tv raftfsm.TenantView, t distributed.ScanTask, ti *pb.TaskInfo) {
	s := t.Scheduling()
	ti.NotBefore = s.NotBeforeSecs
	ti.Scheduled = t.Scheduled(tv.LogicalTime())
	for _, tag := range s.RequiredTags {
		ti.RequiredTags = append(ti.RequiredTags, tag.String())
	}
}

// keepStatus is ListTasks' status filter: a task status, or "scheduled".
func keepStatus(tv raftfsm.TenantView, status string) (func(distributed.ScanTask) bool, error) {
	if status == "" {
		return func(distributed.ScanTask) bool { return true }, nil
	}
	if status == statusScheduled {
		now := tv.LogicalTime()
		return func(t distributed.ScanTask) bool { return t.Scheduled(now) }, nil
	}
	want, ok := distributed.ParseTaskStatus(status)
	if !ok {
		return nil, errInvalid("status is not a task status")
	}
	return func(t distributed.ScanTask) bool { return t.Status() == want }, nil
}

// scanSettings fills ScanProgress's scan settings (paused, in-flight
// limit); the scheduled and unroutable counts come with the status counts
// (scans.go) — what watch reports.
func scanSettings(tv raftfsm.TenantView, scanID string, out *pb.ScanProgressResponse) {
	if st, err := tv.ScanSettings(scanID); err == nil {
		out.MaxInFlight, out.Paused = st.MaxInFlight, st.Paused
	}
}

// routableTo returns whether some of the live workers declared every tag
// a task requires (false for every task when none is live): a queued task
// no live worker can take is unroutable.
func routableTo(live []distributed.WorkerNode) func(distributed.ScanTask) bool {
	tags := make([][]distributed.WorkerTag, len(live))
	for i, w := range live {
		tags[i] = w.Tags()
	}
	return func(t distributed.ScanTask) bool { return anyCovers(tags, t.Scheduling().RequiredTags) }
}

func anyCovers(workers [][]distributed.WorkerTag, required []distributed.WorkerTag) bool {
	for _, tags := range workers {
		ok := true
		for _, r := range required {
			found := false
			for _, have := range tags {
				found = found || have == r
			}
			ok = ok && found
		}
		if ok {
			return true
		}
	}
	return false
}

func (h producerHandler) UpdateScan(ctx context.Context, req *connect.Request[pb.UpdateScanRequest]) (*connect.Response[pb.UpdateScanResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.UpdateScanRequest) (*pb.UpdateScanResponse, uint64, error) {
		if err := distributed.CheckTaskCommandID(m.GetScanId()); err != nil {
			return nil, 0, err
		}
		op := &pb.UpdateScan{ScanId: m.GetScanId(), MaxInFlight: m.MaxInFlight, Paused: m.Paused}
		st, rev, err := proposeAs[distributed.ScanState](ctx, h.s, p, m.ExpectedRevision, &pb.Command{Op: &pb.Command_UpdateScan{UpdateScan: op}}, "UpdateScan")
		if err != nil {
			return nil, rev, err
		}
		return &pb.UpdateScanResponse{MaxInFlight: st.Settings.MaxInFlight, Paused: st.Settings.Paused,
			InFlight: st.InFlight, Active: uint32(st.Active), Revision: rev}, rev, nil
	})
}

func (h adminHandler) SetSchedulingOptions(ctx context.Context, req *connect.Request[pb.SetSchedulingOptionsRequest]) (*connect.Response[pb.SetSchedulingOptionsResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.SetSchedulingOptionsRequest) (*pb.SetSchedulingOptionsResponse, uint64, error) {
		op := &pb.SetSchedulingOptions{Options: m.GetOptions()}
		r, err := h.s.propose(ctx, p, m.ExpectedRevision, &pb.Command{Op: &pb.Command_SetSchedulingOptions{SetSchedulingOptions: op}})
		if err != nil {
			return nil, r.Revision, err
		}
		return &pb.SetSchedulingOptionsResponse{Revision: r.Revision}, r.Revision, nil
	})
}
