package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/server"
)

// clientFlags are the global flags of every client command.
type clientFlags struct {
	server   string
	key      string
	insecure bool
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	def := os.Getenv("TERMIVAR_SERVER")
	if def == "" {
		def = "http://127.0.0.1:7420"
	}
	fs.StringVar(&c.server, "server", def, "server URL (env TERMIVAR_SERVER)")
	fs.StringVar(&c.key, "key", os.Getenv("TERMIVAR_KEY"), "API key (env TERMIVAR_KEY; default: ./termivar-data/admin.key)")
	fs.BoolVar(&c.insecure, "insecure", false, "skip TLS certificate verification")
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

// newHTTPClient returns a keep-alive HTTP/1.1 client with many idle
// connections per host (one per concurrent caller).
func newHTTPClient(insecure bool, conns int) *http.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: insecure}, //nolint:gosec // opt-in flag
	}
	return &http.Client{Transport: tr}
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
func exitFor(cmd string, err error) int {
	if err == nil {
		return exitOK
	}
	code := connect.CodeOf(err)
	if code == connect.CodeUnavailable || code == connect.CodeUnknown || code == connect.CodeDeadlineExceeded {
		var ce *connect.Error
		if !errors.As(err, &ce) || code == connect.CodeUnavailable {
			fmt.Fprintf(os.Stderr, "termivar-coord %s: server unreachable: %v\n", cmd, err)
			return exitUnreachable
		}
	}
	kind := ""
	if d, ok := server.DetailOf(err); ok {
		kind = " [" + d.GetKind() + "]"
	}
	fmt.Fprintf(os.Stderr, "termivar-coord %s: %v%s\n", cmd, err, kind)
	return exitRejected
}
