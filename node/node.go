// Package node is the raft shell around the FSM: it lays out the data
// directory, keeps the cluster secret, opens hashicorp/raft over raft-wal
// (log and stable store), a file snapshot store and a mutual-TLS transport
// keyed by the cluster secret (transport.go), bootstraps a one-voter
// cluster on first start, stamps and batches proposals, runs the leader's
// background recovery ticker and wakes long-polling Acquire calls.
//
// Data directory layout (all created 0700/0600):
//
//	DIR/cluster.secret    32 random bytes (HMAC key for tokens), 0600
//	DIR/raft/wal/         raft-wal segments and meta DB (log + stable store)
//	DIR/raft/snapshots/   raft FileSnapshotStore (FSMState protobuf)
//	DIR/audit.log         audit JSON lines (written by the server)
//	DIR/admin.key         the first admin key, 0600 (written by the CLI)
//
// Durability: raft-wal fsyncs every appended batch before raft acknowledges
// it, so an acknowledged command survives kill -9.
package node

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	walmetrics "github.com/hashicorp/raft-wal/metrics"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/metrics"
	"github.com/termivar/distributed/internal/notify"
	"github.com/termivar/distributed/internal/token"
	"github.com/termivar/distributed/internal/tracing"
	"github.com/termivar/distributed/internal/wire"
	"github.com/termivar/distributed/raftfsm"
)

// File names inside the data directory.
const (
	SecretFile   = "cluster.secret"
	AdminKeyFile = "admin.key"
	raftDir      = "raft"
)

// Config configures a Node. Zero values take the documented defaults.
type Config struct {
	// DataDir holds everything durable (default "./termivar-data").
	DataDir string
	// NodeID names this raft server (default "node1").
	NodeID string
	// RaftAddr is the raft transport bind address (default "127.0.0.1:7421";
	// port 0 picks a free port).
	RaftAddr string
	// Logger receives node diagnostics; nil discards them.
	Logger *slog.Logger
	// RaftLogOutput receives hashicorp/raft's own log at warn level; nil
	// discards it. Ignored when RaftLogger is set.
	RaftLogOutput io.Writer
	// RaftLogger, when set, receives hashicorp/raft's and raft-wal's log
	// (serve routes it into its slog logger: internal/logging.HCLog).
	RaftLogger hclog.Logger
	// Metrics receives the raft instruments (apply latency, batch size,
	// log store latency, snapshots, leader changes, recoveries, raft-wal's
	// counters); nil records nothing.
	Metrics *metrics.Node
	// TracerProvider makes the spans of raft proposals; nil: no spans.
	TracerProvider trace.TracerProvider
	// MaxBatchCommands bounds the commands coalesced into one log entry
	// (default 1024, at most raftfsm.MaxBatchCommands).
	MaxBatchCommands int
	// MaxEntryBytes bounds the encoded commands coalesced into one log
	// entry: an entry takes no further proposal once its commands reach it
	// (default DefaultMaxEntryBytes; a single larger command is an entry
	// alone).
	MaxEntryBytes int
	// TickInterval is the cadence of the leader's recovery ticker (default
	// 1 s; negative disables it).
	TickInterval time.Duration
	// TaskTTLSecs is the age at which the ticker expires non-terminal tasks;
	// 0 uses each tenant's MaxTaskTTLSecs.
	TaskTTLSecs uint64
	// DefaultLimits and DefaultResultLimits apply to the system tenant
	// created at bootstrap (zero: the core's defaults).
	DefaultLimits       distributed.Limits
	DefaultResultLimits distributed.ResultLimits
	// DefaultScheduling are the scheduling options (contract Part F) of the
	// system tenant created at bootstrap and of tenants created without
	// any (nil: DefaultServiceScheduling; point at a zero value for none).
	DefaultScheduling *distributed.SchedulingOptions
	// NowFunc is the wall clock used to stamp commands (default time.Now).
	NowFunc func() time.Time
	// SnapshotThreshold is the number of log entries between snapshots
	// (default 8192).
	SnapshotThreshold uint64
	// SnapshotBytes also takes a snapshot once this many bytes of log
	// entries were applied since the last one (default
	// DefaultSnapshotBytes, 64 MiB; negative: by entry count only). Few
	// large entries otherwise grow the log without a snapshot and a
	// restart replays all of it (snapbytes.go).
	SnapshotBytes int64
	// SnapshotGrowth lets a log of results grow to this many times the
	// result bytes the last snapshot holds (when that is above
	// SnapshotBytes) before the next snapshot: the result store is then
	// rewritten into snapshots a bounded number of times per byte of log,
	// not once per SnapshotBytes, and a restart replays up to this many
	// times its snapshot's results (default DefaultSnapshotGrowth, 1; a
	// larger value is taken as MaxSnapshotGrowth; negative: SnapshotBytes
	// alone). Log bytes that are not results still take a snapshot every
	// SnapshotBytes (snapbytes.go).
	SnapshotGrowth int

	// Cluster settings (cluster.go). With neither Peers nor Join the node
	// bootstraps a one-voter cluster.

	// Peers is the static voter set bootstrapped on first start (every
	// member gets the same list, including itself; ignored on restart).
	Peers []Peer
	// Join, when set and the node is not yet a member, is called first for
	// the cluster secret (JoinCredential, unless the node has one) and,
	// once raft listens, for membership (JoinMember: the leader verifies
	// the node over the authenticated raft transport, then adds it).
	Join JoinFunc
	// SharedSecretFile holds a cluster secret shared by every member
	// (required on the first start of a Peers member); it is copied to
	// DIR/cluster.secret, and must match it on later starts.
	SharedSecretFile string
	// APIURL is this node's advertised API base URL; the leader replicates
	// its own so that followers can forward requests to it.
	APIURL string
	// RegisterSelf, when set, is called on a follower whose APIURL is not
	// in the replicated node table yet, with the leader's API URL; it should
	// ask the leader to record it (serve calls Cluster.Join with the admin
	// key). Leaders register themselves.
	RegisterSelf func(ctx context.Context, leaderAPIURL string, incarnation []byte) error
	// RaftListener, when set, is used instead of listening on RaftAddr
	// (tests pre-open port-0 listeners to know every address up front).
	RaftListener net.Listener
	// RaftTimeout is raft's heartbeat and election timeout (default 300 ms
	// for a single node, 1 s with Peers or Join).
	RaftTimeout time.Duration
	// ForceNewCluster starts a new, empty cluster in a data dir that has no
	// raft state but remains of an old cluster (identity, secret, keys);
	// without it such a start is refused (identity.go).
	ForceNewCluster bool
	// EmulateVersion, when set below raftfsm.SupportedVersion, makes the
	// node behave as a release that supports cluster versions up to it
	// (reports it, applies nothing newer): for mixed-version tests of
	// rolling upgrades (version.go). Zero in production.
	EmulateVersion uint32

	// Test hooks (integrity_test.go): wrapLogStore wraps raft-wal before
	// raft sees it, trailingLogs replaces raft's TrailingLogs (default
	// 4096), storeFailGrace replaces defaultStoreFailGrace, walSegmentBytes
	// replaces raft-wal's segment size (64 MiB).
	wrapLogStore    func(raft.LogStore) raft.LogStore
	trailingLogs    uint64
	storeFailGrace  time.Duration
	walSegmentBytes int
}

func (c *Config) setDefaults() {
	c.DataDir = cmp.Or(c.DataDir, "termivar-data")
	c.NodeID = cmp.Or(c.NodeID, "node1")
	c.RaftAddr = cmp.Or(c.RaftAddr, "127.0.0.1:7421")
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	c.RaftLogOutput = cmp.Or(c.RaftLogOutput, io.Discard)
	c.TracerProvider = cmp.Or(c.TracerProvider, trace.TracerProvider(noop.NewTracerProvider()))
	if c.MaxBatchCommands <= 0 || c.MaxBatchCommands > raftfsm.MaxBatchCommands {
		c.MaxBatchCommands = 1024
	}
	if c.MaxEntryBytes <= 0 {
		c.MaxEntryBytes = DefaultMaxEntryBytes
	}
	c.TickInterval = cmp.Or(c.TickInterval, time.Second)
	c.DefaultLimits = cmp.Or(c.DefaultLimits, distributed.DefaultLimits())
	c.DefaultResultLimits = cmp.Or(c.DefaultResultLimits, distributed.DefaultResultLimits())
	if c.DefaultScheduling == nil {
		d := DefaultServiceScheduling()
		c.DefaultScheduling = &d
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	c.SnapshotThreshold = cmp.Or(c.SnapshotThreshold, 8192)
	c.SnapshotBytes = cmp.Or(c.SnapshotBytes, DefaultSnapshotBytes)
	c.SnapshotGrowth = cmp.Or(c.SnapshotGrowth, DefaultSnapshotGrowth)
	if c.RaftTimeout <= 0 {
		c.RaftTimeout = 300 * time.Millisecond
		if len(c.Peers) > 1 || c.Join != nil {
			c.RaftTimeout = time.Second
		}
	}
}

// ErrNotLeader is returned by Propose on a node that is not the leader.
// Alone it says the command never reached the log; wrapped with
// ErrOutcomeUnknown (ErrLeadershipLost) it may still be applied.
var ErrNotLeader = errors.New("node: not the leader")

// ErrOutcomeUnknown marks a Propose error after which the command may
// still be applied: raft had appended its entry when the node lost
// leadership, and a later leader may commit it (hashicorp/raft
// ErrLeadershipLost). A caller must not report such a failure as one that
// changed nothing.
var ErrOutcomeUnknown = errors.New("node: outcome unknown")

// ErrLeadershipLost is returned by Propose when the node lost leadership
// after its entry was appended: errors.Is matches both ErrNotLeader (retry
// on the leader what is safe to replay) and ErrOutcomeUnknown.
var ErrLeadershipLost = fmt.Errorf("%w: leadership lost before the entry committed; it may still be applied (%w)", ErrNotLeader, ErrOutcomeUnknown)

// ErrClosed is returned by Propose after Close.
var ErrClosed = errors.New("node: closed")

// Node is a running coordinator node. Its methods are safe for concurrent
// use.
type Node struct {
	cfg  Config
	log  *slog.Logger
	fsm  *raftfsm.FSM
	own  *raftfsm.OwnEntries // shared by the proposer and the FSM (raftfsm/own.go)
	raft *raft.Raft
	wal  *wal.WAL
	// walGate paces the proposer by the log store's writes (walgate.go).
	walGate *walGate
	meta    *metadb.BoltMetaDB
	trans   *raft.NetworkTransport
	stream  *tlsStreamLayer
	secret  []byte
	// incarnation is carried in this node's raft certificate, and
	// verifyPeer (nil: accept every holder of the cluster credential) and
	// onRaftRefused (nil: only logged) are the stream layer's hooks; all
	// are set before openRaft.
	incarnation   []byte
	verifyPeer    func(peerNodeID string, peerIncarnation []byte) error
	onRaftRefused func(reason string)
	lastRefusal   atomic.Pointer[string]
	// bootstrappedPeers: this start bootstrapped a new data dir from
	// --peers (not a joiner, no raft state before); replacedDataDir
	// checks such a node against the node table.
	bootstrappedPeers atomic.Bool
	firstRefusal      atomic.Int64 // unix nanoseconds of the first refusal
	codec             *token.Codec
	wake              notify.Queue    // Acquire long-polls (Acquirers)
	changed           notify.Notifier // every applied entry (ChangeChan); one key, ""
	progress          notify.Notifier // the FSM's ProgressFunc: tasks may have become terminal
	clu               clusterState
	ident             *identity
	lock              *dirLock
	hl                *health // fatal errors and log store failures (health.go)

	// life is the node's lifetime (lifetime.go): created in Open, ended
	// first thing in Close; every background loop and call derives from it.
	life      *lifetime
	prop      *proposer // set in start, once raft runs
	tracer    trace.Tracer
	closeOnce sync.Once
	calls     raftCalls // waits on raft futures (futures.go)

	// Snapshots by log bytes (snapbytes.go): snapshots is woken after
	// every snapshot written (one key, ""); snapTrig is nil when off.
	snapshots notify.Notifier
	snapTrig  *snapTrigger
}

// Open starts a node on cfg.DataDir — bootstrapping a one-voter cluster,
// or the static Peers, on first start, or joining through Join — waits
// until the cluster epoch, the system tenant (and in a Peers cluster the
// first admin key) exist, and starts the leader's background loops.
func Open(ctx context.Context, cfg Config) (_ *Node, err error) {
	cfg.setDefaults()
	if err := cfg.validateCluster(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	if err := checkDataDirMode(cfg.DataDir); err != nil {
		return nil, err
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.unlock()
		}
	}()
	ident, established, err := prepareIdentity(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, raftDir, "wal"), 0o700); err != nil {
		return nil, err
	}
	secret, wroteSecret, err := initSecret(cfg, established)
	if err != nil {
		return nil, err
	}
	if cfg.Join != nil && secret == nil {
		if secret, err = fetchSecret(ctx, cfg); err != nil {
			return nil, err
		}
	}
	n := &Node{
		cfg:    cfg,
		log:    cfg.Logger,
		secret: secret,
		ident:  ident,
		hl:     newHealth(),
		life:   newLifetime(),
	}
	n.incarnation = ident.incarnation()
	n.verifyPeer = n.verifyRaftPeer
	n.onRaftRefused = n.raftRefused
	if established {
		// NB: a new data dir records the fingerprint once it is ready (a
		// joiner's fetched secret may still be refused as foreign).
		if err := n.checkSecretIdentity(); err != nil {
			return nil, err
		}
	}
	n.own = new(raftfsm.OwnEntries)
	n.fsm = raftfsm.New(n.fsmOptions())
	n.snapTrig = newSnapTrigger(cfg.SnapshotBytes, int64(cfg.SnapshotGrowth))
	existing, err := n.openRaft()
	if err != nil {
		n.life.Stop()
		n.closeStores()
		return nil, err
	}
	n.lock = lock
	if err := n.start(ctx, existing, wroteSecret); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// start runs the proposer, joins when asked, waits until the cluster is
// ready, checks the data dir's identity against it and starts the
// leader's background loops.
func (n *Node) start(ctx context.Context, existing, wroteSecret bool) error {
	cfg := n.cfg
	n.prop = newProposer(n.raft, n.fsm.LastTime, cfg.NowFunc, entryBounds{commands: cfg.MaxBatchCommands, bytes: cfg.MaxEntryBytes}, n.life.Done())
	n.prop.m = cfg.Metrics
	n.prop.own = n.own
	n.prop.wal = n.walGate
	n.tracer = cfg.TracerProvider.Tracer(tracing.InstrumentationName)
	n.life.Go(n.prop.run)
	n.life.Go(n.prop.respond)
	n.life.Go(n.storeWatchLoop)
	n.startLeaderLoop()
	campaignIfSoleVoter(n.raft, raft.ServerID(cfg.NodeID))
	if n.snapTrig != nil {
		n.life.Go(n.snapshotLoop)
	}
	if existing {
		n.warnPeersDiffer()
	}
	n.bootstrappedPeers.Store(!existing && cfg.Join == nil && len(cfg.Peers) > 1)
	if cfg.Join != nil && !existing {
		if err := n.join(ctx); err != nil {
			if wroteSecret && errors.Is(err, ErrJoinerUnverified) {
				// NB: the leader proved this secret foreign and changed
				// nothing; do not leave it behind for a later start.
				_ = os.Remove(filepath.Join(cfg.DataDir, SecretFile))
			}
			return err
		}
	}
	if err := n.waitReady(ctx); err != nil {
		return err
	}
	if err := n.checkSecretIdentity(); err != nil {
		return err
	}
	if err := n.checkEpochIdentity(); err != nil {
		return err
	}
	codec, err := token.NewCodec(n.secret, n.fsm.Epoch())
	if err != nil {
		return err
	}
	n.codec = codec
	if cfg.TickInterval > 0 {
		n.life.Go(n.tickLoop)
	}
	n.life.Go(n.memberLoop)
	return nil
}

// openRaft opens the stores and raft, bootstrapping on first start; it
// reports whether raft state existed.
func (n *Node) openRaft() (bool, error) {
	cfg := n.cfg
	hl := cfg.RaftLogger
	if hl == nil {
		hl = hclog.New(&hclog.LoggerOptions{Name: "raft", Output: cfg.RaftLogOutput, Level: hclog.Warn})
	}
	// NB: WAL.Close does not close its meta DB (and so keeps the bolt file
	// lock); the node owns the meta store and closes it after the WAL.
	// NB: scanWALSegments checks every byte of the segments before raft-wal
	// opens (and silently trims) them (walscan.go).
	fileSnaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(cfg.DataDir, raftDir), 2, hl)
	if err != nil {
		return false, fmt.Errorf("node: open snapshot store: %w", err)
	}
	snaps := &indexedSnapshots{SnapshotStore: fileSnaps}
	fsm := n.observedFSM(snaps)
	// NB: the newest snapshot restores while the log is checked
	// (prefetch.go); raft starts after both.
	pre := prefetchSnapshot(snaps, fsm)
	defer pre.wait()
	if err := scanWALSegments(filepath.Join(cfg.DataDir, raftDir, "wal")); err != nil {
		return false, err
	}
	n.meta = &metadb.BoltMetaDB{}
	segSize := wal.WithSegmentSize(wal.DefaultSegmentSize)
	if cfg.walSegmentBytes > 0 {
		segSize = wal.WithSegmentSize(cfg.walSegmentBytes)
	}
	var walMetrics walmetrics.Collector = &walmetrics.NoOpCollector{}
	if cfg.Metrics != nil {
		walMetrics = cfg.Metrics
	}
	w, err := wal.Open(filepath.Join(cfg.DataDir, raftDir, "wal"), wal.WithLogger(hl), wal.WithMetaStore(n.meta), segSize,
		wal.WithMetricsCollector(walMetrics))
	if err != nil {
		return false, fmt.Errorf("node: open raft-wal: %w", err)
	}
	n.wal = w
	trans, err := n.newTransport(hl)
	if err != nil {
		return false, fmt.Errorf("node: raft transport: %w", err)
	}
	n.trans = trans
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hl
	// NB: a single voter elects itself at once (campaignIfSoleVoter);
	// short timeouts still bound a failed election's retry.
	rc.HeartbeatTimeout = cfg.RaftTimeout
	rc.ElectionTimeout = cfg.RaftTimeout
	rc.LeaderLeaseTimeout = cfg.RaftTimeout / 2
	if len(cfg.Peers) > 1 || cfg.Join != nil {
		// NB: a follower waits a random 1–2× HeartbeatTimeout without
		// contact before it stands for election; half the election timeout
		// puts a new leader within about one election timeout of a paused
		// one (clients see no request slower than 2× it; docs/node.md,
		// "Paused nodes"). The leader still heartbeats every tenth of it.
		rc.HeartbeatTimeout = cfg.RaftTimeout / 2
	}
	rc.CommitTimeout = 5 * time.Millisecond
	rc.MaxAppendEntries = 256
	rc.BatchApplyCh = true
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = 4096
	if cfg.trailingLogs > 0 {
		rc.TrailingLogs = cfg.trailingLogs
	}
	var logs raft.LogStore = w
	if cfg.wrapLogStore != nil {
		logs = cfg.wrapLogStore(logs)
	}
	n.walGate = newWALGate()
	logs = &watchedLogStore{LogStore: logs, h: n.hl, m: cfg.Metrics, gate: n.walGate}
	existing, err := raft.HasExistingState(logs, w, snaps)
	if err != nil {
		return false, err
	}
	if err := n.verifyDataDir(logs, w, snaps); err != nil {
		return false, err
	}
	if conf, ok := n.bootstrapConfiguration(trans.LocalAddr()); ok && !existing {
		if err := raft.BootstrapCluster(rc, logs, w, snaps, pipelinedTransport{trans}, conf); err != nil {
			return false, fmt.Errorf("node: bootstrap: %w", err)
		}
	}
	rc.NoSnapshotRestoreOnStart = pre.restored(snaps)
	r, err := raft.NewRaft(rc, fsm, logs, w, snaps, pipelinedTransport{trans})
	if uerr := n.fsm.UnsupportedState(); err != nil && uerr != nil {
		return false, dataDirErr(filepath.Join(cfg.DataDir, raftDir, "snapshots"), uerr.Error(), remedyUpgrade)
	}
	if err != nil {
		return false, fmt.Errorf("node: start raft: %w", err)
	}
	n.raft = r
	return existing, nil
}

// ensureCluster proposes InitCluster and the system tenant if the log does
// not hold them yet (first start, or a crash in between). The tenant is
// created at cluster version 1, without scheduling options; the raise to
// version 3 brings the defaults (setClusterVersion).
func (n *Node) ensureCluster(ctx context.Context) error {
	if n.fsm.Epoch() == nil {
		epoch := make([]byte, raftfsm.EpochBytes)
		if _, err := rand.Read(epoch); err != nil {
			return err
		}
		err := raftfsm.ProposalErr(n.Propose(ctx, &pb.Command{Op: &pb.Command_InitCluster{InitCluster: &pb.InitCluster{EpochId: epoch}}}))
		if err != nil && !errors.Is(err, raftfsm.ErrAlreadyInitialized) {
			return err
		}
	}
	if _, ok := n.fsm.Tenant(raftfsm.SystemTenant); !ok {
		err := raftfsm.ProposalErr(n.Propose(ctx, &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{
			Name: raftfsm.SystemTenant, Limits: wire.LimitsToProto(n.cfg.DefaultLimits),
			ResultLimits: wire.ResultLimitsToProto(n.cfg.DefaultResultLimits)}}}))
		if err != nil && !errors.Is(err, raftfsm.ErrTenantExists) {
			return err
		}
	}
	return nil
}

// FSM returns the state machine for reads.
func (n *Node) FSM() *raftfsm.FSM { return n.fsm }

// Reads returns a read-only handle on the applied state (the server's
// view of it; writes go through Propose).
func (n *Node) Reads() raftfsm.Reader { return n.fsm.Reader() }

// DefaultLimits returns the limits a tenant created without any gets.
func (n *Node) DefaultLimits() (distributed.Limits, distributed.ResultLimits) {
	return n.cfg.DefaultLimits, n.cfg.DefaultResultLimits
}

// DefaultScheduling returns the scheduling options of new tenants.
func (n *Node) DefaultScheduling() distributed.SchedulingOptions { return *n.cfg.DefaultScheduling }

// Codec returns the token codec bound to this cluster's secret and epoch.
func (n *Node) Codec() *token.Codec { return n.codec }

// Config returns the effective configuration.
func (n *Node) Config() Config { return n.cfg }

// RaftState returns "Leader", "Follower", "Candidate" or "Shutdown".
func (n *Node) RaftState() string { return n.raft.State().String() }

// Leader returns the leader's raft address and ID, if known.
func (n *Node) Leader() (addr, id string) {
	a, i := n.raft.LeaderWithID()
	return string(a), string(i)
}

// RaftAddr returns the transport's address.
func (n *Node) RaftAddr() string { return string(n.trans.LocalAddr()) }

// ChangeChan returns a channel that is closed after the next log entry is
// applied or snapshot restored (of any tenant): the dashboard's long-poll
// waits on it (server/dashboard.go).
func (n *Node) ChangeChan() <-chan struct{} { return n.changed.Wait("") }

// Acquirers is the queue of Acquire long-polls, woken about as many at a
// time as a command may have made tasks leasable (raftfsm.Options.WakeFunc).
func (n *Node) Acquirers() *notify.Queue { return &n.wake }

// ProgressChan returns a channel that is closed the next time a command
// may have made tasks of the tenant terminal (result followers wait on it).
func (n *Node) ProgressChan(tenant string) <-chan struct{} { return n.progress.Wait(tenant) }

// Snapshot forces a raft snapshot (tests and operators).
func (n *Node) Snapshot() error { return n.raft.Snapshot().Error() }

// Close ends the node's lifetime first (every background loop and call
// derived from it stops), waits for the loops, shuts raft down and closes
// the stores. Pending proposals fail with ErrClosed; so do the node's
// other waits on raft, which raft answers before it stops (futures.go). A second Close
// returns nil at once.
func (n *Node) Close() error {
	var err error
	n.closeOnce.Do(func() {
		n.life.Stop()
		if n.raft != nil {
			if !n.calls.close(raftShutdownGrace) {
				n.log.Error("raft left a future unanswered; shutting it down anyway", "grace", raftShutdownGrace)
			}
			err = n.shutdownRaft()
		}
		n.closeStores()
		n.lock.unlock()
	})
	return err
}

// raftShutdownGrace is how long Close waits for raft to stop before it
// closes the transport under it (see shutdownRaft).
const raftShutdownGrace = 10 * time.Second

// shutdownRaft stops raft. NB: if raft does not stop within
// raftShutdownGrace (a replication goroutine stuck in network I/O), the
// transport is closed under it, which fails that I/O and lets raft finish;
// every acknowledged entry is already fsynced, so nothing durable depends
// on a graceful stop.
func (n *Node) shutdownRaft() error {
	f := n.raft.Shutdown()
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-time.After(raftShutdownGrace):
	}
	n.log.Error("raft did not stop in time; closing its transport under it", "grace", raftShutdownGrace)
	if n.trans != nil {
		n.trans.Close()
	}
	return <-done
}

func (n *Node) closeStores() {
	if n.trans != nil {
		n.trans.Close()
	}
	if n.wal != nil {
		n.wal.Close()
	}
	if n.meta != nil {
		n.meta.Close()
	}
}

// loadOrCreateSecret reads the cluster secret, creating it (0600, written
// to a temporary file, fsynced and renamed) on first start.
func loadOrCreateSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) < token.MinSecretBytes {
			return nil, fmt.Errorf("node: %s is shorter than %d bytes", path, token.MinSecretBytes)
		}
		return b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	if err := WriteFileAtomic(path, secret, 0o600); err != nil {
		return nil, err
	}
	return secret, nil
}

// WriteFileAtomic writes data to path through a temporary file that is
// fsynced and renamed, then fsyncs the directory (atomicfile.go).
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	return writeFileAtomic(osFS{}, path, data, perm)
}

// SyncDir fsyncs a directory's entries (atomicfile.go).
func SyncDir(dir string) error { return syncDir(osFS{}, dir) }

// DefaultServiceScheduling is what a node gives its tenants unless told
// otherwise (contract Part F): retries back off from 2 s, doubling up to
// 5 min with jitter, and scans of one priority are served round-robin.
func DefaultServiceScheduling() distributed.SchedulingOptions {
	return distributed.SchedulingOptions{BackoffBaseSecs: 2, BackoffCapSecs: 300, FairScans: true}
}
