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
	c := newResetClient(t, srv.URL)
	ctx := context.Background()

	_, err := c.Enqueue(ctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "t", ScanId: "s", TargetRef: "x"}}})
	if !client.IsUnreachable(err) || errors.Is(err, context.Canceled) || hits.Load() != 3 {
		t.Fatalf("Enqueue through resets = %v after %d tries; want unreachable after 3", err, hits.Load())
	}
	hits.Store(0)
	_, err = c.CreateKey(ctx, &pb.CreateKeyRequest{Role: "worker"})
	if !client.IsUnreachable(err) || !client.MayHaveApplied(err) || hits.Load() != 1 {
		t.Fatalf("CreateKey through a reset = %v after %d tries; want unreachable with an unknown outcome after 1 (not safe to replay)", err, hits.Load())
	}
}

// TestClient_CutOffAnswerIsUnknownOutcome: a node (or a proxy in front of
// it) that breaks off after the answer's status and headers leaves connect
// an Unknown "read message: unexpected EOF", which is not an answer: the
// call may have been applied (a Connect status 200 says it was). Complete,
// safe to replay, is tried again and gets the second try's answer;
// CreateKey, not safe to replay, reports unreachable with the unknown
// outcome after one try. Before, both returned the Unknown code at once,
// which callers took as a definite failure.
func TestClient_CutOffAnswerIsUnknownOutcome(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	c := newResetClient(t, cutOffEveryOther(t, &hits))
	ctx := context.Background()

	if _, err := c.Complete(ctx, &pb.CompleteRequest{LeaseToken: []byte("t")}); err != nil || hits.Load() != 2 {
		t.Fatalf("Complete after a cut-off answer = %v after %d tries; want the second try's answer", err, hits.Load())
	}
	hits.Store(0)
	_, err := c.CreateKey(ctx, &pb.CreateKeyRequest{Role: "worker"})
	if !client.IsUnreachable(err) || !client.MayHaveApplied(err) || hits.Load() != 1 {
		t.Fatalf("CreateKey through a cut-off answer = %v after %d tries; want unreachable with an unknown outcome after 1", err, hits.Load())
	}
}

// newResetClient is a client of url that tries a call 3 times with
// millisecond backoffs.
func newResetClient(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{ServerURL: url, Key: "k", MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// cutOffEveryOther serves a cut-off answer (status and headers, then the
// connection closes) to every odd request and an empty success to every
// even one, counting requests in hits; it returns the server's URL.
func cutOffEveryOther(t *testing.T, hits *atomic.Int64) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/proto")
		if hits.Add(1)%2 == 0 {
			return // an empty message: the answer of a call that succeeded
		}
		w.Header().Set("Content-Length", "64")
		w.WriteHeader(http.StatusOK)
		conn, _, err := w.(http.Hijacker).Hijack() // NB: flushes the headers first
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestClient_ExpectedRevisionIsNotReplayed: a call that names an expected
// revision (itself, or one of its items) is a compare-and-set: re-sent
// after a first try that was applied, it fails revision_conflict (contract
// A.6), a definite-looking answer about a call that took effect. So it is
// not replayed after an unknown outcome, although its RPC is safe to
// replay without one: the caller gets the unknown outcome after one try.
func TestClient_ExpectedRevisionIsNotReplayed(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	c := newResetClient(t, cutOffEveryOther(t, &hits))
	ctx := context.Background()
	rev := uint64(5)
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Complete", func() error {
			_, err := c.Complete(ctx, &pb.CompleteRequest{LeaseToken: []byte("t"), ExpectedRevision: &rev})
			return err
		}},
		{"CompleteMany item", func() error {
			_, err := c.CompleteMany(ctx, &pb.CompleteManyRequest{Items: []*pb.CompleteRequest{
				{LeaseToken: []byte("a")}, {LeaseToken: []byte("b"), ExpectedRevision: &rev}}})
			return err
		}},
	} {
		hits.Store(0)
		err := tc.call()
		if !client.MayHaveApplied(err) || hits.Load() != 1 {
			t.Errorf("%s with an expected revision through a cut-off answer = %v after %d tries; want unreachable after 1", tc.name, err, hits.Load())
		}
	}
}
