package client

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"

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
	// MaxAttempts bounds the tries of one call that fails with Unavailable
	// or a connection error (default 4; 1 disables retries).
	MaxAttempts int
	// MinBackoff and MaxBackoff bound the jittered exponential backoff
	// between tries (defaults 100 ms and 2 s).
	MinBackoff, MaxBackoff time.Duration
	// Logger receives retry diagnostics; nil discards them.
	Logger *slog.Logger
}

// Client is a connection to one node. Its methods are safe for concurrent
// use.
type Client struct {
	cfg      Config
	hc       *http.Client
	log      *slog.Logger
	worker   termivarv1connect.WorkerClient
	producer termivarv1connect.ProducerClient
	admin    termivarv1connect.AdminClient
	cluster  termivarv1connect.ClusterClient
	router   *router
}

// ErrNoKey is returned by New when Config.Key is empty.
var ErrNoKey = errors.New("client: no API key (use --key, TERMIVAR_KEY or the node's admin.key)")

// New returns a Client for cfg. It does not contact the server.
func New(cfg Config) (*Client, error) {
	if cfg.ServerURL == "" {
		cfg.ServerURL = DefaultServerURL
	}
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
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 4
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(2*time.Second, cfg.MinBackoff)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base := cfg.HTTPClient
	if base == nil {
		base = &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	rt := base.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	hc := *base
	hc.Transport = &bearer{key: cfg.Key, next: rt, router: rtr}
	return &Client{
		cfg:      cfg,
		router:   rtr,
		hc:       &hc,
		log:      log,
		worker:   termivarv1connect.NewWorkerClient(&hc, cfg.ServerURL),
		producer: termivarv1connect.NewProducerClient(&hc, cfg.ServerURL),
		admin:    termivarv1connect.NewAdminClient(&hc, cfg.ServerURL),
		cluster:  termivarv1connect.NewClusterClient(&hc, cfg.ServerURL),
	}, nil
}

// Close closes the client's idle connections. The client stays usable.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// ServerURL returns the (first) base URL the client talks to.
func (c *Client) ServerURL() string { return c.cfg.ServerURL }

// bearer adds the API key to every request.
type bearer struct {
	key    string
	next   http.RoundTripper
	router *router
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r2 := r.Clone(r.Context())
	r2.Header.Set("Authorization", "Bearer "+b.key)
	if b.router != nil {
		b.router.rewrite(r2)
	}
	return b.next.RoundTrip(r2)
}

// CloseIdleConnections forwards to the wrapped transport.
func (b *bearer) CloseIdleConnections() {
	if c, ok := b.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// retryable reports whether a failed call may be tried again.
func retryable(err error) bool {
	return connect.CodeOf(err) == connect.CodeUnavailable
}

// call runs one unary RPC with retries.
func call[Req, Resp any](ctx context.Context, c *Client, op string, req *Req, rpc func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error)) (*Resp, error) {
	var lastErr error
	for attempt := 1; ; attempt++ {
		resp, err := rpc(ctx, connect.NewRequest(req))
		if err == nil {
			return resp.Msg, nil
		}
		lastErr = err
		c.router.observe(err)
		if !retryable(err) || attempt >= c.cfg.MaxAttempts || ctx.Err() != nil {
			break
		}
		d := Backoff(attempt, c.cfg.MinBackoff, c.cfg.MaxBackoff)
		c.log.Debug("retrying request", slog.String("op", op), slog.Int("attempt", attempt), slog.Duration("backoff", d))
		if err := Sleep(ctx, d); err != nil {
			break
		}
	}
	return nil, wrapErr(op, lastErr)
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
	return call(ctx, c, "Worker.RegisterWorker", req, c.worker.RegisterWorker)
}

// Heartbeat reports the worker's status and utilization.
func (c *Client) Heartbeat(ctx context.Context, req *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	return call(ctx, c, "Worker.Heartbeat", req, c.worker.Heartbeat)
}

// Acquire leases up to req.MaxTasks tasks, long-polling up to req.WaitSecs.
//
// NB: a retried Acquire whose first reply was lost leaves those leases to
// expire; the server recovers them by the retry rule.
func (c *Client) Acquire(ctx context.Context, req *pb.AcquireRequest) (*pb.AcquireResponse, error) {
	return call(ctx, c, "Worker.Acquire", req, c.worker.Acquire)
}

// Start marks a leased task running.
func (c *Client) Start(ctx context.Context, req *pb.StartRequest) (*pb.StartResponse, error) {
	return call(ctx, c, "Worker.Start", req, c.worker.Start)
}

// RenewLease extends a lease; the response carries the new lease token.
func (c *Client) RenewLease(ctx context.Context, req *pb.RenewLeaseRequest) (*pb.RenewLeaseResponse, error) {
	return call(ctx, c, "Worker.RenewLease", req, c.worker.RenewLease)
}

// Complete completes a task and stores its result. A retry after a lost
// reply answers AlreadyCompleted.
func (c *Client) Complete(ctx context.Context, req *pb.CompleteRequest) (*pb.CompleteResponse, error) {
	return call(ctx, c, "Worker.Complete", req, c.worker.Complete)
}

// CompleteMany completes several tasks; each item succeeds or fails alone.
func (c *Client) CompleteMany(ctx context.Context, req *pb.CompleteManyRequest) (*pb.CompleteManyResponse, error) {
	return call(ctx, c, "Worker.CompleteMany", req, c.worker.CompleteMany)
}

// Fail fails the current attempt of a task (the server retries it or fails
// it for good by the retry rule).
func (c *Client) Fail(ctx context.Context, req *pb.FailRequest) (*pb.FailResponse, error) {
	return call(ctx, c, "Worker.Fail", req, c.worker.Fail)
}

// Deregister takes the worker offline and recovers its leases.
func (c *Client) Deregister(ctx context.Context, req *pb.DeregisterRequest) (*pb.DeregisterResponse, error) {
	return call(ctx, c, "Worker.Deregister", req, c.worker.Deregister)
}

// Producer service.

// Enqueue admits every task of the batch or none.
//
// NB: a retried Enqueue whose first reply was lost fails with
// task_already_exists; EnqueueTargets handles that case.
func (c *Client) Enqueue(ctx context.Context, req *pb.EnqueueRequest) (*pb.EnqueueResponse, error) {
	return call(ctx, c, "Producer.Enqueue", req, c.producer.Enqueue)
}

// Cancel cancels a task given its fence token (queued) or lease token.
func (c *Client) Cancel(ctx context.Context, req *pb.CancelRequest) (*pb.CancelResponse, error) {
	return call(ctx, c, "Producer.Cancel", req, c.producer.Cancel)
}

// CancelTask cancels a queued, leased or running task by ID: the node
// cancels it with the ownership it holds when the command is applied, so no
// token is needed. A task cancelled before answers AlreadyCancelled (so a
// retry after a lost reply is harmless); any other terminal task fails with
// invalid_transition (errors.Is(err, distributed.ErrInvalidTransition)).
func (c *Client) CancelTask(ctx context.Context, taskID string) (*pb.CancelResponse, error) {
	return call(ctx, c, "Producer.Cancel", &pb.CancelRequest{TaskId: taskID}, c.producer.Cancel)
}

// GetTask returns one task.
func (c *Client) GetTask(ctx context.Context, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	return call(ctx, c, "Producer.GetTask", req, c.producer.GetTask)
}

// ListTasks returns one page of tasks.
func (c *Client) ListTasks(ctx context.Context, req *pb.ListTasksRequest) (*pb.ListTasksResponse, error) {
	return call(ctx, c, "Producer.ListTasks", req, c.producer.ListTasks)
}

// ScanProgress returns a scan's counts per status.
func (c *Client) ScanProgress(ctx context.Context, req *pb.ScanProgressRequest) (*pb.ScanProgressResponse, error) {
	return call(ctx, c, "Producer.ScanProgress", req, c.producer.ScanProgress)
}

// Admin service.

// Status returns the node's and the caller's tenant's status.
func (c *Client) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	return call(ctx, c, "Admin.Status", req, c.admin.Status)
}

// ListWorkers returns every worker of the caller's tenant.
func (c *Client) ListWorkers(ctx context.Context, req *pb.ListWorkersRequest) (*pb.ListWorkersResponse, error) {
	return call(ctx, c, "Admin.ListWorkers", req, c.admin.ListWorkers)
}

// CreateTenant creates a tenant (system tenant admin keys only).
func (c *Client) CreateTenant(ctx context.Context, req *pb.CreateTenantRequest) (*pb.CreateTenantResponse, error) {
	return call(ctx, c, "Admin.CreateTenant", req, c.admin.CreateTenant)
}

// CreateKey creates an API key; the response shows the key once.
func (c *Client) CreateKey(ctx context.Context, req *pb.CreateKeyRequest) (*pb.CreateKeyResponse, error) {
	return call(ctx, c, "Admin.CreateKey", req, c.admin.CreateKey)
}
