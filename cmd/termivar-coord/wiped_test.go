package main

// A member whose data dir was wiped and that is started again with the
// same --peers and the same secret would bootstrap afresh and vote with a
// lost log. Goal: the cluster refuses it (its data dir incarnation differs
// from the one the node table recorded), its start gives up naming the
// repair, nothing of the cluster changes, and the documented repair —
// cluster remove, then --join on an empty data dir — brings it back.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/node"
)

func TestCluster_WipedMemberRefused(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	admin := c.client(c.urls(0), c.adminKey)
	n3 := c.nodes[2]
	inc := n3.rn.n.Incarnation()
	// NB: every member, not only the leader: a member that has not applied
	// the record yet (a new leader, if n3 led) would accept the wiped
	// member's connections; the node's own guards against that
	// (reverify, replacedDataDir) are tested in node/.
	waitCond(t, "n3's incarnation in every member's node table", func() bool {
		for _, m := range c.nodes {
			if got, _ := m.rn.n.FSM().NodeIncarnation("n3"); !bytes.Equal(got, inc) {
				return false
			}
		}
		return true
	})
	before := memberSet(t, ctx, admin)
	peers := c.peersFlag(t, ctx, admin)
	raftAddr, apiAddr := n3.rn.n.RaftAddr(), strings.TrimPrefix(n3.url, "http://")
	n3.kill()
	if err := os.RemoveAll(n3.dir); err != nil {
		t.Fatal(err)
	}

	live := c.nodes[:2]
	rejected := rejectedConns(live)
	wiped := &tnode{id: "n3", dir: n3.dir}
	f := nodeFlags(t, n3.dir, n3.id, listenOn(t, apiAddr), listenOn(t, raftAddr))
	f.cluster.peers, f.cluster.secretFile = peers, c.secretFile
	startErr := make(chan error, 1)
	go func() { startErr <- wiped.start(ctx, f) }()

	// The others refuse its raft connections and keep serving.
	waitCond(t, "the wiped member's raft conns to be refused", func() bool { return rejectedConns(live) > rejected })
	cl := c.client(c.urls(0), c.adminKey)
	for i := range 10 {
		if _, err := cl.Enqueue(ctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "w-" + string(rune('a'+i)), ScanId: "s", TargetRef: "x"}}}); err != nil {
			t.Fatalf("Enqueue with the wiped member up: %v", err)
		}
	}
	// Its start gives up, naming the repair.
	select {
	case err := <-startErr:
		if err == nil {
			wiped.kill()
			t.Fatal("the wiped member started serving")
		}
		if !errors.Is(err, node.ErrDataDir) || !strings.Contains(err.Error(), "data dir was replaced") || !strings.Contains(err.Error(), "cluster remove n3") {
			t.Fatalf("wiped member's start = %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the wiped member's start never gave up")
	}
	for _, n := range live {
		if _, leader := n.rn.n.Leader(); leader == "n3" {
			t.Fatal("the wiped member became leader")
		}
	}
	if got := memberSet(t, ctx, admin); got != before {
		t.Fatalf("members = %s, want %s", got, before)
	}

	// Repair: remove it, then join it on an empty data dir.
	if _, err := admin.RemoveMember(ctx, &pb.RemoveMemberRequest{NodeId: "n3"}); err != nil {
		t.Fatalf("RemoveMember(n3): %v", err)
	}
	if err := os.RemoveAll(n3.dir); err != nil {
		t.Fatal(err)
	}
	rejoined := &tnode{id: "n3", dir: n3.dir}
	f = nodeFlags(t, n3.dir, n3.id, listenOn(t, apiAddr), listenOn(t, raftAddr))
	f.cluster.join, f.cluster.joinKey = c.urls(0), c.adminKey
	if err := rejoined.start(ctx, f); err != nil {
		t.Fatalf("re-join after removal: %v", err)
	}
	c.nodes[2] = rejoined
	if got := memberSet(t, ctx, admin); !strings.Contains(got, "n3@"+raftAddr+"/voter") {
		t.Fatalf("members after the re-join = %s", got)
	}
	waitCond(t, "the re-joined member's new incarnation in the node table", func() bool {
		got, _ := c.leader().rn.n.FSM().NodeIncarnation("n3")
		return bytes.Equal(got, rejoined.rn.n.Incarnation()) && !bytes.Equal(got, inc)
	})
}

// TestCluster_WipedLeaderRefused provokes the race behind the old flake
// of the test above: the member that is wiped leads, and it is killed as
// soon as its own node table records its incarnation and every member's
// log holds that record, so the member that leads next may not have
// applied it when the wiped member (same ID and addresses, --peers) comes
// back. (Without the wait for every log, in 1 of 3 runs a lagging leader
// let it in and it became ready before failing; with it, 4 of 4 runs
// gave up at start.) Whether such a lagging leader
// let it in or not, the wiped member stops with the data-dir-replaced
// error — its start gives up, or, had it become ready, its node fails —
// while the others keep serving with the membership unchanged.
func TestCluster_WipedLeaderRefused(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	l := c.leader()
	inc := l.rn.n.Incarnation()
	waitCond(t, "the leader's own incarnation in its node table", func() bool {
		got, _ := l.rn.n.FSM().NodeIncarnation(l.id)
		return bytes.Equal(got, inc)
	})
	// NB: every member's log (not its node table) must hold the record, so
	// that whoever leads next has it; a member that never received it
	// could not tell the wiped member from a new one (docs/node.md,
	// "Wiped members").
	applied, err := strconv.ParseUint(l.rn.n.RaftStats()["applied_index"], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	waitCond(t, "the record in every member's log", func() bool {
		for _, m := range c.nodes {
			last, err := strconv.ParseUint(m.rn.n.RaftStats()["last_log_index"], 10, 64)
			if err != nil || last < applied {
				return false
			}
		}
		return true
	})
	admin := c.client(c.urls(0), c.adminKey)
	before := memberSet(t, ctx, admin)
	peers := c.peersFlag(t, ctx, admin)
	raftAddr, apiAddr := l.rn.n.RaftAddr(), strings.TrimPrefix(l.url, "http://")
	l.kill()
	if err := os.RemoveAll(l.dir); err != nil {
		t.Fatal(err)
	}
	wiped := &tnode{id: l.id, dir: l.dir}
	defer wiped.kill()
	f := nodeFlags(t, l.dir, l.id, listenOn(t, apiAddr), listenOn(t, raftAddr))
	f.cluster.peers, f.cluster.secretFile = peers, c.secretFile
	err = wiped.start(ctx, f)
	if err == nil {
		select {
		case <-wiped.rn.n.Failed():
			err = wiped.rn.n.Err()
			t.Logf("the wiped member became ready through a lagging member, then failed: %v", err)
		case <-ctx.Done():
			t.Fatal("the wiped member started serving and kept serving")
		}
	}
	if !errors.Is(err, node.ErrDataDir) || !strings.Contains(err.Error(), "data dir was replaced") || !strings.Contains(err.Error(), "cluster remove "+l.id) {
		t.Fatalf("wiped leader's restart = %v; want the data-dir-replaced error naming the repair", err)
	}
	live := c.client(c.urls(0), c.adminKey)
	if _, err := live.Enqueue(ctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "after-wipe", ScanId: "s", TargetRef: "x"}}}); err != nil {
		t.Fatalf("Enqueue on the other members: %v", err)
	}
	if got := memberSet(t, ctx, live); got != before {
		t.Fatalf("members = %s, want %s", got, before)
	}
}
