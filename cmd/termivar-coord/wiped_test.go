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
