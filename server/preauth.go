package server

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
)

// Authentication before the body. Every API request passes two gates:
//
//  1. preauth (outermost, before forwarding): it refuses a throttled
//     source, checks the bearer key and the role from the headers alone
//     (authenticate, the single source of truth), and answers a failure
//     at once without reading a byte of the body. A request it lets
//     through gets a body read deadline and a byte bound, and carries its
//     authResult in the context; handlers take the principal from there
//     (principalFrom) instead of authenticating again.
//  2. localGate (after forwarding, in front of the handlers): a follower
//     cannot decide a key it does not know yet (created a moment ago
//     through the leader), so preauth lets such a request on to the
//     forwarder, and the leader decides. If the request is served locally
//     after all (this node became leader meanwhile), localGate decides it
//     as the leader does, still before its body.
//
// A leader refuses a key it does not know only after a shared catch-up
// barrier (keycatchup.go): its key table may lag behind a key another
// leader acknowledged.
//
// Failed authentications are charged to their source (the client's IP, or
// the verified forwarded address, forwardfor.go): throttled per source
// (throttle.go) and audited in aggregate (audit.FailureAggregator).

// Node-level kinds of the pre-authentication gates.
const (
	// KindAuthThrottled: the source failed authentication too often; the
	// request was refused without looking at its key (Retry-After says
	// when to try again).
	KindAuthThrottled = "auth_throttled"
	// KindBusy: too many requests are awaiting authentication.
	KindBusy = "busy"
)

// bodySlackBytes is added to a service's message bound for the wire body:
// envelope and framing overhead.
const bodySlackBytes = 64 << 10

// authResult is the outcome of authenticating a request's headers.
type authResult struct {
	p   principal
	err error  // nil, or the error authenticate returned
	src string // the source failures are charged to
}

type authCtxKey struct{}

// principalFrom returns the principal preauth computed for the request, or
// its authorisation error. A request that reached a handler without
// passing preauth is refused (fail closed).
func principalFrom(ctx context.Context) (principal, error) {
	res, ok := ctx.Value(authCtxKey{}).(authResult)
	if !ok {
		return principal{}, &apiError{KindInternal, "request was not authenticated"}
	}
	return res.p, res.err
}

// isUnauthenticated reports whether err is an authentication (not an
// authorisation) failure.
func isUnauthenticated(err error) bool {
	if err == nil {
		return false // NB: before ae, which escapes: no allocation per accepted call
	}
	var ae *apiError
	return errors.As(err, &ae) && ae.kind == KindUnauthenticated
}

// preauth is gate 1 (see above).
func (s *Server) preauth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := s.now()
		s.failures.Tick(now)
		if !strings.HasPrefix(r.URL.Path, "/termivar.v1.") {
			next.ServeHTTP(w, r)
			return
		}
		if !s.admitPreAuth(w, r) {
			return
		}
		res, ok := s.decide(w, r, now)
		<-s.preauthSem
		if !ok {
			return
		}
		r2 := r.WithContext(context.WithValue(r.Context(), authCtxKey{}, res))
		s.boundBody(w, r2)
		next.ServeHTTP(w, r2)
	})
}

// decide authenticates r's headers. It answers a throttled source and a
// definite authentication failure itself and returns false.
func (s *Server) decide(w http.ResponseWriter, r *http.Request, now time.Time) (authResult, bool) {
	src := s.source(r, now)
	if s.refuseThrottled(w, r, src, now) {
		return authResult{}, false
	}
	service, method := splitProcedure(r.URL.Path)
	p, err := s.authenticate(r.Header, service, method)
	res := authResult{p: p, err: err, src: src}
	if !isUnauthenticated(err) {
		return res, true
	}
	// NB: a follower forwards a key it does not know to the leader, which
	// decides (and charges the failure to the client, forwardfor.go).
	if !s.node.IsLeader() && !s.keyKnownLocally(r.Header) {
		return res, true
	}
	return s.settle(w, r, res, now)
}

// admitPreAuth takes a pre-authentication slot for r, or answers busy and
// returns false. The caller gives the slot back (<-s.preauthSem).
func (s *Server) admitPreAuth(w http.ResponseWriter, r *http.Request) bool {
	select {
	case s.preauthSem <- struct{}{}:
		return true
	default:
		s.cfg.Metrics.AuthRejected("busy")
		s.refuse(w, r, &apiError{KindBusy, "too many requests awaiting authentication; retry later"}, 0)
		return false
	}
}

// settle decides a request whose key authenticate refused (res) on a node
// that does not forward it (settleUnknownKey): it answers a failure, or
// Unavailable when this node cannot decide now, and returns false; true
// with the principal when the key was found after the catch-up.
func (s *Server) settle(w http.ResponseWriter, r *http.Request, res authResult, now time.Time) (authResult, bool) {
	res, err := s.settleUnknownKey(r, res)
	if err != nil {
		s.refuse(w, r, s.withLeaderHint(toConnect(err)), 0)
		return authResult{}, false
	}
	if isUnauthenticated(res.err) {
		s.failed(w, r, res, now)
		return authResult{}, false
	}
	return res, true
}

// refuseThrottled answers (and audits) a request from a source that is
// out of authentication attempts and returns true; false when src may
// still try.
func (s *Server) refuseThrottled(w http.ResponseWriter, r *http.Request, src string, now time.Time) bool {
	wait := s.throttle.retryAfter(src, now)
	if wait <= 0 {
		return false
	}
	s.failures.Add(now, src, true)
	if r.ProtoMajor == 2 && src == sourceOf(r.RemoteAddr) {
		// NB: over HTTP/2 a throttled client's connection is shut down
		// (GOAWAY), so each further attempt costs it a new connection
		// instead of a stream that has already pushed a receive window of
		// body at us. Not when a follower forwarded the request: its
		// connection carries other clients.
		w.Header().Set("Connection", "close")
	}
	s.cfg.Metrics.AuthRejected("throttled")
	s.refuse(w, r, &apiError{KindAuthThrottled, "too many failed authentications from this address; retry later"}, wait)
	return true
}

// failed charges a failed authentication to its source and answers it.
func (s *Server) failed(w http.ResponseWriter, r *http.Request, res authResult, now time.Time) {
	s.cfg.Metrics.AuthRejected("unauthenticated")
	s.throttle.fail(res.src, now)
	s.failures.Add(now, res.src, false)
	s.refuse(w, r, res.err, 0)
}

// localGate is gate 2 (see above).
func (s *Server) localGate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, ok := r.Context().Value(authCtxKey{}).(authResult)
		if !ok || !isUnauthenticated(res.err) {
			next.ServeHTTP(w, r)
			return
		}
		// NB: under a pre-authentication slot, as in preauth: a request
		// preauth let on as a follower's may arrive here after this node
		// became leader, and its catch-up must count against
		// MaxPreAuthRequests too (keycatchup.go).
		if !s.admitPreAuth(w, r) {
			return
		}
		res, ok = s.settle(w, r, res, s.now())
		<-s.preauthSem
		if ok {
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), authCtxKey{}, res)))
		}
	})
}

// refuse answers err in the request's protocol without reading the body.
// NB: over HTTP/1 the connection is closed after the answer (keeping it
// would mean draining a body that may never come), and the read deadline
// set to now makes net/http's last drain of the unread body fail at once
// instead of waiting for a client that never sends it. Closing matters:
// net/http treats a failed read on a kept connection as the client gone
// and cancels the context of every later request on it. Over HTTP/2 only
// the stream is affected (a GOAWAY would hit every stream of a shared
// connection, e.g. a follower's).
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, err error, retryAfter time.Duration) {
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	var ce *connect.Error
	if !errors.As(toConnect(err), &ce) {
		panic("server: toConnect returned no *connect.Error") // toConnect's contract
	}
	if retryAfter > 0 {
		ce.Meta().Set("Retry-After", strconv.Itoa(int(math.Ceil(retryAfter.Seconds()))))
	}
	if s.errw.IsSupported(r) {
		_ = s.errw.Write(w, r, ce)
		return
	}
	if retryAfter > 0 {
		w.Header().Set("Retry-After", ce.Meta().Get("Retry-After"))
	}
	http.Error(w, ce.Message(), connectHTTPStatus(ce.Code()))
}

// connectHTTPStatus is the HTTP status of a refusal for a request in no
// Connect protocol.
func connectHTTPStatus(c connect.Code) int {
	switch c {
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeResourceExhausted:
		return http.StatusTooManyRequests
	default:
		return http.StatusServiceUnavailable
	}
}

// maxBodyBytes returns the wire bound of a service's request body.
func maxBodyBytes(path string) int64 {
	service, _ := splitProcedure(path)
	switch service {
	case "Worker":
		return MaxWorkerRequestBytes + bodySlackBytes
	case "Producer":
		return MaxProducerRequestBytes + bodySlackBytes
	default:
		return MaxAdminRequestBytes + bodySlackBytes
	}
}

// boundBody gives an admitted request's body its byte bound and its read
// deadline (BodyTimeout from now, on the wall clock: Config.Now serves the
// throttle and the audit, a connection deadline is real). A request
// without a body gets no deadline: net/http already reads the connection
// in the background to notice a client leaving, and a deadline expiring
// there would cancel a long handler. r must be a copy of the request net/http
// passed in: net/http decides from the original body whether it was read
// to its end, and closes the connection if not (so unread body bytes are
// never parsed as the next request). The deadline is lifted when the body
// has been read to its end, so a long-poll or a response stream is not cut
// off; a body never read to its end keeps it, which also bounds net/http's
// drain of it after the handler.
func (s *Server) boundBody(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength == 0 || isSessionPath(r.URL.Path) {
		// NB: a session's body is its stream of messages: each is
		// bounded by its service's message bound (readMax), and the
		// stream lives as long as its worker or producer (session.go).
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.limits.BodyTimeout))
	r.Body = &deadlineBody{ReadCloser: http.MaxBytesReader(w, r.Body, maxBodyBytes(r.URL.Path)), rc: rc}
}

// deadlineBody lifts the connection's read deadline at the body's end.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
