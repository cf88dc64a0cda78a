// Tests of the catch-up before an unknown key is refused (keycatchup.go).
// Goal: a leader whose key table lags behind an acknowledged key accepts
// the key after its barrier; a key still unknown after it is refused
// Unauthenticated; concurrent unknown keys share one barrier; a barrier
// that fails or times out answers a retryable Unavailable, charged to
// nobody; a read whose barrier applies a revocation is refused. Method: a
// second server over the test node whose LinearizableRead is replaced
// (lagBackend), so that "the barrier applied the lagging entry" and "the
// barrier hangs" are explicit steps of each test.
package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
	"github.com/termivar/distributed/internal/apikey"
	"github.com/termivar/distributed/internal/metrics"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/raftfsm"
)

// lagBackend is the test node with its linearizable barrier replaced.
type lagBackend struct {
	Backend
	barrierFunc func(ctx context.Context) error
}

func (l *lagBackend) LinearizableRead(ctx context.Context) error { return l.barrierFunc(ctx) }

// lagServer serves b's node through a lagBackend with barrier; its
// metrics go to reg (nil: none).
func lagServer(t *testing.T, b *testBundle, reg *metrics.Registry, barrier func(ctx context.Context) error) (*Server, *httptest.Server) {
	t.Helper()
	cfg := Config{Backend: &lagBackend{Backend: b.node, barrierFunc: barrier}}
	if reg != nil {
		cfg.Metrics = reg.API
	}
	s := New(cfg)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		srv.Close()
		s.Close()
	})
	return s, srv
}

func producerOf(srv *httptest.Server, key string) termivarv1connect.ProducerClient {
	return termivarv1connect.NewProducerClient(srv.Client(), srv.URL, connect.WithInterceptors(authInterceptor{key}))
}

func adminOf(srv *httptest.Server, key string) termivarv1connect.AdminClient {
	return termivarv1connect.NewAdminClient(srv.Client(), srv.URL, connect.WithInterceptors(authInterceptor{key}))
}

// createKeyCommand proposes the creation of g (a producer key of the
// default tenant) on the test node: what a lagging leader applies at its
// barrier.
func createKeyCommand(ctx context.Context, b *testBundle, g apikey.Generated) error {
	return raftfsm.ProposalErr(b.node.Propose(ctx, &pb.Command{Op: &pb.Command_CreateKey{CreateKey: &pb.CreateKey{
		KeyId: g.ID, SecretHash: g.Hash[:], KeyTenant: raftfsm.SystemTenant, Role: apikey.RoleProducer.String()}}}))
}

// laggingKeyServer is a lagServer whose first barrier applies the creation
// of a new producer key, which it returns: a key acknowledged (by
// "another leader") but not applied on this node yet.
func laggingKeyServer(t *testing.T, b *testBundle, reg *metrics.Registry) (*Server, *httptest.Server, apikey.Generated) {
	t.Helper()
	lagging, err := apikey.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	s, srv := lagServer(t, b, reg, func(ctx context.Context) error {
		var err error
		once.Do(func() { err = createKeyCommand(ctx, b, lagging) })
		return err
	})
	return s, srv, lagging
}

func TestKeyCatchUp_LeaderFindsKeyAfterBarrier(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reg := metrics.New()
	s, srv, lagging := laggingKeyServer(t, b, reg)
	// The key is acknowledged (by "another leader") but not applied here.
	if _, ok := b.node.Reads().Key(lagging.ID); ok {
		t.Fatal("the lagging key is known before the barrier")
	}
	res, err := producerOf(srv, lagging.Key).GetTask(context.Background(), connect.NewRequest(&pb.GetTaskRequest{TaskId: "absent"}))
	if c, k := errKind(err); c != connect.CodeNotFound {
		t.Fatalf("GetTask with a key applied by the barrier = %v, %v (%v %q), want task not found (authenticated)", res, err, c, k)
	}
	if n := s.catchUp.barriers.Load(); n != 1 {
		t.Fatalf("barriers = %d, want 1", n)
	}
	// The key is known now: no further catch-up for it.
	if _, err := adminOf(srv, lagging.Key).Status(context.Background(), connect.NewRequest(&pb.StatusRequest{})); err != nil {
		t.Fatal(err)
	}
	if n := s.catchUp.barriers.Load(); n != 1 {
		t.Fatalf("barriers after a known key = %d, want 1", n)
	}
	if f, b := counterValue(t, reg, catchUpsMetric, map[string]string{"outcome": catchUpFound}), counterValue(t, reg, barriersMetric, nil); f != 1 || b != 1 {
		t.Fatalf("metrics: %v found, %v barriers; want 1 and 1", f, b)
	}
}

const (
	catchUpsMetric = "termivar_api_key_catchups_total"
	barriersMetric = "termivar_api_key_catchup_barriers_total"
)

func TestKeyCatchUp_UnknownKeysShareOneBarrier(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reg := metrics.New()
	s, srv, release := heldBarrierServer(t, b, reg)
	unknown := func() string {
		g, err := apikey.Generate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return g.Key
	}
	before := b.state(t)
	const n = 8
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, errs[n] = producerOf(srv, unknown()).GetTask(context.Background(), connect.NewRequest(&pb.GetTaskRequest{TaskId: "x"}))
	})
	waitUntil(t, "the first barrier", func() bool { return s.catchUp.barriers.Load() == 1 })
	for i := range n {
		key := unknown()
		wg.Go(func() {
			_, errs[i] = producerOf(srv, key).Enqueue(context.Background(), connect.NewRequest(&pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "t", ScanId: "s", TargetRef: "x"}}}))
		})
	}
	waitUntil(t, "every request waiting for a barrier", func() bool { return s.catchUp.waiting.Load() == n+1 })
	close(release)
	wg.Wait()
	for _, err := range errs {
		mustCode(t, err, connect.CodeUnauthenticated, KindUnauthenticated)
	}
	// NB: the first request's barrier began before the others arrived, so
	// it cannot serve them; all n share the second.
	if got := s.catchUp.barriers.Load(); got != 2 {
		t.Fatalf("barriers = %d for 1 + %d concurrent unknown keys, want 2", got, n)
	}
	b.assertUnchanged(t, before, "requests with unknown keys")
	if u, br := counterValue(t, reg, catchUpsMetric, map[string]string{"outcome": catchUpUnknown}), counterValue(t, reg, barriersMetric, nil); u != n+1 || br != 2 {
		t.Fatalf("metrics: %v unknown, %v barriers; want %d and 2", u, br, n+1)
	}
	if r := authRejected(t, reg, "unauthenticated"); r != n+1 {
		t.Fatalf("auth rejected unauthenticated = %v, want %d", r, n+1)
	}
}

func TestKeyCatchUp_FailedBarrierIsRetryable(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var deposed atomic.Bool
	reg := metrics.New()
	s, srv := lagServer(t, b, reg, func(ctx context.Context) error {
		if deposed.Load() {
			return node.ErrNotLeader
		}
		<-ctx.Done() // a barrier that never completes
		return ctx.Err()
	})
	s.catchUp.timeout = 20 * time.Millisecond
	g, err := apikey.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	before := b.state(t)
	// More than the failure burst: a failed catch-up is charged to nobody,
	// so the source is never throttled.
	for i := range DefaultLimits().AuthFailureBurst + 2 {
		_, err := producerOf(srv, g.Key).Enqueue(context.Background(), connect.NewRequest(&pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "t", ScanId: "s", TargetRef: "x"}}}))
		if c, k := errKind(err); c != connect.CodeUnavailable || k != KindUnavailable {
			t.Fatalf("try %d: Enqueue with a key the node could not look up = %v (%v %q), want Unavailable %q", i, err, c, k, KindUnavailable)
		}
	}
	deposed.Store(true)
	_, err = adminOf(srv, g.Key).Status(context.Background(), connect.NewRequest(&pb.StatusRequest{}))
	mustCode(t, err, connect.CodeUnavailable, KindNotLeader)
	b.assertUnchanged(t, before, "requests whose key could not be looked up")
	want := float64(DefaultLimits().AuthFailureBurst + 3)
	if f, r := counterValue(t, reg, catchUpsMetric, map[string]string{"outcome": catchUpFailed}), authRejected(t, reg, "unauthenticated"); f != want || r != 0 {
		t.Fatalf("metrics: %v failed catch-ups, %v unauthenticated; want %v and 0", f, r, want)
	}
}

func TestKeyCatchUp_ReadRechecksRevocation(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	prod := b.createKey(t, "", "producer")
	id, srv := revokedAtBarrier(t, b, prod)
	_, err := producerOf(srv, prod).GetTask(context.Background(), connect.NewRequest(&pb.GetTaskRequest{TaskId: "absent"}))
	mustCode(t, err, connect.CodeUnauthenticated, KindUnauthenticated)
	if !strings.Contains(err.Error(), "unknown API key") {
		t.Fatalf("GetTask with a key revoked at the barrier = %v", err)
	}
	if _, ok := b.node.Reads().Key(id); ok {
		t.Fatal("the key is still live")
	}
}

// A request preauth let on as a follower's (its key unknown there) can
// reach localGate after the node became leader. Its catch-up runs under a
// pre-authentication slot as in preauth: with none free it is refused
// busy, before any barrier and without reaching the handler; with one it
// finds the key the barrier applied, the handler sees its principal, and
// the slot is given back.
func TestKeyCatchUp_LocalGateHoldsAPreAuthSlot(t *testing.T) {
	t.Parallel()
	s, _, lagging := laggingKeyServer(t, setup(t, nil), nil)
	var served []principal
	gate := s.localGate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := principalFrom(r.Context())
		if err != nil {
			t.Errorf("the handler ran for a request that is not authenticated: %v", err)
		}
		served = append(served, p)
	}))
	call := func() int {
		r := httptest.NewRequest(http.MethodPost, "/termivar.v1.Producer/GetTask", nil)
		r.Header.Set("Authorization", "Bearer "+lagging.Key)
		// NB: what preauth hands on for a key a follower does not know.
		res := authResult{err: errUnauthenticated("unknown API key"), src: "192.0.2.1"}
		w := httptest.NewRecorder()
		gate.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), authCtxKey{}, res)))
		return w.Code
	}
	for range cap(s.preauthSem) {
		s.preauthSem <- struct{}{}
	}
	if code := call(); code != http.StatusServiceUnavailable || len(served) != 0 || s.catchUp.barriers.Load() != 0 {
		t.Fatalf("with no pre-authentication slot free: status %d, %d served, %d barriers; want 503, none, none", code, len(served), s.catchUp.barriers.Load())
	}
	for range cap(s.preauthSem) {
		<-s.preauthSem
	}
	if code := call(); code != http.StatusOK || len(served) != 1 || served[0].KeyID != lagging.ID || s.catchUp.barriers.Load() != 1 {
		t.Fatalf("with a slot free: status %d, served %v, %d barriers; want 200, the lagging key, 1", code, served, s.catchUp.barriers.Load())
	}
	if n := len(s.preauthSem); n != 0 {
		t.Fatalf("%d pre-authentication slots still taken after the call", n)
	}
}

// A barrier that overruns its context (raft has not taken it yet) does
// not hold a request past two barriers' bound: the request is answered a
// retryable Unavailable while the barrier still runs, charged to nobody.
func TestKeyCatchUp_OverrunningBarrierIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	release := make(chan struct{})
	defer close(release)
	reg := metrics.New()
	s, srv := lagServer(t, b, reg, func(context.Context) error {
		<-release // ignores its context
		return nil
	})
	s.catchUp.timeout = 20 * time.Millisecond
	g, err := apikey.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	var callErr error
	go func() {
		_, callErr = producerOf(srv, g.Key).GetTask(context.Background(), connect.NewRequest(&pb.GetTaskRequest{TaskId: "x"}))
		done.Store(true)
	}()
	waitUntil(t, "the request answered while its barrier still runs", done.Load)
	mustCode(t, callErr, connect.CodeUnavailable, KindUnavailable)
	if f, r := counterValue(t, reg, catchUpsMetric, map[string]string{"outcome": catchUpFailed}), authRejected(t, reg, "unauthenticated"); f != 1 || r != 0 {
		t.Fatalf("metrics: %v failed catch-ups, %v unauthenticated; want 1 and 0", f, r)
	}
}

// Backup does its own linearizable read: a system admin key revoked before
// the call (the revocation applied at the read's barrier) is refused, and
// no backup is recorded or streamed.
func TestKeyCatchUp_BackupRechecksRevocation(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	admin := b.createKey(t, "", "admin")
	_, srv := revokedAtBarrier(t, b, admin)
	before := b.node.Reads().ExportAt
	st0, err := before()
	if err != nil {
		t.Fatal(err)
	}
	cl := termivarv1connect.NewClusterClient(srv.Client(), srv.URL, connect.WithInterceptors(authInterceptor{admin}))
	st, err := cl.Backup(context.Background(), connect.NewRequest(&pb.BackupRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	chunks := 0
	for st.Receive() {
		chunks++
	}
	mustCode(t, st.Err(), connect.CodeUnauthenticated, KindUnauthenticated)
	if chunks != 0 {
		t.Fatalf("a revoked key received %d backup chunks", chunks)
	}
	st1, err := before()
	if err != nil {
		t.Fatal(err)
	}
	// The revocation is the only entry applied: no backup was recorded.
	if st1.Index != st0.Index+1 {
		t.Fatalf("applied index %d -> %d, want exactly the revocation", st0.Index, st1.Index)
	}
}

// revokedAtBarrier serves b's node through a lagServer whose first read
// barrier revokes key: the revocation was acknowledged before the read,
// and this node applies it at the read's barrier. It returns the key's ID.
func revokedAtBarrier(t *testing.T, b *testBundle, key string) (string, *httptest.Server) {
	t.Helper()
	id, _, err := apikey.Parse(key)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	_, srv := lagServer(t, b, nil, func(ctx context.Context) error {
		var err error
		once.Do(func() {
			_, err = b.clients(b.adminKey).admin.RevokeKey(ctx, connect.NewRequest(&pb.RevokeKeyRequest{KeyId: id}))
		})
		return err
	})
	return id, srv
}

// One source holds at most perSource catch-up waits: with that many
// waiting on a held barrier, its next unknown key is answered busy at
// once (no barrier, nothing changed, not charged as a failed
// authentication), and the waits are given back when they end.
func TestKeyCatchUp_PerSourceBound(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reg := metrics.New()
	s, srv, release := heldBarrierServer(t, b, reg)
	const bound = 2
	s.catchUp.perSource = bound
	unknown := func() termivarv1connect.ProducerClient { return unknownProducer(t, srv) }
	before := b.state(t)
	errs := make([]error, bound)
	var wg sync.WaitGroup
	for i := range bound {
		p := unknown()
		wg.Go(func() { errs[i] = getTaskX(p) })
	}
	waitUntil(t, "the source's waits all taken", func() bool { return s.catchUp.waiting.Load() == bound })
	mustCode(t, getTaskX(unknown()), connect.CodeUnavailable, KindBusy)
	if got := s.catchUp.barriers.Load(); got != 1 {
		t.Fatalf("barriers = %d, want 1: the refused request started none", got)
	}
	close(release)
	wg.Wait()
	for _, err := range errs {
		mustCode(t, err, connect.CodeUnauthenticated, KindUnauthenticated)
	}
	// The waits were given back: the source may wait again.
	mustCode(t, getTaskX(unknown()), connect.CodeUnauthenticated, KindUnauthenticated)
	b.assertUnchanged(t, before, "requests with unknown keys")
	if busy, u := authRejected(t, reg, "busy"), authRejected(t, reg, "unauthenticated"); busy != 1 || u != bound+1 {
		t.Fatalf("auth rejected: %v busy, %v unauthenticated; want 1 and %d", busy, u, bound+1)
	}
}

// TestKeyCatchUp_TotalBound: all sources together hold at most half the
// pre-authentication slots in catch-up waits (catchUp.total); an unknown
// key past that is answered busy at once, without a barrier, even from a
// source below its own bound, so requests with good keys always find
// slots; the waits given back, unknown keys wait again.
func TestKeyCatchUp_TotalBound(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reg := metrics.New()
	s, srv, held := heldBarrierServer(t, b, reg)
	release := sync.OnceFunc(func() { close(held) })
	defer release() // also when the test fails while requests wait
	if want := s.limits.MaxPreAuthRequests / 2; s.catchUp.total != want {
		t.Fatalf("total bound %d, want %d: half of the pre-authentication slots", s.catchUp.total, want)
	}
	const bound = 2
	s.catchUp.total = bound // the one test source stays below its own bound
	unknown := func() termivarv1connect.ProducerClient { return unknownProducer(t, srv) }
	errs := make([]error, bound)
	var wg sync.WaitGroup
	for i := range bound {
		p := unknown()
		wg.Go(func() { errs[i] = getTaskX(p) })
	}
	waitUntil(t, "every catch-up wait taken", func() bool { return s.catchUp.waiting.Load() == bound })
	// NB: bounded, so that a request let on to wait fails the test
	// instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := unknown().GetTask(ctx, connect.NewRequest(&pb.GetTaskRequest{TaskId: "x"}))
	mustCode(t, err, connect.CodeUnavailable, KindBusy)
	if got := s.catchUp.barriers.Load(); got != 1 {
		t.Fatalf("barriers = %d, want 1: the refused request started none", got)
	}
	// A good key is not held up by the flood.
	good := producerOf(srv, b.createKey(t, "", "producer"))
	mustCode(t, getTaskX(good), connect.CodeNotFound, "")
	release()
	wg.Wait()
	for _, err := range errs {
		mustCode(t, err, connect.CodeUnauthenticated, KindUnauthenticated)
	}
	mustCode(t, getTaskX(unknown()), connect.CodeUnauthenticated, KindUnauthenticated)
	if busy := authRejected(t, reg, "busy"); busy != 1 {
		t.Fatalf("auth rejected busy %v, want 1", busy)
	}
}

// unknownProducer is a producer client of srv with a well-formed key no
// node knows.
func unknownProducer(t *testing.T, srv *httptest.Server) termivarv1connect.ProducerClient {
	t.Helper()
	g, err := apikey.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	return producerOf(srv, g.Key)
}

// getTaskX is a GetTask of a task that does not exist.
func getTaskX(p termivarv1connect.ProducerClient) error {
	_, err := p.GetTask(context.Background(), connect.NewRequest(&pb.GetTaskRequest{TaskId: "x"}))
	return err
}

// heldBarrierServer is a lagServer whose first catch-up barrier is held
// until release is closed (every later one passes at once).
func heldBarrierServer(t *testing.T, b *testBundle, reg *metrics.Registry) (*Server, *httptest.Server, chan struct{}) {
	t.Helper()
	release := make(chan struct{})
	var calls atomic.Int64
	s, srv := lagServer(t, b, reg, func(ctx context.Context) error {
		if calls.Add(1) == 1 {
			<-release
		}
		return nil
	})
	// NB: the held barrier ignores its context; a long bound keeps a slow
	// machine from ending the waits (wait's bound) before every request
	// waits.
	s.catchUp.timeout = time.Minute
	return s, srv, release
}

// A key applied between preauth's authentication and its catch-up check
// (a member catching up) is decided again from the table, not refused
// with the stale "unknown API key"; a wrong secret still fails.
func TestKeyCatchUp_KeyAppliedMeanwhileIsDecidedAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	prod := b.createKey(t, "", "producer")
	stale := authResult{err: errUnauthenticated("unknown API key"), src: "192.0.2.1"}
	for key, wantOK := range map[string]bool{prod: true, prod[:len(prod)-1] + flipLast(prod): false} {
		r := httptest.NewRequest(http.MethodPost, "/termivar.v1.Producer/GetTask", nil)
		r.Header.Set("Authorization", "Bearer "+key)
		res, err := b.api.settleUnknownKey(r, stale)
		if err != nil {
			t.Fatalf("settleUnknownKey: %v", err)
		}
		if ok := res.err == nil; ok != wantOK {
			t.Fatalf("key known meanwhile (right secret %v): err = %v", wantOK, res.err)
		}
		if wantOK && res.p.KeyID == "" {
			t.Fatal("no principal for the key found meanwhile")
		}
	}
}

// flipLast is a character other than s's last.
func flipLast(s string) string {
	if s[len(s)-1] == 'A' {
		return "B"
	}
	return "A"
}
