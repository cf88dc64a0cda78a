// Tests of API keys on a member that lags behind the leader (server
// keycatchup.go, docs/node.md "Pre-authentication limits"). Goal: a key the
// cluster acknowledged is never answered Unauthenticated by a member that
// has not applied it yet — a follower forwards it, or, cut off from the
// leader, answers a retryable Unavailable / not_leader — and works there
// once the member caught up; an unknown key stays Unauthenticated; a
// revocation is effective on a member once it applied the entry, and
// every forwarded call is refused at once. Method: a 3-member in-process
// cluster whose raft listeners can stall what a member receives
// (gateListener), so that one follower is held behind for as long as the
// test wants and then released.
package main

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/apikey"
)

// gateListener stalls every connection it accepted (and accepts) while
// closed: the member reads nothing its peers send, so it neither applies
// nor hears the leader's heartbeats, while its own connections to them
// work.
type gateListener struct {
	net.Listener
	mu    sync.Mutex
	open  chan struct{}           // closed while the gate is open
	conns map[*gatedConn]struct{} // accepted and not closed
}

func newGateListener(ln net.Listener) *gateListener {
	g := &gateListener{Listener: ln, open: make(chan struct{}), conns: map[*gatedConn]struct{}{}}
	close(g.open)
	return g
}

// hold closes the gate and the connections accepted so far (a read
// already waiting in one would still get the next message); peers dial
// again and their new connections stall. release opens the gate again.
func (g *gateListener) hold() {
	g.mu.Lock()
	select {
	case <-g.open:
		g.open = make(chan struct{})
	default:
	}
	conns := make([]*gatedConn, 0, len(g.conns))
	for c := range g.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

func (g *gateListener) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *gateListener) opened() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

func (g *gateListener) Accept() (net.Conn, error) {
	c, err := g.Listener.Accept()
	if err != nil {
		return nil, err
	}
	gc := &gatedConn{Conn: c, g: g, closed: make(chan struct{})}
	g.mu.Lock()
	g.conns[gc] = struct{}{}
	g.mu.Unlock()
	return gc, nil
}

type gatedConn struct {
	net.Conn
	g      *gateListener
	once   sync.Once
	closed chan struct{}
}

func (c *gatedConn) Read(p []byte) (int, error) {
	select {
	case <-c.g.opened():
	case <-c.closed:
		return 0, net.ErrClosed
	}
	return c.Conn.Read(p)
}

func (c *gatedConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.g.mu.Lock()
		delete(c.g.conns, c)
		c.g.mu.Unlock()
	})
	return c.Conn.Close()
}

// oneTry is a client that does not retry, so a test sees each answer.
func oneTry(t *testing.T, url, key string) *client.Client {
	t.Helper()
	cl, err := client.New(client.Config{ServerURL: url, Key: key, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// notUnauthenticated fails t unless err is nil or a retryable
// Unavailable / not_leader.
func notUnauthenticated(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable {
		t.Fatalf("%s = %v, want success or a retryable Unavailable (not Unauthenticated)", what, err)
	}
}

// startGatedCluster starts a 3-member cluster whose raft listeners are
// gateListeners and returns it, its leader, and a follower with its gate
// (open).
func startGatedCluster(t *testing.T) (c *tcluster, leader, follower *tnode, gate *gateListener) {
	t.Helper()
	gates := make([]*gateListener, 3)
	c = startClusterWith(t, 3, func(i int, f *serveFlags) {
		gates[i] = newGateListener(f.cluster.raftListener)
		f.cluster.raftListener = gates[i]
	})
	t.Cleanup(func() {
		for _, g := range gates {
			g.release() // NB: before the members stop (c.stop runs later)
		}
	})
	leader = c.leader()
	for i, n := range c.nodes {
		if n != leader {
			follower, gate = n, gates[i]
		}
	}
	return c, leader, follower, gate
}

func TestCluster_LaggingFollowerKeys(t *testing.T) {
	t.Parallel()
	c, leader, held, gate := startGatedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	gate.hold()
	prod := c.createKey(c.client(leader.url, c.adminKey), "producer")
	if _, ok := held.rn.n.FSM().Key(idOf(t, prod)); ok {
		t.Fatalf("%s applied the key while held behind", held.id)
	}
	// Held behind but still following the leader: the call is forwarded
	// (or, if the member just gave up on the leader, answered not_leader).
	_, err := oneTry(t, held.url, prod).GetTask(ctx, &pb.GetTaskRequest{TaskId: "absent"})
	if codeOf(err) != connect.CodeNotFound {
		notUnauthenticated(t, "GetTask with a new key via the held follower", err)
	}
	// Cut off from the leader (no heartbeat arrives), the member knows no
	// leader: it cannot decide the key and answers not_leader.
	waitCond(t, held.id+" to lose its leader", func() bool { return held.rn.n.LeaderAPIURL() == "" })
	unknown, err := apikey.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, key := range map[string]string{"new key": prod, "unknown key": unknown.Key, "admin key": c.adminKey} {
		_, err := oneTry(t, held.url, key).GetTask(ctx, &pb.GetTaskRequest{TaskId: "absent"})
		if codeOf(err) != connect.CodeUnavailable {
			a, id := held.rn.n.Leader()
			t.Fatalf("GetTask with the %s via a member cut off from the leader = %v, want Unavailable (state %s leader %s %s url %q)", name, err, held.rn.n.RaftState(), a, id, held.rn.n.LeaderAPIURL())
		}
		notUnauthenticated(t, "GetTask with the "+name, err)
	}
	if _, ok := held.rn.n.FSM().Key(idOf(t, prod)); ok {
		t.Fatalf("%s applied the key while held behind", held.id)
	}
	// Released, it catches up; the key works there (a retrying client
	// rides out the member's return to the leader).
	gate.release()
	if _, err := c.client(held.url, prod).GetTask(ctx, &pb.GetTaskRequest{TaskId: "absent"}); codeOf(err) != connect.CodeNotFound {
		t.Fatalf("GetTask with the new key via the released member = %v, want not found", err)
	}
	waitCond(t, held.id+" to apply the key", func() bool {
		_, ok := held.rn.n.FSM().Key(idOf(t, prod))
		return ok
	})
	// A key nobody created stays Unauthenticated, on the leader and
	// through the follower.
	for _, n := range []*tnode{leader, held} {
		_, err := c.client(n.url, unknown.Key).GetTask(ctx, &pb.GetTaskRequest{TaskId: "absent"})
		if codeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("GetTask with an unknown key via %s = %v, want Unauthenticated", n.id, err)
		}
	}
}

// TestCluster_RevocationOnLaggingFollower: a follower held behind still
// has the revoked key live. Calls it forwards are refused at once (the
// leader decides); Status, which it answers itself, is accepted until it
// applied the revocation — the documented guarantee — and refused after.
func TestCluster_RevocationOnLaggingFollower(t *testing.T) {
	t.Parallel()
	c, leader, held, gate := startGatedCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prod := c.createKey(c.client(leader.url, c.adminKey), "producer")
	waitCond(t, held.id+" to know the key", func() bool {
		_, ok := held.rn.n.FSM().Key(idOf(t, prod))
		return ok
	})
	gate.hold()
	if code, _, errOut := keysCLI(t, leader.url, c.adminKey, "revoke", idOf(t, prod)); code != exitOK {
		t.Fatalf("keys revoke: exit %d: %s", code, errOut)
	}
	if _, ok := held.rn.n.FSM().Key(idOf(t, prod)); !ok {
		t.Fatalf("%s applied the revocation while held behind", held.id)
	}
	// Forwarded (while the member still follows the leader) or refused
	// not_leader (once it gave up on it): never accepted.
	_, err := oneTry(t, held.url, prod).GetTask(ctx, &pb.GetTaskRequest{TaskId: "absent"})
	if code := codeOf(err); code != connect.CodeUnauthenticated && code != connect.CodeUnavailable {
		t.Fatalf("GetTask with a revoked key via the held follower = %v, want Unauthenticated (or Unavailable)", err)
	}
	// Answered locally from the lagging table: accepted until applied.
	if _, err := oneTry(t, held.url, prod).Status(ctx, &pb.StatusRequest{}); err != nil {
		t.Fatalf("Status with the revoked key via the follower that has not applied the revocation = %v, want accepted (documented)", err)
	}
	gate.release()
	waitCond(t, held.id+" to apply the revocation", func() bool {
		_, ok := held.rn.n.FSM().Key(idOf(t, prod))
		return !ok
	})
	if _, err := oneTry(t, held.url, prod).Status(ctx, &pb.StatusRequest{}); codeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("Status with the revoked key after the follower applied the revocation = %v, want Unauthenticated", err)
	}
}
