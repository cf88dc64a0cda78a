package server

import (
	"context"
	"crypto/tls"
	"errors"
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
)

// Cluster routing. Every API request that reaches a follower is proxied to
// the leader's advertised API URL (learned from the replicated node table),
// authentication and all: the leader authenticates, audits and answers.
// Admin.Status and Cluster.Members are answered by the node asked (unless
// it does not know the caller's key yet). When the
// leader is unknown, or the request was already forwarded once, the node
// answers Unavailable / not_leader with the leader's URL (if known) in the
// LeaderHeader response header; client/ follows it.
const (
	// ForwardedHeader names the node that forwarded a request.
	ForwardedHeader = "Termivar-Forwarded-By"
	// LeaderHeader carries the leader's API URL on a not_leader error.
	LeaderHeader = "Termivar-Leader"
)

// localProcedures are answered by the node asked, leader or not.
var localProcedures = map[string]bool{
	"/termivar.v1.Admin/Status":    true,
	"/termivar.v1.Cluster/Members": true,
}

type forwarder struct {
	s       *Server
	errw    *connect.ErrorWriter
	mu      sync.Mutex
	proxies map[string]*httputil.ReverseProxy
	tr      *http.Transport
}

func newForwarder(s *Server) *forwarder {
	var p http.Protocols
	// NB: HTTP/2 only (h2c for http://, h2 over TLS for https://), so gRPC
	// trailers and server streams pass through unchanged.
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     s.cfg.ForwardTLS,
		Protocols:           &p,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	if tr.TLSClientConfig == nil {
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return &forwarder{s: s, errw: connect.NewErrorWriter(), proxies: map[string]*httputil.ReverseProxy{}, tr: tr}
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
			pr.Out.Header.Set(ForwardedHeader, f.s.node.NodeID())
			pr.Out.Header.Set(ForwardedForHeader, f.s.sealForwardedFor(f.s.source(pr.In, f.s.now()), f.s.now()))
		},
		Transport:     f.tr,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			f.s.log.Debug("forwarding to the leader failed", "leader", leader, "error", err)
			f.writeErr(w, r, leader, "the leader did not answer")
		},
	}
	f.proxies[leader] = p
	return p, nil
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
	if d, ok := DetailOf(ce); ok && d.GetKind() == KindNotLeader {
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
		leader := f.s.node.LeaderAPIURL()
		switch {
		case leader == "":
			f.writeErr(w, r, "", "no leader is known")
			return
		case f.s.cfg.NoForwarding:
			f.writeErr(w, r, leader, "not the leader")
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
		p.ServeHTTP(w, r)
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
	_, found := s.node.FSM().Key(id)
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

// readBarrier makes a read linearizable (node.LinearizableRead) unless the
// procedure is answered locally.
func (s *Server) readBarrier(ctx context.Context, procedure string) error {
	if localProcedures[procedure] {
		return nil
	}
	return s.node.LinearizableRead(ctx)
}
