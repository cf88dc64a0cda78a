package main

// Observability of `serve` (docs/observability.md): the metrics listener
// (--metrics-addr, --metrics-scans, --pprof), the log flags (--log-format,
// --log-level) and tracing (OTEL_EXPORTER_OTLP_ENDPOINT).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/termivar/distributed/internal/buildinfo"
	"github.com/termivar/distributed/internal/logging"
	"github.com/termivar/distributed/internal/metrics"
	"github.com/termivar/distributed/internal/tracing"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/server"
)

// defaultMetricsAddr is --metrics-addr's default: loopback only.
const defaultMetricsAddr = "127.0.0.1:9464"

// obsFlags are the observability flags of serve.
type obsFlags struct {
	metricsAddr         string
	metricsAddrGiven    bool // --metrics-addr was set (runServe fills it in)
	metricsScans        int
	pprof               bool
	logFormat, logLevel string
}

func addObsFlags(fs *flag.FlagSet, o *obsFlags) {
	fs.StringVar(&o.metricsAddr, "metrics-addr", defaultMetricsAddr,
		"plain-HTTP listener for /metrics, /healthz, /readyz (and /debug/pprof with --pprof); no API key, no TLS: keep it on loopback or a private network; \"\" disables it")
	fs.IntVar(&o.metricsScans, "metrics-scans", metrics.DefaultRecentScans,
		fmt.Sprintf("per tenant, how many most recent scans get progress series (1..%d)", metrics.MaxRecentScans))
	fs.BoolVar(&o.pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/ on the metrics listener")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
}

// validate checks the flags that New would refuse later.
func (o obsFlags) validate() error {
	if o.metricsScans < 1 || o.metricsScans > metrics.MaxRecentScans {
		return fmt.Errorf("--metrics-scans must be 1..%d", metrics.MaxRecentScans)
	}
	_, err := logging.New(io.Discard, o.logFormat, o.logLevel)
	return err
}

// newServeLogger is serve's one logger, on w.
func newServeLogger(w io.Writer, o obsFlags) (*slog.Logger, error) {
	return logging.New(w, o.logFormat, o.logLevel)
}

// observability is one running node's metrics registry and tracer
// provider.
type observability struct {
	reg    *metrics.Registry
	tracer *tracing.Provider
}

// newObservability creates the registry and the tracer provider (a no-op
// one, with no exporter, unless OTEL_EXPORTER_OTLP_ENDPOINT is set).
func newObservability(ctx context.Context, logger *slog.Logger) (*observability, error) {
	bi := buildinfo.Read()
	tp, err := tracing.Setup(ctx, tracing.Config{Getenv: os.Getenv, ServiceName: "termivar-coord", ServiceVersion: bi.ModuleVersion})
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	if tp.Exporting {
		logger.Info("exporting traces over OTLP")
	}
	reg := metrics.New()
	reg.AddBuildInfo(bi.ModuleVersion, bi.VCSRevision, bi.GoVersion)
	return &observability{reg: reg, tracer: tp}, nil
}

// apply puts the node-side observability into a node configuration.
func (o *observability) apply(cfg *node.Config, logger *slog.Logger) {
	cfg.Metrics = o.reg.Node
	cfg.TracerProvider = o.tracer
	cfg.RaftLogger = logging.HCLog(logger, "raft")
}

// attach registers the collectors that read the started node and server.
func (o *observability) attach(n *node.Node, srv *server.Server, scans int) {
	o.reg.AddState(metrics.StateSource{Reads: n.Reads, RaftStats: n.RaftStats}, metrics.StateConfig{RecentScans: scans})
	o.reg.AddGaugeFunc("termivar_api_long_polls", "Acquire calls waiting for work on this node now.",
		func() float64 { return float64(srv.LongPollsWaiting()) })
}

// metricsServer is the running metrics listener.
type metricsServer struct {
	hs *http.Server
	ln net.Listener
}

// startMetrics listens on --metrics-addr and serves the metrics handler.
// NB: the default address failing to bind (several nodes on one host) is
// a warning and the node serves without it; an address given explicitly
// must bind.
func startMetrics(f serveFlags, o *observability, srv *server.Server, logger *slog.Logger) (*metricsServer, error) {
	if f.obs.metricsAddr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", f.obs.metricsAddr)
	if err != nil {
		if !f.obs.metricsAddrGiven {
			logger.Warn("metrics listener not started: default address unavailable; set --metrics-addr", "metrics", f.obs.metricsAddr, "error", err)
			return nil, nil
		}
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	h := o.reg.Handler(metrics.HandlerConfig{Ready: srv.Ready, Pprof: f.obs.pprof})
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics listener failed", "error", err)
		}
	}()
	logger.Info("serving metrics", "metrics", "http://"+ln.Addr().String()+"/metrics", "pprof", f.obs.pprof)
	if beyondLoopback(ln.Addr()) {
		logger.Warn("the metrics listener is reachable beyond loopback without authentication", "metrics", ln.Addr().String())
	}
	return &metricsServer{hs: hs, ln: ln}, nil
}

// close stops the metrics listener (nil-safe).
func (m *metricsServer) close(ctx context.Context) {
	if m != nil {
		_ = m.hs.Shutdown(ctx)
	}
}

// flagSet reports whether name was given (on the command line or by the
// config file).
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
