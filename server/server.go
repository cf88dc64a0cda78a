// Package server serves the node's Connect API (termivar.v1 Worker, Producer
// and Admin; gRPC, gRPC-Web and Connect/JSON from one handler). Every request
// needs a bearer API key, checked from the headers before the body is read
// (preauth.go); the key fixes the tenant and its role limits the methods.
// Connections, header and body times and failed authentications are
// bounded by Limits (limits.go). Leases, fences and receipts cross the wire
// only as MACed tokens. Every mutating request of an authenticated caller,
// accepted or rejected, appends one audit line; failed authentications are
// audited in aggregate per source. Core error kinds map to Connect codes in
// one table (errors.go).
package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
	"github.com/termivar/distributed/internal/apikey"
	"github.com/termivar/distributed/internal/audit"
	"github.com/termivar/distributed/internal/buildinfo"
	"github.com/termivar/distributed/internal/metrics"
	"github.com/termivar/distributed/raftfsm"
)

// Request size limits (bytes of one request message).
const (
	// MaxWorkerRequestBytes fits CompleteMany with large results.
	MaxWorkerRequestBytes = 48 << 20
	// MaxProducerRequestBytes fits one Enqueue of 4096 maximal tasks.
	MaxProducerRequestBytes = 8 << 20
	// MaxAdminRequestBytes bounds admin requests.
	MaxAdminRequestBytes = 1 << 20
	// MaxWaitSecs bounds Acquire's long poll.
	MaxWaitSecs = 60
	// MaxCompleteMany bounds CompleteMany items.
	MaxCompleteMany = 1024
)

// Config configures a Server.
type Config struct {
	// Backend is the node served: node.Node in production, an in-memory
	// backend in tests (backend.go).
	Backend Backend
	// Audit receives one entry per mutating request; nil discards them.
	Audit *audit.Logger
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// DefaultLeaseTTLSecs is used when a request asks for 0 (default 60).
	DefaultLeaseTTLSecs uint64
	// ForwardTLS configures the connection to the leader when a follower
	// forwards to an https:// URL (forward.go); nil: system roots.
	ForwardTLS *tls.Config
	// NoForwarding makes a follower answer not_leader with the leader's URL
	// instead of proxying.
	NoForwarding bool
	// Limits bound what unauthenticated and slow clients can make the
	// server hold (limits.go); zero fields take their defaults.
	Limits Limits
	// Now is the clock of the throttle and the failure audit; nil:
	// time.Now.
	Now func() time.Time
	// Metrics receives the API's instruments (requests, latency,
	// rejected authentications, limits reached); nil records nothing.
	Metrics *metrics.API
	// Interceptors wrap every API handler after the metrics one (serve
	// adds the tracing interceptor).
	Interceptors []connect.Interceptor
}

// Server implements the three Connect services.
type Server struct {
	cfg   Config
	node  Backend
	audit *audit.Logger
	log   *slog.Logger
	fwd   *forwarder

	limits     Limits
	now        func() time.Time
	errw       *connect.ErrorWriter
	throttle   *failureThrottle
	failures   *audit.FailureAggregator
	preauthSem chan struct{} // one token per request awaiting authentication
	dashSem    chan struct{} // one token per dashboard overview being built

	stopCtx  context.Context    // cancelled by Close (session.go's watch waits on it without a goroutine)
	stop     context.CancelFunc // Close
	stopping <-chan struct{}    // stopCtx.Done(): long-polls stop waiting
	// longPolls counts the Acquire calls waiting for work right now.
	longPolls atomic.Int64
	// sessionServers counts the goroutines sessions started to answer
	// their messages (session.go serveJobs; tests check the reuse).
	sessionServers atomic.Int64
	// longPollsChanged, when set, is closed (and cleared) at the next
	// change of longPolls (LongPollsChanged).
	longPollsChanged atomic.Pointer[chan struct{}]
	// followsWaiting counts the FollowResults calls waiting for a result.
	followsWaiting atomic.Int64
	sessions       sessionKeys // open worker sessions per key (session.go)
	catchUp        *keyCatchUp // barriers before an unknown key is refused (keycatchup.go)
	limitLog       limitLog
	build          *pb.BuildInfo // this binary's, for Status
}

// New returns a server for cfg.Backend. It panics if cfg.Limits does not
// validate (callers check flags with Limits.Validate first).
func New(cfg Config) *Server {
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	cfg.DefaultLeaseTTLSecs = cmp.Or(cfg.DefaultLeaseTTLSecs, 60)
	if err := cfg.Limits.Validate(); err != nil {
		panic(err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	lim := cfg.Limits.withDefaults()
	s := &Server{cfg: cfg, node: cfg.Backend, audit: cfg.Audit, log: cfg.Logger,
		limits: lim, now: cfg.Now, errw: connect.NewErrorWriter(),
		throttle:   newFailureThrottle(lim.AuthFailureBurst, lim.AuthFailureRefill, lim.AuthSources),
		failures:   cfg.Audit.Failures(audit.FailureConfig{Window: lim.AuthAuditWindow, MaxSources: lim.AuthSources}),
		preauthSem: make(chan struct{}, lim.MaxPreAuthRequests),
		dashSem:    make(chan struct{}, maxDashboardBuilds),
	}
	s.stopCtx, s.stop = context.WithCancel(context.Background())
	s.stopping = s.stopCtx.Done()
	s.fwd = newForwarder(s)
	s.catchUp = &keyCatchUp{barrierFunc: s.node.LinearizableRead, timeout: KeyCatchUpTimeout, perSource: KeyCatchUpsPerSource, total: max(lim.MaxPreAuthRequests/2, 1), life: s.stopCtx, onBarrier: cfg.Metrics.KeyCatchUpBarrier}
	s.build = buildinfo.Read().Proto()
	return s
}

// LongPollsWaiting returns how many Acquire calls wait for work now.
func (s *Server) LongPollsWaiting() int64 { return s.longPolls.Load() }

// LongPollsChanged returns a channel closed at the next change of
// LongPollsWaiting, so that a caller waits on the change instead of
// polling: take the channel first, then read LongPollsWaiting.
func (s *Server) LongPollsChanged() <-chan struct{} {
	for {
		if p := s.longPollsChanged.Load(); p != nil {
			return *p
		}
		ch := make(chan struct{})
		if s.longPollsChanged.CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}

// addLongPoll counts a long-poll starting (1) or ending (-1) and closes
// the channel LongPollsChanged handed out, if any (one atomic swap).
func (s *Server) addLongPoll(d int64) {
	s.longPolls.Add(d)
	if p := s.longPollsChanged.Swap(nil); p != nil {
		close(*p)
	}
}

// Close wakes every pending Acquire long-poll, which then answers at once
// with no tasks (as if its wait had ended), and keeps later Acquire calls
// from waiting. Other calls are not affected. Call it when the HTTP server
// shuts down, so that http.Server.Shutdown does not wait up to a minute for
// long-polls; HTTPServer registers it for that. Close is idempotent.
func (s *Server) Close() {
	s.stop()
}

// HTTPServer returns NewHTTPServer(addr, s.Handler()) with the header and
// idle timeouts of s's Limits, and Close registered to run as soon as its
// Shutdown starts. Serve it on s.LimitListener(ln) for the connection
// bounds.
func (s *Server) HTTPServer(addr string) *http.Server {
	hs := NewHTTPServer(addr, s.Handler())
	hs.ReadHeaderTimeout = s.limits.HeaderTimeout
	hs.IdleTimeout = s.limits.IdleTimeout
	hs.RegisterOnShutdown(s.Close)
	return hs
}

// Handler returns an http.Handler serving the API plus /healthz, /readyz
// and the web dashboard at / (ui.go).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	// NB: responses are compressed only when large and the client asks;
	// gzip of small messages costs more CPU than it saves.
	compress := connect.WithCompressMinBytes(256 << 10)
	ics := s.interceptors()
	wpath, wh := termivarv1connect.NewWorkerHandler(workerHandler{s}, readMax(MaxWorkerRequestBytes), compress, ics)
	mux.Handle(wpath, wh)
	mux.Handle(sessionProcedure, sessionHTTP(wh))
	ppath, ph := termivarv1connect.NewProducerHandler(producerHandler{s}, readMax(MaxProducerRequestBytes), compress, ics)
	mux.Handle(ppath, ph)
	mux.Handle(producerSessionProc, sessionHTTP(ph))
	mux.Handle(termivarv1connect.NewAdminHandler(adminHandler{s}, readMax(MaxAdminRequestBytes), compress, ics))
	mux.Handle(termivarv1connect.NewClusterHandler(clusterHandler{s}, readMax(MaxAdminRequestBytes), ics))
	mux.Handle(termivarv1connect.NewDashboardHandler(dashboardHandler{s}, readMax(MaxAdminRequestBytes), compress, ics))
	mountUI(mux)
	s.mountTooling(mux)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	// NB: authentication comes first, before forwarding and before any
	// body byte is read (preauth.go).
	return s.preauth(s.fwd.handler(s.localGate(mux)))
}

// readMax bounds a handler's request messages to n bytes, decompressed
// size included (compress.go).
func readMax(n int64) connect.HandlerOption {
	return connect.WithHandlerOptions(connect.WithReadMaxBytes(int(n)), withCappedGzip(n))
}

// NewHTTPServer returns an http.Server for h that speaks HTTP/1.1 and
// unencrypted HTTP/2 (h2c) — gRPC needs HTTP/2 — with sane timeouts.
// HTTP/2 frames it reads are at most H2MaxReadFrameSize.
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		Protocols:         &p,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		HTTP2:             &http.HTTP2Config{MaxReadFrameSize: H2MaxReadFrameSize},
	}
}

// H2MaxReadFrameSize is the largest HTTP/2 frame the server reads: the
// protocol's initial 16 KiB, not net/http's 1 MiB. A Go client holds a
// send buffer of min(this, 512 KiB) for as long as a request body is
// open, so each worker session stream (docs/node.md, "Worker sessions")
// kept 512 KiB on its client (docs/benchmarks.md, "1 024 workers with
// worker sessions").
const H2MaxReadFrameSize = 16 << 10

// principal is an authenticated caller.
type principal struct {
	KeyID  string
	Tenant string
	Role   apikey.Role
}

// systemAdmin reports whether p administers the cluster.
func (p principal) systemAdmin() bool {
	return p.Role == apikey.RoleAdmin && p.Tenant == raftfsm.SystemTenant
}

func splitProcedure(proc string) (service, method string) {
	proc = strings.TrimPrefix(proc, "/termivar.v1.")
	service, method, _ = strings.Cut(proc, "/")
	return service, method
}

// authenticate checks the bearer key and the role's permission, from the
// headers alone; preauth calls it once per request, before the body. On
// failure the returned principal still carries the key ID when it parsed,
// for audit.
func (s *Server) authenticate(h http.Header, service, method string) (principal, error) {
	p, err := s.identify(h)
	if err != nil {
		return p, err
	}
	if !apikey.Allowed(p.Role, service, method) {
		return p, errDenied("role " + p.Role.String() + " may not call " + service + "." + method)
	}
	if _, ok := s.node.Reads().Tenant(p.Tenant); !ok {
		return p, &apiError{KindUnknownTenant, "tenant does not exist"}
	}
	return p, nil
}

// identify checks the bearer key alone (no role, no tenant check).
func (s *Server) identify(h http.Header) (principal, error) {
	auth := h.Get("Authorization")
	raw, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		return principal{}, errUnauthenticated("missing bearer API key")
	}
	id, secret, err := apikey.Parse(strings.TrimSpace(raw))
	if err != nil {
		return principal{}, errUnauthenticated("malformed API key")
	}
	rec, found := s.node.Reads().Key(id)
	if !found || !apikey.Verify(rec.Hash, secret) {
		return principal{KeyID: id}, errUnauthenticated("unknown API key")
	}
	role, _ := apikey.ParseRole(rec.Role)
	return principal{KeyID: id, Tenant: rec.Tenant, Role: role}, nil
}

// call takes the principal preauth computed, runs fn, audits mutating
// calls and converts errors.
func call[Req, Res any](ctx context.Context, s *Server, req *connect.Request[Req], mutating bool,
	fn func(ctx context.Context, p principal, msg *Req) (*Res, uint64, error)) (*connect.Response[Res], error) {
	res, err := callMsg(ctx, s, req.Spec().Procedure, req.Msg, mutating, fn)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

// callMsg is call for one message of procedure: a unary request's, or one
// of a worker session (session.go), which obeys the same rules.
func callMsg[Req, Res any](ctx context.Context, s *Server, procedure string, msg *Req, mutating bool,
	fn func(ctx context.Context, p principal, msg *Req) (*Res, uint64, error)) (*Res, error) {
	service, method := splitProcedure(procedure)
	p, err := principalFrom(ctx)
	var res *Res
	var rev uint64
	if err == nil && !mutating {
		err = s.readBarrier(ctx, p, procedure)
	}
	if err == nil {
		res, rev, err = fn(ctx, p, msg)
	}
	if mutating {
		s.audit.Record(ctx, audit.Entry{KeyID: p.KeyID, Tenant: p.Tenant, Method: service + "." + method, Outcome: kindOf(err), Revision: rev, Subject: auditSubject(msg)})
	}
	if err != nil {
		s.noteLimit(p.Tenant, err)
		return nil, s.withLeaderHint(toConnect(err))
	}
	return res, nil
}

// propose sends one tenant command for p and returns its response; domain
// errors come back as err, with the revision at which they happened.
func (s *Server) propose(ctx context.Context, p principal, expected *uint64, cmd *pb.Command) (raftfsm.Response, error) {
	cmd.Tenant = p.Tenant
	cmd.Principal = p.KeyID
	cmd.ExpectedRevision = expected
	r, err := s.node.Propose(ctx, cmd)
	return r, raftfsm.ProposalErr(r, err)
}

// proposeAs is propose, then the response's value as a T (raftfsm.ValueAs:
// a mismatch is an error naming op) and the revision.
func proposeAs[T any](ctx context.Context, s *Server, p principal, expected *uint64, cmd *pb.Command, op string) (T, uint64, error) {
	r, err := s.propose(ctx, p, expected, cmd)
	if err != nil {
		var zero T
		return zero, r.Revision, err
	}
	v, err := raftfsm.ValueAs[T](r, op)
	return v, r.Revision, err
}
