// Tests of leadership transfer. Goal: TransferLeadership moves the leader
// to the named voter (or to some other voter), answers only once the new
// leader is known, refuses followers, unknown targets and lone voters
// without changing leadership, and HandOverLeadership is a no-op on a single
// node. Method: real 3-node and 1-node clusters on loopback; the checks
// right after a transfer do not wait, since the call itself must have
// waited for the new leader.
package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/termivar/distributed/raftfsm"
)

// transferFrom calls TransferLeadership on the current leader, finding it
// again if leadership moved on its own meanwhile (ErrNotLeader).
func transferFrom(t *testing.T, nodes []*Node, target string) (from *Node, got string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		waitFor(t, "a leader", func() bool { from = leaderOf(nodes); return from != nil })
		got, err := from.TransferLeadership(ctx, target)
		if errors.Is(err, ErrNotLeader) && ctx.Err() == nil {
			continue
		}
		if err != nil {
			t.Fatalf("%s.TransferLeadership(%q) = %q, %v", from.NodeID(), target, got, err)
		}
		return from, got
	}
}

func TestNode_TransferLeadership(t *testing.T) {
	t.Parallel()
	nodes := openCluster(t, 3)
	ctx := context.Background()
	var leader *Node
	waitFor(t, "a leader", func() bool { leader = leaderOf(nodes); return leader != nil })
	for _, n := range nodes {
		if n != leader {
			if _, err := n.TransferLeadership(ctx, ""); !errors.Is(err, ErrNotLeader) {
				t.Fatalf("follower %s.TransferLeadership = %v, want ErrNotLeader", n.NodeID(), err)
			}
		}
	}
	if _, err := leader.TransferLeadership(ctx, "nope"); !errors.Is(err, ErrUnknownVoter) {
		t.Fatalf("TransferLeadership(unknown) = %v, want ErrUnknownVoter", err)
	}
	if got, err := leader.TransferLeadership(ctx, leader.NodeID()); err != nil || got != leader.NodeID() {
		t.Fatalf("TransferLeadership(self) = %q, %v", got, err)
	}
	if !leader.IsLeader() {
		t.Fatal("a refused or self transfer moved leadership")
	}

	// To a named voter, then to whichever voter raft picks.
	var target *Node
	for _, n := range nodes {
		if n != leader {
			target = n
		}
	}
	from, got := transferFrom(t, nodes, target.NodeID())
	if got != target.NodeID() || !target.IsLeader() || from.IsLeader() {
		t.Fatalf("after the transfer to %s: got %q, target leads %v, %s leads %v", target.NodeID(), got, target.IsLeader(), from.NodeID(), from.IsLeader())
	}
	if _, err := target.Propose(ctx, enqueue(raftfsm.SystemTenant, "after-transfer")); err != nil {
		t.Fatalf("Propose on the new leader: %v", err)
	}
	from, got = transferFrom(t, nodes, "")
	if got == from.NodeID() || got == "" || from.IsLeader() {
		t.Fatalf("TransferLeadership(any) from %s = %q; old leader still leads: %v", from.NodeID(), got, from.IsLeader())
	}
}

func TestNode_HandOverLeadership(t *testing.T) {
	t.Parallel()
	nodes := openCluster(t, 3)
	var leader *Node
	var got string
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; {
		waitFor(t, "a leader", func() bool { leader = leaderOf(nodes); return leader != nil })
		got, err = leader.HandOverLeadership(context.Background())
		// NB: "" and nil, or ErrNotLeader: leadership moved on its own
		// between leaderOf and the call; hand over from the new leader.
		if (got != "" || err != nil) && !errors.Is(err, ErrNotLeader) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || got == "" || got == leader.NodeID() || leader.IsLeader() {
		t.Fatalf("HandOverLeadership = %q, %v; old leader still leads: %v", got, err, leader.IsLeader())
	}
	for _, n := range nodes {
		if n.NodeID() == got && !n.IsLeader() {
			t.Fatalf("%s was reported as the new leader but does not lead", got)
		}
	}
	// A follower has nothing to hand over.
	if got, err := leader.HandOverLeadership(context.Background()); got != "" || err != nil {
		t.Fatalf("follower HandOverLeadership = %q, %v", got, err)
	}
}

func TestNode_TransferLeadershipSoleVoter(t *testing.T) {
	t.Parallel()
	n := openNode(t, t.TempDir(), nil)
	defer n.Close()
	if got, err := n.HandOverLeadership(context.Background()); got != "" || err != nil {
		t.Fatalf("single node HandOverLeadership = %q, %v", got, err)
	}
	if _, err := n.TransferLeadership(context.Background(), ""); !errors.Is(err, ErrSoleVoter) {
		t.Fatalf("single node TransferLeadership = %v, want ErrSoleVoter", err)
	}
	if !n.IsLeader() {
		t.Fatal("the single node lost leadership")
	}
}

// TestNode_HandOverLeadershipPastDeadVoter: with one follower down, the
// hand-over still reaches the live one. The dead follower is the first
// other voter in configuration order and as up to date as the live one,
// so raft's own pick (longest log, first on ties) usually names it and the
// fallback to naming each voter does the work.
func TestNode_HandOverLeadershipPastDeadVoter(t *testing.T) {
	t.Parallel()
	// Raft timeouts 3× the other cluster tests': at 500 ms, a leader under
	// -race on a loaded machine once lost its lease on its own before the
	// hand-over, which is not what this test is about.
	nodes := openClusterWith(t, 3, func(_ int, c *Config) { c.RaftTimeout = 1500 * time.Millisecond })
	var leader *Node
	waitFor(t, "a leader", func() bool { leader = leaderOf(nodes); return leader != nil })
	var dead, live *Node
	for _, n := range nodes {
		switch {
		case n == leader:
		case dead == nil:
			dead = n
		default:
			live = n
		}
	}
	if _, err := leader.Propose(context.Background(), enqueue(raftfsm.SystemTenant, "before")); err != nil {
		t.Fatalf("Propose: %v", err)
	}
	waitFor(t, "both followers to apply", func() bool {
		return dead.FSM().AppliedIndex() == leader.FSM().AppliedIndex() && live.FSM().AppliedIndex() == leader.FSM().AppliedIndex()
	})
	dead.Close()
	got, err := leader.HandOverLeadership(context.Background())
	if errors.Is(err, ErrNotLeader) || (err == nil && got == "") {
		t.Fatalf("leadership moved on its own before the hand-over (%q, %v)", got, err)
	}
	if err != nil || got != live.NodeID() || !live.IsLeader() || leader.IsLeader() {
		t.Fatalf("HandOverLeadership = %q, %v; %s leads %v, old leader leads %v", got, err, live.NodeID(), live.IsLeader(), leader.IsLeader())
	}
}

// TestNode_HandOverWaitsForWinnerWhenLeadershipMoved: a hand-over whose
// node no longer leads when it tries (an earlier try that raft gave up on
// still made its target run an election) reports the member that leads
// now instead of failing with ErrNotLeader.
func TestNode_HandOverWaitsForWinnerWhenLeadershipMoved(t *testing.T) {
	t.Parallel()
	nodes := openCluster(t, 3)
	from, _ := transferFrom(t, nodes, "")
	ctx, cancel := context.WithTimeout(context.Background(), HandOverTimeout)
	defer cancel()
	got, err := from.handOver(ctx)
	leads := ""
	if now := leaderOf(nodes); now != nil {
		leads = now.NodeID()
	}
	if err != nil || got == "" || got == from.NodeID() || got != leads {
		t.Fatalf("handOver on the deposed %s = %q, %v; %q leads now", from.NodeID(), got, err, leads)
	}
}
