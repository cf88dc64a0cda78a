package server

import (
	"context"
	"errors"
	"sync"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/audit"
)

// MaxEnqueueMany bounds the requests of one EnqueueMany.
const MaxEnqueueMany = 256

// methodEnqueueMany is the audit method of each request of an EnqueueMany.
const methodEnqueueMany = "Producer.EnqueueMany"

// EnqueueMany admits each request as its own Enqueue would: the requests
// without skip_existing go to the log together (node.ProposeAll: one
// entry for all of them when the proposer has room), each its own
// all-or-nothing EnqueueTasks command with its own expected revision; a
// request with skip_existing runs Enqueue's path (it reads, then
// proposes) concurrently with them. Each request gets its own audit line
// and its own result; only a failure of the whole call (authentication,
// request count, an infrastructure error of the log) fails the call.
func (h producerHandler) EnqueueMany(ctx context.Context, req *connect.Request[pb.EnqueueManyRequest]) (*connect.Response[pb.EnqueueManyResponse], error) {
	out, err := h.enqueueManyMsg(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(out), nil
}

// enqueueManyMsg is EnqueueMany's work on one message, for the unary call
// and a producer session's enqueue_many alike (session.go S8); its error
// is a *connect.Error with the leader hint.
func (h producerHandler) enqueueManyMsg(ctx context.Context, msg *pb.EnqueueManyRequest) (*pb.EnqueueManyResponse, error) {
	p, err := principalFrom(ctx)
	reqs := msg.GetRequests()
	if err == nil && (len(reqs) == 0 || len(reqs) > MaxEnqueueMany) {
		err = errInvalid("enqueue_many needs 1 to 256 requests")
	}
	if err != nil {
		h.s.audit.Record(ctx, audit.Entry{KeyID: p.KeyID, Tenant: p.Tenant, Method: methodEnqueueMany, Outcome: kindOf(err)})
		h.s.noteLimit(p.Tenant, err)
		return nil, h.s.withLeaderHint(toConnect(err))
	}
	out, err := h.enqueueMany(ctx, p, reqs)
	if err != nil {
		return nil, h.s.withLeaderHint(toConnect(err))
	}
	return out, nil
}

// enqueueMany answers every request of an EnqueueMany, each audited; an
// infrastructure error of the proposal fails the call (the requests it
// carried are audited with it).
func (h producerHandler) enqueueMany(ctx context.Context, p principal, reqs []*pb.EnqueueRequest) (*pb.EnqueueManyResponse, error) {
	out := &pb.EnqueueManyResponse{Results: make([]*pb.EnqueueItemResult, len(reqs))}
	var wg sync.WaitGroup
	cmds := make([]*pb.Command, 0, len(reqs))
	idx := make([]int, 0, len(reqs))
	for i, m := range reqs {
		if m.GetSkipExisting() {
			wg.Go(func() {
				res, rev, err := h.enqueueOne(ctx, p, m)
				out.Results[i] = h.enqueueItem(ctx, p, res, rev, err)
			})
			continue
		}
		cmd, err := checkedEnqueueCommand(m)
		if err != nil {
			out.Results[i] = h.enqueueItem(ctx, p, nil, 0, err)
			continue
		}
		cmd.Tenant, cmd.Principal, cmd.ExpectedRevision = p.Tenant, p.KeyID, m.ExpectedRevision
		cmds, idx = append(cmds, cmd), append(idx, i)
	}
	err := h.proposeEnqueues(ctx, p, cmds, idx, out)
	wg.Wait()
	return out, err
}

// checkedEnqueueCommand is the command of a request without
// skip_existing, after Enqueue's checks.
func checkedEnqueueCommand(m *pb.EnqueueRequest) (*pb.Command, error) {
	if err := checkEnqueue(m); err != nil {
		return nil, err
	}
	return enqueueCommand(m, m.GetTasks(), m.GetDeclaredTotal())
}

// proposeEnqueues proposes cmds together and fills the results at idx.
func (h producerHandler) proposeEnqueues(ctx context.Context, p principal, cmds []*pb.Command, idx []int, out *pb.EnqueueManyResponse) error {
	if len(cmds) == 0 {
		return nil
	}
	n := 0
	for _, c := range cmds {
		n += len(c.GetEnqueue().GetTasks())
	}
	rs, err := h.s.grantLeases(ctx, cmds, p.Tenant, n) // leases for waiting Acquires in the same entry
	if err != nil {
		for range cmds {
			h.s.audit.Record(ctx, audit.Entry{KeyID: p.KeyID, Tenant: p.Tenant, Method: methodEnqueueMany, Outcome: kindOf(err)})
		}
		return err
	}
	for j, r := range rs {
		var res *pb.EnqueueResponse
		err := r.Err
		if err == nil {
			res, err = h.enqueued(p, r)
		}
		out.Results[idx[j]] = h.enqueueItem(ctx, p, res, r.Revision, err)
	}
	return nil
}

// enqueueItem audits one request's outcome and returns its result: the
// response, or the error as the request's own Enqueue call would have
// carried it (code, message, detail; toConnect).
func (h producerHandler) enqueueItem(ctx context.Context, p principal, res *pb.EnqueueResponse, rev uint64, err error) *pb.EnqueueItemResult {
	h.s.audit.Record(ctx, audit.Entry{KeyID: p.KeyID, Tenant: p.Tenant, Method: methodEnqueueMany, Outcome: kindOf(err), Revision: rev})
	if err == nil {
		return &pb.EnqueueItemResult{Response: res}
	}
	h.s.noteLimit(p.Tenant, err)
	var ce *connect.Error
	if !errors.As(toConnect(err), &ce) {
		panic("server: toConnect returned no *connect.Error") // cannot happen: toConnect always builds one
	}
	return &pb.EnqueueItemResult{Error: detailOf(err), Code: uint32(ce.Code()), Message: ce.Message()}
}
