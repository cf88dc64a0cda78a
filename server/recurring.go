package server

import (
	"context"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/raftfsm"
)

// Recurring scans (raftfsm/recurring.go): create, list and delete
// schedules; the leader's ticker fires them.

func (h producerHandler) CreateSchedule(ctx context.Context, req *connect.Request[pb.CreateScheduleRequest]) (*connect.Response[pb.CreateScheduleResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.CreateScheduleRequest) (*pb.CreateScheduleResponse, uint64, error) {
		name := m.GetName()
		if name == "" {
			name = m.GetScanPrefix()
		}
		prio := parseEnum(m.GetPriority(), distributed.PriorityNormal, distributed.ParseTaskPriority)
		if prio == invalidEnum {
			return nil, 0, errInvalid("priority must be low, normal, high or critical")
		}
		if len(m.GetTargets()) > raftfsm.MaxEnqueueTasks {
			return nil, 0, errInvalid("a schedule has at most 4096 targets")
		}
		targets := make([][]byte, len(m.GetTargets()))
		for i, t := range m.GetTargets() {
			targets[i] = []byte(t)
		}
		op := &pb.CreateSchedule{Name: name, EverySecs: m.GetEverySecs(), ScanPrefix: m.GetScanPrefix(), Targets: targets, Priority: prio}
		r, err := h.s.propose(ctx, p, nil, &pb.Command{Op: &pb.Command_CreateSchedule{CreateSchedule: op}})
		if err != nil {
			return nil, r.Revision, err
		}
		return &pb.CreateScheduleResponse{Revision: r.Revision}, r.Revision, nil
	})
}

func (h producerHandler) ListSchedules(ctx context.Context, req *connect.Request[pb.ListSchedulesRequest]) (*connect.Response[pb.ListSchedulesResponse], error) {
	return call(ctx, h.s, req, false, func(ctx context.Context, p principal, m *pb.ListSchedulesRequest) (*pb.ListSchedulesResponse, uint64, error) {
		tv, _ := h.s.node.Reads().Tenant(p.Tenant)
		out := &pb.ListSchedulesResponse{}
		for _, s := range tv.Schedules() {
			si := &pb.ScheduleInfo{Name: s.GetName(), EverySecs: s.GetEverySecs(), ScanPrefix: s.GetScanPrefix(),
				Targets: uint32(len(s.GetTargets())), Priority: distributed.TaskPriority(s.GetPriority()).String(),
				StartSecs: s.GetStartSecs(), LastTick: s.GetLastTick(), NextTickSecs: raftfsm.NextTickSecs(s), LastError: s.GetLastError()}
			if s.GetLastTick() > 0 {
				si.LastScanId = raftfsm.ScheduleScanID(s.GetScanPrefix(), s.GetLastTick())
			}
			out.Schedules = append(out.Schedules, si)
		}
		return out, 0, nil
	})
}

func (h producerHandler) DeleteSchedule(ctx context.Context, req *connect.Request[pb.DeleteScheduleRequest]) (*connect.Response[pb.DeleteScheduleResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.DeleteScheduleRequest) (*pb.DeleteScheduleResponse, uint64, error) {
		op := &pb.DeleteSchedule{Name: m.GetName()}
		r, err := h.s.propose(ctx, p, nil, &pb.Command{Op: &pb.Command_DeleteSchedule{DeleteSchedule: op}})
		if err != nil {
			return nil, r.Revision, err
		}
		return &pb.DeleteScheduleResponse{Revision: r.Revision}, r.Revision, nil
	})
}
