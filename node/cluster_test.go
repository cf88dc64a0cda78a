package node

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/termivar/distributed/raftfsm"
)

// openCluster starts size nodes bootstrapped with static peers on port-0
// raft listeners and a shared secret file; it returns them in peer order.
func openCluster(t *testing.T, size int) []*Node {
	t.Helper()
	return openClusterWith(t, size, nil)
}

// openClusterWith is openCluster with mut applied to member i's Config
// (nil: none).
func openClusterWith(t *testing.T, size int, mut func(i int, c *Config)) []*Node {
	t.Helper()
	base := t.TempDir()
	secretFile := filepath.Join(base, "shared.secret")
	if err := os.WriteFile(secretFile, randomSecret(t), 0o600); err != nil {
		t.Fatal(err)
	}
	lns := make([]net.Listener, size)
	peers := make([]Peer, size)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		peers[i] = Peer{ID: fmt.Sprintf("n%d", i+1), Addr: ln.Addr().String()}
	}
	nodes := make([]*Node, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg := Config{
				DataDir: filepath.Join(base, peers[i].ID), NodeID: peers[i].ID, RaftListener: lns[i], Peers: peers,
				SharedSecretFile: secretFile, TickInterval: -1, RaftTimeout: 500 * time.Millisecond,
				APIURL: "http://" + peers[i].ID + ".invalid:1",
			}
			if mut != nil {
				mut(i, &cfg)
			}
			nodes[i], errs[i] = Open(ctx, cfg)
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, n := range nodes {
			if n != nil {
				n.Close()
			}
		}
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %s: %v", peers[i].ID, err)
		}
	}
	return nodes
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func leaderOf(nodes []*Node) *Node {
	for _, n := range nodes {
		if n != nil && n.IsLeader() {
			return n
		}
	}
	return nil
}

func TestNode_StaticPeersReplicate(t *testing.T) {
	t.Parallel()
	nodes := openCluster(t, 3)
	key := nodes[0].FirstAdminKey()
	for _, n := range nodes {
		if n.FirstAdminKey() != key || key == "" {
			t.Fatalf("first admin keys differ: %q vs %q", n.FirstAdminKey(), key)
		}
		if !bytes.Equal(n.FSM().Epoch(), nodes[0].FSM().Epoch()) {
			t.Fatal("epochs differ")
		}
	}
	var leader *Node
	waitFor(t, "a leader with its API URL registered", func() bool {
		leader = leaderOf(nodes)
		return leader != nil && nodes[0].LeaderAPIURL() == "http://"+leader.NodeID()+".invalid:1"
	})
	for {
		_, err := leader.Propose(context.Background(), enqueue(raftfsm.SystemTenant, "t1"))
		if err == nil {
			break
		}
		waitFor(t, "a leader", func() bool { leader = leaderOf(nodes); return leader != nil })
	}
	for _, n := range nodes {
		waitFor(t, "replication to "+n.NodeID(), func() bool {
			tv, _ := n.FSM().Tenant(raftfsm.SystemTenant)
			_, ok, _ := tv.GetTask("t1")
			return ok
		})
		if !n.IsLeader() {
			if err := n.LinearizableRead(context.Background()); err != ErrNotLeader {
				t.Fatalf("follower LinearizableRead = %v", err)
			}
			if _, err := n.Propose(context.Background(), enqueue(raftfsm.SystemTenant, "t2")); err != ErrNotLeader {
				t.Fatalf("follower Propose = %v", err)
			}
		}
	}
	if err := leader.LinearizableRead(context.Background()); err != nil {
		t.Fatalf("leader LinearizableRead = %v", err)
	}
	ms, err := nodes[1].Members()
	if err != nil || len(ms) != 3 {
		t.Fatalf("Members = %v, %v", ms, err)
	}
}
