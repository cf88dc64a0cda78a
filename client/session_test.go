package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/termivar/distributed/client"
	"github.com/termivar/distributed/client/clienttest"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
)

// h2cGate is a gate transport over HTTP/2 without TLS: it counts each
// request by RPC (a session counts once, when it opens).
func h2cGate() *gateTransport {
	g := newGate(false)
	t := &http.Transport{Protocols: new(http.Protocols)}
	t.Protocols.SetUnencryptedHTTP2(true)
	g.next = t
	return g
}

// sessionClient is a worker-session client of srv's admin key over g.
func sessionClient(t *testing.T, srv *clienttest.Server, g *gateTransport, attempts int) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{ServerURL: srv.URL, Key: srv.Key, HTTPClient: &http.Client{Transport: g}, WorkerSession: true, MaxAttempts: attempts,
		MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func registerW1(t *testing.T, c *client.Client) {
	t.Helper()
	if _, err := c.RegisterWorker(context.Background(), &pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 4}); err != nil {
		t.Fatal(err)
	}
}

// sessionWithLease returns a server, a worker-session client of it over
// its gate and the lease of task "a", enqueued and started by worker w1.
func sessionWithLease(t *testing.T) (*clienttest.Server, *gateTransport, *client.Client, []byte) {
	t.Helper()
	srv := newServer(t)
	g := h2cGate()
	c := sessionClient(t, srv, g, 0)
	registerW1(t, c)
	if _, err := c.Enqueue(context.Background(), oneTask("a")); err != nil {
		t.Fatal(err)
	}
	got, err := c.Acquire(context.Background(), &pb.AcquireRequest{WorkerId: "w1", Start: true})
	if err != nil || len(got.GetTasks()) != 1 {
		t.Fatalf("acquire: %v, %v", got, err)
	}
	return srv, g, c, got.GetTasks()[0].GetLeaseToken()
}

// waitPolls waits until cond holds, looking again at each change of
// srv's waiting long-polls (every cond here ends on such a change),
// failing the test after 10 s.
func waitPolls(t *testing.T, srv *clienttest.Server, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		changed := srv.LongPollsChanged() // NB: before cond reads the count
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("timed out waiting for %s (%d long-polls waiting)", what, srv.LongPollsWaiting())
		}
	}
}

// TestSession_CallsGoAsMessages: with WorkerSession, Acquire and
// CompleteMany (and an Acquire carrying completions that long-polls) go
// over one stream, answer as the unary calls do, and answers come out
// of order (a CompleteMany answered while an Acquire waits).
func TestSession_CallsGoAsMessages(t *testing.T) {
	srv, g, c, lease := sessionWithLease(t)
	ctx := context.Background()
	// A long-polling Acquire carrying the completion; meanwhile a
	// CompleteMany of the same lease is answered on the same stream.
	type res struct {
		r   *pb.AcquireResponse
		err error
	}
	ch := make(chan res, 1)
	go func() {
		r, err := c.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w1", WaitSecs: 10, Complete: []*pb.CompleteRequest{{LeaseToken: lease, Result: []byte("ok")}}})
		ch <- res{r, err}
	}()
	waitPolls(t, srv, "the acquire long-polls", func() bool { return srv.LongPollsWaiting() == 1 })
	cm, err := c.CompleteMany(ctx, &pb.CompleteManyRequest{Items: []*pb.CompleteRequest{{LeaseToken: lease, Result: []byte("ok")}}})
	if err != nil || !cm.GetResults()[0].GetResponse().GetAlreadyCompleted() {
		t.Fatalf("complete many while the acquire waits: %v, %v", cm, err)
	}
	if _, err := c.Enqueue(ctx, oneTask("b")); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil || len(r.r.GetTasks()) != 1 || r.r.GetTasks()[0].GetTaskId() != "b" || len(r.r.GetCompleted()) != 1 || len(r.r.GetCompleted()[0].GetResponse().GetReceiptToken()) == 0 {
		t.Fatalf("carrying acquire: %v, %v", r.r, r.err)
	}
	// Complete: the same answer, and the same error, as the unary call.
	if res, err := c.Complete(ctx, &pb.CompleteRequest{LeaseToken: lease, Result: []byte("ok")}); err != nil || !res.GetAlreadyCompleted() {
		t.Fatalf("complete replay: %v, %v", res, err)
	}
	unary, err := client.New(client.Config{ServerURL: srv.URL, Key: srv.Key})
	if err != nil {
		t.Fatal(err)
	}
	defer unary.Close()
	forged := &pb.CompleteRequest{LeaseToken: []byte("forged"), Result: []byte("ok")}
	_, errS := c.Complete(ctx, forged)
	_, errU := unary.Complete(ctx, forged)
	var es, eu *client.Error
	if !errors.As(errS, &es) || !errors.As(errU, &eu) || es.Code != eu.Code || es.Kind != eu.Kind || es.Reason != eu.Reason || es.Error() != eu.Error() {
		t.Fatalf("forged complete: session %v, unary %v", errS, errU)
	}
	if g.count("Acquire") != 0 || g.count("CompleteMany") != 0 || g.count("Complete") != 0 || g.count("Session") != 1 {
		t.Fatalf("calls: Acquire %d, CompleteMany %d, Complete %d, Session %d; want 0, 0, 0, 1", g.count("Acquire"), g.count("CompleteMany"), g.count("Complete"), g.count("Session"))
	}
}

// TestSession_FallbackWithoutSession: against a server that answers
// Worker.Session Unimplemented, the calls go unary, and the client does
// not try a session again.
func TestSession_FallbackWithoutSession(t *testing.T) {
	srv := newServer(t)
	g := h2cGate()
	g.notFound = "Session"
	c := sessionClient(t, srv, g, 0)
	registerW1(t, c)
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if _, err := c.Enqueue(ctx, oneTask(id)); err != nil {
			t.Fatal(err)
		}
		got, err := c.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w1"})
		if err != nil || len(got.GetTasks()) != 1 || got.GetTasks()[0].GetTaskId() != id {
			t.Fatalf("acquire %s: %v, %v", id, got, err)
		}
	}
	if g.count("Session") != 1 || g.count("Acquire") != 2 {
		t.Fatalf("Session %d, Acquire %d; want 1, 2", g.count("Session"), g.count("Acquire"))
	}
}

// TestSession_HTTP1Fallback: a WorkerSession client whose HTTPClient
// speaks HTTP/1.1 only falls back to unary calls.
func TestSession_HTTP1Fallback(t *testing.T) {
	srv := newServer(t)
	g := newGate(false)
	c := sessionClient(t, srv, g, 0)
	registerW1(t, c)
	if _, err := c.Enqueue(context.Background(), oneTask("a")); err != nil {
		t.Fatal(err)
	}
	got, err := c.Acquire(context.Background(), &pb.AcquireRequest{WorkerId: "w1"})
	if err != nil || len(got.GetTasks()) != 1 {
		t.Fatalf("acquire: %v, %v", got, err)
	}
	if g.count("Acquire") != 1 {
		t.Fatalf("unary Acquire calls: %d, want 1", g.count("Acquire"))
	}
}

// TestSession_BrokenStreamUnknownOutcome: a message whose stream breaks
// before its answer fails Unavailable with an unknown outcome when no
// retry is left, exactly like a unary call whose connection broke; with
// retries left, the Acquire (safe to replay) is sent again on a new
// stream and succeeds.
func TestSession_BrokenStreamUnknownOutcome(t *testing.T) {
	srv := newServer(t)
	for _, attempts := range []int{1, 4} {
		g := h2cGate()
		c := sessionClient(t, srv, g, attempts)
		worker := fmt.Sprintf("w%d", attempts)
		if _, err := c.RegisterWorker(context.Background(), &pb.RegisterWorkerRequest{WorkerId: worker, Capacity: 4}); err != nil {
			t.Fatal(err)
		}
		waitPolls(t, srv, "no acquire waiting", func() bool { return srv.LongPollsWaiting() == 0 })
		done := make(chan error, 1)
		var got *pb.AcquireResponse
		go func() {
			var err error
			got, err = c.Acquire(context.Background(), &pb.AcquireRequest{WorkerId: worker, WaitSecs: 10})
			done <- err
		}()
		waitPolls(t, srv, "the acquire long-polls", func() bool { return srv.LongPollsWaiting() == 1 })
		c.Close() // breaks the stream under the waiting message
		if attempts == 4 {
			waitPolls(t, srv, "the retry on a new stream", func() bool { return g.count("Session") == 2 && srv.LongPollsWaiting() == 1 })
			if _, err := c.Enqueue(context.Background(), oneTask("retried")); err != nil {
				t.Fatal(err)
			}
		}
		err := <-done
		var ce *connect.Error
		switch {
		case attempts == 1 && (!errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable || ce.Meta().Get(client.OutcomeHeader) != client.OutcomeUnknown):
			t.Fatalf("broken stream, no retry: %v, want Unavailable with an unknown outcome", err)
		case attempts == 4 && (err != nil || len(got.GetTasks()) != 1):
			t.Fatalf("broken stream, retried: %v, %v", got, err)
		}
	}
}

// TestSession_RevokedKey: a key revoked while its session is open fails
// the next message Unauthenticated, without retries.
func TestSession_RevokedKey(t *testing.T) {
	srv := newServer(t)
	admin, err := client.New(client.Config{ServerURL: srv.URL, Key: srv.Key})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx := context.Background()
	k, err := admin.CreateKey(ctx, &pb.CreateKeyRequest{Role: "worker"})
	if err != nil {
		t.Fatal(err)
	}
	g := h2cGate()
	c, err := client.New(client.Config{ServerURL: srv.URL, Key: k.GetKey(), HTTPClient: &http.Client{Transport: g}, WorkerSession: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	registerW1(t, c)
	if _, err := c.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w1"}); err != nil {
		t.Fatal(err)
	}
	// NB: the client has no RevokeKey; the generated Admin client does.
	rk := connect.NewRequest(&pb.RevokeKeyRequest{KeyId: k.GetKeyId()})
	rk.Header().Set("Authorization", "Bearer "+srv.Key)
	if _, err := termivarv1connect.NewAdminClient(http.DefaultClient, srv.URL).RevokeKey(ctx, rk); err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w1"})
	if client.KindOf(err) != "unauthenticated" {
		t.Fatalf("acquire after revocation: %v", err)
	}
	if g.count("Session") != 1 {
		t.Fatalf("sessions opened: %d, want 1 (no retry)", g.count("Session"))
	}
}

// TestSession_FullSessionGoesUnary: a call the server refuses with
// session_limit (the client's session already has the server's bound of
// messages awaiting their answer) was not run and goes as its unary call.
func TestSession_FullSessionGoesUnary(t *testing.T) {
	srv, err := clienttest.New(clienttest.Options{MaxSessionMessages: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	g := h2cGate()
	c := sessionClient(t, srv, g, 0)
	ctx := context.Background()
	for _, id := range []string{"w1", "w2"} {
		if _, err := c.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: id, Capacity: 1}); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 2)
	acquire := func(id string) {
		r, err := c.Acquire(ctx, &pb.AcquireRequest{WorkerId: id, WaitSecs: 10})
		if err == nil && len(r.GetTasks()) != 1 {
			err = fmt.Errorf("%s leased %d tasks", id, len(r.GetTasks()))
		}
		errs <- err
	}
	go acquire("w1")
	waitPolls(t, srv, "the first acquire long-polls", func() bool { return srv.LongPollsWaiting() == 1 })
	go acquire("w2")
	waitPolls(t, srv, "the second acquire long-polls", func() bool { return srv.LongPollsWaiting() == 2 })
	if _, err := c.Enqueue(ctx, &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "a", ScanId: "s", TargetRef: "t"}, {TaskId: "b", ScanId: "s", TargetRef: "t"}}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if g.count("Session") != 1 || g.count("Acquire") != 1 {
		t.Fatalf("Session %d, unary Acquire %d; want 1, 1", g.count("Session"), g.count("Acquire"))
	}
}

// TestSession_RefusedOpenGoesUnary: a session open the server refuses
// with session_limit (its key has --max-sessions-per-key open) ran no
// message; the call goes as its unary call and the client stays unary
// (one refused open, not one per call).
func TestSession_RefusedOpenGoesUnary(t *testing.T) {
	srv, err := clienttest.New(clienttest.Options{MaxSessionsPerKey: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	first := sessionClient(t, srv, h2cGate(), 0)
	registerW1(t, first)
	ctx := context.Background()
	if _, err := first.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w1"}); err != nil {
		t.Fatal(err)
	}
	g := h2cGate()
	second := sessionClient(t, srv, g, 0)
	for _, id := range []string{"a", "b"} {
		if _, err := second.Enqueue(ctx, oneTask(id)); err != nil {
			t.Fatal(err)
		}
		got, err := second.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w1"})
		if err != nil || len(got.GetTasks()) != 1 || got.GetTasks()[0].GetTaskId() != id {
			t.Fatalf("acquire %s beyond the key's sessions: %v, %v", id, got, err)
		}
	}
	if g.count("Session") != 1 || g.count("Acquire") != 2 {
		t.Fatalf("Session %d, unary Acquire %d; want 1, 2", g.count("Session"), g.count("Acquire"))
	}
}

// sessionCallAllocBudget bounds the allocations of one worker call over a
// session, both ends in this process (the call of
// BenchmarkClient_WorkerCallFloor: 61 measured when written, against 185
// for the unary HTTP/1.1 call; 65 before and 63 since the server answers
// a session's messages on a goroutine it reuses, session 8).
const sessionCallAllocBudget = 71

// TestSession_CallAllocBudget fails when a worker call over a session
// allocates more than its budget (allocation counts are the same on every
// run; .ci/run runs the package once more without -race).
func TestSession_CallAllocBudget(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are only meaningful without -race")
	}
	srv := newServer(t)
	c, err := client.New(client.Config{ServerURL: srv.URL, Key: srv.Key, WorkerSession: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := &pb.CompleteManyRequest{Items: []*pb.CompleteRequest{{LeaseToken: []byte("forged"), Result: []byte("r")}}}
	call := func() {
		if _, err := c.CompleteMany(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	call()
	got := testing.AllocsPerRun(300, call)
	t.Logf("allocations per session call: %.0f", got)
	if got > sessionCallAllocBudget {
		t.Fatalf("a session call allocates %.0f times, budget %d", got, sessionCallAllocBudget)
	}
}
