package server

// Goal: a producer session (Producer.Session, session.go S8) answers each
// enqueue_many message exactly as the unary Producer.EnqueueMany call
// (results, codes, details, audit lines), rechecks its key before each
// message, refuses the worker operations and the worker role, and a
// refused message changes nothing. Method: a real node behind the API on
// h2c; every refusal is compared with the exported state before and after.

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/metrics"
	"github.com/termivar/distributed/internal/wireerr"
)

func enqueueManyMsg(id uint64, reqs ...*pb.EnqueueRequest) *pb.SessionRequest {
	return &pb.SessionRequest{Id: id, Op: &pb.SessionRequest_EnqueueMany{EnqueueMany: &pb.EnqueueManyRequest{Requests: reqs}}}
}

func oneTask(id string) *pb.EnqueueRequest {
	return &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: id, ScanId: "s", TargetRef: "t-" + id}}}
}

// TestProducerSession_EnqueueAsUnary: an enqueue_many message is answered
// item by item as the unary EnqueueMany answers the same requests (the
// accepted ones enqueued, each refusal with the same code, message and
// detail), with one audit line per request as the unary call.
func TestProducerSession_EnqueueAsUnary(t *testing.T) {
	b := setup(t, nil)
	key := b.createKey(t, "", "producer")
	st := openSessionOf(t, b, key, true)
	audits := auditCounts(t, b.auditLog)
	msg := enqueueManyMsg(7, oneTask("a"), oneTask("b"), oneTask("a"), &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "bad id!", ScanId: "s", TargetRef: "t"}}})
	sendMsg(t, st, msg)
	got := mustRecv(t, st)
	res := got.GetEnqueueMany().GetResults()
	if got.GetId() != 7 || len(res) != 4 || res[0].GetResponse() == nil || res[1].GetResponse() == nil {
		t.Fatalf("enqueue_many answered %v", got)
	}
	// The unary call of the same requests now: a and b exist, so every
	// item is refused; the duplicate's and the invalid one's refusals must
	// match the session's byte for byte.
	want, err := b.clients(key).producer.EnqueueMany(context.Background(), connect.NewRequest(msg.GetEnqueueMany()))
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{2, 3} {
		if !proto.Equal(res[i], want.Msg.GetResults()[i]) || res[i].GetError() == nil {
			t.Fatalf("item %d: session %v, unary %v", i, res[i], want.Msg.GetResults()[i])
		}
	}
	for _, id := range []string{"a", "b"} {
		if _, err := b.clients(key).producer.GetTask(context.Background(), connect.NewRequest(&pb.GetTaskRequest{TaskId: id})); err != nil {
			t.Fatalf("task %s enqueued over the session: %v", id, err)
		}
	}
	if n := auditCounts(t, b.auditLog)["Producer.EnqueueMany"] - audits["Producer.EnqueueMany"]; n != 8 {
		t.Fatalf("Producer.EnqueueMany audit lines: %d, want 8 (4 per call)", n)
	}
}

// TestProducerSession_BadInputChangesNothing: a message the unary call
// would refuse whole (no request, more than 256), and a worker operation,
// are answered with the unary refusal (or invalid_argument) and change
// nothing.
func TestProducerSession_BadInputChangesNothing(t *testing.T) {
	b := setup(t, nil)
	key := b.createKey(t, "", "producer")
	st := openSessionOf(t, b, key, true)
	many := make([]*pb.EnqueueRequest, MaxEnqueueMany+1)
	for i := range many {
		many[i] = oneTask("m" + string(rune('a'+i%26)))
	}
	before := b.state(t)
	for i, m := range []*pb.SessionRequest{enqueueManyMsg(1), enqueueManyMsg(2, many...)} {
		sendMsg(t, st, m)
		got := mustRecv(t, st)
		_, want := b.clients(key).producer.EnqueueMany(context.Background(), connect.NewRequest(m.GetEnqueueMany()))
		if got.GetId() != m.GetId() {
			t.Fatalf("answer %d to message %d", got.GetId(), m.GetId())
		}
		sameError(t, "message "+string(rune('1'+i)), got.GetError(), want)
	}
	sendMsg(t, st, acquireMsg(3, &pb.AcquireRequest{WorkerId: "w1"}))
	if e := mustRecv(t, st).GetError(); connect.Code(e.GetCode()) != connect.CodeInvalidArgument || e.GetDetail().GetKind() != KindInvalidArgument {
		t.Fatalf("acquire on a producer session answered %v", e)
	}
	b.assertUnchanged(t, before, "the refused messages")
}

// TestProducerSession_RevokedKeyEndsStream: the key is looked up again
// before each message: once revoked, the next enqueue_many is not run and
// the stream ends Unauthenticated.
func TestProducerSession_RevokedKeyEndsStream(t *testing.T) {
	b := setup(t, nil)
	admin := b.clients(b.adminKey).admin
	k, err := admin.CreateKey(context.Background(), connect.NewRequest(&pb.CreateKeyRequest{Role: "producer"}))
	if err != nil {
		t.Fatal(err)
	}
	st := openSessionOf(t, b, k.Msg.GetKey(), true)
	sendMsg(t, st, enqueueManyMsg(1, oneTask("a")))
	if r := mustRecv(t, st); r.GetEnqueueMany().GetResults()[0].GetResponse() == nil {
		t.Fatalf("before revocation: %v", r)
	}
	if _, err := admin.RevokeKey(context.Background(), connect.NewRequest(&pb.RevokeKeyRequest{KeyId: k.Msg.GetKeyId()})); err != nil {
		t.Fatal(err)
	}
	before := b.state(t)
	sendMsg(t, st, enqueueManyMsg(2, oneTask("b")))
	r, err := recvMsg(t, st)
	if err == nil || connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("after revocation: answer %v, stream error %v", r, err)
	}
	b.assertUnchanged(t, before, "the refused message")
}

// TestProducerSession_WrongRoleRefused: a worker key may not open a
// producer session (PermissionDenied, audited once), and a worker session
// refuses enqueue_many invalid_argument without enqueuing.
func TestProducerSession_WrongRoleRefused(t *testing.T) {
	b := setup(t, nil)
	wkey := b.createKey(t, "", "worker")
	before := auditCounts(t, b.auditLog)["Producer.Session"]
	st := openSessionOf(t, b, wkey, true)
	_ = st.Send(enqueueManyMsg(1, oneTask("a")))
	if _, err := recvMsg(t, st); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("worker key: %v, want PermissionDenied", err)
	}
	if n := auditCounts(t, b.auditLog)["Producer.Session"] - before; n != 1 {
		t.Fatalf("Producer.Session audit lines: %d, want 1", n)
	}
	state := b.state(t)
	ws := openSession(t, b, b.adminKey)
	sendMsg(t, ws, enqueueManyMsg(2, oneTask("a")))
	if e := mustRecv(t, ws).GetError(); connect.Code(e.GetCode()) != connect.CodeInvalidArgument || e.GetDetail().GetKind() != KindInvalidArgument {
		t.Fatalf("enqueue_many on a worker session answered %v", e)
	}
	b.assertUnchanged(t, state, "enqueue_many on a worker session")
}

// TestProducerSession_OversizedMessageTyped: a message over the Producer
// service's request bound (not the Worker service's larger one) ends the
// stream ResourceExhausted / message_too_large, as its unary call is
// refused, and changes nothing.
func TestProducerSession_OversizedMessageTyped(t *testing.T) {
	b := setup(t, nil)
	key := b.createKey(t, "", "producer")
	big := &pb.EnqueueManyRequest{Requests: []*pb.EnqueueRequest{{Tasks: []*pb.NewTask{{TaskId: "a", ScanId: "s", TargetRef: string(make([]byte, MaxProducerRequestBytes))}}}}}
	if _, err := b.clients(key).producer.EnqueueMany(context.Background(), connect.NewRequest(big)); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("unary oversized enqueue_many: %v", err)
	}
	before := b.state(t)
	st := openSessionOf(t, b, key, true)
	_ = st.Send(&pb.SessionRequest{Id: 1, Op: &pb.SessionRequest_EnqueueMany{EnqueueMany: big}}) // NB: may meet the stream's end (EOF)
	_, err := recvMsg(t, st)
	if d, ok := wireerr.DetailOf(err); connect.CodeOf(err) != connect.CodeResourceExhausted || !ok || d.GetKind() != KindMessageTooLarge {
		t.Fatalf("oversized message: %v (detail %v), want resource_exhausted %s", err, d, KindMessageTooLarge)
	}
	b.assertUnchanged(t, before, "the oversized message")
}

// TestProducerSession_MetricsAsUnary: each enqueue_many message is
// counted under Producer.EnqueueMany's procedure with its code, as the
// unary call is.
func TestProducerSession_MetricsAsUnary(t *testing.T) {
	reg := metrics.New()
	b := setupServer(t, nil, Config{Metrics: reg.API})
	key := b.createKey(t, "", "producer")
	st := openSessionOf(t, b, key, true)
	count := func(code string) float64 {
		return counterValue(t, reg, "termivar_api_requests_total", map[string]string{"procedure": sessionEnqueueMany, "code": code})
	}
	ok, bad := count("ok"), count("invalid_argument")
	sendMsg(t, st, enqueueManyMsg(1, oneTask("a")))
	mustRecv(t, st)
	sendMsg(t, st, enqueueManyMsg(2))
	mustRecv(t, st)
	if n, m := count("ok")-ok, count("invalid_argument")-bad; n != 1 || m != 1 {
		t.Fatalf("EnqueueMany requests counted: ok %v, invalid_argument %v; want 1 and 1", n, m)
	}
}
