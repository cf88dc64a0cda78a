package client_test

// Goal: with Config.ProducerSession the coalesced Enqueue calls go as
// enqueue_many messages of one Producer.Session stream (client/session.go
// C8) and every caller gets the outcome its own Enqueue would have had; a
// stream cut under a message is an unknown outcome (as a unary call whose
// connection broke), a revoked key fails without a retry, and a server
// without producer sessions gets unary calls. Method: the clienttest
// server over an h2c gate that counts requests per RPC and can cut the
// session's answers.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/termivar/distributed"
	"github.com/termivar/distributed/client"
	"github.com/termivar/distributed/client/clienttest"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
)

// producerSessionClient is a producer-session client of srv with key over
// rt, trying each call attempts times.
func producerSessionClient(t *testing.T, srv *clienttest.Server, key string, rt http.RoundTripper, attempts int) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{ServerURL: srv.URL, Key: key, HTTPClient: &http.Client{Transport: rt}, ProducerSession: true,
		MaxAttempts: attempts, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestProducerSession_EnqueueGoesAsMessages: concurrent Enqueues, and a
// lone one, go over one stream and no HTTP Enqueue call; each caller gets
// its own outcome (good ones stored, a duplicate and an invalid one
// refused as their own single calls are).
func TestProducerSession_EnqueueGoesAsMessages(t *testing.T) {
	srv := newServer(t)
	g := h2cGate()
	c := producerSessionClient(t, srv, srv.Key, g, 0)
	ref := newKeyClient(t, srv, "", newGate(false), -1)
	if _, err := c.Enqueue(context.Background(), oneTask("lone")); err != nil {
		t.Fatal(err)
	}
	bad := map[int]*pb.EnqueueRequest{2: oneTask("lone"), 5: oneTask("bad id")}
	reqs := make([]*pb.EnqueueRequest, 16)
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i := range reqs {
		reqs[i] = cmpOr(bad[i], oneTask("p"+strconv.Itoa(i)))
		wg.Go(func() { _, errs[i] = c.Enqueue(context.Background(), reqs[i]) })
	}
	wg.Wait()
	checkAsAlone(t, ref, reqs, errs, bad)
	if !errors.Is(errs[2], distributed.ErrTaskAlreadyExists) {
		t.Errorf("core error not rebuilt: %v", errs[2])
	}
	if g.count("Session") != 1 || g.count("Enqueue") != 0 || g.count("EnqueueMany") != 0 {
		t.Fatalf("calls: Session %d, Enqueue %d, EnqueueMany %d; want 1, 0, 0", g.count("Session"), g.count("Enqueue"), g.count("EnqueueMany"))
	}
}

// cutter wraps the session streams' answers: once armed, the next answer
// read is dropped and its stream breaks (io.ErrUnexpectedEOF), as when
// the connection dies after the server applied the message; it cuts one
// stream only (armed is cleared).
type cutter struct {
	next  http.RoundTripper
	armed atomic.Bool
}

func (c *cutter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil && r.URL.Path == termivarv1connect.ProducerSessionProcedure {
		resp.Body = &cutBody{ReadCloser: resp.Body, c: c}
	}
	return resp, err
}

type cutBody struct {
	io.ReadCloser
	c      *cutter
	broken atomic.Bool
}

func (b *cutBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.broken.Load() || b.c.armed.CompareAndSwap(true, false) {
		b.broken.Store(true)
		return 0, io.ErrUnexpectedEOF
	}
	return n, err
}

// TestProducerSession_CutStreamUnknownOutcome: a stream cut under an
// enqueue_many is Unavailable with an unknown outcome after one try (it
// was applied: the task is stored), and with retries the next try opens a
// new stream and gets the replay's answer.
func TestProducerSession_CutStreamUnknownOutcome(t *testing.T) {
	srv := newServer(t)
	ref := newKeyClient(t, srv, "", newGate(false), -1)
	for _, attempts := range []int{1, 3} {
		g := h2cGate()
		cut := &cutter{next: g}
		c := producerSessionClient(t, srv, srv.Key, cut, attempts)
		if _, err := c.Enqueue(context.Background(), oneTask("warm"+strconv.Itoa(attempts))); err != nil {
			t.Fatal(err) // the stream is open and answering
		}
		cut.armed.Store(true)
		id := "cut" + strconv.Itoa(attempts)
		done := make(chan error, 1)
		go func() { _, err := c.Enqueue(context.Background(), oneTask(id)); done <- err }()
		if attempts > 1 {
			waitSession(t, g, 2)
		}
		err := <-done
		var ce *connect.Error
		switch {
		case attempts == 1 && (!errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable || ce.Meta().Get(client.OutcomeHeader) != client.OutcomeUnknown || !client.MayHaveApplied(err)):
			t.Fatalf("cut stream, no retry: %v, want Unavailable with an unknown outcome", err)
		case attempts > 1 && err != nil && !errors.Is(err, distributed.ErrTaskAlreadyExists):
			t.Fatalf("cut stream, retried: %v, want success or already_exists (the replay of an applied enqueue)", err)
		}
		if _, err := ref.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: id}); err != nil {
			t.Fatalf("the cut message's task: %v, want stored (its outcome was unknown, not failed)", err)
		}
	}
}

// waitSession waits until g has seen n Session requests, failing the
// test after 10 s.
func waitSession(t *testing.T, g *gateTransport, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for g.count("Session") < n {
		select {
		case <-g.seen:
		case <-deadline:
			t.Fatalf("Session requests: %d, want %d", g.count("Session"), n)
		}
	}
}

// TestProducerSession_RevokedKey: a key revoked while its session is open
// fails the next Enqueue unauthenticated, without a retry, and stores
// nothing.
func TestProducerSession_RevokedKey(t *testing.T) {
	srv := newServer(t)
	ctx := context.Background()
	admin, err := client.New(client.Config{ServerURL: srv.URL, Key: srv.Key})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	k, err := admin.CreateKey(ctx, &pb.CreateKeyRequest{Role: "producer"})
	if err != nil {
		t.Fatal(err)
	}
	g := h2cGate()
	c := producerSessionClient(t, srv, k.GetKey(), g, 4)
	if _, err := c.Enqueue(ctx, oneTask("before")); err != nil {
		t.Fatal(err)
	}
	rk := connect.NewRequest(&pb.RevokeKeyRequest{KeyId: k.GetKeyId()})
	rk.Header().Set("Authorization", "Bearer "+srv.Key)
	if _, err := termivarv1connect.NewAdminClient(http.DefaultClient, srv.URL).RevokeKey(ctx, rk); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, oneTask("after")); client.KindOf(err) != "unauthenticated" {
		t.Fatalf("enqueue after revocation: %v", err)
	}
	if g.count("Session") != 1 || g.count("Enqueue") != 0 || g.count("EnqueueMany") != 0 {
		t.Fatalf("calls: Session %d, Enqueue %d, EnqueueMany %d; want 1, 0, 0 (no retry)", g.count("Session"), g.count("Enqueue"), g.count("EnqueueMany"))
	}
	if _, err := admin.GetTask(ctx, &pb.GetTaskRequest{TaskId: "after"}); client.KindOf(err) != "task_not_found" {
		t.Fatalf("GetTask(after) = %v, want task_not_found", err)
	}
}

// TestProducerSession_FallbackWithoutSession: against a server without
// Producer.Session the Enqueue goes unary (the one that found out as the
// EnqueueMany it was, the next lone one as an Enqueue), and sessions stay
// off.
func TestProducerSession_FallbackWithoutSession(t *testing.T) {
	srv := newServer(t)
	g := h2cGate()
	g.notFound = "Session"
	c := producerSessionClient(t, srv, srv.Key, g, 0)
	for _, id := range []string{"a", "b"} {
		if _, err := c.Enqueue(context.Background(), oneTask(id)); err != nil {
			t.Fatal(err)
		}
	}
	if g.count("Session") != 1 || g.count("EnqueueMany") != 1 || g.count("Enqueue") != 1 {
		t.Fatalf("calls: Session %d, EnqueueMany %d, Enqueue %d; want 1, 1, 1", g.count("Session"), g.count("EnqueueMany"), g.count("Enqueue"))
	}
}

// producerSessionAllocBudget bounds the allocations of one Enqueue over a
// producer session, both ends in the process, refused by the core (an
// invalid task ID) on the clienttest server's in-memory backend, no raft
// and no disk (137 measured when written, the same on every run, against
// 286 for the unary Enqueue over HTTP/1.1; 135 since the server answers a
// session's messages on a goroutine it reuses, session 8).
const producerSessionAllocBudget = 152

// TestProducerSession_EnqueueAllocBudget fails when an Enqueue over a
// producer session allocates more than its budget; it logs the unary
// Enqueue's count beside it (allocation counts are the same on every
// run; .ci/run runs the package once more without -race).
func TestProducerSession_EnqueueAllocBudget(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are only meaningful without -race")
	}
	srv := newServer(t)
	perCall := func(sessions bool) float64 {
		c, err := client.New(client.Config{ServerURL: srv.URL, Key: srv.Key, ProducerSession: sessions})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		bad := oneTask("bad id") // refused by the core: the same work every call
		call := func() {
			if _, err := c.Enqueue(context.Background(), bad); client.KindOf(err) != "invalid_task" {
				t.Fatalf("enqueue of a bad id: %v", err)
			}
		}
		call()
		return testing.AllocsPerRun(300, call)
	}
	unary, session := perCall(false), perCall(true)
	t.Logf("allocations per Enqueue: unary %.0f, producer session %.0f", unary, session)
	if session > producerSessionAllocBudget {
		t.Fatalf("an Enqueue over a producer session allocates %.0f times, budget %d", session, producerSessionAllocBudget)
	}
}
