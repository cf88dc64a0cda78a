package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/termivar/distributed/client"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
	"github.com/termivar/distributed/internal/wireerr"
	"github.com/termivar/distributed/node"
)

// clientFlags are the global flags of the keys, tenants and bench
// commands (the registered commands use globalFlags, cli.go).
type clientFlags struct {
	server       string
	key          string
	insecure     bool
	tls          tlsFlags
	retryTimeout time.Duration
	envErr       error // an unreadable $TERMIVAR_RETRY_TIMEOUT
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	def := cmp.Or(os.Getenv("TERMIVAR_SERVER"), "http://127.0.0.1:7420")
	fs.StringVar(&c.server, "server", def, "server URL (env TERMIVAR_SERVER)")
	fs.StringVar(&c.key, "key", os.Getenv("TERMIVAR_KEY"), "API key (env TERMIVAR_KEY; default: ./termivar-data/admin.key)")
	fs.BoolVar(&c.insecure, "insecure", false, "skip TLS certificate verification")
	c.tls.register(fs, tlsFromEnv())
	var env retryFlag
	c.envErr = env.fromEnv()
	registerRetryTimeout(fs, &c.retryTimeout, env)
}

// Retry budget of a CLI call (issue: ride out a leader election).
const (
	// envRetryTimeout names the environment variable of --retry-timeout.
	envRetryTimeout = "TERMIVAR_RETRY_TIMEOUT"
	// defaultRetryTimeout is --retry-timeout's default: a new leader exists
	// 1–2.5 s after the old one stopped at the default raft timeout
	// (docs/node.md, "Paused nodes"), so 10 s rides out an election with
	// a failed round or two, where the 4 tries of client.Config's default
	// (about 1 s of backoff) did not (etcdctl's --command-timeout is 5 s).
	defaultRetryTimeout = 10 * time.Second
	// cliMaxBackoff caps the CLI's backoff between tries, so that a call
	// finds a new leader within a second of its election.
	cliMaxBackoff = time.Second
)

// retryFlag is a --retry-timeout value given outside a flag set (before
// the command name, or in the environment).
type retryFlag struct {
	d   time.Duration
	set bool
}

// Set parses a --retry-timeout value: a Go duration, not negative.
func (r *retryFlag) Set(val string) error {
	d, err := time.ParseDuration(val)
	if err == nil && d < 0 {
		err = errors.New("must not be negative")
	}
	if err != nil {
		return err
	}
	r.d, r.set = d, true
	return nil
}

// fromEnv sets r from $TERMIVAR_RETRY_TIMEOUT, if set.
func (r *retryFlag) fromEnv() error {
	v, ok := os.LookupEnv(envRetryTimeout)
	if !ok {
		return nil
	}
	if err := r.Set(v); err != nil {
		return fmt.Errorf("%s: %w", envRetryTimeout, err)
	}
	return nil
}

// registerRetryTimeout binds --retry-timeout to d, with def's value as the
// default when set.
func registerRetryTimeout(fs *flag.FlagSet, d *time.Duration, def retryFlag) {
	v := defaultRetryTimeout
	if def.set {
		v = def.d
	}
	fs.DurationVar(d, "retry-timeout", v, "retry a failed call (no leader, node unreachable) for this long, with backoff; 0: one try (env "+envRetryTimeout+"). A call that may have been applied is re-sent only if that is harmless")
}

// withRetryTimeout returns cfg retrying for d (one try when 0).
func withRetryTimeout(cfg client.Config, d time.Duration) (client.Config, error) {
	switch {
	case d < 0:
		return cfg, errors.New("--retry-timeout must not be negative")
	case d == 0:
		cfg.MaxAttempts = 1
	default:
		cfg.RetryTimeout, cfg.MaxBackoff = d, cliMaxBackoff
	}
	return cfg, nil
}

// callTimeout bounds one keys or tenants command: its retry budget plus
// time for a last try (a try of a call that is not safe to replay has no
// deadline of its own), and never less than the 30 s it always had.
func callTimeout(retry time.Duration) time.Duration {
	return max(30*time.Second, retry+15*time.Second)
}

// httpClient returns a keep-alive client (conns idle connections per host)
// with the TLS options and --insecure applied.
func (c *clientFlags) httpClient(conns int) (*http.Client, error) {
	conf, err := c.tls.config()
	if err != nil {
		return nil, err
	}
	conf = cmp.Or(conf, &tls.Config{MinVersion: tls.VersionTLS12})
	conf.InsecureSkipVerify = c.insecure //nolint:gosec // opt-in flag
	return &http.Client{Transport: hinted(client.NewTransport(conf, conns), conf)}, nil
}

func (c *clientFlags) apiKey() (string, error) {
	if c.key != "" {
		return c.key, nil
	}
	b, err := os.ReadFile(filepath.Join("termivar-data", node.AdminKeyFile))
	if err != nil {
		return "", errors.New("no --key, no TERMIVAR_KEY and no ./termivar-data/admin.key")
	}
	return strings.TrimSpace(string(b)), nil
}

// validRetry reports an unreadable $TERMIVAR_RETRY_TIMEOUT or a negative
// --retry-timeout.
func (c *clientFlags) validRetry() error {
	if c.envErr != nil {
		return c.envErr
	}
	if c.retryTimeout < 0 {
		return errors.New("--retry-timeout must not be negative")
	}
	return nil
}

// callClient returns a client of --server with the key of apiKey,
// retrying for --retry-timeout, and the context of the command's one call
// under parent, bounded by callTimeout; done closes the client and ends
// the context.
func (c *clientFlags) callClient(parent context.Context) (_ *client.Client, ctx context.Context, done func(), err error) {
	if err := c.validRetry(); err != nil {
		return nil, nil, nil, err
	}
	key, err := c.apiKey()
	if err != nil {
		return nil, nil, nil, err
	}
	hc, err := c.httpClient(1)
	if err != nil {
		return nil, nil, nil, err
	}
	cfg, err := withRetryTimeout(client.Config{ServerURL: c.server, Key: key, HTTPClient: hc}, c.retryTimeout)
	if err != nil {
		return nil, nil, nil, err
	}
	cl, err := client.New(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(parent, callTimeout(c.retryTimeout))
	return cl, ctx, func() { cancel(); cl.Close() }, nil
}

type apiClients struct {
	worker   termivarv1connect.WorkerClient
	producer termivarv1connect.ProducerClient
	admin    termivarv1connect.AdminClient
}

type bearerInterceptor struct{ key string }

func (b bearerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+b.key)
		return next(ctx, req)
	}
}

func (b bearerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+b.key)
		return conn
	}
}

func (b bearerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// Environment variables of the client TLS options.
//
// NB: not TERMIVAR_KEY_FILE: next to TERMIVAR_KEY (the API key) that name
// would read as "the file holding the API key".
const (
	envCAFile   = "TERMIVAR_TLS_CA_FILE"
	envCertFile = "TERMIVAR_TLS_CERT_FILE"
	envKeyFile  = "TERMIVAR_TLS_KEY_FILE"
)

// tlsFlags are the TLS options of every client command and of worker:
// the CA that signs the node's certificate and, for a node started with
// --client-ca (mutual TLS), the client certificate and its key.
type tlsFlags struct {
	caFile, certFile, keyFile string
}

// tlsFromEnv returns the TLS options of the environment.
func tlsFromEnv() tlsFlags {
	return tlsFlags{caFile: os.Getenv(envCAFile), certFile: os.Getenv(envCertFile), keyFile: os.Getenv(envKeyFile)}
}

// register binds the TLS flags to t with the defaults def.
func (t *tlsFlags) register(fs *flag.FlagSet, def tlsFlags) {
	fs.StringVar(&t.caFile, "ca-file", def.caFile, "PEM CA certificates that sign the node's TLS certificate (env "+envCAFile+"; default: the system roots)")
	fs.StringVar(&t.certFile, "cert-file", def.certFile, "PEM client certificate for a node with --client-ca (env "+envCertFile+"; needs --key-file)")
	fs.StringVar(&t.keyFile, "key-file", def.keyFile, "PEM private key of --cert-file (env "+envKeyFile+"; not the API key, which is --key)")
}

// set assigns the option called name ("ca-file", "cert-file" or
// "key-file"); it reports whether name is one.
func (t *tlsFlags) set(name, val string) bool {
	switch name {
	case "ca-file":
		t.caFile = val
	case "cert-file":
		t.certFile = val
	case "key-file":
		t.keyFile = val
	default:
		return false
	}
	return true
}

// orEnv fills each empty option from the environment.
func (t tlsFlags) orEnv() tlsFlags {
	e := tlsFromEnv()
	t.caFile = cmp.Or(t.caFile, e.caFile)
	t.certFile = cmp.Or(t.certFile, e.certFile)
	t.keyFile = cmp.Or(t.keyFile, e.keyFile)
	return t
}

// config builds the client TLS configuration, or nil when no option is set
// (the transport's defaults then apply: system roots for https URLs).
func (t tlsFlags) config() (*tls.Config, error) {
	if t == (tlsFlags{}) {
		return nil, nil
	}
	if (t.certFile == "") != (t.keyFile == "") {
		return nil, errors.New("--cert-file and --key-file go together")
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.caFile != "" {
		pem, err := os.ReadFile(t.caFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", t.caFile)
		}
	}
	if t.certFile != "" {
		cert, err := tls.LoadX509KeyPair(t.certFile, t.keyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf, nil
}

// httpClient returns an HTTP client for the TLS options, or nil when none
// is set and serverURL names no https node (client.New then uses its
// default).
func (t tlsFlags) httpClient(serverURL string) (*http.Client, error) {
	conf, err := t.config()
	if err != nil {
		return nil, err
	}
	if conf == nil {
		if !strings.Contains(serverURL, "https://") {
			return nil, nil
		}
		conf = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: hinted(client.NewTransport(conf, 256), conf)}, nil
}

// certHint is added to the connection errors of a client without a
// certificate.
const certHint = " (a node started with --client-ca also needs --cert-file and --key-file)"

// hinted wraps rt so that, when conf has no client certificate, a
// connection that breaks on an https request carries certHint.
//
// NB: under TLS 1.3 a node that requires client certificates rejects the
// missing one after the client finished its handshake, so the client
// mostly sees a broken pipe or a reset, not a certificate error.
func hinted(rt http.RoundTripper, conf *tls.Config) http.RoundTripper {
	if len(conf.Certificates) > 0 {
		return rt
	}
	return hintTransport{next: rt}
}

type hintTransport struct{ next http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (h hintTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := h.next.RoundTrip(r)
	if err != nil && r.URL.Scheme == "https" &&
		(errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || strings.Contains(err.Error(), "certificate required")) {
		return nil, fmt.Errorf("%w%s", err, certHint)
	}
	return res, err
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// wrapped transport.
func (h hintTransport) CloseIdleConnections() {
	if c, ok := h.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func newClients(hc *http.Client, url, key string) apiClients {
	// NB: no gzip: on loopback and LANs compression costs more CPU than the
	// bytes it saves.
	opts := connect.WithClientOptions(connect.WithInterceptors(bearerInterceptor{key}), connect.WithAcceptCompression("gzip", nil, nil))
	return apiClients{
		worker:   termivarv1connect.NewWorkerClient(hc, url, opts),
		producer: termivarv1connect.NewProducerClient(hc, url, opts),
		admin:    termivarv1connect.NewAdminClient(hc, url, opts),
	}
}

// exitFor maps a client error to the CLI exit code and prints it.
func exitFor(cmd string, err error) int { return exitForTo(os.Stderr, cmd, err) }

// exitForTo is exitFor printing to w.
func exitForTo(w io.Writer, cmd string, err error) int {
	if err == nil {
		return exitOK
	}
	code := connect.CodeOf(err)
	if code == connect.CodeUnavailable || code == connect.CodeUnknown || code == connect.CodeDeadlineExceeded {
		if _, ok := errors.AsType[*connect.Error](err); !ok || code == connect.CodeUnavailable {
			fmt.Fprintf(w, "termivar-coord %s: server unreachable: %v\n", cmd, err)
			return exitUnreachable
		}
	}
	kind := ""
	if d, ok := wireerr.DetailOf(err); ok {
		kind = " [" + d.GetKind() + "]"
	}
	fmt.Fprintf(w, "termivar-coord %s: %v%s\n", cmd, err, kind)
	return exitRejected
}
