package server

import (
	"cmp"
	"context"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/raftfsm"
)

// Purge and retention over the API (contract Part F, docs/adr/0002-purge.md):
// DeleteScan and PurgeTasks propose the FSM's PurgeTasks; UpdateTenant its
// UpdateTenant. Each is one audited write; identifiers are checked before
// anything is proposed.

// DeleteScan purges every task of a scan and their results. A scan with a
// queued, leased or running task is refused (invalid_transition) unless
// force, which cancels those first in the same command.
func (h producerHandler) DeleteScan(ctx context.Context, req *connect.Request[pb.DeleteScanRequest]) (*connect.Response[pb.DeleteScanResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.DeleteScanRequest) (*pb.DeleteScanResponse, uint64, error) {
		if err := distributed.CheckTaskCommandID(m.GetScanId()); err != nil {
			return nil, 0, err
		}
		op := &pb.PurgeTasks{ScanId: m.GetScanId(), WholeScan: true, CancelFirst: m.GetForce()}
		v, rev, err := h.purge(ctx, p, op)
		if err != nil {
			return nil, rev, err
		}
		return &pb.DeleteScanResponse{Purged: uint32(len(v.TaskIDs)), Cancelled: uint32(v.Cancelled), Revision: rev}, rev, nil
	})
}

// PurgeTasks purges the named terminal tasks and their results; an unknown
// (task_not_found) or non-terminal (invalid_transition) task refuses the
// whole request.
func (h producerHandler) PurgeTasks(ctx context.Context, req *connect.Request[pb.PurgeTasksRequest]) (*connect.Response[pb.PurgeTasksResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.PurgeTasksRequest) (*pb.PurgeTasksResponse, uint64, error) {
		ids := m.GetTaskIds()
		if len(ids) == 0 || len(ids) > distributed.MaxPurgeTaskIDs {
			return nil, 0, errInvalid("purge needs 1 to 65536 task IDs")
		}
		for _, id := range ids {
			if err := distributed.CheckTaskCommandID(id); err != nil {
				return nil, 0, err
			}
		}
		v, rev, err := h.purge(ctx, p, &pb.PurgeTasks{TaskIds: ids})
		if err != nil {
			return nil, rev, err
		}
		return &pb.PurgeTasksResponse{Purged: uint32(len(v.TaskIDs)), Revision: rev}, rev, nil
	})
}

func (h producerHandler) purge(ctx context.Context, p principal, op *pb.PurgeTasks) (raftfsm.PurgeValue, uint64, error) {
	return proposeAs[raftfsm.PurgeValue](ctx, h.s, p, nil, &pb.Command{Op: &pb.Command_PurgeTasks{PurgeTasks: op}}, "PurgeTasks")
}

// UpdateTenant changes a tenant's result retention. A tenant admin may
// update its own tenant; an admin of the system tenant any.
func (h adminHandler) UpdateTenant(ctx context.Context, req *connect.Request[pb.UpdateTenantRequest]) (*connect.Response[pb.UpdateTenantResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.UpdateTenantRequest) (*pb.UpdateTenantResponse, uint64, error) {
		name := cmp.Or(m.GetName(), p.Tenant)
		if name != p.Tenant && !p.systemAdmin() {
			return nil, 0, errDenied("only an admin key of the system tenant may update other tenants")
		}
		cmd := &pb.Command{Principal: p.KeyID, Op: &pb.Command_UpdateTenant{UpdateTenant: &pb.UpdateTenant{Name: name, ResultRetentionSecs: m.GetResultRetentionSecs()}}}
		r, err := h.s.node.Propose(ctx, cmd)
		if err := raftfsm.ProposalErr(r, err); err != nil {
			return nil, 0, err
		}
		return &pb.UpdateTenantResponse{}, r.Revision, nil
	})
}
