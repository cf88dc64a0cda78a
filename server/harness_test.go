// Shared test harness for the server package: a real node (raft over
// raft-wal in a temp dir) behind an httptest server, with typed clients per
// API key.
package server

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
	"github.com/termivar/distributed/internal/audit"
	"github.com/termivar/distributed/internal/wireerr"
	"github.com/termivar/distributed/node"
)

func TestMain(m *testing.M) {
	if os.Getenv(envHostileRole) != "" {
		os.Exit(runHostileChild()) // an attacker of TestServer_HostileLoad
	}
	goleak.VerifyTestMain(m)
}

type testBundle struct {
	dir      string
	node     *node.Node
	srv      *httptest.Server
	api      *Server
	adminKey string
	auditLog string
}

type clients struct {
	worker   termivarv1connect.WorkerClient
	producer termivarv1connect.ProducerClient
	admin    termivarv1connect.AdminClient
}

func setup(t testing.TB, mut func(*node.Config)) *testBundle {
	t.Helper()
	return setupServer(t, mut, Config{})
}

// setupServer is setup with the server's Limits and clock from scfg.
func setupServer(t testing.TB, mut func(*node.Config), scfg Config) *testBundle {
	t.Helper()
	dir := t.TempDir()
	cfg := node.Config{DataDir: dir, RaftAddr: "127.0.0.1:0", TickInterval: -1}
	if mut != nil {
		mut(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := node.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, node.AdminKeyFile)
	if _, err := EnsureAdminKey(ctx, n, keyPath); err != nil {
		t.Fatal(err)
	}
	key, _ := os.ReadFile(keyPath)
	auditPath := filepath.Join(dir, audit.FileName)
	al, err := audit.Open(auditPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	scfg.Backend, scfg.Audit = n, al
	s := New(scfg)
	// NB: HTTP/1.1 and h2c, as serve speaks them (NewHTTPServer).
	srv := httptest.NewUnstartedServer(s.Handler())
	srv.Config.Protocols = NewHTTPServer("", nil).Protocols
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		n.Close()
		al.Close()
	})
	return &testBundle{dir: dir, node: n, srv: srv, api: s, adminKey: strings.TrimSpace(string(key)), auditLog: auditPath}
}

type bearer string

func (b bearer) intercept(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if b != "" {
			req.Header().Set("Authorization", "Bearer "+string(b))
		}
		return next(ctx, req)
	}
}

type authInterceptor struct{ key string }

func (a authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return bearer(a.key).intercept(next)
}

func (a authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if a.key != "" {
			conn.RequestHeader().Set("Authorization", "Bearer "+a.key)
		}
		return conn
	}
}

func (a authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func (b *testBundle) clients(key string) clients {
	opt := connect.WithInterceptors(authInterceptor{key})
	hc := b.srv.Client()
	return clients{
		worker:   termivarv1connect.NewWorkerClient(hc, b.srv.URL, opt),
		producer: termivarv1connect.NewProducerClient(hc, b.srv.URL, opt),
		admin:    termivarv1connect.NewAdminClient(hc, b.srv.URL, opt),
	}
}

func (b *testBundle) createKey(t testing.TB, tenant, role string) string {
	t.Helper()
	res, err := b.clients(b.adminKey).admin.CreateKey(context.Background(), connect.NewRequest(&pb.CreateKeyRequest{Tenant: tenant, Role: role}))
	if err != nil {
		t.Fatalf("CreateKey(%s, %s): %v", tenant, role, err)
	}
	return res.Msg.GetKey()
}

func (b *testBundle) createTenant(t testing.TB, name string, lim *pb.CoreLimits, rl *pb.ResultLimits) {
	t.Helper()
	_, err := b.clients(b.adminKey).admin.CreateTenant(context.Background(), connect.NewRequest(&pb.CreateTenantRequest{Name: name, Limits: lim, ResultLimits: rl}))
	if err != nil {
		t.Fatalf("CreateTenant(%s): %v", name, err)
	}
}

// state returns the FSM's exported bytes (every tenant, key and counter).
func (b *testBundle) state(t *testing.T) []byte {
	t.Helper()
	st, err := b.node.FSM().ExportState()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (b *testBundle) assertUnchanged(t *testing.T, before []byte, what string) {
	t.Helper()
	if !bytes.Equal(before, b.state(t)) {
		t.Fatalf("%s changed the state", what)
	}
}

// errKind returns the Connect code and ErrorDetail.kind of err.
func errKind(err error) (connect.Code, string) {
	if err == nil {
		return 0, ""
	}
	d, _ := wireerr.DetailOf(err)
	return connect.CodeOf(err), d.GetKind()
}

func mustCode(t *testing.T, err error, code connect.Code, kind string) {
	t.Helper()
	c, k := errKind(err)
	if err == nil || c != code || (kind != "" && k != kind) {
		t.Fatalf("err = %v (code %v, kind %q), want code %v kind %q", err, c, k, code, kind)
	}
}
