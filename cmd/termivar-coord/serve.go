package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/internal/audit"
	"github.com/termivar/distributed/internal/tracing"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/server"
)

type serveFlags struct {
	dataDir, apiAddr, raftAddr, nodeID string
	tlsCert, tlsKey, clientCA          string
	configFile                         string
	tick                               time.Duration
	leaseTTL, taskTTL                  uint64
	auditStderr, forceNewCluster       bool
	auditRotation                      audit.Rotation
	limits                             distributed.Limits
	resultLimits                       distributed.ResultLimits
	cluster                            clusterFlags
	serverLimits                       server.Limits
	obs                                obsFlags
	scheduling                         distributed.SchedulingOptions
	// emulateVersion is node.Config.EmulateVersion: set only by the
	// mixed-version tests (upgrade_test.go), never by a flag.
	emulateVersion uint32
	// snapshotBytes is node.Config.SnapshotBytes (--snapshot-bytes).
	snapshotBytes int64
	// snapshotGrowth is node.Config.SnapshotGrowth (--snapshot-growth).
	snapshotGrowth int
}

func newServeFlagSet(f *serveFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&f.dataDir, "data-dir", "termivar-data", "data directory")
	fs.StringVar(&f.apiAddr, "api-addr", "127.0.0.1:7420", "API listen address")
	fs.StringVar(&f.raftAddr, "raft-addr", "127.0.0.1:7421", "raft transport address")
	fs.StringVar(&f.nodeID, "node-id", "node1", "raft node ID")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "TLS certificate file (enables HTTPS)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "TLS private key file")
	fs.StringVar(&f.clientCA, "client-ca", "", "CA file for client certificates (mutual TLS)")
	fs.StringVar(&f.configFile, "config", "", "JSON config file whose keys are these flag names; flags override it")
	fs.DurationVar(&f.tick, "tick", time.Second, "background recovery cadence")
	fs.Uint64Var(&f.leaseTTL, "lease-ttl", 60, "default lease TTL in seconds")
	fs.Uint64Var(&f.taskTTL, "task-ttl", 0, "expire non-terminal tasks older than this many seconds (0: the tenant's max-task-ttl)")
	fs.BoolVar(&f.auditStderr, "audit-stderr", false, "also write audit lines to stderr")
	fs.Int64Var(&f.auditRotation.MaxBytes, "audit-max-bytes", audit.DefaultMaxBytes, "rotate audit.log once it would grow past this many bytes (0: never rotate)")
	fs.IntVar(&f.auditRotation.Keep, "audit-keep", audit.DefaultKeep, fmt.Sprintf("rotated audit logs kept (audit.log.1..N, 1..%d)", audit.MaxKeep))
	fs.BoolVar(&f.forceNewCluster, "force-new-cluster", false, "start a new, empty cluster in a data dir whose raft state is gone but whose identity, secret or keys remain (otherwise refused)")
	addClusterFlags(fs, &f.cluster)
	addLimitFlags(fs, &f.limits, &f.resultLimits, "per-tenant default: ")
	addServerLimitFlags(fs, &f.serverLimits)
	addObsFlags(fs, &f.obs)
	d := node.DefaultServiceScheduling()
	fs.Uint64Var(&f.scheduling.BackoffBaseSecs, "backoff-base", d.BackoffBaseSecs, "per-tenant default: first retry delay in seconds, doubling per retry with jitter (0: retry at once)")
	fs.Uint64Var(&f.scheduling.BackoffCapSecs, "backoff-cap", d.BackoffCapSecs, "per-tenant default: longest retry delay in seconds")
	fs.BoolVar(&f.scheduling.FairScans, "fair-scans", d.FairScans, "per-tenant default: serve scans of one priority round-robin")
	fs.Int64Var(&f.snapshotBytes, "snapshot-bytes", node.DefaultSnapshotBytes, "also take a raft snapshot once this many bytes of log were applied since the last one (besides every 8192 entries; negative: by entry count only)")
	fs.IntVar(&f.snapshotGrowth, "snapshot-growth", node.DefaultSnapshotGrowth, "once the last snapshot holds more result bytes than --snapshot-bytes, let a log of results grow to this many times them before the next snapshot (1 to 16; negative: --snapshot-bytes alone; log bytes that are not results still take one every --snapshot-bytes)")
	return fs
}

// limitFlagNames are the flags addLimitFlags defines.
var limitFlagNames = []string{"max-task-records", "max-active-tasks", "max-queued-tasks", "max-terminal-tasks",
	"max-workers", "max-retries", "max-lease-ttl", "max-task-ttl", "heartbeat-timeout", "max-results",
	"max-result-bytes", "max-total-result-bytes", "max-aggregate-items", "max-aggregate-bytes"}

// addLimitFlags defines one flag per core and result limit, defaulting to
// the service's per-tenant defaults (service_limits.go); serve uses them
// for the default tenant and tenants create for a new tenant.
func addLimitFlags(fs *flag.FlagSet, l *distributed.Limits, rl *distributed.ResultLimits, help string) {
	d, rd := serviceLimits(), serviceResultLimits()
	fs.IntVar(&l.MaxTaskRecords, "max-task-records", d.MaxTaskRecords, help+"retained task records")
	fs.IntVar(&l.MaxActiveTasks, "max-active-tasks", d.MaxActiveTasks, help+"non-terminal tasks")
	fs.IntVar(&l.MaxQueuedTasks, "max-queued-tasks", d.MaxQueuedTasks, help+"queued tasks")
	fs.IntVar(&l.MaxTerminalTasks, "max-terminal-tasks", d.MaxTerminalTasks, help+"terminal reservation")
	fs.IntVar(&l.MaxWorkers, "max-workers", d.MaxWorkers, help+"workers")
	l.MaxRetries = d.MaxRetries
	fs.Var(retryValue{&l.MaxRetries}, "max-retries", help+"retries")
	fs.Uint64Var(&l.MaxLeaseTTLSecs, "max-lease-ttl", d.MaxLeaseTTLSecs, help+"longest lease (s)")
	fs.Uint64Var(&l.MaxTaskTTLSecs, "max-task-ttl", d.MaxTaskTTLSecs, help+"longest task age (s)")
	fs.Uint64Var(&l.HeartbeatTimeoutSecs, "heartbeat-timeout", d.HeartbeatTimeoutSecs, help+"heartbeat timeout (s)")
	fs.IntVar(&rl.MaxResults, "max-results", rd.MaxResults, help+"stored results")
	fs.IntVar(&rl.MaxResultBytes, "max-result-bytes", rd.MaxResultBytes, help+"bytes of one result")
	fs.IntVar(&rl.MaxTotalBytes, "max-total-result-bytes", rd.MaxTotalBytes, help+"bytes of all results")
	fs.IntVar(&rl.MaxAggregateItems, "max-aggregate-items", rd.MaxAggregateItems, help+"items per aggregate")
	fs.IntVar(&rl.MaxAggregateBytes, "max-aggregate-bytes", rd.MaxAggregateBytes, help+"bytes per aggregate")
}

type retryValue struct{ p *uint32 }

func (r retryValue) String() string {
	if r.p == nil {
		return "0"
	}
	return fmt.Sprint(*r.p)
}

func (r retryValue) Set(s string) error {
	var v uint32
	if _, err := fmt.Sscan(s, &v); err != nil {
		return err
	}
	*r.p = v
	return nil
}

// applyConfigFile sets every flag named in the JSON file that was not given
// on the command line.
func applyConfigFile(fs *flag.FlagSet, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	for k, v := range m {
		if flagSet(fs, k) || k == "config" {
			continue
		}
		if fs.Lookup(k) == nil {
			return fmt.Errorf("config file: unknown key %q", k)
		}
		if err := fs.Set(k, fmt.Sprint(v)); err != nil {
			return fmt.Errorf("config file: %s: %w", k, err)
		}
	}
	return nil
}

func runServe(args []string) int {
	var f serveFlags
	fs := newServeFlagSet(&f)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if f.configFile != "" {
		if err := applyConfigFile(fs, f.configFile); err != nil {
			fmt.Fprintln(os.Stderr, "termivar-coord serve:", err)
			return exitUsage
		}
	}
	if err := f.limits.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "termivar-coord serve: limits:", err)
		return exitUsage
	}
	if err := f.resultLimits.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "termivar-coord serve: result limits:", err)
		return exitUsage
	}
	if err := f.serverLimits.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "termivar-coord serve:", err)
		return exitUsage
	}
	if err := f.scheduling.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "termivar-coord serve: scheduling:", err)
		return exitUsage
	}
	if err := f.auditRotation.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "termivar-coord serve: --audit-max-bytes/--audit-keep:", err)
		return exitUsage
	}
	if f.snapshotGrowth == 0 || f.snapshotGrowth > node.MaxSnapshotGrowth {
		fmt.Fprintf(os.Stderr, "termivar-coord serve: --snapshot-growth must be 1 to %d, or negative for --snapshot-bytes alone\n", node.MaxSnapshotGrowth)
		return exitUsage
	}
	if (f.tlsCert == "") != (f.tlsKey == "") || (f.clientCA != "" && f.tlsCert == "") {
		fmt.Fprintln(os.Stderr, "termivar-coord serve: --tls-cert and --tls-key go together; --client-ca needs them")
		return exitUsage
	}
	if err := f.obs.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "termivar-coord serve:", err)
		return exitUsage
	}
	f.obs.metricsAddrGiven = flagSet(fs, "metrics-addr")
	logger, _ := newServeLogger(os.Stderr, f.obs) // validated above
	if err := serve(f, logger); err != nil {
		logger.Error("serve failed", "error", err)
		return exitRejected
	}
	return exitOK
}

func serve(f serveFlags, logger *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rn, err := startNode(ctx, f, logger)
	if err != nil {
		return err
	}
	defer rn.close()
	ms, err := startMetrics(f, rn.obs, rn.srv, logger)
	if err != nil {
		return err
	}
	defer ms.close(context.Background())
	logger.Info("serving", "api", rn.url, "dashboard", rn.url+"/", "raft", rn.n.RaftAddr(), "data_dir", f.dataDir, "tls", f.tlsCert != "")
	warnPlaintext(logger, rn.ln.Addr(), f.tlsCert != "")
	errc := make(chan error, 1)
	go func() { errc <- rn.hs.Serve(rn.ln) }()
	select {
	case <-ctx.Done():
	case <-rn.n.Failed():
		// NB: a corrupt committed entry or a log store that keeps failing;
		// exit 2 with the node's one message (runServe), after closing.
		return rn.n.Err()
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	logger.Info("shutting down")
	return nil
}

// runningNode is a started node with its API server (not yet serving).
type runningNode struct {
	n   *node.Node
	srv *server.Server
	hs  *http.Server
	ln  net.Listener
	al  *audit.Logger
	obs *observability
	url string // advertised API URL
}

// close hands leadership over (a leader with other voters; the node logs
// the outcome), stops the HTTP server, then the node. NB: the API keeps
// serving during the hand-over, so requests meanwhile are forwarded to the
// new leader instead of meeting a closed port.
func (r *runningNode) close() {
	_, _ = r.n.HandOverLeadership(context.Background())
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	_ = r.hs.Shutdown(sctx)
	r.srv.CloseIdleConnections()
	r.al.Close()
	r.n.Close()
	_ = r.obs.tracer.Shutdown(sctx)
}

// startNode listens on the API address, opens (or bootstraps, or joins) the
// node, makes sure the admin key file exists and builds the API server.
func startNode(ctx context.Context, f serveFlags, logger *slog.Logger) (_ *runningNode, err error) {
	ln, err := apiListener(f)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			ln.Close()
		}
	}()
	serverTLS, forwardTLS, err := apiTLS(f)
	if err != nil {
		return nil, err
	}
	apiURL := f.cluster.advertiseURL
	if apiURL == "" {
		scheme := "http"
		if serverTLS != nil {
			scheme = "https"
		}
		apiURL = scheme + "://" + ln.Addr().String()
	}
	obs, err := newObservability(ctx, logger)
	if err != nil {
		return nil, err
	}
	ncfg := nodeConfig(f, logger, apiURL)
	obs.apply(&ncfg, logger)
	openCtx, cancel, err := f.cluster.apply(ctx, &ncfg, logger, forwardTLS)
	if err != nil {
		return nil, err
	}
	defer cancel()
	n, err := node.Open(openCtx, ncfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if err := ensureAdminKey(openCtx, n, f, logger); err != nil {
		return nil, err
	}
	al, err := openAudit(f)
	if err != nil {
		return nil, err
	}
	ics, err := tracing.ServerInterceptors(obs.tracer)
	if err != nil {
		return nil, err
	}
	srv := server.New(server.Config{Backend: n, Audit: al, Logger: logger, DefaultLeaseTTLSecs: f.leaseTTL, ForwardTLS: forwardTLS, Limits: f.serverLimits,
		Metrics: obs.reg.API, Interceptors: ics})
	obs.attach(n, srv, f.obs.metricsScans)
	// NB: HTTPServer wakes pending Acquire long-polls when Shutdown starts,
	// so shutting down does not wait for them.
	hs := srv.HTTPServer(f.apiAddr)
	ln = srv.LimitListener(ln) // NB: inside TLS, so http.Server still sees *tls.Conn
	if serverTLS != nil {
		ln = tls.NewListener(ln, serverTLS)
	}
	return &runningNode{n: n, srv: srv, hs: hs, ln: ln, al: al, obs: obs, url: apiURL}, nil
}

// apiListener returns the API listener: the one the cluster flags already
// opened, else a new one on --api-addr.
func apiListener(f serveFlags) (net.Listener, error) {
	if ln := f.cluster.apiListener; ln != nil {
		return ln, nil
	}
	return net.Listen("tcp", f.apiAddr)
}

// apiTLS builds the API's TLS configurations from --tls-cert, --tls-key and
// --client-ca; both are nil without --tls-cert. serverTLS serves the API
// (requiring client certificates signed by --client-ca when it is given);
// forwardTLS is what a follower uses to forward to the leader.
func apiTLS(f serveFlags) (serverTLS, forwardTLS *tls.Config, err error) {
	if f.tlsCert == "" {
		return nil, nil, nil
	}
	cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
	if err != nil {
		return nil, nil, err
	}
	serverTLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	// NB: a follower forwards to the leader over TLS, presenting its own
	// certificate (for mutual TLS) and trusting --client-ca, else the
	// system roots.
	forwardTLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.clientCA != "" {
		pool, err := loadCertPool(f.clientCA)
		if err != nil {
			return nil, nil, err
		}
		serverTLS.ClientCAs, serverTLS.ClientAuth = pool, tls.RequireAndVerifyClientCert
		forwardTLS.RootCAs = pool
	}
	return serverTLS, forwardTLS, nil
}

// loadCertPool reads a PEM file of CA certificates.
func loadCertPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("client CA file has no certificates")
	}
	return pool, nil
}

// nodeConfig is the node configuration of the serve flags (the cluster
// flags add to it in clusterFlags.apply).
func nodeConfig(f serveFlags, logger *slog.Logger, apiURL string) node.Config {
	tick := f.tick
	if tick <= 0 {
		tick = -1
	}
	return node.Config{
		DataDir: f.dataDir, NodeID: f.nodeID, RaftAddr: f.raftAddr, Logger: logger, RaftLogOutput: os.Stderr,
		TickInterval: tick, TaskTTLSecs: f.taskTTL, DefaultLimits: f.limits, DefaultResultLimits: f.resultLimits,
		APIURL: apiURL, ForceNewCluster: f.forceNewCluster, DefaultScheduling: &f.scheduling,
		EmulateVersion: f.emulateVersion, SnapshotBytes: f.snapshotBytes,
		SnapshotGrowth: f.snapshotGrowth,
	}
}

// ensureAdminKey makes sure the data dir's admin key file exists (writing
// it after a bootstrap). A key file the cluster does not know is only
// warned about: the node still serves.
func ensureAdminKey(ctx context.Context, n *node.Node, f serveFlags, logger *slog.Logger) error {
	keyPath := filepath.Join(f.dataDir, node.AdminKeyFile)
	created, err := ensureAdminKeyFile(ctx, n, keyPath, f.cluster)
	if errors.Is(err, server.ErrAdminKeyUnknown) {
		logger.Warn("the admin key file is missing or unknown to the cluster and is not registered after bootstrap", "path", keyPath)
	} else if err != nil {
		return err
	}
	if created {
		logger.Info("wrote the admin key of the default tenant", "path", keyPath)
	}
	return nil
}

// openAudit opens the data dir's audit log, rotated by
// --audit-max-bytes/--audit-keep, also copied to stderr with
// --audit-stderr.
func openAudit(f serveFlags) (*audit.Logger, error) {
	path := filepath.Join(f.dataDir, audit.FileName)
	if f.auditStderr {
		return audit.OpenRotating(path, os.Stderr, f.auditRotation)
	}
	// NB: a nil io.Writer, not a nil *os.File in a non-nil interface.
	return audit.OpenRotating(path, nil, f.auditRotation)
}
