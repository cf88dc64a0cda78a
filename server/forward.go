package server

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/apikey"
	"github.com/termivar/distributed/internal/wireerr"
)

// Cluster routing. Every API request that reaches a follower is proxied to
// the leader's advertised API URL (learned from the replicated node table),
// authentication and all: the leader authenticates, audits and answers.
// Admin.Status and Cluster.Members are answered by the node asked (unless
// it does not know the caller's key yet). When the
// leader is unknown, or the request was already forwarded once, the node
// answers Unavailable / not_leader with the leader's URL (if known) in the
// LeaderHeader response header; client/ follows it.
//
// A forwarded request stops waiting when the node's view of the leader
// changes (it notices a paused or cut-off leader within about one election
// timeout, when raft starts an election) or after ForwardTimeout (calls
// other than the Acquire and FollowResults long-polls and the
// AggregateResults and Backup streams). It then answers Unavailable /
// not_leader with the leader hint of the moment and OutcomeHeader:
// OutcomeUnknown, because the old leader may have applied the request; the
// client retries what is safe to replay on another node.
const (
	// ForwardedHeader names the node that forwarded a request.
	ForwardedHeader = "Termivar-Forwarded-By"
	// LeaderHeader carries the leader's API URL on a not_leader error.
	LeaderHeader = "Termivar-Leader"
	// OutcomeHeader is set to OutcomeUnknown on a not_leader error of a
	// forward that was sent and got no answer, and on a leader's
	// Unavailable answer after its proposal reached the log (toConnect).
	OutcomeHeader  = "Termivar-Outcome"
	OutcomeUnknown = "unknown"
	// ForwardTimeout bounds a forwarded call that does not wait on purpose
	// (an Acquire or FollowResults gets MaxWaitSecs on top; an AggregateResults stream is
	// bounded only by the leader watch). A leader that raft still trusts
	// but whose API does not answer costs at most this.
	ForwardTimeout = 10 * time.Second
	// leaderPollInterval is how often a forward checks the node's leader.
	leaderPollInterval = 50 * time.Millisecond
)

// localProcedures are answered by the node asked, leader or not.
var localProcedures = map[string]bool{
	"/termivar.v1.Admin/Status":    true,
	"/termivar.v1.Cluster/Members": true,
	// The dashboard shows the node's own view (dashboard.go).
	"/termivar.v1.Dashboard/Overview": true,
}

// Causes of a forward's cancellation.
var (
	errLeaderChanged  = errors.New("the leader changed while the request was forwarded")
	errForwardTimeout = errors.New("the leader did not answer in time")
)

type forwarder struct {
	s       *Server
	errw    *connect.ErrorWriter
	mu      sync.Mutex
	proxies map[string]*httputil.ReverseProxy
	tr      *http.Transport

	// nodeID names this node in ForwardedHeader.
	nodeID string
	// leaderURLFunc is the node's current view of the leader's API URL
	// ("" when none is known).
	leaderURLFunc func() string
	// timeout is ForwardTimeout (tests shorten it).
	timeout time.Duration
	log     *slog.Logger
}

func newForwarder(s *Server) *forwarder {
	return &forwarder{s: s, errw: connect.NewErrorWriter(), proxies: map[string]*httputil.ReverseProxy{}, tr: newForwardTransport(s.cfg.ForwardTLS),
		nodeID: s.node.NodeID(), leaderURLFunc: s.node.LeaderAPIURL, timeout: ForwardTimeout, log: s.log}
}

func newForwardTransport(tlsConf *tls.Config) *http.Transport {
	var p http.Protocols
	// NB: HTTP/2 only (h2c for http://, h2 over TLS for https://), so gRPC
	// trailers and server streams pass through unchanged.
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     cmp.Or(tlsConf, &tls.Config{MinVersion: tls.VersionTLS12}),
		Protocols:           &p,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
}

func (f *forwarder) proxy(leader string) (*httputil.ReverseProxy, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.proxies[leader]; ok {
		return p, nil
	}
	target, err := url.Parse(leader)
	if err != nil {
		return nil, err
	}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Set(ForwardedHeader, f.nodeID)
			if f.s != nil { // NB: forward tests build a forwarder without a server
				now := f.s.now()
				pr.Out.Header.Set(ForwardedForHeader, f.s.sealForwardedFor(f.s.source(pr.In, now), now))
			}
		},
		Transport:      f.tr,
		FlushInterval:  -1,
		ModifyResponse: bufferUnaryAnswer,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			f.proxyError(w, r, leader, err)
		},
	}
	f.proxies[leader] = p
	return p, nil
}

// forwardBufferBytes bounds the part of a leader's answer to a unary call
// that a forward reads before it sends the client anything (the leader
// holds the whole answer in memory as well); the rest of a larger answer
// is streamed as it comes.
const forwardBufferBytes = 64 << 20

// errAnswerCut is the cause of a forward whose leader answer broke off
// before its end.
var errAnswerCut = errors.New("the leader's answer was cut off")

// streamingProcedures are the server streams: their answers are passed on
// as they come.
var streamingProcedures = map[string]bool{
	"/termivar.v1.Producer/AggregateResults": true,
	"/termivar.v1.Cluster/Backup":            true,
}

// bufferUnaryAnswer reads the leader's whole answer to a unary call (up to
// forwardBufferBytes) before the proxy writes its status and headers to the
// client. A unary answer is all or nothing: had the headers gone out first
// (a Connect status 200 says the call succeeded), a leader change, a
// ForwardTimeout or the leader's death before the body arrived left the
// client a cut-off response, which connect reports as a definite-looking
// code (Unknown "read message: unexpected EOF" over HTTP/1.1, Internal over
// HTTP/2) that is neither retried nor an unknown outcome — although the
// leader applied the call. An error here goes to proxyError instead, which
// answers not_leader with an unknown outcome
// (TestForwarder_LeaderChangeAfterAnswerBegan).
func bufferUnaryAnswer(res *http.Response) error {
	if streamingProcedures[res.Request.URL.Path] {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, forwardBufferBytes+1))
	if err != nil {
		return fmt.Errorf("%w: %w", errAnswerCut, err)
	}
	if len(b) <= forwardBufferBytes {
		res.Body.Close() // NB: read to its end: fills res.Trailer (gRPC)
		res.Body = io.NopCloser(bytes.NewReader(b))
		return nil
	}
	res.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), res.Body), res.Body}
	return nil
}

// proxyError answers a forward that failed: the leader changed (with the
// new hint) or did not answer in time (outcome unknown), the leader could
// not be dialled (not sent), or it broke off (outcome unknown). A leader
// that failed to answer is not named as the hint, so that clients keep
// asking this node, which forwards to whichever leader it knows next. A
// caller that went away gets nothing.
func (f *forwarder) proxyError(w http.ResponseWriter, r *http.Request, leader string, err error) {
	cause := context.Cause(r.Context())
	switch {
	case errors.Is(cause, errLeaderChanged):
		f.writeUnknown(w, r, f.leaderURLFunc(), errLeaderChanged.Error())
		return
	case errors.Is(cause, errForwardTimeout):
		f.writeUnknown(w, r, "", errForwardTimeout.Error())
		return
	case r.Context().Err() != nil:
		return
	}
	f.log.Debug("forwarding to the leader failed", "leader", leader, "error", err)
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
		f.writeErr(w, r, "", "the leader cannot be reached")
		return
	}
	if errors.Is(err, errAnswerCut) {
		f.writeUnknown(w, r, "", errAnswerCut.Error())
		return
	}
	f.writeUnknown(w, r, "", "the leader did not answer")
}

// forward proxies r to leader until the leader answers, the node's view of
// the leader changes (errLeaderChanged) or the procedure's bound passes
// (errForwardTimeout).
func (f *forwarder) forward(w http.ResponseWriter, r *http.Request, leader string, p *httputil.ReverseProxy) {
	ctx, cancel := context.WithCancelCause(r.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel(nil)
	if d := f.bound(r.URL.Path); d > 0 {
		t := time.AfterFunc(d, func() { cancel(errForwardTimeout) })
		defer t.Stop()
	}
	if watchesLeader(r.URL.Path) {
		wg.Go(func() { f.watchLeader(ctx, leader, cancel) })
	}
	p.ServeHTTP(w, r.WithContext(ctx))
}

// watchesLeader reports whether a forward of procedure stops when the
// leader changes. NB: TransferLeadership changes the leader on purpose; the
// old leader answers it once the new one is known (bounded by its own
// timeout and the forward's), so a change is its success, not a reason to
// give up.
func watchesLeader(procedure string) bool {
	return procedure != "/termivar.v1.Cluster/TransferLeadership"
}

// bound is the time a forward of procedure may take (0: no bound).
func (f *forwarder) bound(procedure string) time.Duration {
	switch procedure {
	case "/termivar.v1.Worker/Acquire", "/termivar.v1.Producer/FollowResults":
		return MaxWaitSecs*time.Second + f.timeout
	case "/termivar.v1.Producer/AggregateResults", "/termivar.v1.Cluster/Backup":
		// NB: streams as long as the state is large; the leader watch
		// still ends them when the leader changes.
		return 0
	case "/termivar.v1.Dashboard/Overview":
		return MaxDashboardWaitSecs*time.Second + f.timeout
	}
	return f.timeout
}

// watchLeader cancels the forward with errLeaderChanged as soon as the
// node's leader is no longer leader; it returns when ctx ends.
//
// NB: polling (cheap: two reads under raft's and the FSM's locks) keeps the
// node's API unchanged; a paused leader is noticed by raft after an
// election timeout, far above the poll interval.
func (f *forwarder) watchLeader(ctx context.Context, leader string, cancel context.CancelCauseFunc) {
	t := time.NewTicker(leaderPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if f.leaderURLFunc() != leader {
				cancel(errLeaderChanged)
				return
			}
		}
	}
}

// writeUnknown answers Unavailable / not_leader for a forward that was
// sent and got no answer.
func (f *forwarder) writeUnknown(w http.ResponseWriter, r *http.Request, leader, msg string) {
	ce := notLeaderError(leader, msg)
	ce.Meta().Set(OutcomeHeader, OutcomeUnknown)
	_ = f.errw.Write(w, r, ce)
}

// writeErr answers Unavailable / not_leader in the request's protocol.
func (f *forwarder) writeErr(w http.ResponseWriter, r *http.Request, leader, msg string) {
	_ = f.errw.Write(w, r, notLeaderError(leader, msg))
}

func notLeaderError(leader, msg string) *connect.Error {
	ce := connect.NewError(connect.CodeUnavailable, errors.New(msg))
	if d, err := connect.NewErrorDetail(&pb.ErrorDetail{Kind: KindNotLeader, Reason: msg}); err == nil {
		ce.AddDetail(d)
	}
	if leader != "" {
		ce.Meta().Set(LeaderHeader, leader)
	}
	return ce
}

// withLeaderHint adds the leader's URL to a not_leader error of a handler.
func (s *Server) withLeaderHint(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable {
		return err
	}
	if d, ok := wireerr.DetailOf(ce); ok && d.GetKind() == KindNotLeader {
		if u := s.node.LeaderAPIURL(); u != "" {
			ce.Meta().Set(LeaderHeader, u)
		}
	}
	return err
}

// handler wraps the API mux with forwarding.
func (f *forwarder) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/termivar.v1.") || f.s.node.IsLeader() || !f.errw.IsSupported(r) ||
			(localProcedures[r.URL.Path] && f.s.keyKnownLocally(r.Header)) {
			next.ServeHTTP(w, r)
			return
		}
		leader := f.leaderURLFunc()
		switch {
		case leader == "":
			f.writeErr(w, r, "", "no leader is known")
			return
		case f.s.cfg.NoForwarding:
			f.writeErr(w, r, leader, "not the leader")
			return
		case isSessionPath(r.URL.Path):
			// NB: a stream is not forwarded; the client reconnects to the
			// leader (session.go S5).
			f.writeErr(w, r, leader, "not the leader (sessions are not forwarded)")
			return
		case r.Header.Get(ForwardedHeader) != "":
			// NB: never forward twice (stale leader views could loop).
			f.writeErr(w, r, leader, "not the leader (request was already forwarded)")
			return
		}
		p, err := f.proxy(leader)
		if err != nil {
			f.writeErr(w, r, "", "the leader's URL is invalid")
			return
		}
		f.forward(w, r, leader, p)
	})
}

// keyKnownLocally reports whether this node's FSM already holds the
// request's API key. A follower may lag behind a key created a moment ago
// through the leader; a local procedure with such a key is forwarded
// instead of failing with "unknown API key".
func (s *Server) keyKnownLocally(h http.Header) bool {
	raw, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	if !ok {
		return true // fails the same everywhere
	}
	id, _, err := apikey.Parse(strings.TrimSpace(raw))
	if err != nil {
		return true
	}
	_, found := s.node.Reads().Key(id)
	return found
}

// CloseIdleConnections closes the idle connections of the forwarding
// transport (tests call it before checking for goroutine leaks).
func (s *Server) CloseIdleConnections() { s.fwd.tr.CloseIdleConnections() }

// readyToServe reports whether this node can answer API calls: it leads,
// or it knows a leader to forward to.
func (s *Server) readyToServe() bool {
	return s.node.IsLeader() || s.node.LeaderAPIURL() != ""
}

// readBarrier makes p's read of procedure linearizable
// (node.LinearizableRead) and then re-checks p's key (keyStillLive),
// unless the procedure is answered locally.
func (s *Server) readBarrier(ctx context.Context, p principal, procedure string) error {
	if localProcedures[procedure] {
		return nil
	}
	if err := s.node.LinearizableRead(ctx); err != nil {
		return err
	}
	return s.keyStillLive(p)
}
