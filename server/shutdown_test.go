package server

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
	"github.com/termivar/distributed/node"
)

// TestServer_ShutdownWakesLongPoll: http.Server.Shutdown of the server's
// HTTPServer returns promptly while an Acquire long-poll of 30 s is
// pending; the poll answers at once with no tasks. (Before, Shutdown
// waited for the poll to time out.) goleak (TestMain) checks that nothing
// is left running.
func TestServer_ShutdownWakesLongPoll(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	octx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := node.Open(octx, node.Config{DataDir: dir, RaftAddr: "127.0.0.1:0", TickInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	keyPath := filepath.Join(dir, node.AdminKeyFile)
	if _, err := EnsureAdminKey(octx, n, keyPath); err != nil {
		t.Fatal(err)
	}
	s := New(Config{Backend: n})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := s.HTTPServer(ln.Addr().String())
	// NB: wait until the Acquire is inside the handler. (ConnState's
	// StateActive is too early: a Shutdown between it and the handler drops
	// the request, which net/http does by design.)
	entered := make(chan struct{}, 1)
	inner := hs.Handler
	hs.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/Acquire") {
			entered <- struct{}{}
		}
		inner.ServeHTTP(w, r)
	})
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()

	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	kb, _ := os.ReadFile(keyPath)
	key := strings.TrimSpace(string(kb))
	w := termivarv1connect.NewWorkerClient(hc, "http://"+ln.Addr().String(), connect.WithInterceptors(authInterceptor{key}))
	if _, err := w.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 1})); err != nil {
		t.Fatal(err)
	}
	type result struct {
		res *connect.Response[pb.AcquireResponse]
		err error
		at  time.Time
	}
	polled := make(chan result, 1)
	go func() {
		r, err := w.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", WaitSecs: 30}))
		polled <- result{r, err, time.Now()}
	}()
	select {
	case <-entered: // the long-poll request is being served
	case <-time.After(10 * time.Second):
		t.Fatal("the Acquire request never reached the server")
	}
	start := time.Now()
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := hs.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown = %v after %v", err, time.Since(start))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Shutdown took %v with a long-poll pending", d)
	}
	var r result
	select {
	case r = <-polled:
	case <-time.After(10 * time.Second):
		t.Fatal("the long-poll did not return")
	}
	if r.err != nil || len(r.res.Msg.GetTasks()) != 0 || r.at.Sub(start) > 5*time.Second {
		t.Fatalf("long-poll = %v, %v after %v; want an empty answer at once", r.res, r.err, r.at.Sub(start))
	}
	if err := <-served; err != http.ErrServerClosed {
		t.Fatalf("Serve = %v", err)
	}
}
