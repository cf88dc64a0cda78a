package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// Leadership transfer (Cluster.TransferLeadership, and the hand-over of a
// graceful shutdown). hashicorp/raft's LeadershipTransfer makes the leader
// stop accepting entries, bring the target up to date and send it
// TimeoutNow, so the target starts an election at once instead of after an
// election timeout; the transfer's future resolves when the old leader
// steps down. TransferLeadership then waits, on raft's leader observations,
// until this node knows the new leader, so its caller can route to it.

// ErrSoleVoter is returned by TransferLeadership on a leader that has no
// other voter to hand over to.
var ErrSoleVoter = errors.New("node: no other voter to hand leadership to")

// ErrUnknownVoter is returned by TransferLeadership when the target is not
// a voter of the configuration.
var ErrUnknownVoter = errors.New("node: the target is not a voter of the cluster")

// ErrTransferFailed is returned by TransferLeadership when raft could not
// hand leadership over (the target did not catch up or win in time), or
// when another node than the named target won.
var ErrTransferFailed = errors.New("node: leadership transfer failed")

// maxTransferWaitTimeouts bounds a whole transfer, in raft timeouts: raft
// gives up on the transfer itself after two election timeouts, and the new
// leader's first heartbeat follows its election at once.
const maxTransferWaitTimeouts = 10

// HandOverTimeout bounds the hand-over of a graceful shutdown
// (HandOverLeadership).
const HandOverTimeout = 5 * time.Second

// TransferLeadership (on the leader) hands leadership to targetID, or to
// the most up-to-date other voter when targetID is empty, and returns the
// new leader's ID once this node has heard from it. A targetID naming this
// node returns it at once (a retry after a lost reply is harmless).
//
// It returns ErrNotLeader on a follower, ErrSoleVoter without another
// voter, ErrUnknownVoter for a target that is not a voter, ErrTransferFailed
// when raft gave up or another node won, and ctx's error (wrapped) when no
// new leader was known in time (ctx, at most ten raft timeouts); the
// transfer may then still complete.
func (n *Node) TransferLeadership(ctx context.Context, targetID string) (string, error) {
	if n.raft.State() != raft.Leader {
		return "", ErrNotLeader
	}
	if targetID == n.cfg.NodeID {
		return targetID, nil
	}
	target, err := n.transferTarget(targetID)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, maxTransferWaitTimeouts*n.cfg.RaftTimeout)
	defer cancel()
	// NB: the observer is registered before the transfer starts, so the
	// leader change it waits for cannot slip by unseen.
	changed := make(chan raft.Observation, 1)
	defer n.observeLeader(changed)()
	transfer := func() raft.Future {
		if targetID == "" {
			return n.raft.LeadershipTransfer()
		}
		return n.raft.LeadershipTransferToServer(target.ID, target.Address)
	}
	if err := transferErr(n.await(ctx, ErrClosed, transfer)); err != nil {
		return "", err
	}
	return n.awaitNewLeader(ctx, changed, targetID)
}

// transferTarget checks the configuration: some other voter exists and,
// when targetID is given, it is one of them.
func (n *Node) transferTarget(targetID string) (raft.Server, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return raft.Server{}, mapRaftErr(err)
	}
	others := 0
	var target raft.Server
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter || string(s.ID) == n.cfg.NodeID {
			continue
		}
		others++
		if string(s.ID) == targetID {
			target = s
		}
	}
	switch {
	case others == 0:
		return raft.Server{}, ErrSoleVoter
	case targetID != "" && target.ID == "":
		return raft.Server{}, fmt.Errorf("%w: %q", ErrUnknownVoter, targetID)
	}
	return target, nil
}

// transferErr classifies the wait for the transfer's future (await; raft
// bounds the transfer by two election timeouts).
func transferErr(err error) error {
	switch {
	case err == nil, errors.Is(err, ErrNotLeader), errors.Is(err, ErrClosed):
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("node: leadership transfer: %w", err)
	}
	return fmt.Errorf("%w: %v", ErrTransferFailed, err)
}

// awaitNewLeader waits until this node (now a follower) knows a leader
// other than itself. Each leader observation re-checks the state; the
// observer drops events only while one is pending, and the state is set
// before raft observes it, so no change is missed.
func (n *Node) awaitNewLeader(ctx context.Context, changed <-chan raft.Observation, targetID string) (string, error) {
	for {
		id := n.leaderID()
		switch {
		case n.raft.State() == raft.Leader:
			return "", fmt.Errorf("%w: this node leads again", ErrTransferFailed)
		case id != "" && targetID != "" && id != targetID:
			return id, fmt.Errorf("%w: %s leads instead of %s", ErrTransferFailed, id, targetID)
		case id != "":
			return id, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return "", fmt.Errorf("node: no new leader known yet: %w", ctx.Err())
		}
	}
}

// HandOverLeadership is the first step of a graceful shutdown: a leader
// with other voters transfers leadership (bounded by HandOverTimeout and
// ctx) so that the cluster does not wait an election timeout for a new
// leader, and logs the outcome. raft picks the most up-to-date voter,
// which may be down (it still has the longest log); when that transfer
// fails, each other voter is tried by name. A follower, or the only voter,
// returns "" and nil at once. A failed hand-over is logged and returned;
// the caller shuts down anyway (the cluster then elects after the timeout).
// The hand-over also ends when the node's lifetime does (Close).
func (n *Node) HandOverLeadership(ctx context.Context) (string, error) {
	if n.raft.State() != raft.Leader || n.soleVoter() {
		return "", nil
	}
	ctx, stop := n.life.bound(ctx)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, HandOverTimeout)
	defer cancel()
	start := time.Now()
	id, err := n.handOver(ctx)
	elapsed := time.Since(start)
	if err != nil {
		n.log.Warn("leadership hand-over before shutdown failed", "error", err, "elapsed", elapsed)
		return "", err
	}
	n.log.Info("leadership handed over before shutdown", "new_leader", id, "elapsed", elapsed)
	return id, nil
}

// handOver tries raft's pick, then every other voter by name, until one
// leads; any other leader than this node counts as success. When this
// node no longer leads (ErrNotLeader) it waits for the new leader: a
// try that raft gave up on (its target's election outlasted an election
// timeout under load) still ends this node's leadership once that
// election's vote request arrives, and the hand-over is done when the
// winner is known.
func (n *Node) handOver(ctx context.Context) (string, error) {
	// NB: registered before the first try, so no leader change after it
	// slips by unseen.
	changed := make(chan raft.Observation, 1)
	defer n.observeLeader(changed)()
	targets := []string{""}
	if ms, err := n.Members(); err == nil {
		for _, m := range ms {
			if m.Suffrage == "voter" && m.ID != n.cfg.NodeID {
				targets = append(targets, m.ID)
			}
		}
	}
	var err error
	for _, target := range targets {
		var id string
		id, err = n.TransferLeadership(ctx, target)
		if id != "" && id != n.cfg.NodeID && (err == nil || errors.Is(err, ErrTransferFailed)) {
			return id, nil
		}
		if errors.Is(err, ErrNotLeader) {
			return n.awaitNewLeader(ctx, changed, "")
		}
		if !errors.Is(err, ErrTransferFailed) {
			return "", err
		}
		n.log.Debug("leadership hand-over attempt failed", "target", target, "error", err)
	}
	return "", err
}
