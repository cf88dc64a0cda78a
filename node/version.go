package node

import (
	"context"
	"errors"
	"fmt"
	"math"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/raftfsm"
)

// Rolling upgrades (raftfsm/version.go; docs/node.md, "Versions and
// rolling upgrades"): every member records the highest cluster version
// its binary supports in the node table (the leader its own, a follower
// through the leader with its registration); the leader raises the
// cluster version once every member of the configuration reported a
// higher one; an operation of a version the cluster has not reached is
// refused before it is proposed, so no member ever meets one it does not
// know.

// MaxVersion is the highest cluster version the node supports:
// EmulateVersion when set, else raftfsm.SupportedVersion.
func (c Config) MaxVersion() uint32 {
	if c.EmulateVersion > 0 && c.EmulateVersion < raftfsm.SupportedVersion {
		return c.EmulateVersion
	}
	return raftfsm.SupportedVersion
}

// ClusterVersion returns the replicated cluster version as this node
// applied it.
func (n *Node) ClusterVersion() uint32 { return n.fsm.ClusterVersion() }

// gate refuses cmd (and each element of a batch) when its operation
// belongs to a cluster version the cluster has not reached: the same
// typed error (raftfsm.ErrClusterVersion) the FSM would answer, but
// before anything reaches the log, where a member on an older binary
// would have to stop at it.
func (n *Node) gate(cmd *pb.Command) error {
	cv := n.fsm.ClusterVersion()
	if err := raftfsm.CheckClusterVersion(cmd, cv); err != nil {
		return err
	}
	for _, c := range cmd.GetBatch().GetCommands() {
		if err := raftfsm.CheckClusterVersion(c, cv); err != nil {
			return err
		}
	}
	return nil
}

// commonVersion returns the highest cluster version every member of the
// configuration reported; ok is false while one has reported none.
func (n *Node) commonVersion() (v uint32, ok bool) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0, false
	}
	v = math.MaxUint32
	for _, s := range f.Configuration().Servers {
		nv := n.fsm.NodeVersion(string(s.ID))
		if nv == 0 {
			return 0, false
		}
		v = min(v, nv)
	}
	return v, len(f.Configuration().Servers) > 0
}

// raiseClusterVersion (leader, member loop) proposes SetClusterVersion
// once every member supports a version above the cluster's. NB: not
// cancelled by Close, like setNodeInfo (memberLoop).
func (n *Node) raiseClusterVersion(ctx context.Context) {
	from := n.fsm.ClusterVersion()
	if from >= n.cfg.MaxVersion() {
		return // NB: the steady state of every round; the FSM refuses a raise above this (recorded) member
	}
	target, ok := n.commonVersion()
	if !ok || target <= from {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), applyTimeout)
	defer cancel()
	r, err := n.Propose(ctx, n.setClusterVersion(target))
	if err := raftfsm.ProposalErr(r, err); err != nil {
		n.log.Warn("raising the cluster version failed", "from", from, "to", target, "error", err)
		return
	}
	n.log.Info("cluster version raised: every member supports it", "from", from, "to", target)
}

// setClusterVersion is the SetClusterVersion command raising the cluster
// version to v. A raise to scheduling's version (3) or above carries the
// node's default scheduling options for the system tenant, which was
// created at version 1 without them; the FSM applies them only on the
// raise that first reaches 3, so a repeated or later raise changes none
// of an operator's settings.
func (n *Node) setClusterVersion(v uint32) *pb.Command {
	m := &pb.SetClusterVersion{Version: v}
	if v >= 3 && *n.cfg.DefaultScheduling != (distributed.SchedulingOptions{}) {
		m.SystemScheduling = raftfsm.SchedulingToProto(*n.cfg.DefaultScheduling)
	}
	return &pb.Command{Op: &pb.Command_SetClusterVersion{SetClusterVersion: m}}
}

// checkJoinerVersion refuses a new member that reports a version below
// the cluster's (it would stop at the first entry it cannot apply). v 0
// reports nothing — `cluster add` names a node that has not started yet —
// and is let through: such a node, if older, stops at that entry instead.
func (n *Node) checkJoinerVersion(id string, v uint32) error {
	if cv := n.fsm.ClusterVersion(); v > 0 && v < cv {
		return JoinerUnverified(fmt.Sprintf("node %s supports cluster version %d, the cluster runs %d: upgrade its binary first", id, v, cv))
	}
	return nil
}

// ensureSoleVoterVersion (leader, before the node is ready) raises the
// cluster version of a one-voter cluster to this binary's at once: it is
// the only member, so every member supports it, and a new single node
// (or one just upgraded) serves every operation from its first request
// instead of after the member loop's next round. Clusters of several
// voters wait for every member's report (raiseClusterVersion).
func (n *Node) ensureSoleVoterVersion(ctx context.Context) error {
	if !n.soleVoter() || n.fsm.ClusterVersion() >= n.cfg.MaxVersion() {
		return nil
	}
	for id := range n.fsm.NodeAPIURLs() {
		if id != n.cfg.NodeID && n.fsm.NodeVersion(id) < n.cfg.MaxVersion() {
			return nil // NB: a stale record of a removed member; the member loop decides
		}
	}
	r, err := n.Propose(ctx, n.setClusterVersion(n.cfg.MaxVersion()))
	if err != nil {
		return err
	}
	if r.Err != nil && !errors.Is(r.Err, raftfsm.ErrClusterVersion) {
		return r.Err
	}
	return nil
}
