package server

import (
	"context"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/notify"
	"github.com/termivar/distributed/internal/token"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/raftfsm"
)

// Backend is the seam between the API and the replicated state: what the
// server needs of a node. node.Node implements it in production;
// client/clienttest implements it in memory (one FSM, no raft, no disk)
// so agent and CLI tests run these same handlers. Every method is safe
// for concurrent use.
type Backend interface {
	// Propose stamps cmd with the time, commits and applies it, and
	// returns the FSM's Response (domain errors in Response.Err). The error
	// is an infrastructure failure (node.ErrNotLeader, node.ErrClosed,
	// ctx); the command may still have been applied when ctx ended, or
	// when the error errors.Is node.ErrOutcomeUnknown (toConnect answers
	// that with an unknown outcome).
	Propose(ctx context.Context, cmd *pb.Command) (raftfsm.Response, error)
	// ProposeAll proposes cmds together and returns their responses in
	// order; an infrastructure error fails the whole call, and
	// errors.Is node.ErrOutcomeUnknown when some of cmds took effect or
	// may.
	ProposeAll(ctx context.Context, cmds []*pb.Command) ([]raftfsm.Response, error)
	// Reads returns a read-only handle on the applied state.
	Reads() raftfsm.Reader
	// Codec seals and opens the tenant-bound tokens (leases, fences,
	// receipts, ownerships).
	Codec() *token.Codec
	// Acquirers is the queue Acquire long-polls wait in; the FSM wakes
	// about as many of a tenant's waiters as a command may have made tasks
	// leasable (raftfsm.Options.WakeFunc).
	Acquirers() *notify.Queue
	// ProgressChan returns a channel closed the next time tasks of tenant
	// may have become terminal (FollowResults long-polls on it).
	ProgressChan(tenant string) <-chan struct{}
	// DefaultLimits are the limits of a tenant created without any.
	DefaultLimits() (distributed.Limits, distributed.ResultLimits)
	// DefaultScheduling are the scheduling options of a tenant created
	// without any (contract Part F).
	DefaultScheduling() distributed.SchedulingOptions
	// NodeID names this node; Secret is the cluster secret (it keys the
	// forwarded-for MAC and is handed to joiners).
	NodeID() string
	Secret() []byte
	// IsLeader reports whether this node may propose; LeaderAPIURL is the
	// leader's API URL ("" when unknown); Leader its raft address and ID;
	// RaftState "Leader", "Follower", "Candidate" or "Shutdown".
	IsLeader() bool
	LeaderAPIURL() string
	Leader() (addr, id string)
	RaftState() string
	// LinearizableRead returns once this node's applied state includes
	// every write committed before the call (an error when it cannot).
	LinearizableRead(ctx context.Context) error
	// CommitHealth returns why this node cannot commit now, or nil
	// (/readyz).
	CommitHealth() error
}

// ClusterBackend is the optional membership side of a Backend (the
// Cluster service and the members in Status); node.Node implements it. A
// backend without it has no members to list or change, and the Cluster
// service answers Unimplemented.
type ClusterBackend interface {
	Backend
	// Members lists the raft configuration with each member's API URL.
	Members() ([]node.Member, error)
	// AddVoter adds (or updates the API URL of) a voter, recording the
	// highest cluster version its binary supports (0: not reported); errors
	// wrap node.ErrNotMember or node.ErrJoinerUnverified.
	AddVoter(ctx context.Context, id, raftAddr, apiURL string, incarnation []byte, version uint32) error
	// RemoveServer removes a member.
	RemoveServer(ctx context.Context, id string) error
	// TransferLeadership hands leadership to targetID ("" for any voter)
	// and returns the new leader's ID; errors wrap node.ErrUnknownVoter,
	// node.ErrSoleVoter or node.ErrTransferFailed.
	TransferLeadership(ctx context.Context, targetID string) (string, error)
}

var _ ClusterBackend = (*node.Node)(nil)

// cluster returns the backend's membership side, if it has one.
func (s *Server) cluster() (ClusterBackend, bool) {
	c, ok := s.node.(ClusterBackend)
	return c, ok
}
