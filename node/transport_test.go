// Tests of the authenticated raft stream layer. Goal: nothing reaches raft
// from a peer without the cluster credential; a peer with it but refused
// by VerifyPeerFunc learns why; a silent peer neither blocks other
// handshakes nor stays connected past the deadline; the bound on pending
// handshakes holds. Method: pairs of stream layers on loopback listeners,
// raw TCP conns as silent or hostile peers, and hashicorp/raft's own
// NetworkTransport (plain TCP, and TLS from another cluster's secret)
// against a running node.
package node

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/apikey"
	"github.com/termivar/distributed/raftfsm"
)

// Two fixed secrets that pass the node's entropy check (SHA-256 of a label).
var (
	secretA = sha256Of("termivar test secret A")
	secretB = sha256Of("termivar test secret B")
)

func sha256Of(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// newTestLayer starts a stream layer on a loopback port-0 listener; it is
// closed when the test ends.
func newTestLayer(t *testing.T, cfg streamConfig) *tlsStreamLayer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := newStreamLayer(ln, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// rawConn opens a TCP conn that never speaks (closed when the test ends).
func rawConn(t *testing.T, addr net.Addr) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitClosedByPeer reads from c until the peer closes it; a read timeout
// (60 s, a safety net only) fails the test.
func waitClosedByPeer(t *testing.T, c net.Conn) {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(60 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the stream layer kept a silent conn open")
	}
}

// acceptOne runs Accept in the background.
func acceptOne(s *tlsStreamLayer) <-chan net.Conn {
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := s.Accept()
		if err != nil {
			close(ch)
			return
		}
		ch <- c
	}()
	return ch
}

func TestStreamLayer_DeriveCAIsDeterministic(t *testing.T) {
	t.Parallel()
	a1, _, err := deriveCA(secretA)
	if err != nil {
		t.Fatal(err)
	}
	a2, _, _ := deriveCA(bytes.Clone(secretA))
	b, _, _ := deriveCA(secretB)
	if !bytes.Equal(a1.Raw, a2.Raw) {
		t.Fatal("the same secret derived two different CAs")
	}
	if a1.PublicKey.(ed25519.PublicKey).Equal(b.PublicKey) {
		t.Fatal("different secrets derived the same CA key")
	}
	if _, _, err := deriveCA(nil); err == nil {
		t.Fatal("deriveCA(nil) succeeded")
	}
}

func TestStreamLayer_MutualAuthAndIdentity(t *testing.T) {
	t.Parallel()
	gotPeer := make(chan peerIdentity, 1)
	a := newTestLayer(t, streamConfig{Secret: secretA, NodeID: "a", VerifyPeerFunc: func(id string, inc []byte) error {
		gotPeer <- peerIdentity{id, inc}
		return nil
	}})
	b := newTestLayer(t, streamConfig{Secret: secretA, NodeID: "b", Incarnation: []byte{1, 2, 3}})
	accepted := acceptOne(a)
	peer, c, err := b.dial(a.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	if peer.NodeID != "a" || len(peer.Incarnation) != 0 {
		t.Fatalf("dialer sees %+v, want node a with an empty incarnation", peer)
	}
	if p := <-gotPeer; p.NodeID != "b" || !bytes.Equal(p.Incarnation, []byte{1, 2, 3}) {
		t.Fatalf("acceptor's VerifyPeerFunc saw %+v, want b/010203", p)
	}
	sc := <-accepted
	if sc == nil {
		t.Fatal("Accept failed")
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(sc, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v", buf, err)
	}
	// Close closes every connection the layer accepted.
	a.Close()
	waitClosedByPeer(t, c)
	if a.Rejected() != 0 || b.Rejected() != 0 {
		t.Fatalf("rejected = %d, %d; want 0", a.Rejected(), b.Rejected())
	}
}

func TestStreamLayer_ForeignSecretAndPlainTCPRejected(t *testing.T) {
	t.Parallel()
	a := newTestLayer(t, streamConfig{Secret: secretA, NodeID: "a"})
	b := newTestLayer(t, streamConfig{Secret: secretB, NodeID: "b"})
	accepted := acceptOne(a)
	if _, _, err := b.dial(a.Addr().String(), 5*time.Second); !errors.Is(err, errNoCredential) {
		t.Fatalf("dial with another cluster's secret = %v, want errNoCredential", err)
	}
	// A foreign dialer that trusts any server: a must refuse its
	// certificate.
	trusting := newTestLayer(t, streamConfig{Secret: secretB, NodeID: "mallory"})
	trusting.client.VerifyConnection = nil
	if _, _, err := trusting.dial(a.Addr().String(), 5*time.Second); !errors.Is(err, errNoCredential) {
		t.Fatalf("trusting dial with another cluster's secret = %v, want errNoCredential", err)
	}
	raw := rawConn(t, a.Addr())
	if _, err := raw.Write([]byte("\x00plain raft rpc")); err != nil {
		t.Fatal(err)
	}
	waitClosedByPeer(t, raw)
	waitFor(t, "three rejections", func() bool { return a.Rejected() == 3 })
	if b.Rejected() != 1 {
		t.Fatalf("dialer counted %d failed handshakes, want 1", b.Rejected())
	}
	select {
	case c := <-accepted:
		t.Fatalf("Accept returned %v for an unauthenticated peer", c)
	default:
	}
}

func TestStreamLayer_VerifyPeerRefusalReachesPeer(t *testing.T) {
	t.Parallel()
	a := newTestLayer(t, streamConfig{Secret: secretA, NodeID: "a", VerifyPeerFunc: func(id string, _ []byte) error {
		if id == "b" {
			return errors.New("node b was removed from the cluster")
		}
		return nil
	}})
	reasons := make(chan string, 1)
	b := newTestLayer(t, streamConfig{Secret: secretA, NodeID: "b", OnRefusedFunc: func(r string) { reasons <- r }})
	_, _, err := b.dial(a.Addr().String(), 5*time.Second)
	var re *refusedError
	if !errors.As(err, &re) || re.by != "peer" {
		t.Fatalf("dial = %v, want a refusal by the peer", err)
	}
	if r := <-reasons; r != "node b was removed from the cluster" {
		t.Fatalf("OnRefusedFunc got %q", r)
	}
	waitFor(t, "the acceptor to count the refusal", func() bool { return a.Rejected() == 1 })
	// A node it does not refuse still gets through.
	c := newTestLayer(t, streamConfig{Secret: secretA, NodeID: "c"})
	accepted := acceptOne(a)
	if _, conn, err := c.dial(a.Addr().String(), 5*time.Second); err != nil {
		t.Fatalf("dial as c: %v", err)
	} else {
		conn.Close()
	}
	if sc := <-accepted; sc == nil {
		t.Fatal("Accept failed for c")
	}
}

func TestStreamLayer_SilentConnDoesNotBlockHandshakes(t *testing.T) {
	t.Parallel()
	// A long deadline: the silent conns stay pending for the whole test.
	a := newTestLayer(t, streamConfig{Secret: secretA, NodeID: "a", HandshakeTimeout: time.Minute, MaxPending: 2})
	b := newTestLayer(t, streamConfig{Secret: secretA, NodeID: "b"})
	rawConn(t, a.Addr())
	waitFor(t, "one pending handshake", func() bool { return len(a.pending) == 1 })
	accepted := acceptOne(a)
	_, c, err := b.dial(a.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial beside a silent conn: %v", err)
	}
	defer c.Close()
	if sc := <-accepted; sc == nil {
		t.Fatal("Accept failed")
	}
	if len(a.pending) != 1 {
		t.Fatalf("pending handshakes = %d, want the silent one only", len(a.pending))
	}
	// The bound: with two silent conns pending, a third conn is closed at
	// once and counted.
	rawConn(t, a.Addr())
	waitFor(t, "two pending handshakes", func() bool { return len(a.pending) == 2 })
	third := rawConn(t, a.Addr())
	waitClosedByPeer(t, third)
	waitFor(t, "the refused third conn to be counted", func() bool { return a.Rejected() == 1 })
}

func TestStreamLayer_SilentConnClosedAfterDeadline(t *testing.T) {
	t.Parallel()
	a := newTestLayer(t, streamConfig{Secret: secretA, NodeID: "a", HandshakeTimeout: 200 * time.Millisecond})
	silent := rawConn(t, a.Addr())
	waitClosedByPeer(t, silent)
	waitFor(t, "the timed-out handshake to be counted", func() bool { return a.Rejected() == 1 })
	if len(a.pending) != 0 {
		t.Fatalf("pending handshakes = %d after the deadline", len(a.pending))
	}
}

// fakeLeaderAppend sends what a fake leader would: AppendEntries with a
// higher term that continues the node's log with a CreateKey command for
// key g.
func fakeLeaderAppend(t *testing.T, n *Node, trans *raft.NetworkTransport, g apikey.Generated) error {
	t.Helper()
	last := n.raft.LastIndex()
	var prev raft.Log
	if err := n.wal.GetLog(last, &prev); err != nil {
		t.Fatal(err)
	}
	term := n.raft.CurrentTerm() + 10
	data, err := raftfsm.MarshalEntry(&pb.Command{Version: raftfsm.CommandVersion, NowSecs: n.fsm.LastTime(), Op: &pb.Command_CreateKey{CreateKey: &pb.CreateKey{
		KeyId: g.ID, SecretHash: g.Hash[:], KeyTenant: raftfsm.SystemTenant, Role: apikey.RoleAdmin.String()}}})
	if err != nil {
		t.Fatal(err)
	}
	var resp raft.AppendEntriesResponse
	return trans.AppendEntries(raft.ServerID(n.NodeID()), raft.ServerAddress(n.RaftAddr()), &raft.AppendEntriesRequest{
		RPCHeader: attackHeader(trans), Term: term, PrevLogEntry: last, PrevLogTerm: prev.Term, LeaderCommitIndex: last + 1,
		Entries: []*raft.Log{{Index: last + 1, Term: term, Type: raft.LogCommand, Data: data}}}, &resp)
}

func attackHeader(trans *raft.NetworkTransport) raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("mallory"), Addr: trans.EncodePeer("mallory", trans.LocalAddr())}
}

// attackRPCs sends every raft RPC a fake leader or candidate would, with a
// higher term, and returns their errors: the fake append, a vote request,
// a snapshot install that makes the attacker the only voter, TimeoutNow.
func attackRPCs(t *testing.T, n *Node, trans *raft.NetworkTransport, g apikey.Generated) []error {
	t.Helper()
	errs := []error{fakeLeaderAppend(t, n, trans, g)}
	id, target := raft.ServerID(n.NodeID()), raft.ServerAddress(n.RaftAddr())
	term, last := n.raft.CurrentTerm()+10, n.raft.LastIndex()
	var rv raft.RequestVoteResponse
	errs = append(errs, trans.RequestVote(id, target, &raft.RequestVoteRequest{
		RPCHeader: attackHeader(trans), Term: term, LastLogIndex: last + 100, LastLogTerm: term}, &rv))
	state := mustExport(t, n)
	conf := raft.EncodeConfiguration(raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: "mallory", Address: trans.LocalAddr()}}})
	var is raft.InstallSnapshotResponse
	errs = append(errs, trans.InstallSnapshot(id, target, &raft.InstallSnapshotRequest{
		RPCHeader: attackHeader(trans), SnapshotVersion: raft.SnapshotVersionMax, Term: term, LastLogIndex: last + 100, LastLogTerm: term,
		Configuration: conf, ConfigurationIndex: last + 100, Size: int64(len(state))}, &is, bytes.NewReader(state)))
	var tn raft.TimeoutNowResponse
	errs = append(errs, trans.TimeoutNow(id, target, &raft.TimeoutNowRequest{RPCHeader: attackHeader(trans)}, &tn))
	return errs
}

func TestNode_RaftPortRejectsUnauthenticated(t *testing.T) {
	t.Parallel()
	attackers := map[string]func(t *testing.T) *raft.NetworkTransport{
		"plain TCP": func(t *testing.T) *raft.NetworkTransport {
			tr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 5*time.Second, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			return tr
		},
		"another cluster's credential": func(t *testing.T) *raft.NetworkTransport {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			s, err := newStreamLayer(ln, streamConfig{Secret: secretB, NodeID: "mallory"})
			if err != nil {
				t.Fatal(err)
			}
			// NB: the attacker trusts any server, so it is the node that
			// must refuse the attacker's certificate.
			s.client.VerifyConnection = nil
			return raft.NewNetworkTransport(s, 1, 5*time.Second, io.Discard)
		},
	}
	for name, newTrans := range attackers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			n := openNode(t, t.TempDir(), nil)
			defer n.Close()
			mustPropose(t, n, enqueue(raftfsm.SystemTenant, "before"))
			trans := newTrans(t)
			defer trans.Close()
			g, err := apikey.Generate(rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			term, state := n.raft.CurrentTerm(), mustExport(t, n)
			rejected := n.RaftRejectedConns()
			for i, err := range attackRPCs(t, n, trans, g) {
				if err == nil {
					t.Errorf("attack RPC %d succeeded", i)
				}
			}
			waitFor(t, "four rejected conns", func() bool { return n.RaftRejectedConns() >= rejected+4 })
			if n.raft.CurrentTerm() != term || !n.IsLeader() {
				t.Fatalf("term %d leader %v after the attack; want term %d, leader", n.raft.CurrentTerm(), n.IsLeader(), term)
			}
			if _, ok := n.FSM().Key(g.ID); ok || !bytes.Equal(mustExport(t, n), state) {
				t.Fatal("the attack changed the replicated state")
			}
			mustPropose(t, n, enqueue(raftfsm.SystemTenant, "after"))
		})
	}
}

// TestNode_RaftAttackNeedsOnlyTheCredential is the control of the test
// above: the same RPCs from a holder of the cluster credential do reach
// raft (the fake leader's CreateKey is applied), so what stops them above
// is the authentication, not a malformed request.
func TestNode_RaftAttackNeedsOnlyTheCredential(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := openNode(t, dir, nil)
	defer n.Close()
	secret, err := os.ReadFile(filepath.Join(dir, SecretFile))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := newStreamLayer(ln, streamConfig{Secret: secret, NodeID: "mallory"})
	if err != nil {
		t.Fatal(err)
	}
	trans := raft.NewNetworkTransport(s, 1, 5*time.Second, io.Discard)
	defer trans.Close()
	g, err := apikey.Generate(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if err := fakeLeaderAppend(t, n, trans, g); err != nil {
		t.Fatalf("AppendEntries with the credential: %v", err)
	}
	waitFor(t, "the fake leader's key to be applied", func() bool { _, ok := n.FSM().Key(g.ID); return ok })
}

func mustExport(t *testing.T, n *Node) []byte {
	t.Helper()
	b, err := n.FSM().ExportState()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openSingle opens a one-voter node on a port-0 raft listener with mut
// applied to its config, and closes it when the test ends.
func openSingle(t *testing.T, dir string, mut func(*Config)) (*Node, error) {
	t.Helper()
	cfg := Config{DataDir: dir, RaftAddr: "127.0.0.1:0", TickInterval: -1, RaftTimeout: 500 * time.Millisecond}
	if mut != nil {
		mut(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := Open(ctx, cfg)
	if err == nil {
		t.Cleanup(func() { n.Close() })
	}
	return n, err
}

// joinVia is a JoinFunc that calls the leader directly, as the server's
// Cluster.Join handler does.
func joinVia(leader *Node) JoinFunc {
	return func(ctx context.Context, mode JoinMode, nodeID, raftAddr string) ([]byte, error) {
		if mode == JoinMember {
			if err := leader.AddVoter(ctx, nodeID, raftAddr, "", nil, 0); err != nil {
				return nil, err
			}
		}
		return leader.Secret(), nil
	}
}

func membersOf(t *testing.T, n *Node) string {
	t.Helper()
	ms, err := n.Members()
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, m := range ms {
		parts = append(parts, m.ID+"@"+m.RaftAddr+"/"+m.Suffrage)
	}
	return strings.Join(parts, ",")
}

func TestNode_JoinVerified(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	leader, err := openSingle(t, filepath.Join(base, "n1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	before := membersOf(t, leader)

	// A joiner with another cluster's secret is refused before AddVoter;
	// the configuration is unchanged and the foreign secret not kept.
	wrong := filepath.Join(base, "wrong.secret")
	if err := os.WriteFile(wrong, secretB, 0o600); err != nil {
		t.Fatal(err)
	}
	dir2 := filepath.Join(base, "n2")
	_, err = openSingle(t, dir2, func(c *Config) { c.NodeID, c.Join, c.SharedSecretFile = "n2", joinVia(leader), wrong })
	if !errors.Is(err, ErrJoinerUnverified) || !strings.Contains(err.Error(), "does not hold this cluster's credential") {
		t.Fatalf("join with a foreign secret = %v", err)
	}
	if got := membersOf(t, leader); got != before {
		t.Fatalf("members after the refused join = %s, want %s", got, before)
	}
	if _, err := os.Stat(filepath.Join(dir2, SecretFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused joiner kept the foreign secret: %v", err)
	}

	// Without a secret file the joiner fetches the credential first, then
	// joins.
	n2, err := openSingle(t, dir2, func(c *Config) { c.NodeID, c.Join = "n2", joinVia(leader) })
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir2, SecretFile)); !bytes.Equal(got, leader.Secret()) {
		t.Fatal("the joiner stored another secret")
	}
	joined := membersOf(t, leader)
	if !strings.Contains(joined, "n2@"+n2.RaftAddr()+"/voter") {
		t.Fatalf("members after the join = %s", joined)
	}

	// A raft address that answers as another node is refused.
	err = leader.AddVoter(context.Background(), "n3", n2.RaftAddr(), "", nil, 0)
	if !errors.Is(err, ErrJoinerUnverified) || !strings.Contains(err.Error(), `answers as node "n2"`) {
		t.Fatalf("AddVoter(n3 at n2's address) = %v", err)
	}
	if got := membersOf(t, leader); got != joined {
		t.Fatalf("members after the refused AddVoter = %s, want %s", got, joined)
	}
}

func TestStreamLayer_SilentServerIsATimeoutNotACredentialFailure(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			held <- c // accepted and never answered, like a paused member
		}
		close(held)
	}()
	b := newTestLayer(t, streamConfig{Secret: secretA, NodeID: "b", HandshakeTimeout: 200 * time.Millisecond})
	_, _, err = b.dial(ln.Addr().String(), 5*time.Second)
	var ne net.Error
	if err == nil || errors.Is(err, errNoCredential) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("dial to a silent server = %v, want a timeout that is not errNoCredential", err)
	}
	for c := range held {
		c.Close()
	}
}

// TestStreamLayer_ReverifyClosesNowRefusedConns: a peer accepted while
// the verifier knew nothing against it (a member whose node table lagged)
// loses its connections, both directions, once the verifier refuses it;
// a peer still accepted keeps its own.
func TestStreamLayer_ReverifyClosesNowRefusedConns(t *testing.T) {
	t.Parallel()
	var refuseB atomic.Bool
	a := newTestLayer(t, streamConfig{Secret: secretA, NodeID: "a", VerifyPeerFunc: func(id string, _ []byte) error {
		if id == "b" && refuseB.Load() {
			return errors.New("node b's data dir was replaced")
		}
		return nil
	}})
	b := newTestLayer(t, streamConfig{Secret: secretA, NodeID: "b"})
	c := newTestLayer(t, streamConfig{Secret: secretA, NodeID: "c"})
	var fromB, fromC, atC net.Conn // atC: a's side of fromC
	for _, p := range []struct {
		l       *tlsStreamLayer
		out, in *net.Conn
	}{{b, &fromB, new(net.Conn)}, {c, &fromC, &atC}} {
		accepted := acceptOne(a)
		_, conn, err := p.l.dial(a.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		sc := <-accepted
		if sc == nil {
			t.Fatal("Accept failed")
		}
		*p.out, *p.in = conn, sc
	}
	// a dials b too: an outbound conn it verified.
	accepted := acceptOne(b)
	_, toB, err := a.dial(b.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer toB.Close()
	bSide := <-accepted
	if bSide == nil {
		t.Fatal("Accept failed at b")
	}
	if n := a.reverify(); n != 0 {
		t.Fatalf("reverify closed %d conns while every peer is accepted", n)
	}
	rejected := a.Rejected()
	refuseB.Store(true)
	if n := a.reverify(); n != 2 {
		t.Fatalf("reverify closed %d conns, want b's two", n)
	}
	waitClosedByPeer(t, fromB)
	waitClosedByPeer(t, bSide)
	if got := a.Rejected(); got != rejected+2 {
		t.Fatalf("rejected = %d, want %d", got, rejected+2)
	}
	// c's conn is still open: a byte written through it reaches a. NB: a
	// write alone succeeds on a conn the peer closed; the read proves it.
	if _, err := fromC.Write([]byte{7}); err != nil {
		t.Fatalf("c's conn after reverify: %v", err)
	}
	if err := atC.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 1)
	if _, err := io.ReadFull(atC, got); err != nil || got[0] != 7 {
		t.Fatalf("c's byte did not reach a after reverify: %v %v", got, err)
	}
	if n := a.reverify(); n != 0 {
		t.Fatalf("a second reverify closed %d more", n)
	}
}
