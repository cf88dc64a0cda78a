package server

import (
	"context"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Retry re-runs a scan's failed, expired or cancelled tasks (or the named
// ones of the scan) through one RerunTasks command; see
// distributed.TaskQueue.RerunTasks. Audited like every mutating call.
func (h producerHandler) Retry(ctx context.Context, req *connect.Request[pb.RetryRequest]) (*connect.Response[pb.RetryResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.RetryRequest) (*pb.RetryResponse, uint64, error) {
		cmd, err := rerunCommand(m)
		if err != nil {
			return nil, 0, err
		}
		v, rev, err := proposeAs[distributed.RerunOutcome](ctx, h.s, p, m.ExpectedRevision, &pb.Command{Op: &pb.Command_RerunTasks{RerunTasks: cmd}}, "RerunTasks")
		if err != nil {
			return nil, rev, err
		}
		return &pb.RetryResponse{Requeued: v.Requeued, Unchanged: uint32(v.Unchanged), Revision: rev}, rev, nil
	})
}

// rerunCommand checks a Retry request before anything is proposed: a valid
// scan ID, valid task IDs, known status names.
func rerunCommand(m *pb.RetryRequest) (*pb.RerunTasks, error) {
	if err := distributed.CheckTaskCommandID(m.GetScanId()); err != nil {
		return nil, err
	}
	if len(m.GetTaskIds()) > distributed.MaxTaskRecords {
		return nil, errInvalid("retry names too many tasks")
	}
	for _, id := range m.GetTaskIds() {
		if err := distributed.CheckTaskCommandID(id); err != nil {
			return nil, err
		}
	}
	cmd := &pb.RerunTasks{ScanId: m.GetScanId(), TaskIds: m.GetTaskIds()}
	for _, name := range m.GetStatuses() {
		s, ok := distributed.ParseTaskStatus(name)
		if !ok || (s != distributed.TaskFailed && s != distributed.TaskExpired && s != distributed.TaskCancelled) {
			return nil, errInvalid("retry statuses are failed, expired or cancelled")
		}
		cmd.Statuses = append(cmd.Statuses, uint32(s))
	}
	return cmd, nil
}

// fillAttempts adds the fields beyond contract Part A to a TaskInfo: the
// timeout, re-runs, the attempt history and the last failure reason.
func fillAttempts(ti *pb.TaskInfo, t distributed.ScanTask) {
	ti.AttemptTimeoutSecs, ti.Reruns = t.AttemptTimeoutSecs(), t.Reruns()
	ti.LastFailureReason, _ = t.LastFailureReason()
	for _, a := range t.Attempts() {
		ai := &pb.AttemptInfo{
			Attempt: a.Attempt(), TaskGeneration: a.TaskGeneration(), WorkerId: a.WorkerID(), LeaseId: a.LeaseID(),
			AcquiredAt: a.AcquiredAt(), EndedAt: a.EndedAt(), Outcome: a.Outcome().String(), Reason: a.Reason(),
		}
		if s, ok := a.StartedAt(); ok {
			ai.StartedAt = &s
		}
		ti.Attempts = append(ti.Attempts, ai)
	}
}
