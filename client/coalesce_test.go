// Goal: concurrent Enqueue callers of one Client share calls without
// sharing fates: while a call is in flight the callers that arrive wait
// and go together in one EnqueueMany; each gets the outcome, error
// included, that its own call would have had (a collision, an invalid
// task, a stale revision fail only their caller, and the others are
// stored); clients of different keys never share a call; coalescing can
// be turned off, and a server without EnqueueMany gets single calls.
// Method: the clienttest server behind a transport that counts calls per
// RPC and can hold the first one until the others have queued (each
// caller's joining signalled by the coalescer, NotifyEnqueueJoins); every outcome is
// checked with GetTask and against a non-coalescing client's answer.
package client_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/client"
	"github.com/termivar/distributed/client/clienttest"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// gateTransport counts requests per RPC and, while hold is set, blocks
// the first request it sees until release is closed.
type gateTransport struct {
	next     http.RoundTripper
	mu       sync.Mutex
	calls    map[string]int
	hold     bool
	arrived  chan struct{} // closed when the held request arrived
	release  chan struct{}
	notFound string      // an RPC answered 404, as a server that lacks it
	seen     chan string // each request's RPC name as it arrives
}

func newGate(hold bool) *gateTransport {
	return &gateTransport{next: http.DefaultTransport, calls: map[string]int{}, hold: hold, arrived: make(chan struct{}), release: make(chan struct{}), seen: make(chan string, 64)}
}

func (g *gateTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rpc := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	g.mu.Lock()
	g.calls[rpc]++
	held := g.hold
	g.hold = false
	g.mu.Unlock()
	select {
	case g.seen <- rpc:
	default: // nobody counts arrivals beyond the buffer
	}
	if held {
		close(g.arrived)
		<-g.release
	}
	if rpc == g.notFound {
		return &http.Response{StatusCode: http.StatusNotFound, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
	}
	return g.next.RoundTrip(r)
}

func (g *gateTransport) count(rpc string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[rpc]
}

// newKeyClient returns a client of a new key of tenant (role producer)
// over g, with inFlight Enqueue calls at most.
func newKeyClient(t testing.TB, srv *clienttest.Server, tenant string, g *gateTransport, inFlight int) *client.Client {
	t.Helper()
	admin, err := client.New(client.Config{ServerURL: srv.URL, Key: srv.Key})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if tenant != "" {
		if _, err := admin.CreateTenant(context.Background(), &pb.CreateTenantRequest{Name: tenant}); err != nil && client.KindOf(err) != "tenant_exists" {
			t.Fatal(err)
		}
	}
	k, err := admin.CreateKey(context.Background(), &pb.CreateKeyRequest{Tenant: tenant, Role: "producer"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.Config{ServerURL: srv.URL, Key: k.GetKey(), HTTPClient: &http.Client{Transport: g}, EnqueueCallsInFlight: inFlight})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// newServer starts a clienttest server closed at the test's end.
func newServer(t testing.TB) *clienttest.Server {
	t.Helper()
	srv, err := clienttest.New(clienttest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

func oneTask(id string) *pb.EnqueueRequest {
	return &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: id, ScanId: "s", TargetRef: "target-" + id}}}
}

// waitEvents waits for n values on ch, failing the test after 10 s.
func waitEvents[T any](t *testing.T, what string, ch <-chan T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for i := range n {
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("%s: %d of %d seen", what, i, n)
		}
	}
}

// heldRun enqueues first alone (held in the transport), then reqs
// concurrently once all of them queue behind it, and returns each one's
// outcome.
func heldRun(t *testing.T, c *client.Client, g *gateTransport, first *pb.EnqueueRequest, reqs []*pb.EnqueueRequest) []error {
	t.Helper()
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := c.Enqueue(context.Background(), first); err != nil {
			t.Error(err)
		}
	})
	<-g.arrived
	joined := make(chan struct{}, len(reqs))
	client.NotifyEnqueueJoins(c, joined)
	for i, r := range reqs {
		wg.Go(func() { _, errs[i] = c.Enqueue(context.Background(), r) })
	}
	waitEvents(t, "callers waiting for a slot", joined, len(reqs))
	close(g.release)
	wg.Wait()
	return errs
}

func TestClient_EnqueueCoalescedIndependent(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	g := newGate(true)
	c := newKeyClient(t, srv, "a", g, 1)
	ref := newKeyClient(t, srv, "a", newGate(false), -1) // answers as single calls
	if _, err := ref.Enqueue(context.Background(), oneTask("held")); err != nil {
		t.Fatal(err)
	}
	stale := uint64(1)
	bad := map[int]*pb.EnqueueRequest{
		3:  {Tasks: []*pb.NewTask{{TaskId: "c1", ScanId: "s", TargetRef: "x"}, {TaskId: "held", ScanId: "s", TargetRef: "x"}}},
		7:  oneTask("bad id"),
		11: {Tasks: oneTask("r1").GetTasks(), ExpectedRevision: &stale},
	}
	reqs := make([]*pb.EnqueueRequest, 32)
	for i := range reqs {
		reqs[i] = cmpOr(bad[i], oneTask("g"+strconv.Itoa(i)))
	}
	errs := heldRun(t, c, g, oneTask("first"), reqs)
	if n, m := g.count("Enqueue"), g.count("EnqueueMany"); n != 1 || m != 1 {
		t.Fatalf("%d Enqueue and %d EnqueueMany calls, want 1 and 1 (31 callers share the second)", n, m)
	}
	checkAsAlone(t, ref, reqs, errs, bad)
	if !errors.Is(errs[3], distributed.ErrTaskAlreadyExists) || !errors.Is(errs[11], distributed.ErrRevisionConflict) {
		t.Errorf("core errors not rebuilt: %v, %v", errs[3], errs[11])
	}
	for i := range reqs {
		id := reqs[i].GetTasks()[0].GetTaskId()
		_, err := ref.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: id})
		if (err == nil) != (bad[i] == nil) {
			t.Errorf("GetTask(%s) = %v; stored must be %v", id, err, bad[i] == nil)
		}
	}
}

// checkAsAlone fails unless every good request (not in bad) succeeded and
// every bad one failed as its own single call through ref does (kind,
// code, reason, the Enqueue op).
func checkAsAlone(t *testing.T, ref *client.Client, reqs []*pb.EnqueueRequest, errs []error, bad map[int]*pb.EnqueueRequest) {
	t.Helper()
	for i, err := range errs {
		if bad[i] == nil {
			if err != nil {
				t.Errorf("good request %d: %v", i, err)
			}
			continue
		}
		_, alone := ref.Enqueue(context.Background(), reqs[i])
		if err == nil || client.KindOf(err) != client.KindOf(alone) || !sameCode(err, alone) || !strings.HasPrefix(err.Error(), "termivar: Producer.Enqueue:") {
			t.Errorf("request %d: coalesced %v; alone %v", i, err, alone)
		}
	}
}

func cmpOr(a, b *pb.EnqueueRequest) *pb.EnqueueRequest {
	if a != nil {
		return a
	}
	return b
}

func sameCode(a, b error) bool {
	var ea, eb *client.Error
	return errors.As(a, &ea) && errors.As(b, &eb) && ea.Code == eb.Code && ea.Reason == eb.Reason
}

// TestClient_EnqueueCoalescingPerKey: two clients of two tenants enqueue
// the same task IDs concurrently; no call carries both (each would then
// collide with the other), and each tenant stores its own.
func TestClient_EnqueueCoalescingPerKey(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	ga, gb := newGate(true), newGate(true)
	a, b := newKeyClient(t, srv, "ta", ga, 1), newKeyClient(t, srv, "tb", gb, 1)
	reqs := []*pb.EnqueueRequest{oneTask("x1"), oneTask("x2"), oneTask("x3")}
	var wg sync.WaitGroup
	var errsA, errsB []error
	wg.Go(func() { errsA = heldRun(t, a, ga, oneTask("x0"), reqs) })
	wg.Go(func() { errsB = heldRun(t, b, gb, oneTask("x0"), reqs) })
	wg.Wait()
	for i := range reqs {
		if errsA[i] != nil || errsB[i] != nil {
			t.Fatalf("request %d: %v, %v", i, errsA[i], errsB[i])
		}
	}
	for _, c := range []*client.Client{a, b} {
		for _, id := range []string{"x0", "x1", "x2", "x3"} {
			if _, err := c.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: id}); err != nil {
				t.Fatalf("GetTask(%s): %v", id, err)
			}
		}
	}
	if ga.count("EnqueueMany") != 1 || gb.count("EnqueueMany") != 1 {
		t.Fatalf("EnqueueMany calls %d, %d, want one per client", ga.count("EnqueueMany"), gb.count("EnqueueMany"))
	}
}

// TestClient_EnqueueSingleCalls: with coalescing off every Enqueue is its
// own call, and a server without EnqueueMany (404: Unimplemented) gets
// single calls from then on, each caller still answered.
func TestClient_EnqueueSingleCalls(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	off := newGate(true)
	c := newKeyClient(t, srv, "", off, -1)
	var done atomic.Int32
	var wg sync.WaitGroup
	wg.Go(func() { c.Enqueue(context.Background(), oneTask("o0")); done.Add(1) })
	<-off.arrived
	for i := range 4 {
		wg.Go(func() {
			if _, err := c.Enqueue(context.Background(), oneTask("o"+strconv.Itoa(i+1))); err == nil {
				done.Add(1)
			}
		})
	}
	// Not coalescing: the four are on the wire while the first is held
	// (the first arrival was seen too).
	waitEvents(t, "all five single Enqueues on the wire", off.seen, 5)
	close(off.release)
	wg.Wait()
	if off.count("Enqueue") != 5 || off.count("EnqueueMany") != 0 || done.Load() != 5 {
		t.Fatalf("coalescing off: %d Enqueue, %d EnqueueMany, %d done", off.count("Enqueue"), off.count("EnqueueMany"), done.Load())
	}

	old := newGate(true)
	old.notFound = "EnqueueMany"
	c = newKeyClient(t, srv, "", old, 1)
	errs := heldRun(t, c, old, oneTask("p0"), []*pb.EnqueueRequest{oneTask("p1"), oneTask("p2"), oneTask("p0")})
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], distributed.ErrTaskAlreadyExists) {
		t.Fatalf("against a server without EnqueueMany: %v", errs)
	}
	if old.count("EnqueueMany") != 1 || old.count("Enqueue") != 4 {
		t.Fatalf("%d EnqueueMany, %d Enqueue; want 1 refused, then 4 single calls", old.count("EnqueueMany"), old.count("Enqueue"))
	}
}
