// Goal: a node that dies under a request (the connection reset before an
// answer) is "unreachable" with an unknown outcome, not a cancellation: a
// call that is safe to replay is tried again, one that is not is not, and
// both report IsUnreachable. Method: an HTTP server that resets every
// connection after reading the request (SO_LINGER 0), counting requests.
package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func TestClient_ConnectionResetIsUnreachable(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close with RST
		}
		conn.Close()
	}))
	defer srv.Close()
	c, err := client.New(client.Config{ServerURL: srv.URL, Key: "k", MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	_, err = c.Enqueue(ctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "t", ScanId: "s", TargetRef: "x"}}})
	if !client.IsUnreachable(err) || errors.Is(err, context.Canceled) || hits.Load() != 3 {
		t.Fatalf("Enqueue through resets = %v after %d tries; want unreachable after 3", err, hits.Load())
	}
	hits.Store(0)
	_, err = c.CreateKey(ctx, &pb.CreateKeyRequest{Role: "worker"})
	if !client.IsUnreachable(err) || hits.Load() != 1 {
		t.Fatalf("CreateKey through a reset = %v after %d tries; want unreachable after 1 (not safe to replay)", err, hits.Load())
	}
}
