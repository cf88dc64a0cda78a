package node

import (
	"bytes"
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/apikey"
	"github.com/termivar/distributed/internal/token"
	"github.com/termivar/distributed/raftfsm"
)

// Peer is one voter of a static bootstrap (serve --peers id=addr,...).
type Peer struct {
	ID   string // raft server ID (--node-id of that member)
	Addr string // raft transport address host:port
}

// ParsePeers parses "id1=host:port,id2=host:port,...".
func ParsePeers(s string) ([]Peer, error) {
	var out []Peer
	ids, addrs := map[string]bool{}, map[string]bool{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, addr, ok := strings.Cut(part, "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("node: peer %q is not id=host:port", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("node: peer %q: %w", part, err)
		}
		if ids[id] || addrs[addr] {
			return nil, fmt.Errorf("node: peer %q is listed twice", part)
		}
		ids[id], addrs[addr] = true, true
		out = append(out, Peer{ID: id, Addr: addr})
	}
	if len(out) == 0 {
		return nil, errors.New("node: --peers lists no peer")
	}
	return out, nil
}

// JoinMode says what a JoinFunc asks the cluster for.
type JoinMode int

const (
	// JoinCredential asks only for the cluster secret (Cluster.Join with
	// credential_only, raftAddr empty); the configuration does not change.
	JoinCredential JoinMode = iota + 1
	// JoinMember asks the leader to verify that this node (nodeID, raft
	// listener at raftAddr) holds the cluster credential and to add it as
	// a voter; it also returns the cluster secret.
	JoinMember
)

// JoinFunc asks an existing member for the cluster secret or for
// membership (see JoinMode). When the leader refuses a JoinMember because
// it could not verify the joiner, the error wraps ErrJoinerUnverified.
type JoinFunc func(ctx context.Context, mode JoinMode, nodeID, raftAddr string) (secret []byte, err error)

// ErrJoinerUnverified is returned by AddVoter (and by a JoinFunc, wrapped)
// when the leader's authenticated raft dial to the joiner's raft address
// fails or answers as another node; the configuration is unchanged.
var ErrJoinerUnverified = errors.New("node: the joiner could not be verified")

// JoinerUnverified returns an error that wraps ErrJoinerUnverified with
// the leader's reason (for JoinFunc implementations that receive the
// refusal over the API).
func JoinerUnverified(reason string) error { return &joinerError{reason} }

// joinerError is an ErrJoinerUnverified with the reason.
type joinerError struct{ msg string }

func (e *joinerError) Error() string        { return e.msg }
func (e *joinerError) Is(target error) bool { return target == ErrJoinerUnverified }

// joinVerifyTimeout bounds the leader's dial to a joiner.
const joinVerifyTimeout = 10 * time.Second

// Member is one server of the raft configuration.
type Member struct {
	ID, RaftAddr, APIURL string
	Suffrage             string // voter, nonvoter, staging
	Leader               bool
}

// clusterState is the node's view of its own leadership.
type clusterState struct {
	barrierTerm atomic.Uint64 // term in which a barrier completed on this leader
	adminOnce   sync.Once
	adminKey    apikey.Generated
	adminErr    error
}

// memberLoopInterval is how often the leader checks its own registration.
const memberLoopInterval = 100 * time.Millisecond

func (c *Config) validateCluster() error {
	if len(c.Peers) > 0 && c.Join != nil {
		return errors.New("node: --peers and --join exclude each other")
	}
	if len(c.Peers) > 0 && !slices.ContainsFunc(c.Peers, func(p Peer) bool { return p.ID == c.NodeID }) {
		return fmt.Errorf("node: --peers does not list this node (%s)", c.NodeID)
	}
	return nil
}

// initSecret returns the cluster secret: DIR/cluster.secret, which must
// equal the shared secret file when one is given (and is created from it
// on first start; wrote reports that). Without either, a Peers member
// fails, a joiner gets the secret from Join (nil here) and a new single
// node creates a random one; a data dir with raft state but no secret is
// refused, never given a new one (every outstanding token would die).
// Secret files must be private (0600) and look random.
func initSecret(cfg Config, raftState bool) (secret []byte, wrote bool, err error) {
	path := filepath.Join(cfg.DataDir, SecretFile)
	local, err := readSecretFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, false, err
	}
	if cfg.SharedSecretFile != "" {
		shared, err := readSecretFile(cfg.SharedSecretFile)
		if err != nil {
			return nil, false, fmt.Errorf("node: cluster secret file: %w", err)
		}
		if local != nil && !bytes.Equal(local, shared) {
			return nil, false, fmt.Errorf("node: the cluster secret file differs from %s", path)
		}
		if local == nil {
			if err := WriteFileAtomic(path, shared, 0o600); err != nil {
				return nil, false, err
			}
		}
		return shared, local == nil, nil
	}
	if local != nil {
		return local, false, nil
	}
	switch {
	case raftState:
		return nil, false, dataDirError("%s is missing but the data dir holds raft state: restore the secret (every member of a cluster shares it; --cluster-secret-file takes a copy); a new one would invalidate every token", path)
	case len(cfg.Peers) > 1:
		return nil, false, errors.New("node: a --peers cluster needs --cluster-secret-file (the same file on every member)")
	case cfg.Join != nil:
		return nil, false, nil
	}
	secret, err = loadOrCreateSecret(path)
	return secret, err == nil, err
}

// readSecretFile reads a secret file and checks that it is private, long
// enough and not obviously low-entropy.
func readSecretFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if err := CheckPrivateFile(path); err != nil {
		return nil, err
	}
	if len(b) < token.MinSecretBytes {
		return nil, fmt.Errorf("node: %s is shorter than %d bytes", path, token.MinSecretBytes)
	}
	if err := checkSecretEntropy(path, b); err != nil {
		return nil, err
	}
	return b, nil
}

func (n *Node) newTransport(hl hclog.Logger) (*raft.NetworkTransport, error) {
	ln := n.cfg.RaftListener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", n.cfg.RaftAddr); err != nil {
			return nil, err
		}
	}
	if a, ok := ln.Addr().(*net.TCPAddr); !ok || a.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("raft address %s is not advertisable (use a concrete host)", ln.Addr())
	}
	s, err := newStreamLayer(ln, streamConfig{
		Secret: n.secret, NodeID: n.cfg.NodeID, Incarnation: n.incarnation,
		VerifyPeerFunc: n.verifyPeer, OnRefusedFunc: n.onRaftRefused, Logger: n.log,
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	n.stream = s
	// NB: raft gets this transport as a pipelinedTransport (pipeline.go):
	// NetworkTransport's own pipeline deadlocks once raft stops reading
	// it, which hung raft.Shutdown and `serve` on SIGTERM
	// (TestServe_ClearedSuffixRestarts) while pipelining was off here.
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: s, MaxPool: 3, Timeout: 10 * time.Second, Logger: hl, MaxRPCsInFlight: maxRPCsInFlight,
	}), nil
}

// RaftRejectedConns counts raft connections that failed authentication or
// were refused, inbound and outbound, since Open.
func (n *Node) RaftRejectedConns() uint64 {
	if n.stream == nil {
		return 0
	}
	return n.stream.Rejected()
}

// bootstrapConfiguration is the first configuration of a new node: the
// static peers, or this node alone; a joiner bootstraps nothing.
func (n *Node) bootstrapConfiguration(local raft.ServerAddress) (raft.Configuration, bool) {
	switch {
	case n.cfg.Join != nil:
		return raft.Configuration{}, false
	case len(n.cfg.Peers) > 0:
		var c raft.Configuration
		for _, p := range n.cfg.Peers {
			c.Servers = append(c.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
		}
		return c, true
	}
	return raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(n.cfg.NodeID), Address: local}}}, true
}

// fetchSecret asks a member for the cluster secret (JoinCredential, no
// configuration change) and stores it 0600 before raft opens, so that the
// raft transport can prove membership.
func fetchSecret(ctx context.Context, cfg Config) ([]byte, error) {
	secret, err := cfg.Join(ctx, JoinCredential, cfg.NodeID, "")
	if err != nil {
		return nil, fmt.Errorf("node: join (credential): %w", err)
	}
	if len(secret) < token.MinSecretBytes {
		return nil, errors.New("node: join: the member sent no cluster secret")
	}
	if err := WriteFileAtomic(filepath.Join(cfg.DataDir, SecretFile), secret, 0o600); err != nil {
		return nil, err
	}
	return secret, nil
}

// join asks the leader to verify this node over raft and add it as a
// voter.
func (n *Node) join(ctx context.Context) error {
	secret, err := n.cfg.Join(ctx, JoinMember, n.cfg.NodeID, n.RaftAddr())
	switch {
	case errors.Is(err, ErrJoinerUnverified) && n.cfg.SharedSecretFile != "":
		return fmt.Errorf("node: join refused, the cluster's secret differs from --cluster-secret-file: %w", err)
	case err != nil:
		return fmt.Errorf("node: join: %w", err)
	case !bytes.Equal(n.secret, secret):
		return errors.New("node: join: the cluster's secret differs from --cluster-secret-file")
	}
	return nil
}

// waitReady waits until the FSM holds the epoch, the system tenant and (in
// a Peers cluster) the first admin key; whenever this node leads meanwhile
// it proposes what is missing. A node that is the only voter also waits
// until it leads with everything applied, so that it serves at once.
func (n *Node) waitReady(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if n.raft.State() == raft.Leader {
			if err := n.leaderInit(ctx); err != nil && !errors.Is(err, ErrNotLeader) && ctx.Err() == nil {
				n.log.Warn("cluster initialisation failed; retrying", "error", err)
			}
		}
		if err := n.replacedDataDir(); err != nil {
			return err
		}
		if n.ready() {
			return nil
		}
		if r, long := n.refusal(); long {
			return dataDirError("the cluster refuses this node: %s", r)
		}
		select {
		case <-ctx.Done():
			if r, _ := n.refusal(); r != "" {
				return dataDirError("the cluster refuses this node: %s", r)
			}
			return fmt.Errorf("node: waiting for the cluster (leader %q): %w", n.leaderID(), ctx.Err())
		case <-n.hl.failed:
			return n.Err()
		case <-t.C:
		}
	}
}

func (n *Node) leaderID() string {
	_, id := n.raft.LeaderWithID()
	return string(id)
}

func (n *Node) ready() bool {
	if n.fsm.Epoch() == nil {
		return false
	}
	if _, ok := n.fsm.Tenant(raftfsm.SystemTenant); !ok {
		return false
	}
	// NB: the first admin key exists once any key does (only bootstrap
	// mints it; it may be revoked later and must not come back).
	if len(n.cfg.Peers) > 0 && n.fsm.KeyCount() == 0 {
		return false
	}
	if n.soleVoter() {
		return n.raft.State() == raft.Leader && n.cluBarrierDone()
	}
	return true
}

func (n *Node) soleVoter() bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	voters := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	return voters <= 1
}

func (n *Node) cluBarrierDone() bool { return n.clu.barrierTerm.Load() == n.raft.CurrentTerm() }

// leaderInit runs on a leader: a barrier, then whatever of the cluster's
// bootstrap state is missing.
func (n *Node) leaderInit(ctx context.Context) error {
	if err := n.ensureBarrier(ctx); err != nil {
		return err
	}
	if err := n.ensureCluster(ctx); err != nil {
		return err
	}
	if err := n.ensureSoleVoterVersion(ctx); err != nil {
		return err
	}
	if len(n.cfg.Peers) == 0 || n.fsm.KeyCount() > 0 {
		return nil
	}
	g, err := n.firstAdminKey()
	if err != nil {
		return err
	}
	err = raftfsm.ProposalErr(n.Propose(ctx, &pb.Command{Op: &pb.Command_CreateKey{CreateKey: &pb.CreateKey{
		KeyId: g.ID, SecretHash: g.Hash[:], KeyTenant: raftfsm.SystemTenant, Role: apikey.RoleAdmin.String()}}}))
	if errors.Is(err, raftfsm.ErrKeyExists) {
		return nil
	}
	return err
}

// ensureBarrier makes sure that every entry committed before this
// leader's term is applied (once per term).
func (n *Node) ensureBarrier(ctx context.Context) error {
	term := n.raft.CurrentTerm()
	if n.clu.barrierTerm.Load() == term {
		return nil
	}
	if err := n.await(ctx, ErrClosed, func() raft.Future { return n.raft.Barrier(applyTimeout) }); err != nil {
		return err
	}
	n.clu.barrierTerm.Store(term)
	return nil
}

func mapRaftErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrLeadershipLost):
		return ErrLeadershipLost // appended: a later leader may commit it
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return ErrNotLeader // refused before it reached the log
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	}
	return err
}

// firstAdminKey derives the first admin key of a Peers cluster from the
// cluster secret and epoch, so that every member writes the same
// admin.key without talking to the others: HKDF-SHA256(secret, salt =
// epoch, info = "termivar/v1 first admin key") → 8 ID + 32 secret bytes.
func (n *Node) firstAdminKey() (apikey.Generated, error) {
	epoch := n.fsm.Epoch()
	if epoch == nil {
		return apikey.Generated{}, errors.New("node: no epoch yet")
	}
	n.clu.adminOnce.Do(func() {
		b, err := hkdf.Key(sha256.New, n.secret, epoch, "termivar/v1 first admin key", 40)
		if err != nil {
			n.clu.adminErr = err
			return
		}
		n.clu.adminKey, n.clu.adminErr = apikey.Generate(bytes.NewReader(b))
	})
	return n.clu.adminKey, n.clu.adminErr
}

// FirstAdminKey returns the derived first admin key of a Peers cluster
// ("" for a single node or a joiner, whose admin key comes from elsewhere).
func (n *Node) FirstAdminKey() string {
	if len(n.cfg.Peers) == 0 {
		return ""
	}
	g, err := n.firstAdminKey()
	if err != nil {
		return ""
	}
	return g.Key
}

// memberLoop keeps the leader's API URL registered in the replicated node
// table (followers forward there) and its per-term barrier done, until ctx
// (the node's lifetime) ends; the registrations it starts derive from ctx.
// NB: its own SetNodeInfo is not cancelled by Close (WithoutCancel, still
// bounded by applyTimeout): Close then waits for the entry to commit, as
// before, instead of shutting raft down while the entry replicates, where
// hashicorp/raft v1.8's pipeline replication deadlocked Shutdown (seen in
// TestNode_HandOverLeadership under -race) before safePipeline
// (pipeline.go).
func (n *Node) memberLoop(ctx context.Context) {
	t := time.NewTicker(memberLoopInterval)
	defer t.Stop()
	var nextRegister time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !n.checkPeers() {
			return
		}
		if n.raft.State() != raft.Leader {
			if n.cfg.RegisterSelf != nil && n.cfg.APIURL != "" && time.Now().After(nextRegister) {
				nextRegister = time.Now().Add(2 * time.Second)
				n.registerSelf(ctx)
			}
			continue
		}
		if err := n.ensureBarrier(ctx); err != nil {
			continue
		}
		if n.cfg.APIURL == "" {
			continue
		}
		if !n.registered() {
			if err := n.setNodeInfo(context.WithoutCancel(ctx), n.cfg.NodeID, n.cfg.APIURL, n.Incarnation(), n.cfg.MaxVersion()); err != nil {
				n.log.Debug("registering the API URL failed", "error", err)
			}
			continue
		}
		n.raiseClusterVersion(ctx)
	}
}

// checkPeers closes raft connections of peers the node table now refuses
// (tlsStreamLayer.reverify) and fails the node when its own data dir
// turns out replaced: its applied node table says so (replacedDataDir),
// or, for a node that bootstrapped from --peers, members have refused it
// for longer than refusalGrace — as waitReady gives up before it is
// ready. (Only a replaced data dir is refused: verifyRaftPeer is the one
// verifier; a joiner may be refused for a moment by a member that has not
// applied its removal yet, so it is not failed.) False once it failed.
func (n *Node) checkPeers() bool {
	if n.stream != nil {
		n.stream.reverify()
	}
	err := n.replacedDataDir()
	if r, long := n.refusal(); err == nil && long && n.bootstrappedPeers.Load() {
		err = dataDirError("the cluster refuses this node: %s", r)
	}
	if err != nil {
		n.log.Error("this node's data dir was replaced; it stops serving", "error", err)
		n.hl.setFatal(err)
		return false
	}
	return true
}

// registered reports whether the node table records this node's API URL,
// data dir incarnation and supported cluster version.
func (n *Node) registered() bool {
	u, ok := n.fsm.NodeAPIURL(n.cfg.NodeID)
	inc, _ := n.fsm.NodeIncarnation(n.cfg.NodeID)
	return ok && u == n.cfg.APIURL && bytes.Equal(inc, n.Incarnation()) && n.fsm.NodeVersion(n.cfg.NodeID) == n.cfg.MaxVersion()
}

// registerSelf asks the leader to record this follower's API URL and
// incarnation; ctx is the member loop's, so Close cancels the call.
func (n *Node) registerSelf(ctx context.Context) {
	if n.registered() {
		return
	}
	leader := n.LeaderAPIURL()
	if leader == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := n.cfg.RegisterSelf(ctx, leader, n.Incarnation()); err != nil {
		n.log.Debug("registering the API URL with the leader failed", "error", err)
	}
}

func (n *Node) setNodeInfo(ctx context.Context, id, apiURL string, incarnation []byte, version uint32) error {
	ctx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	return raftfsm.ProposalErr(n.Propose(ctx, &pb.Command{Op: &pb.Command_SetNodeInfo{SetNodeInfo: &pb.SetNodeInfo{NodeId: id, ApiUrl: apiURL, Incarnation: incarnation, MaxVersion: version}}}))
}

// IsLeader reports whether this node is the raft leader.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// NodeID returns this node's raft server ID.
func (n *Node) NodeID() string { return n.cfg.NodeID }

// LeaderAPIURL returns the advertised API URL of the current leader, or ""
// when there is no leader or it has not registered its URL yet.
func (n *Node) LeaderAPIURL() string {
	id := n.leaderID()
	if id == "" {
		return ""
	}
	u, _ := n.fsm.NodeAPIURL(id)
	return u
}

// LinearizableRead returns nil when a read of the local FSM that starts
// now is linearizable: this node leads, every entry of earlier terms is
// applied, and a quorum still confirms its leadership. Otherwise
// ErrNotLeader (or ErrClosed).
func (n *Node) LinearizableRead(ctx context.Context) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	if err := n.ensureBarrier(ctx); err != nil {
		return err
	}
	// NB: a running raft answers VerifyLeader (a leader that cannot reach
	// a quorum steps down within its lease); await ends the wait at Close,
	// where raft would leave a queued one unanswered (futures.go).
	if err := ctx.Err(); err != nil {
		return err
	}
	return n.await(ctx, ErrClosed, n.raft.VerifyLeader)
}

// Members returns the raft configuration with each node's API URL.
func (n *Node) Members() ([]Member, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, mapRaftErr(err)
	}
	urls := n.fsm.NodeAPIURLs()
	leader := n.leaderID()
	var out []Member
	for _, s := range f.Configuration().Servers {
		m := Member{ID: string(s.ID), RaftAddr: string(s.Address), APIURL: urls[string(s.ID)], Leader: string(s.ID) == leader}
		switch s.Suffrage {
		case raft.Voter:
			m.Suffrage = "voter"
		case raft.Nonvoter:
			m.Suffrage = "nonvoter"
		default:
			m.Suffrage = "staging"
		}
		out = append(out, m)
	}
	return out, nil
}

// ErrNotMember is returned by AddVoter without a raft address for a node
// that is not in the configuration.
var ErrNotMember = errors.New("node: not a member of the cluster")

// AddVoter (on the leader) adds the node as a voter and records its API
// URL, data dir incarnation (may be nil) and the highest cluster version
// its binary supports (0: not reported; a new member that reports one
// below the cluster's is refused with ErrJoinerUnverified: version.go). A new raft address is
// verified first: the leader dials it through the authenticated raft
// transport, and the peer must hold the cluster credential and answer as
// id, else ErrJoinerUnverified and nothing changes. Adding a member again
// with the same address changes nothing (but the API URL); an empty
// raftAddr only records the API URL of an existing member (ErrNotMember
// otherwise).
func (n *Node) AddVoter(ctx context.Context, id, raftAddr, apiURL string, incarnation []byte, version uint32) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	if raftAddr == "" && apiURL == "" {
		return ErrNotMember
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return mapRaftErr(err)
	}
	member, current := false, false
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			member = true
			current = (raftAddr == "" || string(s.Address) == raftAddr) && s.Suffrage == raft.Voter
		}
	}
	if raftAddr == "" && !member {
		return ErrNotMember
	}
	if raftAddr != "" && !current {
		if err := n.checkJoinerVersion(id, version); err != nil {
			return err
		}
		if err := n.verifyJoiner(id, raftAddr); err != nil {
			return err
		}
	}
	if err := n.checkIncarnationChange(id, member, incarnation); err != nil {
		return err
	}
	if apiURL != "" {
		u, ok := n.fsm.NodeAPIURL(id)
		inc, _ := n.fsm.NodeIncarnation(id)
		if !ok || u != apiURL || (len(incarnation) > 0 && !bytes.Equal(inc, incarnation)) || (version > 0 && version != n.fsm.NodeVersion(id)) {
			if err := n.setNodeInfo(ctx, id, apiURL, incarnation, version); err != nil {
				return err
			}
		}
	}
	if current {
		return nil
	}
	return n.await(ctx, errCutAppend, func() raft.Future {
		return n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, 30*time.Second)
	})
}

// checkIncarnationChange refuses (ErrJoinerUnverified) to record a new
// incarnation for a member whose recorded one differs: its data dir was
// replaced, and only removing it (which forgets the record) and joining
// it again may bring it back; otherwise a wiped member's registration
// would make the others accept it.
func (n *Node) checkIncarnationChange(id string, member bool, incarnation []byte) error {
	if !member || len(incarnation) == 0 {
		return nil
	}
	rec, _ := n.fsm.NodeIncarnation(id)
	if err := replacedErr(id, rec, incarnation); err != nil {
		return JoinerUnverified(err.Error())
	}
	return nil
}

// verifyJoiner dials addr through the authenticated stream layer and
// checks that the peer answers as node id.
func (n *Node) verifyJoiner(id, addr string) error {
	peer, c, err := n.stream.dial(addr, joinVerifyTimeout)
	if c != nil {
		c.Close()
	}
	var refused *refusedError
	switch {
	case err == nil && peer.NodeID != id:
		return &joinerError{fmt.Sprintf("node: the joiner at %s answers as node %q, not %q", addr, peer.NodeID, id)}
	case err == nil:
		return nil
	case errors.As(err, &refused):
		return &joinerError{fmt.Sprintf("node: the joiner at %s: %v", addr, err)}
	case errors.Is(err, errNoCredential):
		return &joinerError{fmt.Sprintf("node: the joiner at %s does not hold this cluster's credential", addr)}
	}
	return &joinerError{fmt.Sprintf("node: cannot reach the joiner at %s over raft: %v", addr, err)}
}

// RemoveServer (on the leader) removes a server from the configuration and
// forgets its API URL.
func (n *Node) RemoveServer(ctx context.Context, id string) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	if err := n.await(ctx, errCutAppend, func() raft.Future { return n.raft.RemoveServer(raft.ServerID(id), 0, 30*time.Second) }); err != nil {
		return err
	}
	if id != n.cfg.NodeID {
		if _, ok := n.fsm.NodeAPIURL(id); ok {
			_ = n.setNodeInfo(ctx, id, "", nil, 0)
		}
	}
	return nil
}

// warnPeersDiffer logs the differences between --peers and the stored
// raft configuration of an existing data dir: the stored one wins (the
// list is only a first-start bootstrap), but a silent difference hides a
// misconfiguration.
func (n *Node) warnPeersDiffer() {
	if len(n.cfg.Peers) == 0 {
		return
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	if diff := peersDiff(n.cfg.Peers, f.Configuration()); diff != "" {
		n.log.Warn("--peers differs from the stored cluster configuration, which is used (change membership with termivar-coord cluster add/remove)",
			"difference", diff)
	}
}

// peersDiff describes how peers differ from a raft configuration ("" when
// they list the same servers at the same addresses).
func peersDiff(peers []Peer, conf raft.Configuration) string {
	stored := map[string]string{}
	for _, s := range conf.Servers {
		stored[string(s.ID)] = string(s.Address)
	}
	var d []string
	for _, p := range peers {
		addr, ok := stored[p.ID]
		switch {
		case !ok:
			d = append(d, p.ID+" is not a member")
		case addr != p.Addr:
			d = append(d, fmt.Sprintf("%s is at %s, not %s", p.ID, addr, p.Addr))
		}
		delete(stored, p.ID)
	}
	for _, id := range slices.Sorted(maps.Keys(stored)) {
		d = append(d, id+" ("+stored[id]+") is a member but not listed")
	}
	return strings.Join(d, "; ")
}

// Secret returns the cluster secret (the leader hands it to joiners).
func (n *Node) Secret() []byte { return bytes.Clone(n.secret) }
