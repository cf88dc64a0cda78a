package server

import (
	"cmp"
	"context"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/apikey"
	"github.com/termivar/distributed/internal/wire"
	"github.com/termivar/distributed/raftfsm"
)

type adminHandler struct{ s *Server }

func (h adminHandler) Status(ctx context.Context, req *connect.Request[pb.StatusRequest]) (*connect.Response[pb.StatusResponse], error) {
	return call(ctx, h.s, req, false, func(ctx context.Context, p principal, m *pb.StatusRequest) (*pb.StatusResponse, uint64, error) {
		tv, _ := h.s.node.Reads().Tenant(p.Tenant)
		snap := tv.Counters()
		addr, id := h.s.node.Leader()
		out := &pb.StatusResponse{
			Tenant: p.Tenant, Revision: snap.Revision, LogicalTime: snap.LogicalTime,
			TaskRecords: uint32(snap.TaskRecords), ActiveTasks: uint32(snap.ActiveTasks), QueuedTasks: uint32(snap.QueuedTasks),
			TerminalTasks: uint32(snap.TerminalTasks), Workers: uint32(snap.Workers),
			Results: uint32(tv.ResultCount()), ResultBytes: uint64(tv.ResultBytes()),
			RaftState: h.s.node.RaftState(), Leader: id + "@" + addr, AppliedIndex: h.s.node.Reads().AppliedIndex(),
			NodeId: h.s.node.NodeID(), Members: h.s.members(), LongPollsWaiting: h.s.LongPollsWaiting(),
			ResultRetentionSecs: tv.ResultRetentionSecs(),
			Build:               h.s.build,
			ClusterVersion:      h.s.node.Reads().ClusterVersion(), NodeMaxVersion: h.s.node.Reads().MaxVersion(),
		}
		out.LastBackup, _ = h.s.node.Reads().LastBackup() // nil before the first backup
		if m.GetStateHash() {
			if err := h.stateHash(p, out); err != nil {
				return nil, 0, err
			}
		}
		return out, 0, nil
	})
}

// stateHash fills the FSM state hash of this node into out (system-tenant
// admins only: the hash covers every tenant).
func (h adminHandler) stateHash(p principal, out *pb.StatusResponse) error {
	if !p.systemAdmin() {
		return errDenied("only an admin key of the system tenant may ask for the state hash")
	}
	sh, err := h.s.node.Reads().StateHash()
	if err != nil {
		return err
	}
	if sh.IndexKnown {
		out.StateHash, out.StateHashIndex = sh.Sum[:], sh.Index
	}
	return nil
}

func (h adminHandler) ListWorkers(ctx context.Context, req *connect.Request[pb.ListWorkersRequest]) (*connect.Response[pb.ListWorkersResponse], error) {
	return call(ctx, h.s, req, false, func(ctx context.Context, p principal, _ *pb.ListWorkersRequest) (*pb.ListWorkersResponse, uint64, error) {
		tv, _ := h.s.node.Reads().Tenant(p.Tenant)
		out := &pb.ListWorkersResponse{}
		for _, w := range tv.Workers() {
			out.Workers = append(out.Workers, workerInfo(w))
		}
		return out, 0, nil
	})
}

func (h adminHandler) CreateTenant(ctx context.Context, req *connect.Request[pb.CreateTenantRequest]) (*connect.Response[pb.CreateTenantResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.CreateTenantRequest) (*pb.CreateTenantResponse, uint64, error) {
		if !p.systemAdmin() {
			return nil, 0, errDenied("only an admin key of the system tenant may create tenants")
		}
		defLim, defRL := h.s.node.DefaultLimits()
		lim := cmp.Or(m.GetLimits(), wire.LimitsToProto(defLim))
		rl := cmp.Or(m.GetResultLimits(), wire.ResultLimitsToProto(defRL))
		cmd := &pb.Command{Principal: p.KeyID, Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: m.GetName(), Limits: lim, ResultLimits: rl,
			Scheduling: h.tenantScheduling(m), ResultRetentionSecs: m.GetResultRetentionSecs()}}}
		if err := raftfsm.ProposalErr(h.s.node.Propose(ctx, cmd)); err != nil {
			return nil, 0, err
		}
		return &pb.CreateTenantResponse{}, 0, nil
	})
}

// tenantScheduling is a new tenant's scheduling options: the request's, or
// the node's defaults once the cluster runs the version a CreateTenant
// with scheduling needs (raftfsm.CheckClusterVersion); before, a tenant
// gets none.
func (h adminHandler) tenantScheduling(m *pb.CreateTenantRequest) *pb.SchedulingOptions {
	d := h.s.node.DefaultScheduling()
	if m.GetScheduling() != nil || d == (distributed.SchedulingOptions{}) {
		return m.GetScheduling()
	}
	ct := &pb.CreateTenant{Scheduling: raftfsm.SchedulingToProto(d)}
	if raftfsm.CheckClusterVersion(&pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: ct}}, h.s.node.Reads().ClusterVersion()) != nil {
		return nil
	}
	return ct.Scheduling
}

func (h adminHandler) CreateKey(ctx context.Context, req *connect.Request[pb.CreateKeyRequest]) (*connect.Response[pb.CreateKeyResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.CreateKeyRequest) (*pb.CreateKeyResponse, uint64, error) {
		tenant := cmp.Or(m.GetTenant(), p.Tenant)
		if tenant != p.Tenant && !p.systemAdmin() {
			return nil, 0, errDenied("only an admin key of the system tenant may create keys for other tenants")
		}
		role, ok := apikey.ParseRole(m.GetRole())
		if !ok {
			return nil, 0, errInvalid("role must be admin, producer or worker")
		}
		key, err := CreateKey(ctx, h.s.node, tenant, role)
		if err != nil {
			return nil, 0, err
		}
		return &pb.CreateKeyResponse{KeyId: key.ID, Key: key.Key}, 0, nil
	})
}

// CreateKey generates a key and replicates its hash. The node uses it for
// the first admin key; the API for Admin.CreateKey.
func CreateKey(ctx context.Context, n interface {
	Propose(context.Context, *pb.Command) (raftfsm.Response, error)
}, tenant string, role apikey.Role) (apikey.Generated, error) {
	g, err := apikey.Generate(nil)
	if err != nil {
		return apikey.Generated{}, err
	}
	cmd := &pb.Command{Op: &pb.Command_CreateKey{CreateKey: &pb.CreateKey{KeyId: g.ID, SecretHash: g.Hash[:], KeyTenant: tenant, Role: role.String()}}}
	if err := raftfsm.ProposalErr(n.Propose(ctx, cmd)); err != nil {
		return apikey.Generated{}, err
	}
	return g, nil
}

// ListKeys lists keys without secrets or hashes: an admin's own tenant, or
// any tenant (all of them when none is named) for a system admin.
func (h adminHandler) ListKeys(ctx context.Context, req *connect.Request[pb.ListKeysRequest]) (*connect.Response[pb.ListKeysResponse], error) {
	return call(ctx, h.s, req, false, func(ctx context.Context, p principal, m *pb.ListKeysRequest) (*pb.ListKeysResponse, uint64, error) {
		tenant := m.GetTenant()
		switch {
		case tenant == "" && !p.systemAdmin():
			tenant = p.Tenant
		case tenant != "" && tenant != p.Tenant && !p.systemAdmin():
			return nil, 0, errDenied("only an admin key of the system tenant may list other tenants' keys")
		}
		out := &pb.ListKeysResponse{}
		for _, k := range h.s.node.Reads().ListKeys(tenant, m.GetIncludeRevoked()) {
			out.Keys = append(out.Keys, &pb.KeyInfo{KeyId: k.ID, Tenant: k.Tenant, Role: k.Role, CreatedSecs: k.CreatedSecs, RevokedSecs: k.RevokedSecs})
		}
		return out, 0, nil
	})
}

// RevokeKey revokes a key through the log; the FSM checks that the caller
// may (admin of the key's tenant or of the system tenant) and keeps the
// system tenant's last admin key.
func (h adminHandler) RevokeKey(ctx context.Context, req *connect.Request[pb.RevokeKeyRequest]) (*connect.Response[pb.RevokeKeyResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.RevokeKeyRequest) (*pb.RevokeKeyResponse, uint64, error) {
		if !apikey.ValidID(m.GetKeyId()) {
			return nil, 0, errInvalid("key_id must be the 16 hex digits of a key ID")
		}
		if err := h.s.proposeKeyCommand(ctx, p, &pb.Command{Op: &pb.Command_RevokeKey{RevokeKey: &pb.RevokeKey{KeyId: m.GetKeyId()}}}); err != nil {
			return nil, 0, err
		}
		return &pb.RevokeKeyResponse{}, 0, nil
	})
}

// RotateKey replaces a key by a new one (same tenant and role) in one log
// command and returns the new key once.
func (h adminHandler) RotateKey(ctx context.Context, req *connect.Request[pb.RotateKeyRequest]) (*connect.Response[pb.RotateKeyResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.RotateKeyRequest) (*pb.RotateKeyResponse, uint64, error) {
		if !apikey.ValidID(m.GetKeyId()) {
			return nil, 0, errInvalid("key_id must be the 16 hex digits of a key ID")
		}
		g, err := apikey.Generate(nil)
		if err != nil {
			return nil, 0, err
		}
		op := &pb.Command_RotateKey{RotateKey: &pb.RotateKey{KeyId: m.GetKeyId(), NewKeyId: g.ID, NewSecretHash: g.Hash[:]}}
		if err := h.s.proposeKeyCommand(ctx, p, &pb.Command{Op: op}); err != nil {
			return nil, 0, err
		}
		return &pb.RotateKeyResponse{KeyId: g.ID, Key: g.Key, RevokedKeyId: m.GetKeyId()}, 0, nil
	})
}

// proposeKeyCommand proposes a key-table command on behalf of p (the FSM
// authorizes p at apply time) and returns its domain error, if any.
func (s *Server) proposeKeyCommand(ctx context.Context, p principal, cmd *pb.Command) error {
	cmd.Principal = p.KeyID
	return raftfsm.ProposalErr(s.node.Propose(ctx, cmd))
}

// auditSubject names the key a key-management request acts on (its
// key_id), or the scan a Retry re-runs, for the audit line; "" for other
// requests.
func auditSubject(msg any) string {
	if m, ok := msg.(interface{ GetKeyId() string }); ok {
		return m.GetKeyId()
	}
	if m, ok := msg.(*pb.RetryRequest); ok {
		return m.GetScanId()
	}
	return ""
}
