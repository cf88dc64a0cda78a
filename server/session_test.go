package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
	"github.com/termivar/distributed/internal/apikey"
	"github.com/termivar/distributed/internal/metrics"
	"github.com/termivar/distributed/internal/wireerr"
)

type sessionStream = connect.BidiStreamForClient[pb.SessionRequest, pb.SessionResponse]

// openSession opens a worker session with key over h2c; the stream is
// closed at the test's end.
func openSession(t *testing.T, b *testBundle, key string) *sessionStream {
	t.Helper()
	return openSessionOf(t, b, key, false)
}

// openSessionOf opens a producer session (producer) or a worker session
// with key over h2c; the stream is closed at the test's end.
func openSessionOf(t *testing.T, b *testBundle, key string, producer bool) *sessionStream {
	t.Helper()
	hc := h2cHTTPClient()
	t.Cleanup(hc.CloseIdleConnections)
	opt := connect.WithInterceptors(authInterceptor{key})
	ctx, cancel := context.WithCancel(context.Background())
	var st *sessionStream
	if producer {
		st = termivarv1connect.NewProducerClient(hc, b.srv.URL, opt).Session(ctx)
	} else {
		st = termivarv1connect.NewWorkerClient(hc, b.srv.URL, opt).Session(ctx)
	}
	t.Cleanup(func() {
		_ = st.CloseRequest()
		cancel()
		_ = st.CloseResponse()
	})
	return st
}

func sendMsg(t *testing.T, st *sessionStream, m *pb.SessionRequest) {
	t.Helper()
	if err := st.Send(m); err != nil {
		t.Fatalf("send %d: %v", m.GetId(), err)
	}
}

// recvMsg receives one answer, failing the test after 10 s.
func recvMsg(t *testing.T, st *sessionStream) (*pb.SessionResponse, error) {
	t.Helper()
	type out struct {
		r   *pb.SessionResponse
		err error
	}
	ch := make(chan out, 1)
	go func() { r, err := st.Receive(); ch <- out{r, err} }()
	select {
	case o := <-ch:
		return o.r, o.err
	case <-time.After(10 * time.Second):
		t.Fatal("no answer within 10 s")
		return nil, nil
	}
}

func mustRecv(t *testing.T, st *sessionStream) *pb.SessionResponse {
	t.Helper()
	r, err := recvMsg(t, st)
	if err != nil {
		t.Fatalf("receive: %v", err)
	}
	return r
}

// longPolling sends st an acquire of w1 (id 1) that long-polls up to
// waitSecs and waits until it does, on the server's long-poll changes.
func longPolling(t *testing.T, b *testBundle, st *sessionStream, waitSecs uint32) {
	t.Helper()
	sendMsg(t, st, acquireMsg(1, &pb.AcquireRequest{WorkerId: "w1", WaitSecs: waitSecs}))
	timeout := time.After(10 * time.Second)
	for {
		changed := b.api.LongPollsChanged() // NB: before the count is read
		if b.api.LongPollsWaiting() == 1 {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatal("timed out waiting for the acquire to long-poll")
		}
	}
}

func acquireMsg(id uint64, m *pb.AcquireRequest) *pb.SessionRequest {
	return &pb.SessionRequest{Id: id, Op: &pb.SessionRequest_Acquire{Acquire: m}}
}

func completeMsg(id uint64, m *pb.CompleteManyRequest) *pb.SessionRequest {
	return &pb.SessionRequest{Id: id, Op: &pb.SessionRequest_CompleteMany{CompleteMany: m}}
}

// sessionWorker registers worker "w1" (capacity 4) with a fresh worker
// key and returns the key and its clients.
func sessionWorker(t *testing.T, b *testBundle) (string, clients) {
	t.Helper()
	key := b.createKey(t, "", "worker")
	c := b.clients(key)
	if _, err := c.worker.RegisterWorker(context.Background(), connect.NewRequest(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 4})); err != nil {
		t.Fatal(err)
	}
	return key, c
}

func enqueueIDs(t *testing.T, b *testBundle, ids ...string) {
	t.Helper()
	var tasks []*pb.NewTask
	for _, id := range ids {
		tasks = append(tasks, &pb.NewTask{TaskId: id, ScanId: "s", TargetRef: "t-" + id})
	}
	if _, err := b.clients(b.adminKey).producer.Enqueue(context.Background(), connect.NewRequest(&pb.EnqueueRequest{Tasks: tasks})); err != nil {
		t.Fatal(err)
	}
}

// sameError fails unless the session's answer carries the unary call's
// error: the same code, message and detail.
func sameError(t *testing.T, what string, got *pb.SessionError, want error) {
	t.Helper()
	ce, ok := errors.AsType[*connect.Error](want)
	if !ok {
		t.Fatalf("%s: unary error %v is no *connect.Error", what, want)
	}
	wd, _ := wireerr.DetailOf(ce)
	if got == nil || connect.Code(got.GetCode()) != ce.Code() || got.GetMessage() != ce.Message() || !proto.Equal(got.GetDetail(), wd) {
		t.Fatalf("%s: session answered %v, unary %v (detail %v)", what, got, ce, wd)
	}
}

// TestSession_BadInputAsUnary: each bad message is answered with the
// unary call's error (code, message, detail) and changes nothing.
func TestSession_BadInputAsUnary(t *testing.T) {
	b := setup(t, nil)
	key, c := sessionWorker(t, b)
	enqueueIDs(t, b, "a")
	before := b.state(t)
	audits := auditCounts(t, b.auditLog)
	bad := []*pb.SessionRequest{
		acquireMsg(1, &pb.AcquireRequest{WorkerId: "w1", WaitSecs: 61}),
		acquireMsg(2, &pb.AcquireRequest{WorkerId: "w1", MaxTasks: 257}),
		acquireMsg(3, &pb.AcquireRequest{WorkerId: "nobody"}),
		completeMsg(4, &pb.CompleteManyRequest{}),
		{Id: 6, Op: &pb.SessionRequest_Complete{Complete: &pb.CompleteRequest{LeaseToken: []byte("forged"), Result: []byte("r")}}},
	}
	st := openSession(t, b, key)
	for _, m := range bad {
		sendMsg(t, st, m)
		got := mustRecv(t, st)
		var want error
		switch {
		case m.GetAcquire() != nil:
			_, want = c.worker.Acquire(context.Background(), connect.NewRequest(m.GetAcquire()))
		case m.GetCompleteMany() != nil:
			_, want = c.worker.CompleteMany(context.Background(), connect.NewRequest(m.GetCompleteMany()))
		default:
			_, want = c.worker.Complete(context.Background(), connect.NewRequest(m.GetComplete()))
		}
		if got.GetId() != m.GetId() {
			t.Fatalf("answer %d to message %d", got.GetId(), m.GetId())
		}
		sameError(t, "message "+string(rune('0'+m.GetId())), got.GetError(), want)
	}
	sendMsg(t, st, &pb.SessionRequest{Id: 5})
	if e := mustRecv(t, st).GetError(); connect.Code(e.GetCode()) != connect.CodeInvalidArgument || e.GetDetail().GetKind() != KindInvalidArgument {
		t.Fatalf("empty message answered %v", e)
	}
	if after := b.state(t); string(after) != string(before) {
		t.Fatal("bad messages changed the state")
	}
	// NB: one audit line per message, as per unary call (the unary calls
	// above made one each, too).
	got := auditCounts(t, b.auditLog)
	if n := got["Worker.Acquire"] - audits["Worker.Acquire"]; n != 6 {
		t.Fatalf("Worker.Acquire audit lines: %d, want 6", n)
	}
	if n := got["Worker.CompleteMany"] - audits["Worker.CompleteMany"]; n != 2 {
		t.Fatalf("Worker.CompleteMany audit lines: %d, want 2", n)
	}
	if n := got["Worker.Complete"] - audits["Worker.Complete"]; n != 2 {
		t.Fatalf("Worker.Complete audit lines: %d, want 2", n)
	}
}

// TestSession_LeaseAndComplete: a session leases and completes as the
// unary calls do, and a completion carried by a long-polling acquire is
// answered at once, before the leases, which arrive when a task does;
// answers come by id, out of order.
func TestSession_LeaseAndComplete(t *testing.T) {
	b := setup(t, nil)
	key, c := sessionWorker(t, b)
	enqueueIDs(t, b, "a")
	st := openSession(t, b, key)
	sendMsg(t, st, acquireMsg(1, &pb.AcquireRequest{WorkerId: "w1", Start: true}))
	r := mustRecv(t, st)
	tasks := r.GetAcquire().GetTasks()
	if r.GetId() != 1 || len(tasks) != 1 || tasks[0].GetTaskId() != "a" {
		t.Fatalf("acquire answered %v", r)
	}
	// Carried completion of "a" with a 10 s long-poll on an empty queue.
	sendMsg(t, st, acquireMsg(2, &pb.AcquireRequest{WorkerId: "w1", WaitSecs: 10, Complete: []*pb.CompleteRequest{{LeaseToken: tasks[0].GetLeaseToken(), Result: []byte("ok")}}}))
	r = mustRecv(t, st)
	done := r.GetCompleted().GetResults()
	if r.GetId() != 2 || len(done) != 1 || len(done[0].GetResponse().GetReceiptToken()) == 0 {
		t.Fatalf("carried completion answered %v", r)
	}
	got, err := c.worker.Complete(context.Background(), connect.NewRequest(&pb.CompleteRequest{LeaseToken: tasks[0].GetLeaseToken(), Result: []byte("ok")}))
	if err != nil || !got.Msg.GetAlreadyCompleted() {
		t.Fatalf("unary replay of the carried completion: %v, %v", got, err)
	}
	sendMsg(t, st, &pb.SessionRequest{Id: 4, Op: &pb.SessionRequest_Complete{Complete: &pb.CompleteRequest{LeaseToken: tasks[0].GetLeaseToken(), Result: []byte("ok")}}})
	if r := mustRecv(t, st); r.GetId() != 4 || !r.GetComplete().GetAlreadyCompleted() || !bytes.Equal(r.GetComplete().GetReceiptToken(), got.Msg.GetReceiptToken()) {
		t.Fatalf("session replay of the carried completion: %v, unary %v", r, got.Msg)
	}
	// Out of order: message 3 is answered while message 2 still waits.
	sendMsg(t, st, completeMsg(3, &pb.CompleteManyRequest{Items: []*pb.CompleteRequest{{LeaseToken: tasks[0].GetLeaseToken(), Result: []byte("ok")}}}))
	r = mustRecv(t, st)
	if r.GetId() != 3 || !r.GetCompleteMany().GetResults()[0].GetResponse().GetAlreadyCompleted() {
		t.Fatalf("complete_many answered %v", r)
	}
	waitUntil(t, "the acquire long-polls", func() bool { return b.api.LongPollsWaiting() == 1 })
	enqueueIDs(t, b, "b")
	r = mustRecv(t, st)
	if r.GetId() != 2 || len(r.GetAcquire().GetTasks()) != 1 || r.GetAcquire().GetTasks()[0].GetTaskId() != "b" || len(r.GetAcquire().GetCompleted()) != 0 {
		t.Fatalf("long-poll answered %v", r)
	}
}

// TestSession_RevokedKeyEndsStream: a key revoked while its session is
// open is refused on its next message, and the stream ends
// Unauthenticated.
func TestSession_RevokedKeyEndsStream(t *testing.T) {
	b := setup(t, nil)
	admin := b.clients(b.adminKey).admin
	k, err := admin.CreateKey(context.Background(), connect.NewRequest(&pb.CreateKeyRequest{Role: "worker"}))
	if err != nil {
		t.Fatal(err)
	}
	st := openSession(t, b, k.Msg.GetKey())
	bad := &pb.CompleteManyRequest{Items: []*pb.CompleteRequest{{LeaseToken: []byte("forged")}}}
	sendMsg(t, st, completeMsg(1, bad))
	if r := mustRecv(t, st); r.GetCompleteMany().GetResults()[0].GetError().GetKind() != KindInvalidToken {
		t.Fatalf("before revocation: %v", r)
	}
	if _, err := admin.RevokeKey(context.Background(), connect.NewRequest(&pb.RevokeKeyRequest{KeyId: k.Msg.GetKeyId()})); err != nil {
		t.Fatal(err)
	}
	before := b.state(t)
	sendMsg(t, st, completeMsg(2, bad))
	r, err := recvMsg(t, st)
	if err == nil || connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("after revocation: answer %v, stream error %v", r, err)
	}
	if string(b.state(t)) != string(before) {
		t.Fatal("the refused message changed the state")
	}
}

// TestSession_EndAnswersAdmittedFirst: a session whose key is revoked
// while an acquire of it waits answers that acquire (its wait cut off,
// empty) before the stream ends Unauthenticated at the next message: the
// client takes the messages a server-ended stream left unanswered as not
// run (client/session.go C2), so none the server admitted may be left so.
func TestSession_EndAnswersAdmittedFirst(t *testing.T) {
	b := setup(t, nil)
	key, _ := sessionWorker(t, b)
	id, _, err := apikey.Parse(key)
	if err != nil {
		t.Fatal(err)
	}
	st := openSession(t, b, key)
	longPolling(t, b, st, 30)
	if _, err := b.clients(b.adminKey).admin.RevokeKey(context.Background(), connect.NewRequest(&pb.RevokeKeyRequest{KeyId: id})); err != nil {
		t.Fatal(err)
	}
	sendMsg(t, st, completeMsg(2, &pb.CompleteManyRequest{Items: []*pb.CompleteRequest{{LeaseToken: []byte("forged")}}}))
	if r := mustRecv(t, st); r.GetId() != 1 || r.GetAcquire() == nil || len(r.GetAcquire().GetTasks()) != 0 {
		t.Fatalf("the waiting acquire answered %v, want its empty answer before the stream's end", r)
	}
	if _, err := recvMsg(t, st); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("stream end: %v, want Unauthenticated", err)
	}
}

// TestSession_WrongRoleRefused: a producer key may not open a worker
// session: PermissionDenied, audited once.
func TestSession_WrongRoleRefused(t *testing.T) {
	b := setup(t, nil)
	key := b.createKey(t, "", "producer")
	before := auditCounts(t, b.auditLog)["Worker.Session"]
	st := openSession(t, b, key)
	_ = st.Send(acquireMsg(1, &pb.AcquireRequest{WorkerId: "w1"}))
	if _, err := recvMsg(t, st); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("producer key: %v, want PermissionDenied", err)
	}
	if n := auditCounts(t, b.auditLog)["Worker.Session"] - before; n != 1 {
		t.Fatalf("Worker.Session audit lines: %d, want 1", n)
	}
}

// TestSession_Limits: a message beyond MaxSessionMessages in flight is
// answered session_limit; a session beyond MaxSessionsPerKey is refused.
func TestSession_Limits(t *testing.T) {
	b := setupServer(t, nil, Config{Limits: Limits{MaxSessionMessages: 1, MaxSessionsPerKey: 1}})
	key, _ := sessionWorker(t, b)
	st := openSession(t, b, key)
	longPolling(t, b, st, 10)
	sendMsg(t, st, acquireMsg(2, &pb.AcquireRequest{WorkerId: "w1"}))
	r := mustRecv(t, st)
	if e := r.GetError(); r.GetId() != 2 || connect.Code(e.GetCode()) != connect.CodeResourceExhausted || e.GetDetail().GetKind() != KindSessionLimit {
		t.Fatalf("message over the limit answered %v", r)
	}
	second := openSession(t, b, key)
	// NB: the refusal may end the stream before the message is written
	// (EOF): Receive then reports why.
	_ = second.Send(acquireMsg(1, &pb.AcquireRequest{WorkerId: "w1"}))
	if _, err := recvMsg(t, second); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("second session of the key: %v", err)
	}
}

// TestSession_SlotFreeOnAnswer: a message's slot is given back before its
// answer is sent (serveJob), so a client at MaxSessionMessages that sends
// its next message on each answer is never answered session_limit (S3).
func TestSession_SlotFreeOnAnswer(t *testing.T) {
	b := setupServer(t, nil, Config{Limits: Limits{MaxSessionMessages: 1}})
	key, _ := sessionWorker(t, b)
	st := openSession(t, b, key)
	for id := uint64(1); id <= 50; id++ {
		sendMsg(t, st, acquireMsg(id, &pb.AcquireRequest{WorkerId: "w1"}))
		if r := mustRecv(t, st); r.GetId() != id || r.GetAcquire() == nil {
			t.Fatalf("message %d sent on the answer before it, at the limit: answered %v", id, r)
		}
	}
}

// TestSession_ShutdownEndsStream: Close answers the session's waiting
// acquire (empty) and ends the stream Unavailable; goleak (TestMain)
// checks that no goroutine of it is left.
func TestSession_ShutdownEndsStream(t *testing.T) {
	b := setup(t, nil)
	key, _ := sessionWorker(t, b)
	st := openSession(t, b, key)
	longPolling(t, b, st, 30)
	b.api.Close()
	r := mustRecv(t, st)
	if r.GetId() != 1 || len(r.GetAcquire().GetTasks()) != 0 {
		t.Fatalf("waiting acquire answered %v", r)
	}
	if _, err := recvMsg(t, st); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("stream end: %v", err)
	}
}

// TestSession_UnknownIfEnded: a message's error after its session ended
// under it (context cancelled) is Unavailable with an unknown outcome (a
// proposal cut off may still apply); otherwise the error is unchanged.
func TestSession_UnknownIfEnded(t *testing.T) {
	orig := toConnect(&apiError{KindCanceled, "context canceled"})
	if got := unknownIfEnded(context.Background(), orig); got != orig {
		t.Fatalf("live session: %v, want the error unchanged", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ce, ok := errors.AsType[*connect.Error](unknownIfEnded(ctx, orig))
	if !ok || ce.Code() != connect.CodeUnavailable || ce.Meta().Get(OutcomeHeader) != OutcomeUnknown {
		t.Fatalf("ended session: %v, want Unavailable with an unknown outcome", ce)
	}
	if d, ok := wireerr.DetailOf(ce); !ok || d.GetKind() != KindUnavailable {
		t.Fatalf("ended session: detail %v", d)
	}
}

// garbleCodec is the proto codec whose requests do not decode (a field
// of wire type 7): a session message the server cannot read.
type garbleCodec struct{}

func (garbleCodec) Name() string                    { return "proto" }
func (garbleCodec) Marshal(any) ([]byte, error)     { return []byte{0x0f, 0x01}, nil }
func (garbleCodec) Unmarshal(b []byte, m any) error { return proto.Unmarshal(b, m.(proto.Message)) }

// TestSession_UnreadableMessageTyped: a message over the Worker service's
// request limit ends the stream ResourceExhausted (as the unary call is
// refused) and one that does not decode InvalidArgument, each with its
// ErrorDetail (server/session.go S6), so the client does not take the
// stream as broken; neither changes anything.
func TestSession_UnreadableMessageTyped(t *testing.T) {
	b := setup(t, nil)
	key, c := sessionWorker(t, b)
	enqueueIDs(t, b, "a")
	before := b.state(t)
	big := &pb.CompleteRequest{LeaseToken: []byte("x"), Result: make([]byte, MaxWorkerRequestBytes+1)}
	if _, err := c.worker.Complete(context.Background(), connect.NewRequest(big)); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("unary oversized complete: %v", err)
	}
	st := openSession(t, b, key)
	_ = st.Send(&pb.SessionRequest{Id: 1, Op: &pb.SessionRequest_Complete{Complete: big}}) // NB: may meet the stream's end (EOF)
	_, err := recvMsg(t, st)
	if d, ok := wireerr.DetailOf(err); connect.CodeOf(err) != connect.CodeResourceExhausted || !ok || d.GetKind() != KindMessageTooLarge {
		t.Fatalf("oversized message: %v (detail %v), want resource_exhausted %s", err, d, KindMessageTooLarge)
	}
	hc := h2cHTTPClient()
	t.Cleanup(hc.CloseIdleConnections)
	wc := termivarv1connect.NewWorkerClient(hc, b.srv.URL, connect.WithInterceptors(authInterceptor{key}), connect.WithCodec(garbleCodec{}))
	gs := wc.Session(context.Background())
	t.Cleanup(func() { _ = gs.CloseRequest(); _ = gs.CloseResponse() })
	_ = gs.Send(acquireMsg(2, &pb.AcquireRequest{WorkerId: "w1"}))
	_, err = recvMsg(t, gs)
	if d, ok := wireerr.DetailOf(err); connect.CodeOf(err) != connect.CodeInvalidArgument || !ok || d.GetKind() != KindInvalidArgument {
		t.Fatalf("undecodable message: %v (detail %v), want invalid_argument", err, d)
	}
	if string(b.state(t)) != string(before) {
		t.Fatal("an unreadable message changed the state")
	}
}

// authRejected is the node's termivar_api_auth_rejected_total{reason}.
func authRejected(t *testing.T, reg *metrics.Registry, reason string) float64 {
	t.Helper()
	return counterValue(t, reg, "termivar_api_auth_rejected_total", map[string]string{"reason": reason})
}

// counterValue is the value of counter name with every label of labels
// (0 when no such series exists yet).
func counterValue(t *testing.T, reg *metrics.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			n := 0
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v == l.GetValue() {
					n++
				}
			}
			if n == len(labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestSession_AdmitMetricsAsUnary: a session whose key is revoked counts
// one unauthenticated rejection, as preauth counts the unary call's; one
// whose tenant is gone is refused unknown_tenant and, as the unary call's
// is, not counted.
func TestSession_AdmitMetricsAsUnary(t *testing.T) {
	reg := metrics.New()
	b := setupServer(t, nil, Config{Metrics: reg.API})
	key, _ := sessionWorker(t, b)
	id, _, err := apikey.Parse(key)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := b.node.Reads().Key(id)
	gone := &session{h: workerHandler{b.api}, p: principal{KeyID: id, Tenant: "no-such-tenant"}, hash: rec.Hash}
	before := authRejected(t, reg, "unauthenticated")
	if err := gone.admit(); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("tenant gone: %v, want unknown_tenant", err)
	}
	if n := authRejected(t, reg, "unauthenticated") - before; n != 0 {
		t.Fatalf("tenant gone counted %v unauthenticated rejections, want 0", n)
	}
	st := openSession(t, b, key)
	if _, err := b.clients(b.adminKey).admin.RevokeKey(context.Background(), connect.NewRequest(&pb.RevokeKeyRequest{KeyId: id})); err != nil {
		t.Fatal(err)
	}
	_ = st.Send(acquireMsg(1, &pb.AcquireRequest{WorkerId: "w1"}))
	if _, err := recvMsg(t, st); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("revoked key: %v", err)
	}
	if n := authRejected(t, reg, "unauthenticated") - before; n != 1 {
		t.Fatalf("revoked key counted %v unauthenticated rejections, want 1", n)
	}
}

// TestSession_CancelledLongPollLeasesNothing: a cancel of a long-polling
// acquire ends its wait at once (answered empty, S7) and it leases
// nothing: the task enqueued afterwards is leased by the next acquire. A
// cancel of a message already answered, or of none, changes nothing.
func TestSession_CancelledLongPollLeasesNothing(t *testing.T) {
	b := setup(t, nil)
	key, c := sessionWorker(t, b)
	st := openSession(t, b, key)
	longPolling(t, b, st, 60)
	sendMsg(t, st, &pb.SessionRequest{Op: &pb.SessionRequest_Cancel{Cancel: &pb.SessionCancel{Id: 1}}})
	if r := mustRecv(t, st); r.GetId() != 1 || r.GetAcquire() == nil || len(r.GetAcquire().GetTasks()) != 0 {
		t.Fatalf("cancelled acquire answered %v, want its empty answer", r)
	}
	if n := b.api.LongPollsWaiting(); n != 0 {
		t.Fatalf("%d acquires still long-poll after the cancel", n)
	}
	sendMsg(t, st, &pb.SessionRequest{Op: &pb.SessionRequest_Cancel{Cancel: &pb.SessionCancel{Id: 1}}})  // answered already
	sendMsg(t, st, &pb.SessionRequest{Op: &pb.SessionRequest_Cancel{Cancel: &pb.SessionCancel{Id: 99}}}) // never sent
	enqueueIDs(t, b, "a")
	got, err := c.worker.Acquire(context.Background(), connect.NewRequest(&pb.AcquireRequest{WorkerId: "w1", Start: true}))
	if err != nil || len(got.Msg.GetTasks()) != 1 || got.Msg.GetTasks()[0].GetTaskId() != "a" {
		t.Fatalf("acquire after the cancel: %v, %v; want task a, unleased by the cancelled one", got, err)
	}
	// The session still serves messages: a cancel is no message of its own.
	sendMsg(t, st, completeMsg(2, &pb.CompleteManyRequest{Items: []*pb.CompleteRequest{{LeaseToken: got.Msg.GetTasks()[0].GetLeaseToken(), Result: []byte("ok")}}}))
	if r := mustRecv(t, st); r.GetId() != 2 || r.GetCompleteMany().GetResults()[0].GetResponse() == nil {
		t.Fatalf("complete after the cancels answered %v", r)
	}
}

// TestSession_MessagesReuseGoroutine: messages sent one after another's
// answer run on the goroutine that answered the one before (one started
// for the whole run, not one each), two at once on two; once the client
// closes its side the waiting goroutine ends with the handler (goleak,
// TestMain), and messages answered meanwhile are answered as before.
func TestSession_MessagesReuseGoroutine(t *testing.T) {
	b := setup(t, nil)
	key, _ := sessionWorker(t, b)
	st := openSession(t, b, key)
	before := b.api.sessionServers.Load()
	for id := uint64(1); id <= 20; id++ {
		sendMsg(t, st, acquireMsg(id, &pb.AcquireRequest{WorkerId: "w1"}))
		if r := mustRecv(t, st); r.GetId() != id || r.GetAcquire() == nil || len(r.GetAcquire().GetTasks()) != 0 {
			t.Fatalf("message %d answered %v", id, r)
		}
	}
	if n := b.api.sessionServers.Load() - before; n != 1 {
		t.Fatalf("20 messages in a row started %d goroutines, want 1", n)
	}
	// A long-poll holds the waiting goroutine: the next message needs a
	// second one, and both are answered.
	sendMsg(t, st, acquireMsg(21, &pb.AcquireRequest{WorkerId: "w1", WaitSecs: 10}))
	waitUntil(t, "the acquire long-polls", func() bool { return b.api.LongPollsWaiting() == 1 })
	sendMsg(t, st, acquireMsg(22, &pb.AcquireRequest{WorkerId: "w1"}))
	if r := mustRecv(t, st); r.GetId() != 22 {
		t.Fatalf("message 22 answered %v", r)
	}
	if n := b.api.sessionServers.Load() - before; n != 2 {
		t.Fatalf("a message beside a long-poll: %d goroutines started in all, want 2", n)
	}
	enqueueIDs(t, b, "a")
	if r := mustRecv(t, st); r.GetId() != 21 || len(r.GetAcquire().GetTasks()) != 1 {
		t.Fatalf("long-poll answered %v", r)
	}
	if err := st.CloseRequest(); err != nil {
		t.Fatal(err)
	}
	// NB: recvMsg fails after 10 s: a waiting goroutine that did not end
	// would hold the handler in its wait for its goroutines (S4).
	if r, err := recvMsg(t, st); !errors.Is(err, io.EOF) {
		t.Fatalf("after the client closed its side: %v, %v; want the stream's clean end (EOF)", r, err)
	}
}

// TestSession_CancelOnReusedGoroutine: a message handed to the goroutine
// that answered the one before runs under a context of its own (S7): a
// cancel of it ends its long-poll, answered empty, and the next message,
// on the same goroutine, is not cancelled with it: it long-polls until a
// task comes.
func TestSession_CancelOnReusedGoroutine(t *testing.T) {
	b := setup(t, nil)
	key, _ := sessionWorker(t, b)
	st := openSession(t, b, key)
	before := b.api.sessionServers.Load()
	sendMsg(t, st, acquireMsg(1, &pb.AcquireRequest{WorkerId: "w1"}))
	if r := mustRecv(t, st); r.GetId() != 1 || r.GetAcquire() == nil {
		t.Fatalf("message 1 answered %v", r)
	}
	sendMsg(t, st, acquireMsg(2, &pb.AcquireRequest{WorkerId: "w1", WaitSecs: 60}))
	waitUntil(t, "message 2 long-polls", func() bool { return b.api.LongPollsWaiting() == 1 })
	sendMsg(t, st, &pb.SessionRequest{Op: &pb.SessionRequest_Cancel{Cancel: &pb.SessionCancel{Id: 2}}})
	if r := mustRecv(t, st); r.GetId() != 2 || r.GetAcquire() == nil || len(r.GetAcquire().GetTasks()) != 0 {
		t.Fatalf("cancelled message 2 answered %v, want its empty answer", r)
	}
	sendMsg(t, st, acquireMsg(3, &pb.AcquireRequest{WorkerId: "w1", WaitSecs: 60}))
	waitUntil(t, "message 3 long-polls", func() bool { return b.api.LongPollsWaiting() == 1 })
	enqueueIDs(t, b, "a")
	if r := mustRecv(t, st); r.GetId() != 3 || len(r.GetAcquire().GetTasks()) != 1 {
		t.Fatalf("message 3 answered %v, want task a", r)
	}
	if n := b.api.sessionServers.Load() - before; n != 1 {
		t.Fatalf("3 messages in a row started %d goroutines, want 1", n)
	}
}
