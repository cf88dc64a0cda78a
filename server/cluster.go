package server

import (
	"context"
	"errors"
	"net"
	"net/url"
	"slices"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/raftfsm"
)

// KindJoinUnverified: the leader could not verify a joiner over the
// authenticated raft transport (FailedPrecondition; nothing changed).
const KindJoinUnverified = "join_unverified"

// clusterHandler serves termivar.v1.Cluster (system-tenant admins only).
type clusterHandler struct{ s *Server }

// errNoCluster answers a Cluster call on a backend without membership.
func errNoCluster() error {
	return connect.NewError(connect.CodeUnimplemented, errors.New("this node has no cluster membership"))
}

func (s *Server) members() []*pb.ClusterMember {
	c, ok := s.cluster()
	if !ok {
		return nil
	}
	ms, err := c.Members()
	if err != nil {
		return nil
	}
	out := make([]*pb.ClusterMember, len(ms))
	for i, m := range ms {
		out[i] = &pb.ClusterMember{NodeId: m.ID, RaftAddr: m.RaftAddr, ApiUrl: m.APIURL, Suffrage: m.Suffrage, Leader: m.Leader}
	}
	return out
}

func (h clusterHandler) Join(ctx context.Context, req *connect.Request[pb.JoinRequest]) (*connect.Response[pb.JoinResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.JoinRequest) (*pb.JoinResponse, uint64, error) {
		if !p.systemAdmin() {
			return nil, 0, errDenied("only an admin key of the system tenant may change the cluster")
		}
		c, ok := h.s.cluster()
		if !ok {
			return nil, 0, errNoCluster()
		}
		if !distributed.ValidIdentifier(m.GetNodeId()) {
			return nil, 0, errInvalid("node_id must be 1 to 256 letters, digits, '.', '_', ':' or '-'")
		}
		if m.GetCredentialOnly() {
			if m.GetRaftAddr() != "" || m.GetApiUrl() != "" {
				return nil, 0, errInvalid("credential_only takes no raft_addr or api_url")
			}
			h.s.log.Info("cluster credential handed out", "node_id", m.GetNodeId())
			return &pb.JoinResponse{ClusterSecret: h.s.node.Secret(), Members: h.s.members()}, 0, nil
		}
		if _, _, err := net.SplitHostPort(m.GetRaftAddr()); err != nil && m.GetRaftAddr() != "" {
			return nil, 0, errInvalid("raft_addr must be host:port")
		}
		if len(m.GetIncarnation()) > raftfsm.MaxIncarnationBytes {
			return nil, 0, errInvalid("incarnation is too long")
		}
		if m.GetApiUrl() != "" {
			if u, err := url.Parse(m.GetApiUrl()); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(m.GetApiUrl()) > 1024 {
				return nil, 0, errInvalid("api_url must be http(s)://host:port")
			}
		}
		if err := c.AddVoter(ctx, m.GetNodeId(), m.GetRaftAddr(), m.GetApiUrl(), m.GetIncarnation(), m.GetMaxVersion()); errors.Is(err, node.ErrNotMember) {
			return nil, 0, &apiError{KindNotAMember, "without raft_addr, node_id must be a member and api_url is required"}
		} else if errors.Is(err, node.ErrJoinerUnverified) {
			return nil, 0, &apiError{KindJoinUnverified, err.Error()}
		} else if err != nil {
			return nil, 0, err
		}
		h.s.log.Info("node joined", "node_id", m.GetNodeId(), "raft_addr", m.GetRaftAddr(), "api_url", m.GetApiUrl())
		return &pb.JoinResponse{ClusterSecret: h.s.node.Secret(), Members: h.s.members()}, 0, nil
	})
}

func (h clusterHandler) Members(ctx context.Context, req *connect.Request[pb.MembersRequest]) (*connect.Response[pb.MembersResponse], error) {
	return call(ctx, h.s, req, false, func(ctx context.Context, p principal, _ *pb.MembersRequest) (*pb.MembersResponse, uint64, error) {
		if !p.systemAdmin() {
			return nil, 0, errDenied("only an admin key of the system tenant may list the cluster")
		}
		_, id := h.s.node.Leader()
		return &pb.MembersResponse{Members: h.s.members(), LeaderId: id}, 0, nil
	})
}

func (h clusterHandler) RemoveMember(ctx context.Context, req *connect.Request[pb.RemoveMemberRequest]) (*connect.Response[pb.RemoveMemberResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.RemoveMemberRequest) (*pb.RemoveMemberResponse, uint64, error) {
		if !p.systemAdmin() {
			return nil, 0, errDenied("only an admin key of the system tenant may change the cluster")
		}
		c, ok := h.s.cluster()
		if !ok {
			return nil, 0, errNoCluster()
		}
		ms, err := c.Members()
		if err != nil {
			return nil, 0, err
		}
		if !slices.ContainsFunc(ms, func(x node.Member) bool { return x.ID == m.GetNodeId() }) {
			return nil, 0, &apiError{KindNoSuchMember, "no such member"}
		}
		if err := c.RemoveServer(ctx, m.GetNodeId()); err != nil {
			return nil, 0, err
		}
		return &pb.RemoveMemberResponse{}, 0, nil
	})
}

// KindTransferFailed is the ErrorDetail kind of a leadership transfer that
// raft gave up on, or that another node than the named one won.
const KindTransferFailed = "transfer_failed"

// TransferLeadership runs on the leader (followers forward it): the leader
// hands over to the named voter, or to the most up-to-date one, and answers
// with the new leader once it knows it. Audited like every mutating call.
func (h clusterHandler) TransferLeadership(ctx context.Context, req *connect.Request[pb.TransferLeadershipRequest]) (*connect.Response[pb.TransferLeadershipResponse], error) {
	return call(ctx, h.s, req, true, func(ctx context.Context, p principal, m *pb.TransferLeadershipRequest) (*pb.TransferLeadershipResponse, uint64, error) {
		if !p.systemAdmin() {
			return nil, 0, errDenied("only an admin key of the system tenant may change the cluster")
		}
		if m.GetNodeId() != "" && !distributed.ValidIdentifier(m.GetNodeId()) {
			return nil, 0, errInvalid("node_id must be 1 to 256 letters, digits, '.', '_', ':' or '-'")
		}
		c, ok := h.s.cluster()
		if !ok {
			return nil, 0, errNoCluster()
		}
		id, err := c.TransferLeadership(ctx, m.GetNodeId())
		switch {
		case errors.Is(err, node.ErrUnknownVoter):
			return nil, 0, &apiError{KindNoSuchMember, "no such voter"}
		case errors.Is(err, node.ErrSoleVoter):
			return nil, 0, &apiError{KindSoleVoter, "the cluster has no other voter"}
		case errors.Is(err, node.ErrTransferFailed):
			return nil, 0, &apiError{KindTransferFailed, err.Error()}
		case err != nil:
			return nil, 0, err
		}
		if id != h.s.node.NodeID() {
			h.s.log.Info("leadership transferred", "from", h.s.node.NodeID(), "to", id)
		}
		return &pb.TransferLeadershipResponse{LeaderId: id}, 0, nil
	})
}
