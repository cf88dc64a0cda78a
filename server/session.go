package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
	"github.com/termivar/distributed/internal/audit"
	"github.com/termivar/distributed/internal/wireerr"
	"github.com/termivar/distributed/node"
)

// Worker sessions (docs/node.md, "Worker sessions"): Worker.Session is a
// bidi stream over HTTP/2 that carries a worker's Acquire and CompleteMany
// calls as messages, so each costs one message exchange instead of one
// HTTP request (docs/benchmarks.md, "A worker session stream").
//
//   - S1: the stream is authenticated once when it opens, by preauth like
//     every call; before each message its key is looked up again in the
//     published key table (revoked or rotated: the stream ends
//     Unauthenticated; its tenant gone: the stream ends as authenticate
//     would have refused it).
//   - S2: each message runs through callMsg with the handler's own work
//     (workerHandler.acquire, completeMany, complete): the same checks, limits,
//     audit line, error kinds and codes as the unary call; its metrics
//     are recorded under the unary procedure's name.
//   - S3: at most Limits.MaxSessionMessages messages await their final
//     answer; one more is answered session_limit and changes nothing. A
//     message's slot is free before its answer is sent, so a message sent
//     on an answer finds it. At most Limits.MaxSessionsPerKey sessions of
//     one key are open.
//   - S4: answers are sent by id, in the order they are ready; every
//     goroutine a message started has ended when the handler returns.
//   - S5: the stream is not forwarded: a follower refuses its open with
//     not_leader (forward.go), and a session whose node is no longer the
//     leader, or is shutting down, ends Unavailable after its messages in
//     flight are answered; one whose work the end cut off (its context
//     cancelled) is answered Unavailable with an unknown outcome
//     (unknownIfEnded), as a unary call whose connection broke.
//   - S6: a message the server cannot read (over the Worker service's
//     request limit, or not decoding) ends the stream with the unary
//     call's refusal and an ErrorDetail (message_too_large,
//     invalid_argument): the client fails it without a retry.
//   - S7: each message runs under a context of its own; a cancel{id}
//     (its caller gave up) cancels message id's. A long-polling acquire
//     cancelled while it waits leases nothing and is answered empty; one
//     cancelled after it proposed may still be applied. Its answer is
//     sent either way (the client, which gave up, takes the outcome as
//     unknown, as a unary call cancelled mid-flight).
//   - S8: Producer.Session (docs/node.md, "Producer sessions") is the
//     same stream for a producer's key: its one operation is
//     enqueue_many, answered as Producer.EnqueueMany (enqueueManyMsg: the
//     same checks, per-request audit lines, limits and error kinds), its
//     metrics under that procedure's name; S1 and S3–S7 hold as written.
//     Each kind of session refuses the other's operations
//     invalid_argument, running nothing.

// KindSessionLimit: a worker session limit (S3) was reached.
const KindSessionLimit = "session_limit"

// KindMessageTooLarge: a worker session message over the Worker
// service's request limit (S6).
const KindMessageTooLarge = "message_too_large"

const (
	sessionProcedure      = termivarv1connect.WorkerSessionProcedure
	producerSessionProc   = termivarv1connect.ProducerSessionProcedure
	sessionEnqueueMany    = termivarv1connect.ProducerEnqueueManyProcedure
	sessionAcquire        = termivarv1connect.WorkerAcquireProcedure
	sessionCompleteMany   = termivarv1connect.WorkerCompleteManyProcedure
	sessionComplete       = termivarv1connect.WorkerCompleteProcedure
	errSessionMessageBusy = "too many messages of this session await their answer"
)

// sessionKeys counts the open sessions of each key (S3).
type sessionKeys struct {
	mu   sync.Mutex
	open map[string]int
}

// acquire takes a session slot of key; false when it has max open.
func (k *sessionKeys) acquire(key string, max int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.open == nil {
		k.open = map[string]int{}
	}
	if k.open[key] >= max {
		return false
	}
	k.open[key]++
	return true
}

func (k *sessionKeys) release(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.open[key]--; k.open[key] <= 0 {
		delete(k.open, key)
	}
}

type sessionCtxKey struct{}

// sessionHTTP gives a session handler its stream's ResponseController
// (through the context), so that shutdown and leadership loss can end a
// Receive that waits for the client (S5).
func sessionHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionCtxKey{}, rc)))
	})
}

// isSessionPath reports whether path is a session stream's (S5, S8).
func isSessionPath(path string) bool {
	return path == sessionProcedure || path == producerSessionProc
}

// session is one open Worker.Session or Producer.Session stream.
type session struct {
	h        workerHandler // NB: a producer session's too: both are the Server's handlers
	producer bool          // a Producer.Session (S8): enqueue_many only
	method   string        // the audit method of its open and admit refusals
	st       *connect.BidiStream[pb.SessionRequest, pb.SessionResponse]
	p        principal
	hash     []byte        // the key's hash at the open (S1: a rotation ends the stream)
	slots    chan struct{} // one per message awaiting its final answer (S3)
	sendMu   sync.Mutex
	wg       sync.WaitGroup

	cancelMu sync.Mutex
	cancels  map[uint64]context.CancelFunc // of the messages being served (S7)

	// A goroutine that has its message's answer ready puts a token in
	// avail before it sends it (at most one holds one); dispatch takes the
	// token and hands the next message through jobs to that goroutine,
	// which runs it on a stack already grown instead of a new goroutine
	// growing one (≈ 3 % of the CPU of one task per call with worker
	// sessions: docs/benchmarks.md, "One task per call, session 8"). quit
	// is closed when run stops receiving: the token's goroutine ends
	// (S4).
	avail, quit chan struct{}
	jobs        chan sessionJob
}

// sessionJob is one message handed to a goroutine: the message, its
// context and the func that forgets it once answered (track).
type sessionJob struct {
	mctx context.Context
	stop func()
	m    *pb.SessionRequest
}

// Session serves one worker session stream.
func (h workerHandler) Session(ctx context.Context, st *connect.BidiStream[pb.SessionRequest, pb.SessionResponse]) error {
	return startSession(ctx, &session{h: h, st: st, method: "Worker.Session"})
}

// Session serves one producer session stream (S8).
func (h producerHandler) Session(ctx context.Context, st *connect.BidiStream[pb.SessionRequest, pb.SessionResponse]) error {
	return startSession(ctx, &session{h: workerHandler(h), st: st, producer: true, method: "Producer.Session"})
}

// startSession authenticates ss's stream, takes its key's session slot
// and runs it (S1, S3, S5).
func startSession(ctx context.Context, ss *session) error {
	h := ss.h
	p, err := principalFrom(ctx)
	if err != nil {
		// NB: audited as a mutating call's refusal is (call).
		h.s.audit.Record(ctx, audit.Entry{KeyID: p.KeyID, Tenant: p.Tenant, Method: ss.method, Outcome: kindOf(err)})
		return h.s.withLeaderHint(toConnect(err))
	}
	if !h.s.node.IsLeader() {
		return notLeaderError(h.s.node.LeaderAPIURL(), "not the leader (sessions are not forwarded)")
	}
	rec, ok := h.s.node.Reads().Key(p.KeyID)
	if !ok {
		return toConnect(errUnauthenticated("unknown API key"))
	}
	if !h.s.sessions.acquire(p.KeyID, h.s.limits.MaxSessionsPerKey) {
		return toConnect(&apiError{KindSessionLimit, "too many open sessions of this key"})
	}
	defer h.s.sessions.release(p.KeyID)
	// NB: the response headers go out now, not with the first answer: until
	// they arrive the client's Connect stream parks a goroutine on them, for
	// a whole long-poll when the first message is a waiting acquire. Not
	// for gRPC-Web: it answers a stream that wrote nothing "trailers-only",
	// its status in the headers, which must not have gone out yet.
	if rc, ok := ctx.Value(sessionCtxKey{}).(*http.ResponseController); ok && ss.st.Peer().Protocol != connect.ProtocolGRPCWeb {
		_ = rc.Flush()
	}
	ss.p, ss.hash, ss.slots = p, rec.Hash, make(chan struct{}, h.s.limits.MaxSessionMessages)
	ss.avail, ss.jobs, ss.quit = make(chan struct{}, 1), make(chan sessionJob, 1), make(chan struct{})
	return ss.run(ctx)
}

// run receives messages until the client closes its side (nil, once
// every message is answered) or the stream must end (its error).
func (ss *session) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	stop := ss.watch(ctx)
	var end error
	defer func() {
		stop()
		if end != nil {
			cancel() // NB: waiting messages answer at once (S5)
		}
		close(ss.quit)
		ss.wg.Wait()
		cancel()
	}()
	for {
		m, err := ss.st.Receive()
		if err != nil {
			end = ss.endCause(err)
			return end
		}
		if end = ss.admit(); end != nil {
			return end
		}
		ss.dispatch(ctx, m)
	}
}

// watch ends a waiting Receive when the server shuts down (S5); the
// returned func stops watching, after which it never touches the stream.
// NB: context.AfterFunc, not a goroutine per session: a parked goroutine
// is one more stack for the collector to scan (docs/benchmarks.md,
// "1 024 workers with worker sessions").
func (ss *session) watch(ctx context.Context) func() {
	rc, _ := ctx.Value(sessionCtxKey{}).(*http.ResponseController)
	if rc == nil {
		return func() {}
	}
	var mu sync.Mutex
	ended := false
	stop := context.AfterFunc(ss.h.s.stopCtx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			_ = rc.SetReadDeadline(time.Now())
		}
	})
	return func() {
		stop()
		mu.Lock()
		ended = true
		mu.Unlock()
	}
}

// endCause is the stream's end for a failed Receive: nil when the client
// closed its side, Unavailable when the server is shutting down, and for
// a message the server could not read (S6) the unary call's refusal with
// an ErrorDetail, so that the client fails it definitively instead of
// taking the stream as broken (client/session.go C2).
func (ss *session) endCause(err error) error {
	select {
	case <-ss.h.s.stopping:
		return toConnect(&apiError{KindUnavailable, "server shutting down"})
	default:
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	if bad := unreadable(err); bad != nil {
		return toConnect(bad) // NB: not audited, as the unary call connect refuses before its handler
	}
	return err
}

// unreadable is the typed refusal of a message Receive could not read:
// message_too_large for one over the Worker service's read limit (as its
// unary call is refused ResourceExhausted), invalid_argument for one that
// does not decode; nil for any other failure (the stream broke).
func unreadable(err error) error {
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok || len(ce.Details()) > 0 {
		return nil
	}
	switch ce.Code() {
	case connect.CodeResourceExhausted:
		return &apiError{KindMessageTooLarge, "session message larger than its service's request limit"}
	case connect.CodeInvalidArgument:
		return errInvalid("session message does not decode")
	}
	return nil
}

// admit checks the stream's key and the node before a message (S1, S5).
func (ss *session) admit() error {
	s := ss.h.s
	err := ss.keyErr()
	if err == nil && !s.node.IsLeader() {
		return notLeaderError(s.node.LeaderAPIURL(), "not the leader")
	}
	if err == nil {
		return nil
	}
	if isUnauthenticated(err) {
		s.cfg.Metrics.AuthRejected("unauthenticated") // NB: as preauth counts it; an unknown tenant is not (S1)
	}
	s.audit.Record(context.Background(), audit.Entry{KeyID: ss.p.KeyID, Tenant: ss.p.Tenant, Method: ss.method, Outcome: kindOf(err)})
	return toConnect(err)
}

// keyErr is authenticate's refusal of the stream's key now: revoked or
// rotated (unauthenticated), its tenant gone (unknown_tenant); nil if
// the key still holds (S1).
func (ss *session) keyErr() error {
	reads := ss.h.s.node.Reads()
	if rec, ok := reads.Key(ss.p.KeyID); !ok || !bytes.Equal(rec.Hash, ss.hash) {
		return errUnauthenticated("API key revoked or rotated")
	}
	if _, ok := reads.Tenant(ss.p.Tenant); !ok {
		return &apiError{KindUnknownTenant, "tenant does not exist"}
	}
	return nil
}

// dispatch serves m under a context of its own (S7) on the goroutine
// that offered itself in avail, else on a new one (serveJobs), or answers
// session_limit when MaxSessionMessages await their answer (S3); a cancel
// is served here, in order after its message.
func (ss *session) dispatch(ctx context.Context, m *pb.SessionRequest) {
	if c := m.GetCancel(); c != nil {
		ss.cancelMsg(c.GetId())
		return
	}
	select {
	case ss.slots <- struct{}{}:
	default:
		ss.fail(m.GetId(), toConnect(&apiError{KindSessionLimit, errSessionMessageBusy}))
		return
	}
	mctx, stop := ss.track(ctx, m.GetId())
	job := sessionJob{mctx: mctx, stop: stop, m: m}
	select {
	case <-ss.avail:
		ss.jobs <- job // NB: the token's goroutine takes it (at most one other is in the buffer)
	default:
		ss.h.s.sessionServers.Add(1)
		ss.wg.Go(func() { ss.serveJobs(ctx, job) })
	}
}

// serveJobs answers job, then each message dispatch hands it for the
// token it put in avail, until it finds no room for a token or run stops
// receiving. NB: a goroutine holds its slot while it serves, not while
// it sends the answer (serveJob), so goroutines blocked sending to a
// client that stopped reading can outnumber the slots; they stay a few
// times the slots: dispatch starts one only when no token is there, and
// run itself blocks at the second message handed to a goroutine still
// sending (jobs holds one) or at a message over the slots (fail sends).
func (ss *session) serveJobs(ctx context.Context, job sessionJob) {
	for ss.serveJob(ctx, job) {
		select {
		case job = <-ss.jobs:
		case <-ss.quit:
			select {
			case job = <-ss.jobs: // handed before run stopped receiving
			default:
				return
			}
		}
	}
}

// serveJob answers one message and releases its slot; true when it put
// a token in avail before sending the answer (the next message handed
// over then comes to this goroutine).
func (ss *session) serveJob(ctx context.Context, job sessionJob) bool {
	r := ss.serve(ctx, job.mctx, job.m)
	job.stop()
	<-ss.slots
	var token bool
	select {
	case ss.avail <- struct{}{}:
		token = true
	default:
	}
	ss.send(r)
	return token
}

// track returns message id's context, which cancelMsg(id) cancels, and
// the func that cancels and forgets it when the message is answered (S7).
func (ss *session) track(ctx context.Context, id uint64) (context.Context, func()) {
	mctx, cancel := context.WithCancel(ctx)
	ss.cancelMu.Lock()
	if ss.cancels == nil {
		ss.cancels = map[uint64]context.CancelFunc{}
	}
	ss.cancels[id] = cancel
	ss.cancelMu.Unlock()
	return mctx, func() {
		ss.cancelMu.Lock()
		delete(ss.cancels, id)
		ss.cancelMu.Unlock()
		cancel()
	}
}

// cancelMsg cancels message id's context; a message already answered
// (or never sent) is left alone (S7).
func (ss *session) cancelMsg(id uint64) {
	ss.cancelMu.Lock()
	cancel := ss.cancels[id]
	ss.cancelMu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// serve runs one message as its unary call would (S2) and returns its
// final answer; it runs under mctx, the message's context, and ctx is the
// session's.
func (ss *session) serve(ctx, mctx context.Context, m *pb.SessionRequest) *pb.SessionResponse {
	id := m.GetId()
	if ss.producer {
		return ss.serveProducer(ctx, mctx, m)
	}
	switch op := m.GetOp().(type) {
	case *pb.SessionRequest_Acquire:
		early := func(done []*pb.CompleteItemResult) {
			ss.send(&pb.SessionResponse{Id: id, Result: &pb.SessionResponse_Completed{Completed: &pb.CompleteManyResponse{Results: done}}})
		}
		return serveMsg(ctx, mctx, ss, id, sessionAcquire, op.Acquire, ss.h.acquire(early), func(r *pb.AcquireResponse) *pb.SessionResponse {
			return &pb.SessionResponse{Id: id, Result: &pb.SessionResponse_Acquire{Acquire: r}}
		})
	case *pb.SessionRequest_CompleteMany:
		return serveMsg(ctx, mctx, ss, id, sessionCompleteMany, op.CompleteMany, ss.h.completeMany, func(r *pb.CompleteManyResponse) *pb.SessionResponse {
			return &pb.SessionResponse{Id: id, Result: &pb.SessionResponse_CompleteMany{CompleteMany: r}}
		})
	case *pb.SessionRequest_Complete:
		return serveMsg(ctx, mctx, ss, id, sessionComplete, op.Complete, ss.h.complete, func(r *pb.CompleteResponse) *pb.SessionResponse {
			return &pb.SessionResponse{Id: id, Result: &pb.SessionResponse_Complete{Complete: r}}
		})
	default:
		return failure(id, toConnect(errInvalid("session message carries no worker operation")))
	}
}

// serveProducer runs one message of a Producer.Session (S8) and returns
// its answer.
func (ss *session) serveProducer(ctx, mctx context.Context, m *pb.SessionRequest) *pb.SessionResponse {
	id := m.GetId()
	op, ok := m.GetOp().(*pb.SessionRequest_EnqueueMany)
	if !ok {
		return failure(id, toConnect(errInvalid("session message carries no producer operation")))
	}
	start := time.Now()
	res, err := producerHandler(ss.h).enqueueManyMsg(mctx, op.EnqueueMany)
	ss.h.s.cfg.Metrics.Observe(sessionEnqueueMany, start, err)
	if err != nil {
		return failure(id, unknownIfEnded(ctx, err))
	}
	return &pb.SessionResponse{Id: id, Result: &pb.SessionResponse_EnqueueMany{EnqueueMany: res}}
}

// serveMsg runs message id, msg of procedure, through callMsg with fn
// under mctx, records its metrics under procedure, and returns ok(its
// response) or its error as its answer (S2); ctx is the session's.
func serveMsg[Req, Res any](ctx, mctx context.Context, ss *session, id uint64, procedure string, msg *Req,
	fn func(context.Context, principal, *Req) (*Res, uint64, error), ok func(*Res) *pb.SessionResponse) *pb.SessionResponse {
	start := time.Now()
	res, err := callMsg(mctx, ss.h.s, procedure, msg, true, fn)
	ss.h.s.cfg.Metrics.Observe(procedure, start, err)
	if err != nil {
		return failure(id, unknownIfEnded(ctx, err))
	}
	return ok(res)
}

// unknownIfEnded is err, or, when the session ended under the message
// (its context cancelled: S5, S1), node.ErrOutcomeUnknown as toConnect
// answers it (Unavailable, OutcomeUnknown): a proposal cut off may still
// be applied, so the client must treat the message as a unary call whose
// connection broke (client/session.go C1).
func unknownIfEnded(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		return err
	}
	return toConnect(node.ErrOutcomeUnknown)
}

// fail answers message id with err (a *connect.Error from toConnect).
func (ss *session) fail(id uint64, err error) { ss.send(failure(id, err)) }

// failure is the answer to message id failing with err.
func failure(id uint64, err error) *pb.SessionResponse {
	return &pb.SessionResponse{Id: id, Result: &pb.SessionResponse_Error{Error: sessionError(err)}}
}

// sessionError is err as a SessionError: its code, message, detail and
// metadata, so the client rebuilds the unary call's error.
func sessionError(err error) *pb.SessionError {
	ce, _ := errors.AsType[*connect.Error](toConnect(err)) // NB: toConnect keeps a *connect.Error as it is
	out := &pb.SessionError{Code: uint32(ce.Code()), Message: ce.Message()}
	if d, ok := wireerr.DetailOf(ce); ok {
		out.Detail = d
	}
	for k, v := range ce.Meta() {
		if len(v) > 0 {
			if out.Meta == nil {
				out.Meta = map[string]string{}
			}
			out.Meta[k] = v[0]
		}
	}
	return out
}

// send writes one answer; answers of concurrent messages are serialised
// (S4). A failed send means the stream is gone: the client treats every
// unanswered message as of unknown outcome.
func (ss *session) send(r *pb.SessionResponse) {
	ss.sendMu.Lock()
	defer ss.sendMu.Unlock()
	_ = ss.st.Send(r)
}
