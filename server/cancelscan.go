package server

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/raftfsm"
)

// cancelScanChunk is how many cancellations CancelScan proposes together
// (they share log entries; the proposer batches them).
const cancelScanChunk = 512

// CancelScan cancels every non-terminal task of a scan: it reads the scan's
// queued, leased and running tasks and proposes one CancelTaskByID each
// (the producer's Cancel by task_id), in chunks. A task that became
// terminal before its cancellation was applied is counted unchanged
// (invalid_transition from the core); any other failure fails the call
// (the tasks cancelled before it stay cancelled, and a repeated call
// cancels the rest). A scan with no tasks is scan_not_found. One audit
// line per call.
func (h producerHandler) CancelScan(ctx context.Context, req *connect.Request[pb.CancelScanRequest]) (*connect.Response[pb.CancelScanResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.CancelScanRequest) (*pb.CancelScanResponse, uint64, error) {
		if err := distributed.CheckTaskCommandID(m.GetScanId()); err != nil {
			return nil, 0, err
		}
		tv, _ := h.s.node.Reads().Tenant(p.Tenant)
		ids, total := liveScanTasks(tv, m.GetScanId())
		if total == 0 {
			return nil, 0, &apiError{KindScanNotFound, "scan " + m.GetScanId() + " has no tasks"}
		}
		out := &pb.CancelScanResponse{Unchanged: uint32(total - len(ids))}
		for len(ids) > 0 {
			n := min(len(ids), cancelScanChunk)
			if err := h.cancelChunk(ctx, p, ids[:n], out); err != nil {
				return nil, out.Revision, err
			}
			ids = ids[n:]
		}
		return out, out.Revision, nil
	})
}

// liveScanTasks returns the IDs of a scan's non-terminal tasks and the
// number of its tasks.
func liveScanTasks(tv raftfsm.TenantView, scanID string) ([]string, int) {
	all := tv.ScanTaskIDs(scanID)
	var ids []string
	for _, id := range all {
		if t, ok, _ := tv.GetTask(id); ok && !t.Status().Terminal() {
			ids = append(ids, id)
		}
	}
	return ids, len(all)
}

func (h producerHandler) cancelChunk(ctx context.Context, p principal, ids []string, out *pb.CancelScanResponse) error {
	cmds := make([]*pb.Command, len(ids))
	for i, id := range ids {
		cmds[i] = &pb.Command{Tenant: p.Tenant, Principal: p.KeyID,
			Op: &pb.Command_CancelTaskById{CancelTaskById: &pb.CancelTaskByID{TaskId: id}}}
	}
	rs, err := h.s.node.ProposeAll(ctx, cmds)
	if err != nil {
		return err
	}
	for _, r := range rs {
		out.Revision = max(out.Revision, r.Revision)
		switch {
		case errors.Is(r.Err, distributed.ErrInvalidTransition):
			out.Unchanged++
		case r.Err != nil:
			return r.Err
		default:
			v, err := raftfsm.ValueAs[raftfsm.CancelByIDValue](r, "CancelTaskByID")
			if err != nil {
				return err
			}
			if v.Outcome.Kind == distributed.Cancelled {
				out.Cancelled++
			} else {
				out.Unchanged++
			}
		}
	}
	return nil
}
