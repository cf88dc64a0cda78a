// Tests of `keys list/revoke/rotate`. Goal: through the real server, list
// shows keys (never a secret), revoke and rotate take a key out of service
// with the CLI's exit codes (0 ok, 1 usage, 2 rejected, 3 unreachable); in
// a 3-node cluster a revoked key is refused by the leader and by every
// follower as soon as that node has applied the revocation's log entry, and
// a rotated first admin key stays revoked across a leader change and a
// member restart (whose start-up check derives that key and, leading,
// would propose it if it were unknown). Method: in-process
// nodes (cancel_test.go, cluster_test.go helpers), commands run in process.
package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/apikey"
	"github.com/termivar/distributed/node"
)

// listenOn listens on addr again (a port a stopped node released).
func listenOn(t *testing.T, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	waitCond(t, "port "+addr+" to be free", func() bool {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err == nil
	})
	return ln
}

// keysCLI runs `keys ARGS... --server url --key key`.
func keysCLI(t *testing.T, url, key string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut strings.Builder
	code = runKeysTo(append(args, "--server", url, "--key", key), &out, &errOut)
	return code, out.String(), errOut.String()
}

func idOf(t *testing.T, key string) string {
	t.Helper()
	id, _, err := apikey.Parse(key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestCLI_KeysListRevokeRotate(t *testing.T) {
	t.Parallel()
	url, admin := inProcessNode(t, node.Config{})
	code, prod, errOut := keysCLI(t, url, admin, "create", "--role", "producer")
	if code != exitOK {
		t.Fatalf("keys create: exit %d: %s", code, errOut)
	}
	prod = strings.TrimSpace(prod)

	// list --json: one object per key, no secret.
	code, out, errOut := keysCLI(t, url, admin, "list", "--json")
	if code != exitOK {
		t.Fatalf("keys list: exit %d: %s", code, errOut)
	}
	roles := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var k keyJSON
		if err := json.Unmarshal([]byte(line), &k); err != nil {
			t.Fatalf("keys list line %q: %v", line, err)
		}
		if k.Tenant != "default" || k.CreatedSecs == 0 || k.RevokedSecs != 0 {
			t.Fatalf("keys list line = %+v", k)
		}
		roles[k.KeyID] = k.Role
	}
	if len(roles) != 2 || roles[idOf(t, admin)] != "admin" || roles[idOf(t, prod)] != "producer" {
		t.Fatalf("keys list = %v", roles)
	}
	if strings.Contains(out, admin[21:]) || strings.Contains(out, prod[21:]) {
		t.Fatal("keys list prints a secret")
	}
	if code, out, _ := keysCLI(t, url, admin, "list"); code != exitOK || !strings.HasPrefix(out, "KEY ID") || !strings.Contains(out, idOf(t, prod)) {
		t.Fatalf("keys list table: exit %d:\n%s", code, out)
	}

	// Usage errors exit 1 and never reach the node.
	for _, args := range [][]string{{"revoke"}, {"revoke", "a", "b"}, {"revoke", prod}, {"rotate", "not-an-id"}, {"list", "extra"}, {"frobnicate"}} {
		if code, _, _ := keysCLI(t, url, admin, args...); code != exitUsage {
			t.Errorf("keys %v: exit %d, want %d", args, code, exitUsage)
		}
	}

	// revoke: exit 0, then the key is refused (exit 2) and a second revoke
	// is rejected (exit 2, key_not_found). Flags may follow KEYID.
	if code, _, errOut := keysCLI(t, url, admin, "revoke", idOf(t, prod)); code != exitOK {
		t.Fatalf("keys revoke: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, url, prod, "status"); code != exitRejected || !strings.Contains(errOut, "unknown API key") {
		t.Fatalf("status with a revoked key: exit %d: %s", code, errOut)
	}
	if code, _, errOut := keysCLI(t, url, admin, "revoke", idOf(t, prod)); code != exitRejected || !strings.Contains(errOut, "[key_not_found]") {
		t.Fatalf("second revoke: exit %d: %s", code, errOut)
	}
	if code, out, _ := keysCLI(t, url, admin, "list", "--revoked", "--json"); code != exitOK || !strings.Contains(out, `"revoked_secs"`) {
		t.Fatalf("keys list --revoked: exit %d:\n%s", code, out)
	}
	// The system tenant keeps its last admin key.
	if code, _, errOut := keysCLI(t, url, admin, "revoke", idOf(t, admin)); code != exitRejected || !strings.Contains(errOut, "[last_admin_key]") {
		t.Fatalf("revoke the last admin key: exit %d: %s", code, errOut)
	}

	// rotate --out: the new key lands in the file (0600) and works; the
	// old one is refused.
	outFile := filepath.Join(t.TempDir(), "admin.key")
	if code, _, errOut := keysCLI(t, url, admin, "rotate", idOf(t, admin), "--out", outFile); code != exitOK {
		t.Fatalf("keys rotate: exit %d: %s", code, errOut)
	}
	st, err := os.Stat(outFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("rotated key file: %v, %v", st, err)
	}
	newAdmin, err := client.LoadKey(outFile)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := keysCLI(t, url, newAdmin, "list"); code != exitOK {
		t.Fatalf("keys list with the rotated key: exit %d: %s", code, errOut)
	}
	if code, _, _ := keysCLI(t, url, admin, "list"); code != exitRejected {
		t.Fatalf("keys list with the old key: exit %d, want %d", code, exitRejected)
	}
	// rotate without --out prints the key on stdout.
	code, printed, _ := keysCLI(t, url, newAdmin, "rotate", idOf(t, newAdmin))
	if code != exitOK {
		t.Fatalf("keys rotate to stdout: exit %d", code)
	}
	if _, _, err := apikey.Parse(strings.TrimSpace(printed)); err != nil {
		t.Fatalf("keys rotate printed %q", printed)
	}

	// An unreachable node exits 3 (once the retry budget is spent).
	if code, _, _ := keysCLI(t, "http://"+freeAddr(t), admin, "list", "--retry-timeout", "300ms"); code != exitUnreachable {
		t.Fatalf("keys list against no node: exit %d, want %d", code, exitUnreachable)
	}
}

// TestCluster_RevokedKeyFailsOnEveryNode revokes a producer key through a
// follower (forwarded to the leader). Every node, leader and followers,
// refuses the key — for calls it answers itself (Status) and for calls it
// forwards — as soon as its FSM has applied the leader's index at the time
// the revocation was acknowledged. Then it rotates the cluster's first
// admin key, kills the leader, checks that no member knows the old key
// as live, and restarts the old leader from its snapshot: its readiness
// check derives the first admin key and must find it revoked in the
// restored state (not wait for it forever).
func TestCluster_RevokedKeyFailsOnEveryNode(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leader := c.leader()
	var follower *tnode
	for _, n := range c.nodes {
		if n != leader {
			follower = n
		}
	}
	prod := c.createKey(c.client(leader.url, c.adminKey), "producer")
	for _, n := range c.nodes {
		// NB: a follower answers Status itself, after applying the key's
		// creation, which it may not have done yet.
		waitCond(t, n.id+" to know the producer key", func() bool {
			_, ok := n.rn.n.FSM().Key(idOf(t, prod))
			return ok
		})
		if _, err := c.client(n.url, prod).Status(ctx, &pb.StatusRequest{}); err != nil {
			t.Fatalf("Status with the producer key via %s: %v", n.id, err)
		}
	}

	if code, _, errOut := keysCLI(t, follower.url, c.adminKey, "revoke", idOf(t, prod)); code != exitOK {
		t.Fatalf("keys revoke via a follower: exit %d: %s", code, errOut)
	}
	revokedAt, acked := leader.rn.n.FSM().AppliedIndex(), time.Now()
	for _, n := range c.nodes {
		waitCond(t, n.id+" to apply the revocation", func() bool { return n.rn.n.FSM().AppliedIndex() >= revokedAt })
		t.Logf("%s applied index %d %v after the revocation was acknowledged", n.id, revokedAt, time.Since(acked))
		cl := c.client(n.url, prod)
		if _, err := cl.Status(ctx, &pb.StatusRequest{}); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("Status with the revoked key via %s (applied %d ≥ %d) = %v, want Unauthenticated", n.id, n.rn.n.FSM().AppliedIndex(), revokedAt, err)
		}
		if _, err := cl.GetTask(ctx, &pb.GetTaskRequest{TaskId: "x"}); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("GetTask with the revoked key via %s = %v, want Unauthenticated", n.id, err)
		}
	}

	// Rotate the first admin key, then change leaders.
	keyFile := filepath.Join(c.base, "new-admin.key")
	if code, _, errOut := keysCLI(t, follower.url, c.adminKey, "rotate", idOf(t, c.adminKey), "--out", keyFile); code != exitOK {
		t.Fatalf("keys rotate via a follower: exit %d: %s", code, errOut)
	}
	newAdmin, err := client.LoadKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	rotatedAt := leader.rn.n.FSM().AppliedIndex()
	for _, n := range c.nodes {
		waitCond(t, n.id+" to apply the rotation", func() bool { return n.rn.n.FSM().AppliedIndex() >= rotatedAt })
	}
	// NB: the leader snapshots first, so that its restart below restores
	// the key tables from the snapshot (the revoked first admin key must be
	// in it, or the restarted member never becomes ready).
	if err := leader.rn.n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	var peers []string
	for _, n := range c.nodes {
		peers = append(peers, n.id+"="+n.rn.n.RaftAddr())
	}
	oldRaftAddr, oldAPIAddr := leader.rn.n.RaftAddr(), strings.TrimPrefix(leader.url, "http://")
	leader.kill()
	next := c.leader()
	if next == leader {
		t.Fatal("the killed node still leads")
	}
	for _, n := range c.nodes {
		if n.stopped {
			continue
		}
		if _, err := c.client(n.url, c.adminKey).Status(ctx, &pb.StatusRequest{}); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("Status with the rotated-out admin key via %s after failover = %v, want Unauthenticated", n.id, err)
		}
		if _, ok := n.rn.n.FSM().Key(idOf(t, c.adminKey)); ok {
			t.Fatalf("%s holds the rotated-out admin key again", n.id)
		}
	}
	// The old leader restarts: its readiness check accepts that the first
	// admin key it derives was rotated out, and it refuses that key too.
	restarted := &tnode{id: leader.id, dir: leader.dir}
	f := nodeFlags(t, restarted.dir, restarted.id, listenOn(t, oldAPIAddr), listenOn(t, oldRaftAddr))
	f.cluster.peers, f.cluster.secretFile = strings.Join(peers, ","), c.secretFile
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	if err := restarted.start(rctx, f); err != nil {
		t.Fatalf("restart %s after the rotation: %v", leader.id, err)
	}
	c.nodes = append(c.nodes, restarted)
	// NB: not AppliedIndex, which a restore from a snapshot does not set.
	waitCond(t, "the restarted node to know the rotated admin key", func() bool {
		_, ok := restarted.rn.n.FSM().Key(idOf(t, newAdmin))
		return ok
	})
	if _, err := c.client(restarted.url, c.adminKey).Status(ctx, &pb.StatusRequest{}); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("Status with the rotated-out admin key via the restarted node = %v, want Unauthenticated", err)
	}
	if _, err := c.client(restarted.url, newAdmin).Status(ctx, &pb.StatusRequest{}); err != nil {
		t.Fatalf("Status with the rotated admin key via the restarted node: %v", err)
	}
	lk, err := c.client(c.urls(0), newAdmin).CreateKey(ctx, &pb.CreateKeyRequest{Role: "worker"})
	if err != nil || lk.GetKey() == "" {
		t.Fatalf("CreateKey with the rotated admin key after failover = %v, %v", lk, err)
	}
}
