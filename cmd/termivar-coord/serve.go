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
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/server"
)

type serveFlags struct {
	dataDir, apiAddr, raftAddr, nodeID string
	tlsCert, tlsKey, clientCA          string
	configFile                         string
	tick                               time.Duration
	leaseTTL, taskTTL                  uint64
	auditStderr                        bool
	limits                             distributed.Limits
	resultLimits                       distributed.ResultLimits
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
	d, rd := distributed.DefaultLimits(), distributed.DefaultResultLimits()
	fs.IntVar(&f.limits.MaxTaskRecords, "max-task-records", d.MaxTaskRecords, "per-tenant default: retained task records")
	fs.IntVar(&f.limits.MaxActiveTasks, "max-active-tasks", d.MaxActiveTasks, "per-tenant default: non-terminal tasks")
	fs.IntVar(&f.limits.MaxQueuedTasks, "max-queued-tasks", d.MaxQueuedTasks, "per-tenant default: queued tasks")
	fs.IntVar(&f.limits.MaxTerminalTasks, "max-terminal-tasks", d.MaxTerminalTasks, "per-tenant default: terminal reservation")
	fs.IntVar(&f.limits.MaxWorkers, "max-workers", d.MaxWorkers, "per-tenant default: workers")
	f.limits.MaxRetries = d.MaxRetries
	fs.Var(retryValue{&f.limits.MaxRetries}, "max-retries", "per-tenant default: retries")
	fs.Uint64Var(&f.limits.MaxLeaseTTLSecs, "max-lease-ttl", d.MaxLeaseTTLSecs, "per-tenant default: longest lease (s)")
	fs.Uint64Var(&f.limits.MaxTaskTTLSecs, "max-task-ttl", d.MaxTaskTTLSecs, "per-tenant default: longest task age (s)")
	fs.Uint64Var(&f.limits.HeartbeatTimeoutSecs, "heartbeat-timeout", d.HeartbeatTimeoutSecs, "per-tenant default: heartbeat timeout (s)")
	fs.IntVar(&f.resultLimits.MaxResults, "max-results", rd.MaxResults, "per-tenant default: stored results")
	fs.IntVar(&f.resultLimits.MaxResultBytes, "max-result-bytes", rd.MaxResultBytes, "per-tenant default: bytes of one result")
	fs.IntVar(&f.resultLimits.MaxTotalBytes, "max-total-result-bytes", rd.MaxTotalBytes, "per-tenant default: bytes of all results")
	fs.IntVar(&f.resultLimits.MaxAggregateItems, "max-aggregate-items", rd.MaxAggregateItems, "per-tenant default: items per aggregate")
	fs.IntVar(&f.resultLimits.MaxAggregateBytes, "max-aggregate-bytes", rd.MaxAggregateBytes, "per-tenant default: bytes per aggregate")
	return fs
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
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for k, v := range m {
		if set[k] || k == "config" {
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
	if (f.tlsCert == "") != (f.tlsKey == "") || (f.clientCA != "" && f.tlsCert == "") {
		fmt.Fprintln(os.Stderr, "termivar-coord serve: --tls-cert and --tls-key go together; --client-ca needs them")
		return exitUsage
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := serve(f, logger); err != nil {
		logger.Error("serve failed", "error", err)
		return exitRejected
	}
	return exitOK
}

func serve(f serveFlags, logger *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tick := f.tick
	if tick <= 0 {
		tick = -1
	}
	openCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	n, err := node.Open(openCtx, node.Config{
		DataDir: f.dataDir, NodeID: f.nodeID, RaftAddr: f.raftAddr, Logger: logger, RaftLogOutput: os.Stderr,
		TickInterval: tick, TaskTTLSecs: f.taskTTL, DefaultLimits: f.limits, DefaultResultLimits: f.resultLimits,
	})
	if err != nil {
		return err
	}
	defer n.Close()
	keyPath := filepath.Join(f.dataDir, node.AdminKeyFile)
	created, err := server.EnsureAdminKey(openCtx, n, keyPath)
	if err != nil {
		return err
	}
	if created {
		logger.Info("created the admin key of the default tenant", "path", keyPath)
	}
	var tee *os.File
	if f.auditStderr {
		tee = os.Stderr
	}
	var al *audit.Logger
	if tee != nil {
		al, err = audit.Open(filepath.Join(f.dataDir, audit.FileName), tee)
	} else {
		al, err = audit.Open(filepath.Join(f.dataDir, audit.FileName), nil)
	}
	if err != nil {
		return err
	}
	defer al.Close()
	srv := server.New(server.Config{Node: n, Audit: al, Logger: logger, DefaultLeaseTTLSecs: f.leaseTTL})
	// NB: HTTPServer wakes pending Acquire long-polls when Shutdown starts,
	// so shutting down does not wait for them.
	hs := srv.HTTPServer(f.apiAddr)
	ln, err := net.Listen("tcp", f.apiAddr)
	if err != nil {
		return err
	}
	if f.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return err
		}
		tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
		if f.clientCA != "" {
			pem, err := os.ReadFile(f.clientCA)
			if err != nil {
				return err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return errors.New("client CA file has no certificates")
			}
			tc.ClientCAs, tc.ClientAuth = pool, tls.RequireAndVerifyClientCert
		}
		ln = tls.NewListener(ln, tc)
	}
	logger.Info("serving", "api", "http://"+ln.Addr().String(), "raft", n.RaftAddr(), "data_dir", f.dataDir, "tls", f.tlsCert != "")
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	logger.Info("shutting down")
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := hs.Shutdown(sctx); err != nil {
		logger.Warn("requests still running at shutdown; closing their connections", "error", err)
		_ = hs.Close()
	}
	return nil
}
