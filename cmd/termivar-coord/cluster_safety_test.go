// Membership safety on loopback (in-process `serve` nodes, as in
// cluster_test.go). Goal: a node holding another cluster's secret never
// changes the configuration or counts toward quorum. Method:
// TestCluster_JoinWithForeignSecretRefused joins with a wrong
// --cluster-secret-file (startNode, and runServe for the exit code);
// TestCluster_ForeignSecretMemberNeverVotes wipes a --peers member and
// restarts it with the same --peers and a foreign secret while the other
// two keep serving.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/node"
)

// writeForeignSecret writes a 32-byte secret that no test cluster uses.
func writeForeignSecret(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "foreign.secret")
	foreign := sha256.Sum256([]byte("a secret no test cluster uses"))
	if err := os.WriteFile(p, foreign[:], 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// memberSet renders Members as sorted "id@raftaddr/suffrage".
func memberSet(t *testing.T, ctx context.Context, cl *client.Client) string {
	t.Helper()
	ms, err := cl.Members(ctx, &pb.MembersRequest{})
	if err != nil {
		t.Fatalf("Members: %v", err)
	}
	var out []string
	for _, m := range ms.GetMembers() {
		out = append(out, m.GetNodeId()+"@"+m.GetRaftAddr()+"/"+m.GetSuffrage())
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

func TestCluster_JoinWithForeignSecretRefused(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := c.client(c.urls(0), c.adminKey)
	before := memberSet(t, ctx, admin)
	foreign := writeForeignSecret(t)

	n4 := &tnode{id: "n4", dir: filepath.Join(c.base, "n4")}
	f := nodeFlags(t, n4.dir, n4.id, listen(t), listen(t))
	f.cluster.join, f.cluster.joinKey, f.cluster.secretFile = c.urls(1), c.adminKey, foreign
	err := n4.start(ctx, f)
	if err == nil {
		n4.kill()
		t.Fatal("a joiner with a foreign secret was admitted")
	}
	if !errors.Is(err, node.ErrJoinerUnverified) || !strings.Contains(err.Error(), "does not hold this cluster's credential") {
		t.Fatalf("join error = %v", err)
	}
	if got := memberSet(t, ctx, admin); got != before {
		t.Fatalf("members after the refused join = %s, want %s", got, before)
	}
	if _, err := os.Stat(filepath.Join(n4.dir, node.SecretFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused joiner kept the foreign secret: %v", err)
	}

	// credential_only hands out the secret and changes nothing; it takes no
	// raft_addr, and only system admins may call it.
	secret, _ := os.ReadFile(c.secretFile)
	if r, err := admin.Join(ctx, &pb.JoinRequest{NodeId: "n9", CredentialOnly: true}); err != nil || !bytes.Equal(r.GetClusterSecret(), secret) {
		t.Fatalf("Join(credential_only) = secret equal %v, %v", bytes.Equal(r.GetClusterSecret(), secret), err)
	}
	if _, err := admin.Join(ctx, &pb.JoinRequest{NodeId: "n9", RaftAddr: "127.0.0.1:1", CredentialOnly: true}); codeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("Join(credential_only, raft_addr) = %v", err)
	}
	prod := c.client(c.urls(0), c.createKey(admin, "producer"))
	if _, err := prod.Join(ctx, &pb.JoinRequest{NodeId: "n9", CredentialOnly: true}); codeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("Join(credential_only) with a producer key = %v", err)
	}
	// A raft address nobody listens on is refused as unverified too.
	dead := listen(t)
	deadAddr := dead.Addr().String()
	dead.Close()
	if _, err := admin.Join(ctx, &pb.JoinRequest{NodeId: "n9", RaftAddr: deadAddr}); codeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("Join(unreachable raft_addr) = %v", err)
	}
	if got := memberSet(t, ctx, admin); got != before {
		t.Fatalf("members after the Join calls = %s, want %s", got, before)
	}

	// The command exits 2 (rejected), and still nothing changed.
	code := runServe([]string{"--data-dir", filepath.Join(c.base, "n5"), "--node-id", "n5",
		"--api-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--raft-timeout", "500ms",
		"--join", c.urls(0), "--join-key", c.adminKey, "--cluster-secret-file", foreign})
	if code != exitRejected {
		t.Fatalf("serve --join with a foreign secret exited %d, want %d", code, exitRejected)
	}
	if got := memberSet(t, ctx, admin); got != before {
		t.Fatalf("members after serve --join = %s, want %s", got, before)
	}
}

func TestCluster_ForeignSecretMemberNeverVotes(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin := c.client(c.urls(0), c.adminKey)
	er, err := admin.Enqueue(ctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "before", ScanId: "s", TargetRef: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	fence := er.GetTasks()[0].GetFenceToken()
	before := memberSet(t, ctx, admin)
	keys := c.leader().rn.n.FSM().KeyCount()

	// Stop and wipe n3, then start it again on the same addresses with the
	// same --peers and a foreign secret. Open blocks (it never gets the
	// cluster's state) until we cancel it.
	n3 := c.nodes[2]
	raftAddr, apiAddr := n3.rn.n.RaftAddr(), strings.TrimPrefix(n3.url, "http://")
	peers := c.peersFlag(t, ctx, admin)
	n3.kill()
	if err := os.RemoveAll(n3.dir); err != nil {
		t.Fatal(err)
	}
	live := c.nodes[:2]
	rejected := rejectedConns(live)
	apiLn, err := net.Listen("tcp", apiAddr)
	if err != nil {
		t.Fatal(err)
	}
	raftLn, err := net.Listen("tcp", raftAddr)
	if err != nil {
		apiLn.Close()
		t.Fatal(err)
	}
	f := nodeFlags(t, n3.dir, n3.id, apiLn, raftLn)
	f.cluster.peers, f.cluster.secretFile = peers, writeForeignSecret(t)
	startCtx, stopStart := context.WithCancel(ctx)
	startErr := make(chan error, 1)
	foreign := &tnode{id: "n3", dir: n3.dir}
	go func() { startErr <- foreign.start(startCtx, f) }()
	defer func() {
		stopStart()
		if err := <-startErr; err == nil {
			foreign.kill()
			t.Error("the member with a foreign secret started serving")
		}
	}()

	// Its raft traffic reaches the others and is refused there, while they
	// keep electing among themselves and serving writes.
	waitCond(t, "the foreign member's raft conns to be refused", func() bool { return rejectedConns(live) >= rejected+10 })
	cl := c.client(c.urls(0), c.adminKey)
	for i := range 20 {
		id := "during-" + string(rune('a'+i))
		if _, err := cl.Enqueue(ctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: id, ScanId: "s", TargetRef: "x"}}}); err != nil {
			t.Fatalf("Enqueue %s with the foreign member up: %v", id, err)
		}
		for _, n := range live {
			if _, leader := n.rn.n.Leader(); leader == "n3" {
				t.Fatal("the foreign member became leader")
			}
		}
	}
	if got := memberSet(t, ctx, admin); got != before {
		t.Fatalf("members = %s, want %s", got, before)
	}
	// A lease token issued before still opens: cancel the task with it.
	if _, err := cl.Cancel(ctx, &pb.CancelRequest{OwnershipToken: fence}); err != nil {
		t.Fatalf("Cancel with a token issued before: %v", err)
	}
	if got := c.leader().rn.n.FSM().KeyCount(); got != keys {
		t.Fatalf("key count changed from %d to %d", keys, got)
	}
	select {
	case err := <-startErr:
		startErr <- err
		t.Fatalf("the foreign member's start returned early: %v", err)
	default:
	}
}

// peersFlag rebuilds the --peers list of a running cluster.
func (c *tcluster) peersFlag(t *testing.T, ctx context.Context, admin *client.Client) string {
	t.Helper()
	ms, err := admin.Members(ctx, &pb.MembersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms.GetMembers() {
		out = append(out, m.GetNodeId()+"="+m.GetRaftAddr())
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

func rejectedConns(ns []*tnode) uint64 {
	var sum uint64
	for _, n := range ns {
		sum += n.rn.n.RaftRejectedConns()
	}
	return sum
}
