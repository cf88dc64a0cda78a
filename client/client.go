package client

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
)

// Defaults of the stable CLI surface (contract Part D).
const (
	// DefaultServerURL is the server when neither a flag nor
	// TERMIVAR_SERVER names one.
	DefaultServerURL = "http://127.0.0.1:7420"
	// DefaultKeyFile is the admin key the node writes on first start in its
	// default data directory.
	DefaultKeyFile = "termivar-data/admin.key"
	// EnvServer and EnvKey name the environment variables the CLI reads.
	EnvServer = "TERMIVAR_SERVER"
	EnvKey    = "TERMIVAR_KEY"
	// DefaultAttemptTimeout is Config.AttemptTimeout's default: a
	// cluster's default raft election timeout (1 s). A healthy node answers
	// in milliseconds, so a try that takes longer is talking to a paused or
	// cut-off node; a new leader needs one to two election timeouts, so a
	// client that gives up on the paused node after one is back on a
	// working node about as soon as there is one (docs/node.md, "Paused
	// nodes": 2 s here put a floor of 2 s under the slowest request).
	DefaultAttemptTimeout = time.Second
)

// Config configures a Client. Zero values take the documented defaults.
type Config struct {
	// ServerURL is the node's base URL (default DefaultServerURL). A
	// comma-separated list names several cluster nodes: the client moves
	// to the next one when a node cannot be reached, and follows a
	// not_leader answer to the leader (cluster.go).
	ServerURL string
	// Key is the API key sent as "Authorization: Bearer <key>". Required.
	Key string
	// HTTPClient carries the requests (default: a client with keep-alive
	// connections and no overall timeout, because Acquire long-polls;
	// every call is bounded by its context).
	HTTPClient *http.Client
	// MaxAttempts bounds the tries of one call that fails with Unavailable,
	// a connection error or (for calls that are safe to replay) an expired
	// attempt deadline (default 4; 1 disables retries).
	MaxAttempts int
	// RetryTimeout, when positive, bounds a call's retries by time instead
	// of by MaxAttempts: a try that failed in a way that may be retried is
	// tried again as long as RetryTimeout has not passed since the call's
	// first try began, and a backoff never sleeps past that moment (one
	// election at the cluster's raft timeouts takes 1–2.5 s; a budget of a
	// few elections rides one out, docs/node.md "Paused nodes"). The
	// rules of what is retried stay the same: a call that is not safe to
	// replay is not re-sent after an unknown outcome (MayHaveApplied).
	// Default 0: MaxAttempts bounds the tries.
	RetryTimeout time.Duration
	// AttemptTimeout bounds one try of a call that is safe to replay (the
	// table in doc.go): when it passes without an answer — a paused node
	// accepts connections and never answers — the client moves to the next
	// URL and tries again there. Acquire's tries get their long-poll wait
	// on top. A node's deadline_exceeded answer at the try's deadline (the
	// node's deadline is the try's) counts as that deadline passing. Calls
	// that are not safe to replay are bounded by their context only.
	// Default DefaultAttemptTimeout; negative disables.
	AttemptTimeout time.Duration
	// MinBackoff and MaxBackoff bound the jittered exponential backoff
	// between tries (defaults 100 ms and 2 s).
	MinBackoff, MaxBackoff time.Duration
	// Logger receives retry diagnostics; nil discards them.
	Logger *slog.Logger
	// CompleteManyCallBytes bounds the message of one CompleteMany call: a
	// larger request is sent as several calls (complete.go). Default
	// DefaultCompleteManyCallBytes; negative: never split.
	CompleteManyCallBytes int
	// EnqueueCallsInFlight bounds the Enqueue calls the client has on the
	// wire at once (default DefaultEnqueueCallsInFlight; negative: every
	// Enqueue is a call of its own). Callers that call Enqueue while that
	// many are in flight share the next call, one Producer.EnqueueMany
	// whose requests the server admits one by one (coalesce.go): each
	// caller gets the outcome its own call would have had.
	EnqueueCallsInFlight int
	// WorkerSession sends Acquire, CompleteMany and Complete as messages of one
	// Worker.Session stream (HTTP/2) instead of one HTTP request each
	// (session.go; docs/node.md, "Worker sessions"), with the same
	// retries and outcomes. Without HTTPClient the stream has a transport
	// of its own that speaks HTTP/2 (h2c to http:// URLs); a given
	// HTTPClient must speak HTTP/2 for it. Against a server without
	// sessions (or over HTTP/1.1) the client falls back to unary calls.
	// Default off.
	WorkerSession bool
	// ProducerSession sends the coalesced Enqueue calls (coalesce.go) as
	// enqueue_many messages of one Producer.Session stream (HTTP/2)
	// instead of one HTTP request each (session.go; docs/node.md,
	// "Producer sessions"), with the same retries and outcomes, the
	// transport rules of WorkerSession and its fallback to unary calls; a
	// lone caller goes as an enqueue_many of one request. With it
	// EnqueueCallsInFlight defaults to DefaultSessionEnqueueCallsInFlight.
	// Default off.
	ProducerSession bool
}

// Client is a connection to one node. Its methods are safe for concurrent
// use.
type Client struct {
	cfg    Config
	hc     *http.Client
	log    *slog.Logger
	router *router
	auth   string     // the Authorization header: "Bearer " + the key
	enq    *coalescer // nil: Config.EnqueueCallsInFlight < 0
	sess   *sessions  // nil: Config.WorkerSession off
	psess  *sessions  // nil: Config.ProducerSession off

	// The service clients, each built on first use: a Connect client per
	// method of a service costs tens of kilobytes, and most programs (a
	// worker, a producer) use one service (issue 15: 1 024 workers).
	svcOnce  [4]sync.Once
	worker   termivarv1connect.WorkerClient
	producer termivarv1connect.ProducerClient
	admin    termivarv1connect.AdminClient
	cluster  termivarv1connect.ClusterClient
}

func (c *Client) workerSvc() termivarv1connect.WorkerClient {
	c.svcOnce[0].Do(func() { c.worker = termivarv1connect.NewWorkerClient(c.hc, c.cfg.ServerURL) })
	return c.worker
}

func (c *Client) producerSvc() termivarv1connect.ProducerClient {
	c.svcOnce[1].Do(func() { c.producer = termivarv1connect.NewProducerClient(c.hc, c.cfg.ServerURL) })
	return c.producer
}

func (c *Client) adminSvc() termivarv1connect.AdminClient {
	c.svcOnce[2].Do(func() { c.admin = termivarv1connect.NewAdminClient(c.hc, c.cfg.ServerURL) })
	return c.admin
}

func (c *Client) clusterSvc() termivarv1connect.ClusterClient {
	c.svcOnce[3].Do(func() { c.cluster = termivarv1connect.NewClusterClient(c.hc, c.cfg.ServerURL) })
	return c.cluster
}

// NewTransport returns the keep-alive HTTP/1.1 transport New uses by
// default: conns idle connections per host, speaking TLS with conf to
// https URLs (nil: the defaults).
//
// NB: HTTP/1.1: a long-polling Acquire holds its own connection, and a
// refused client certificate surfaces as the connection's error instead
// of HTTP/2's "client conn could not be established".
func NewTransport(conf *tls.Config, conns int) *http.Transport {
	return &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		TLSClientConfig:     conf,
		ReadBufferSize:      TransportBufferBytes,
		WriteBufferSize:     TransportBufferBytes,
	}
}

// TransportBufferBytes is the size of NewTransport's read and write
// buffer on each connection (net/http's default is 4 KiB each). A
// process holding a connection per long-polling worker keeps both
// buffers per connection; calls are small, and bodies larger than a
// buffer are read and written past it, so 1 KiB costs no extra system
// call there (issue 15: 1 024 workers, ≈ 6 KB less per idle connection,
// docs/benchmarks.md).
const TransportBufferBytes = 1 << 10

// ErrNoKey is returned by New when Config.Key is empty.
var ErrNoKey = errors.New("client: no API key (use --key, TERMIVAR_KEY or the node's admin.key)")

// New returns a Client for cfg. It does not contact the server.
func New(cfg Config) (*Client, error) {
	cfg.ServerURL = cmp.Or(cfg.ServerURL, DefaultServerURL)
	urls, err := parseServerURLs(cfg.ServerURL)
	if err != nil {
		return nil, err
	}
	cfg.ServerURL = urls[0].String()
	rtr := &router{urls: urls}
	cfg.Key = strings.TrimSpace(cfg.Key)
	if cfg.Key == "" {
		return nil, ErrNoKey
	}
	cfg.MaxAttempts = cmp.Or(max(cfg.MaxAttempts, 0), 4)
	cfg.AttemptTimeout = cmp.Or(cfg.AttemptTimeout, DefaultAttemptTimeout)
	cfg.CompleteManyCallBytes = cmp.Or(cfg.CompleteManyCallBytes, DefaultCompleteManyCallBytes)
	cfg.MinBackoff = cmp.Or(max(cfg.MinBackoff, 0), 100*time.Millisecond)
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(2*time.Second, cfg.MinBackoff)
	}
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	base := cfg.HTTPClient
	if base == nil {
		// NB: not cmp.Or, which would build (and leak) a transport even
		// when the caller brings its own client.
		base = &http.Client{Transport: NewTransport(nil, 256)}
	}
	rt := cmp.Or(base.Transport, http.DefaultTransport)
	hc := *base
	auth := "Bearer " + cfg.Key
	hc.Transport = &bearer{auth: auth, next: rt, router: rtr}
	c := &Client{cfg: cfg, router: rtr, hc: &hc, log: log, auth: auth}
	if cfg.EnqueueCallsInFlight >= 0 {
		def := DefaultEnqueueCallsInFlight
		if cfg.ProducerSession {
			def = DefaultSessionEnqueueCallsInFlight
		}
		c.enq = &coalescer{c: c, max: cmp.Or(cfg.EnqueueCallsInFlight, def)}
	}
	c.sess = newSessions(c, cfg.HTTPClient, cfg.WorkerSession, false)
	c.psess = newSessions(c, cfg.HTTPClient, cfg.ProducerSession, true)
	return c, nil
}

// Close closes the client's sessions and idle connections. The client
// stays usable.
func (c *Client) Close() {
	for _, s := range []*sessions{c.sess, c.psess} {
		if s != nil {
			s.close()
		}
	}
	c.hc.CloseIdleConnections()
}

// ServerURL returns the (first) base URL the client talks to.
func (c *Client) ServerURL() string { return c.cfg.ServerURL }

// bearer adds the API key to every request and sends it to the router's
// target.
type bearer struct {
	auth   string // "Bearer " + the key
	next   http.RoundTripper
	router *router
}

// RoundTrip sends r as it is when invoke already set the key and the
// target is the first URL (issue 15: the per-call path; a copy of the
// request and its header cost more than the rest of ours); otherwise it
// sends a copy with the key and the target.
func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	var t *url.URL
	if b.router != nil {
		var ok bool
		if t, ok = r.Context().Value(targetKey{}).(*url.URL); !ok {
			t = b.router.target() // streams: no per-try target
		}
	}
	if r.Header.Get("Authorization") == b.auth && (t == nil || t == b.router.urls[0]) {
		return b.next.RoundTrip(r)
	}
	r2 := r.Clone(r.Context())
	r2.Header.Set("Authorization", b.auth)
	if t != nil {
		b.router.rewrite(r2, t)
	}
	return b.next.RoundTrip(r2)
}

// CloseIdleConnections forwards to the wrapped transport.
func (b *bearer) CloseIdleConnections() {
	if c, ok := b.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// replaySafe lists the RPCs that may be sent again after a try that got no
// answer (it may have been applied): a replay changes nothing the first
// try did not (doc.go has the table and the reasons) — unless the request
// names an expected revision (expectsRevision). Every other RPC,
// including any added later and not listed here, has no attempt deadline
// and is retried only on an Unavailable answer that says it was not
// handled.
var replaySafe = map[string]bool{
	"Worker.Heartbeat":       true,
	"Worker.Acquire":         true,
	"Worker.Start":           true,
	"Worker.RenewLease":      true,
	"Worker.Complete":        true,
	"Worker.CompleteMany":    true,
	"Worker.Fail":            true,
	"Worker.Deregister":      true,
	"Producer.Enqueue":       true,
	"Producer.EnqueueMany":   true,
	"Producer.Cancel":        true,
	"Producer.GetTask":       true,
	"Producer.ListTasks":     true,
	"Producer.ScanProgress":  true,
	"Producer.Retry":         true,
	"Admin.Status":           true,
	"Admin.ListWorkers":      true,
	"Admin.ListKeys":         true,
	"Cluster.Members":        true,
	"Producer.ListScans":     true,
	"Producer.FollowResults": true,
}

// changesNothing reports whether req changes nothing whatever its RPC's
// other requests do, so a replay is safe: a credential_only Join only
// hands out the cluster secret (doc.go's table).
func changesNothing(req any) bool {
	j, ok := req.(*pb.JoinRequest)
	return ok && j.GetCredentialOnly()
}

// expectsRevision reports whether m, or an element of one of its lists
// (CompleteMany items, an Acquire's complete items), names an expected
// revision: a compare-and-set, which a replay after a first try that was
// applied fails with revision_conflict instead of the replay's answer
// (contract A.6: a replay still has to name the current revision). Such a
// call is not safe to replay.
func expectsRevision(m protoreflect.Message) bool {
	fields := m.Descriptor().Fields()
	if fd := fields.ByName(expectedRevisionField); fd != nil && m.Has(fd) {
		return true
	}
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !fd.IsList() || fd.Message() == nil || !m.Has(fd) {
			continue
		}
		efd := fd.Message().Fields().ByName(expectedRevisionField)
		if efd == nil {
			continue // NB: the elements cannot name one: not walked
		}
		l := m.Get(fd).List()
		for j := range l.Len() {
			if l.Get(j).Message().Has(efd) {
				return true
			}
		}
	}
	return false
}

// expectedRevisionField is the request field of a compare-and-set.
const expectedRevisionField protoreflect.Name = "expected_revision"

// retryable reports whether a failed call may be tried again: Unavailable
// (not handled; see outcomeUnknown), or an attempt deadline that passed on
// a call that is safe to replay.
func retryable(err error, safe, timedOut bool) bool {
	if timedOut {
		return safe
	}
	if connect.CodeOf(err) != connect.CodeUnavailable || tlsRefused(err) {
		return false
	}
	return safe || !outcomeUnknown(err)
}

// tlsRefused reports whether a try failed in a TLS handshake on the
// certificates (the node's is not trusted or names another host, or the
// node refused ours with an alert): the same certificates fail the same way
// on every try, so such an error is returned at once instead of being
// retried for the whole budget. NB: a node that requires a client
// certificate the client did not send often breaks the connection instead
// (TLS 1.3), which is retried like any broken connection.
func tlsRefused(err error) bool {
	var verify *tls.CertificateVerificationError
	var authority x509.UnknownAuthorityError
	var host x509.HostnameError
	var op *net.OpError
	return errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &host) ||
		(errors.As(err, &op) && op.Op == "remote error")
}

// outcomeUnknown reports whether a try's failure leaves its outcome
// unknown (OutcomeHeader): a node answered so (a forward the leader never
// answered, a leader that lost leadership with the entry appended), the
// connection broke under it, or it ran out of its attempt deadline.
func outcomeUnknown(err error) bool {
	var ce *connect.Error
	return errors.As(err, &ce) && ce.Meta().Get(OutcomeHeader) == OutcomeUnknown
}

// MayHaveApplied reports whether err, an error of a Client method, leaves
// the call's outcome unknown: its last try may have been applied (a node
// said so, the connection broke under it, or it got no answer in time),
// so the call must not be taken as one that changed nothing. A caller for
// which sending the call again is harmless may do so.
func MayHaveApplied(err error) bool { return outcomeUnknown(err) }

// call runs one unary RPC with retries (invoke without a long-poll wait).
func call[Req, Resp any](ctx context.Context, c *Client, op string, req *Req, rpc func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error)) (*Resp, error) {
	return invoke(ctx, c, op, 0, req, rpc)
}

// invoke runs one unary RPC with retries. Each try goes to the router's
// target of the moment; a try of an op that replaySafe lists gets its own
// deadline, Config.AttemptTimeout plus wait (the server-side long-poll)
// plus the request's upload time at attemptBytesPerSecond, and a try that
// runs out of it moves the router on and is re-issued at
// once (it has waited already). Other failures back off before the next
// try (Backoff).
func invoke[Req, Resp any](ctx context.Context, c *Client, op string, wait time.Duration, req *Req, rpc func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error)) (*Resp, error) {
	safe := replaySafe[op] || changesNothing(req)
	if m, ok := any(req).(proto.Message); ok && safe {
		safe = !expectsRevision(m.ProtoReflect())
		wait += time.Duration(proto.Size(m)) * time.Second / attemptBytesPerSecond
	}
	var lastErr error
	budget := c.newRetryBudget()
	for attempt := 1; ; attempt++ {
		target := c.router.target()
		actx, cancel := c.attemptContext(ctx, target, safe, wait)
		creq := connect.NewRequest(req)
		creq.Header().Set("Authorization", c.auth)
		resp, err := rpc(actx, creq)
		timedOut := attemptExpired(ctx, actx, err)
		cancel()
		if err == nil {
			c.router.answered(target)
			return resp.Msg, nil
		}
		if timedOut {
			ce := connect.NewError(connect.CodeUnavailable, fmt.Errorf("no answer from %s within the attempt timeout: %w", target.Host, err))
			ce.Meta().Set(OutcomeHeader, OutcomeUnknown)
			err = ce
		} else if connectionLost(ctx, err) {
			err = lostConnection(target.Host, err)
		}
		if !timedOut && connect.CodeOf(err) != connect.CodeUnavailable {
			c.router.answered(target)
		}
		lastErr = err
		c.router.observe(target, err, timedOut)
		if !retryable(err, safe, timedOut) || budget.spent(attempt) || ctx.Err() != nil {
			break
		}
		if timedOut {
			c.log.Debug("re-issuing request on the next node", slog.String("op", op), slog.Int("attempt", attempt), slog.String("unanswered", target.Host))
			continue
		}
		d := budget.backoff(attempt)
		c.log.Debug("retrying request", slog.String("op", op), slog.Int("attempt", attempt), slog.String("node", target.Host), slog.Duration("backoff", d), slog.String("error", connectMessage(err)))
		if err := Sleep(ctx, d); err != nil {
			break
		}
	}
	return nil, wrapErr(op, lastErr)
}

// retryBudget is what one call may still spend on retries: tries
// (Config.MaxAttempts) or time (Config.RetryTimeout, when positive).
type retryBudget struct {
	c        *Client
	deadline time.Time // zero: counted in tries
}

// newRetryBudget starts the budget of a call whose first try begins now.
func (c *Client) newRetryBudget() retryBudget {
	if c.cfg.RetryTimeout <= 0 {
		return retryBudget{c: c}
	}
	return retryBudget{c: c, deadline: time.Now().Add(c.cfg.RetryTimeout)}
}

// spent reports whether no try may follow try number attempt.
func (b retryBudget) spent(attempt int) bool {
	if b.deadline.IsZero() {
		return attempt >= b.c.cfg.MaxAttempts
	}
	return !time.Now().Before(b.deadline)
}

// backoff returns the wait before try attempt+1: Backoff, cut to the time
// left.
func (b retryBudget) backoff(attempt int) time.Duration {
	d := Backoff(attempt, b.c.cfg.MinBackoff, b.c.cfg.MaxBackoff)
	if !b.deadline.IsZero() {
		d = max(min(d, time.Until(b.deadline)), 0)
	}
	return d
}

// connectionLost reports whether a try failed because the connection broke
// under it while the caller still waits: connect reports a reset read as
// Canceled (the same code as the caller's own cancellation), a request
// body whose write the reset cut off as Unavailable ("use of closed
// network connection"), a connection closed before the answer as
// Unavailable (EOF), and an answer cut off after its status and headers
// as Unknown ("read message: unexpected EOF": a node that died, or a
// proxy that broke off, mid-answer — for a Connect unary call the status
// had already said whether the call succeeded). Either way the node may
// have read the whole request and applied it.
func connectionLost(ctx context.Context, err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeCanceled, connect.CodeUnavailable, connect.CodeUnknown:
	default:
		return false
	}
	return ctx.Err() == nil && brokenConnection(err)
}

// brokenConnection reports whether err is a transport failure of a
// connection that carried the request: reset, closed, or ended before the
// answer did.
func brokenConnection(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// lostConnection turns a broken connection into Unavailable with
// OutcomeUnknown: the node may have applied the request before it went
// away, so only calls that are safe to replay are tried again.
func lostConnection(host string, err error) error {
	ce := connect.NewError(connect.CodeUnavailable, fmt.Errorf("connection to %s lost: %w", host, err))
	ce.Meta().Set(OutcomeHeader, OutcomeUnknown)
	return ce
}

// attemptBytesPerSecond is the slowest upload an attempt deadline allows
// for: a try gets one more second per MiB of request (a 48 MiB
// CompleteMany, 48 s), so a large batch on a slow link is not cut off and
// re-sent over and over.
const attemptBytesPerSecond = 1 << 20

// attemptExpired reports whether a try failed because its own deadline
// passed (not the caller's context, not an answer from a server), or the
// node answered deadline_exceeded at that deadline: the node's deadline
// is the try's (connect sends it in whole milliseconds, rounded down), so
// its answer can come before the try's own timer has fired — a timer
// late under load failed a whole bench run with deadline_exceeded
// (TestAttemptExpired_NodeDeadlineBeforeOwnTimer).
func attemptExpired(ctx, actx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	code := connect.CodeOf(err)
	if errors.Is(actx.Err(), context.DeadlineExceeded) {
		return code == connect.CodeDeadlineExceeded || code == connect.CodeUnavailable || code == connect.CodeCanceled
	}
	return code == connect.CodeDeadlineExceeded && ownDeadlinePassed(ctx, actx)
}

// ownDeadlinePassed reports whether the try's deadline — its own, not
// the caller's — is at most a millisecond away (the node's may be that
// much earlier).
func ownDeadlinePassed(ctx, actx context.Context) bool {
	d, ok := actx.Deadline()
	if !ok {
		return false
	}
	if cd, ok := ctx.Deadline(); ok && !cd.After(d) {
		return false // the caller's deadline: the call ends
	}
	return time.Until(d) < time.Millisecond
}

// attemptContext is the context of one try: it carries the try's target
// (bearer.RoundTrip sends the request there) and, for a call that is safe
// to replay, the try's deadline.
func (c *Client) attemptContext(ctx context.Context, target *url.URL, safe bool, wait time.Duration) (context.Context, context.CancelFunc) {
	ctx = context.WithValue(ctx, targetKey{}, target)
	if !safe || c.cfg.AttemptTimeout < 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.cfg.AttemptTimeout+wait)
}

// Backoff returns the jittered delay before try attempt+1: uniformly in
// [d/2, d] where d = min·2^(attempt−1) capped at max.
func Backoff(attempt int, minD, maxD time.Duration) time.Duration {
	d := minD
	for i := 1; i < attempt && d < maxD; i++ {
		d *= 2
	}
	d = min(d, maxD)
	half := d / 2
	if half <= 0 {
		return d
	}
	return half + rand.N(half+1)
}

// Sleep waits for d or until ctx ends, returning ctx.Err() in that case.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// LoadKey reads an API key file (such as the node's admin.key) and returns
// the key with surrounding whitespace removed.
func LoadKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	k := strings.TrimSpace(string(b))
	if k == "" {
		return "", ErrNoKey
	}
	return k, nil
}

// Worker service.

// RegisterWorker registers a new worker or, with ReactivateGeneration set,
// reactivates an offline one.
func (c *Client) RegisterWorker(ctx context.Context, req *pb.RegisterWorkerRequest) (*pb.RegisterWorkerResponse, error) {
	return call(ctx, c, "Worker.RegisterWorker", req, c.workerSvc().RegisterWorker)
}

// Heartbeat reports the worker's status and utilization.
func (c *Client) Heartbeat(ctx context.Context, req *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	return call(ctx, c, "Worker.Heartbeat", req, c.workerSvc().Heartbeat)
}

// Acquire leases up to req.MaxTasks tasks, long-polling up to req.WaitSecs.
// With req.Complete it first completes those leases, each alone as
// CompleteMany does: the response's Completed answers them by position
// (ItemError gives an item's error), durable once answered. A worker that
// completes one task at a time thus needs one call per task instead of
// two.
//
// NB: a retried Acquire whose first reply was lost leaves those leases to
// expire; the server recovers them by the retry rule.
//
// A try that gets no answer within req.WaitSecs plus Config.AttemptTimeout
// is re-issued on the next node.
//
// Completions larger than Config.CompleteManyCallBytes are cut as
// CompleteMany cuts a request (complete.go): every part but the last is
// sent as a CompleteMany call first, in order, and the last rides with the
// Acquire; Completed answers every item in order, as one call does. If a
// call fails, Acquire returns its error; the earlier parts' items were
// completed (a replay answers them already_completed).
func (c *Client) Acquire(ctx context.Context, req *pb.AcquireRequest) (*pb.AcquireResponse, error) {
	return c.AcquireNotify(ctx, req, nil)
}

// AcquireNotify is Acquire; completed, when not nil, is called with the
// answers to req.Complete as soon as a worker session reports them
// durable — before the leases of an Acquire that long-polls, so a worker
// can carry its completions on a waiting Acquire instead of a call of
// their own (docs/node.md, "Worker sessions"). It is called on a
// goroutine of its own (not the session's reader: it may take its time
// and may call the Client), before AcquireNotify returns, and again on a
// retry (the replay answers already_completed). The response carries the
// answers in every case; without a session, when the Acquire does not
// wait, or when its completions are split over several calls
// (Config.CompleteManyCallBytes), completed is not called.
func (c *Client) AcquireNotify(ctx context.Context, req *pb.AcquireRequest, completed func([]*pb.CompleteItemResult)) (*pb.AcquireResponse, error) {
	wait := time.Duration(req.GetWaitSecs()) * time.Second
	parts := splitCompleteMany(&pb.CompleteManyRequest{Items: req.GetComplete()}, c.cfg.CompleteManyCallBytes)
	if len(parts) == 1 {
		return invoke(ctx, c, "Worker.Acquire", wait, req, c.acquireRPC(completed))
	}
	done, err := c.completeParts(ctx, parts[:len(parts)-1], len(req.GetComplete()))
	if err != nil {
		return nil, err
	}
	last := acquireCompleting(req, parts[len(parts)-1].GetItems())
	res, err := invoke(ctx, c, "Worker.Acquire", wait, last, c.acquireRPC(nil))
	if err != nil {
		return nil, err
	}
	if got, want := len(res.GetCompleted()), len(last.GetComplete()); got != want {
		return nil, fmt.Errorf("client: Worker.Acquire answered %d completions for %d", got, want)
	}
	res.Completed = append(done, res.GetCompleted()...)
	return res, nil
}

// Start marks a leased task running.
func (c *Client) Start(ctx context.Context, req *pb.StartRequest) (*pb.StartResponse, error) {
	return call(ctx, c, "Worker.Start", req, c.workerSvc().Start)
}

// RenewLease extends a lease; the response carries the new lease token.
func (c *Client) RenewLease(ctx context.Context, req *pb.RenewLeaseRequest) (*pb.RenewLeaseResponse, error) {
	return call(ctx, c, "Worker.RenewLease", req, c.workerSvc().RenewLease)
}

// Complete completes a task and stores its result. A retry after a lost
// reply answers AlreadyCompleted.
func (c *Client) Complete(ctx context.Context, req *pb.CompleteRequest) (*pb.CompleteResponse, error) {
	return call(ctx, c, "Worker.Complete", req, c.completeRPC())
}

// Fail fails the current attempt of a task (the server retries it or fails
// it for good by the retry rule).
func (c *Client) Fail(ctx context.Context, req *pb.FailRequest) (*pb.FailResponse, error) {
	return call(ctx, c, "Worker.Fail", req, c.workerSvc().Fail)
}

// Deregister takes the worker offline and recovers its leases.
func (c *Client) Deregister(ctx context.Context, req *pb.DeregisterRequest) (*pb.DeregisterResponse, error) {
	return call(ctx, c, "Worker.Deregister", req, c.workerSvc().Deregister)
}

// Producer service.

// Enqueue admits every task of the batch or none.
//
// Concurrent callers share calls (Config.EnqueueCallsInFlight): a request
// of at most 64 KiB that arrives while the client has that many Enqueue
// calls in flight waits for the next one and goes with the others that
// arrived meanwhile. Each request stays all-or-nothing and independent:
// its outcome, error included, is the one its own call would have had.
// A caller whose context ends returns at once; its request may still be
// admitted with the call it joined, as a single call's may.
//
// NB: a retried Enqueue whose first reply was lost fails with
// task_already_exists; EnqueueTargets handles that case.
func (c *Client) Enqueue(ctx context.Context, req *pb.EnqueueRequest) (*pb.EnqueueResponse, error) {
	if c.enq != nil {
		if n, ok := coalescable(req); ok && !c.enq.single.Load() {
			return c.enq.enqueue(ctx, req, n)
		}
	}
	return c.enqueueOne(ctx, req)
}

// enqueueOne is one Producer.Enqueue call.
func (c *Client) enqueueOne(ctx context.Context, req *pb.EnqueueRequest) (*pb.EnqueueResponse, error) {
	return call(ctx, c, opEnqueue, req, c.producerSvc().Enqueue)
}

// Cancel cancels a task: by its fence token (queued) or lease token
// (leased or running), or by TaskId alone — then the node cancels a queued,
// leased or running task with the ownership it holds when the command is
// applied, so no token is needed. A task cancelled before answers
// AlreadyCancelled (so a retry after a lost reply is harmless); any other
// terminal task fails with invalid_transition
// (errors.Is(err, distributed.ErrInvalidTransition)).
func (c *Client) Cancel(ctx context.Context, req *pb.CancelRequest) (*pb.CancelResponse, error) {
	return call(ctx, c, "Producer.Cancel", req, c.producerSvc().Cancel)
}

// GetTask returns one task.
func (c *Client) GetTask(ctx context.Context, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	return call(ctx, c, "Producer.GetTask", req, c.producerSvc().GetTask)
}

// ListTasks returns one page of tasks.
func (c *Client) ListTasks(ctx context.Context, req *pb.ListTasksRequest) (*pb.ListTasksResponse, error) {
	return call(ctx, c, "Producer.ListTasks", req, c.producerSvc().ListTasks)
}

// ScanProgress returns a scan's counts per status.
func (c *Client) ScanProgress(ctx context.Context, req *pb.ScanProgressRequest) (*pb.ScanProgressResponse, error) {
	return call(ctx, c, "Producer.ScanProgress", req, c.producerSvc().ScanProgress)
}

// DeleteScan purges every task of a scan and their results (contract Part
// F, docs/adr/0002-purge.md). A scan with a queued, leased or running task
// fails with invalid_transition (errors.Is(err,
// distributed.ErrInvalidTransition)) unless Force, which cancels those
// first; a scan without tasks (never enqueued, or deleted before: a retry
// after a lost reply) fails with scan_not_found. Lease tokens of the
// purged tasks fail with task_purged from then on.
func (c *Client) DeleteScan(ctx context.Context, req *pb.DeleteScanRequest) (*pb.DeleteScanResponse, error) {
	return call(ctx, c, "Producer.DeleteScan", req, c.producerSvc().DeleteScan)
}

// PurgeTasks purges the named terminal tasks and their results; an unknown
// (task_not_found) or non-terminal (invalid_transition) one refuses the
// whole request and nothing is purged.
func (c *Client) PurgeTasks(ctx context.Context, req *pb.PurgeTasksRequest) (*pb.PurgeTasksResponse, error) {
	return call(ctx, c, "Producer.PurgeTasks", req, c.producerSvc().PurgeTasks)
}

// Admin service.

// Status returns the node's and the caller's tenant's status.
func (c *Client) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	return call(ctx, c, "Admin.Status", req, c.adminSvc().Status)
}

// ListWorkers returns every worker of the caller's tenant.
func (c *Client) ListWorkers(ctx context.Context, req *pb.ListWorkersRequest) (*pb.ListWorkersResponse, error) {
	return call(ctx, c, "Admin.ListWorkers", req, c.adminSvc().ListWorkers)
}

// CreateTenant creates a tenant (system tenant admin keys only).
func (c *Client) CreateTenant(ctx context.Context, req *pb.CreateTenantRequest) (*pb.CreateTenantResponse, error) {
	return call(ctx, c, "Admin.CreateTenant", req, c.adminSvc().CreateTenant)
}

// UpdateTenant changes a tenant's result retention (its own tenant's for a
// tenant admin key; any tenant's for a system admin key).
func (c *Client) UpdateTenant(ctx context.Context, req *pb.UpdateTenantRequest) (*pb.UpdateTenantResponse, error) {
	return call(ctx, c, "Admin.UpdateTenant", req, c.adminSvc().UpdateTenant)
}

// CreateKey creates an API key; the response shows the key once.
func (c *Client) CreateKey(ctx context.Context, req *pb.CreateKeyRequest) (*pb.CreateKeyResponse, error) {
	return call(ctx, c, "Admin.CreateKey", req, c.adminSvc().CreateKey)
}

// ListKeys lists API keys (IDs, tenants, roles, times; never secrets).
func (c *Client) ListKeys(ctx context.Context, req *pb.ListKeysRequest) (*pb.ListKeysResponse, error) {
	return call(ctx, c, "Admin.ListKeys", req, c.adminSvc().ListKeys)
}

// RevokeKey revokes an API key. Not re-sent after an unknown outcome: a
// replay of an applied revocation fails (the key is revoked already).
func (c *Client) RevokeKey(ctx context.Context, req *pb.RevokeKeyRequest) (*pb.RevokeKeyResponse, error) {
	return call(ctx, c, "Admin.RevokeKey", req, c.adminSvc().RevokeKey)
}

// RotateKey replaces an API key by a new one of the same tenant and role;
// the response shows the new key once. Not re-sent after an unknown
// outcome: a replay would fail on the revoked old key.
func (c *Client) RotateKey(ctx context.Context, req *pb.RotateKeyRequest) (*pb.RotateKeyResponse, error) {
	return call(ctx, c, "Admin.RotateKey", req, c.adminSvc().RotateKey)
}
