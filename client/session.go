package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
	"github.com/termivar/distributed/internal/wireerr"
)

// Worker sessions (Config.WorkerSession; docs/node.md, "Worker
// sessions"). Acquire, CompleteMany and Complete go as messages of one
// Worker.Session stream per Client instead of one HTTP request each. Each
// try of such a call is one message: invoke's retries, attempt
// deadlines, backoff and error classification apply to it unchanged.
//
//   - C1: a message whose stream broke before its answer is Unavailable
//     with OutcomeUnknown, exactly like a unary call whose connection
//     broke; the next try opens a new stream.
//   - C2: a stream the server ended with an error of its own (its
//     ErrorDetail present: revoked key, not_leader, shutting down) fails
//     its unanswered messages with that error: the server answers every
//     message it admitted before it ends a stream, so those were not
//     applied.
//   - C3: a server without Worker.Session (Unimplemented, also what an
//     HTTP/1.1 connection gets) turns sessions off for the Client; the
//     message that found out is sent as its unary call.
//   - C4: a session is bound to the node it was opened on; a try whose
//     target is another node closes it and opens one there.
//   - C5: a message the server refused with session_limit (the session
//     has --max-session-messages awaiting their answer: a Client shared
//     by that many concurrent callers) was not run; it is sent as its
//     unary call. A stream the server ended session_limit was refused at
//     its open (its key has --max-sessions-per-key open) and ran no
//     message: sessions go off for the Client as in C3.
//   - C6: a caller that gives up (its context ends) returns Canceled or
//     DeadlineExceeded at once and sends cancel{id}: the server cancels
//     the message, so a long-polling Acquire leases nothing for nobody.
//     One the server had proposed already may still be applied: the
//     outcome is unknown, as for a unary call cancelled mid-flight.
//   - C7: AcquireNotify's callback runs on a goroutine of its own, not on
//     the stream's reader: a slow callback does not stall the session,
//     and one calling back into the Client does not deadlock it. The
//     Acquire returns after its callback has returned.
//   - C8: with Config.ProducerSession the coalesced Enqueue calls go as
//     enqueue_many messages of a Producer.Session stream, in a sessions
//     value of their own (never shared with the worker session): C1–C6
//     hold for them as written (a cut stream is an EnqueueMany whose
//     connection broke: Unavailable, OutcomeUnknown).

// kindSessionLimit is server.KindSessionLimit: a message refused, not
// run, because its session has the server's bound of messages awaiting
// their answer.
const kindSessionLimit = "session_limit"

// sessionRPC is a try of one call of the unary signature.
type sessionRPC[Req, Resp any] func(context.Context, *connect.Request[Req]) (*connect.Response[Resp], error)

// errNoSession: the server has no Worker.Session (or Producer.Session)
// (C3).
var errNoSession = errors.New("client: the server has no sessions")

// sessions holds a Client's current worker (or producer) session.
type sessions struct {
	c        *Client
	hc       *http.Client // HTTP/2: the stream's transport
	own      bool         // hc's transport is ours (closed by close)
	producer bool         // Producer.Session streams (C8), else Worker.Session

	mu     sync.Mutex
	off    bool // C3
	cur    *workerSession
	nextID uint64
}

// newSessions returns the session state for c, or nil when sessions are
// off (!on); producer: Producer.Session streams (C8). Without
// Config.HTTPClient the stream gets a transport of its own that speaks
// HTTP/2 (h2c to http:// URLs).
func newSessions(c *Client, base *http.Client, on, producer bool) *sessions {
	if !on {
		return nil
	}
	hc := *c.hc
	s := &sessions{c: c, hc: &hc, producer: producer}
	if base == nil {
		t := NewTransport(nil, 4)
		t.Protocols = new(http.Protocols)
		t.Protocols.SetHTTP2(true)
		t.Protocols.SetUnencryptedHTTP2(true)
		hc.Transport = &bearer{auth: c.auth, next: t, router: c.router}
		s.own = true
	}
	hc.Transport = h2Only{hc.Transport}
	return s
}

// h2Only refuses a session stream answered over HTTP/1 (C3): the stream
// needs HTTP/2, and a server answers an HTTP/1.1 one 505.
type h2Only struct{ next http.RoundTripper }

func (h h2Only) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := h.next.RoundTrip(r)
	if err == nil && resp.ProtoMajor < 2 {
		resp.Body.Close()
		return nil, errNoSession
	}
	return resp, err
}

// CloseIdleConnections forwards to the wrapped transport.
func (h h2Only) CloseIdleConnections() {
	if c, ok := h.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// get returns the open session to target, opening one when there is none
// (C4); nil when sessions are off. NB: targets compare by value: a leader
// hint parsed again (router.follow) names the same node.
func (s *sessions) get(target *url.URL) *workerSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.off {
		return nil
	}
	if s.cur != nil && (*s.cur.target != *target || s.cur.broken()) {
		s.cur.close()
		s.cur = nil
	}
	if s.cur == nil {
		s.cur = openSession(s.hc, target, s.c.auth, s.producer)
	}
	return s.cur
}

// on reports whether s's calls go as session messages: s is not nil and
// not turned off (C3).
func (s *sessions) on() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.off
}

func (s *sessions) turnOff() {
	s.mu.Lock()
	cur := s.cur
	s.off, s.cur = true, nil
	s.mu.Unlock()
	if cur != nil {
		cur.close()
	}
}

// id returns the next message ID.
func (s *sessions) id() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	return s.nextID
}

// close ends the current session (Client.Close).
func (s *sessions) close() {
	s.mu.Lock()
	cur := s.cur
	s.cur = nil
	s.mu.Unlock()
	if cur != nil {
		cur.close()
	}
	if s.own {
		s.hc.CloseIdleConnections()
	}
}

// sessionAnswer is the final answer of one message.
type sessionAnswer struct {
	r   *pb.SessionResponse
	err error
}

// pendingMsg is a message awaiting its final answer.
type pendingMsg struct {
	ch        chan sessionAnswer // buffered 1
	completed []*pb.CompleteItemResult
	notify    func([]*pb.CompleteItemResult) // AcquireNotify's; nil: none
	notified  chan struct{}                  // closed when notify has returned; nil: not called (C7)
}

// waitNotified waits for the notify call started for p, if any (C7): the
// caller's AcquireNotify returns after its callback.
func (p *pendingMsg) waitNotified() {
	if p.notified != nil {
		<-p.notified
	}
}

// workerSession is one open Worker.Session stream.
type workerSession struct {
	target *url.URL
	st     *connect.BidiStreamForClient[pb.SessionRequest, pb.SessionResponse]
	cancel context.CancelFunc
	done   chan struct{} // closed when the reader has ended

	sendMu  sync.Mutex
	mu      sync.Mutex
	pending map[uint64]*pendingMsg
	err     error // set when the stream ended: every message fails with it
}

func openSession(hc *http.Client, target *url.URL, auth string, producer bool) *workerSession {
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), targetKey{}, target))
	var st *connect.BidiStreamForClient[pb.SessionRequest, pb.SessionResponse]
	if producer {
		st = termivarv1connect.NewProducerClient(hc, target.String()).Session(ctx)
	} else {
		st = termivarv1connect.NewWorkerClient(hc, target.String()).Session(ctx)
	}
	st.RequestHeader().Set("Authorization", auth)
	ws := &workerSession{target: target, st: st, cancel: cancel, done: make(chan struct{}), pending: map[uint64]*pendingMsg{}}
	go ws.read()
	return ws
}

func (ws *workerSession) broken() bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.err != nil
}

// close ends the stream and waits for its reader; unanswered messages
// fail (C1).
func (ws *workerSession) close() {
	ws.cancel() // NB: first: it unblocks a Send that waits for flow control
	ws.sendMu.Lock()
	_ = ws.st.CloseRequest()
	ws.sendMu.Unlock()
	<-ws.done
}

// read delivers answers by id until the stream ends, then fails every
// unanswered message with the stream's end (C1, C2).
func (ws *workerSession) read() {
	defer close(ws.done)
	for {
		r, err := ws.st.Receive()
		if err != nil {
			ws.end(streamEnd(ws.target, err))
			_ = ws.st.CloseResponse()
			return
		}
		ws.deliver(r)
	}
}

func (ws *workerSession) deliver(r *pb.SessionResponse) {
	ws.mu.Lock()
	p, ok := ws.pending[r.GetId()]
	switch {
	case !ok:
		// its caller gave up (its try's deadline): as a lost reply
	case r.GetCompleted() != nil:
		p.completed = r.GetCompleted().GetResults() // an acquire's carried completions, before its leases
		if p.notify != nil && p.notified == nil {
			p.notified = make(chan struct{})
			go func(done []*pb.CompleteItemResult) { // C7: off the reader
				defer close(p.notified)
				p.notify(done)
			}(p.completed)
		}
	default:
		delete(ws.pending, r.GetId())
		if a := r.GetAcquire(); a != nil && p.completed != nil {
			a.Completed = p.completed
		}
		p.ch <- sessionAnswer{r: r}
	}
	ws.mu.Unlock()
}

func (ws *workerSession) end(err error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.err = err
	for id, p := range ws.pending {
		delete(ws.pending, id)
		p.ch <- sessionAnswer{err: err}
	}
}

// streamEnd classifies the error that ended a stream: Unimplemented (C3)
// or an open refused session_limit (C5), the server's own error (C2), or
// a broken stream (C1).
func streamEnd(target *url.URL, err error) error {
	ce, ok := errors.AsType[*connect.Error](err)
	d, fromServer := wireerr.DetailOf(err)
	switch {
	case errors.Is(err, errNoSession), ok && ce.Code() == connect.CodeUnimplemented, fromServer && d.GetKind() == kindSessionLimit:
		return fmt.Errorf("%w: %w", errNoSession, err)
	case fromServer:
		return ce
	}
	return lostConnection(target.Host, err)
}

// do sends m and waits for its final answer or ctx's end.
func (ws *workerSession) do(ctx context.Context, m *pb.SessionRequest, notify func([]*pb.CompleteItemResult)) (*pb.SessionResponse, error) {
	p := &pendingMsg{ch: make(chan sessionAnswer, 1), notify: notify}
	ws.mu.Lock()
	if ws.err != nil {
		ws.mu.Unlock()
		return nil, ws.err
	}
	ws.pending[m.GetId()] = p
	ws.mu.Unlock()
	ws.sendMu.Lock()
	// NB: a failed Send means the stream has ended (connect's io.EOF):
	// the reader's Receive reports why and fails p with it. Cancelling
	// here would race it and hide the cause (an Unimplemented answer
	// seen as a broken stream: TestSession_FallbackWithoutSession under
	// -race).
	_ = ws.st.Send(m)
	ws.sendMu.Unlock()
	select {
	case a := <-p.ch:
		p.waitNotified()
		return a.r, a.err
	case <-ctx.Done():
		ws.forget(m.GetId())
		go ws.sendCancel(m.GetId()) // NB: not waiting for flow control: the caller gave up
		code := connect.CodeCanceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			code = connect.CodeDeadlineExceeded
		}
		return nil, connect.NewError(code, ctx.Err())
	}
}

// sendCancel tells the server that message id's caller gave up (C6).
func (ws *workerSession) sendCancel(id uint64) {
	ws.sendMu.Lock()
	defer ws.sendMu.Unlock()
	_ = ws.st.Send(&pb.SessionRequest{Op: &pb.SessionRequest_Cancel{Cancel: &pb.SessionCancel{Id: id}}})
}

func (ws *workerSession) forget(id uint64) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	delete(ws.pending, id)
}

// viaSession returns a try of a call that goes as a message of sess when
// sessions are on (sess not nil), and as unary otherwise (C3): wrap makes
// the message, unwrap takes the answer's response.
func viaSession[Req, Resp any](sess *sessions, unary sessionRPC[Req, Resp], wrap func(*Req) *pb.SessionRequest, unwrap func(*pb.SessionResponse) *Resp,
	notify func([]*pb.CompleteItemResult)) sessionRPC[Req, Resp] {
	if sess == nil {
		return unary
	}
	return func(ctx context.Context, req *connect.Request[Req]) (*connect.Response[Resp], error) {
		target, _ := ctx.Value(targetKey{}).(*url.URL)
		ws := sess.get(target)
		if ws == nil {
			return unary(ctx, req)
		}
		m := wrap(req.Msg)
		m.Id = sess.id()
		r, err := ws.do(ctx, m, notify)
		if errors.Is(err, errNoSession) {
			sess.turnOff()
			return unary(ctx, req)
		}
		if err != nil {
			return nil, err
		}
		if e := r.GetError(); e != nil {
			if e.GetDetail().GetKind() == kindSessionLimit {
				return unary(ctx, req) // C5: not run; the session is full
			}
			return nil, sessionErr(e)
		}
		out := unwrap(r)
		if out == nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("client: session answer %d of another kind", r.GetId()))
		}
		return connect.NewResponse(out), nil
	}
}

// sessionErr rebuilds the error the unary call would have returned.
func sessionErr(e *pb.SessionError) error {
	ce := connect.NewError(connect.Code(e.GetCode()), errors.New(e.GetMessage()))
	if e.GetDetail() != nil {
		if d, err := connect.NewErrorDetail(e.GetDetail()); err == nil {
			ce.AddDetail(d)
		}
	}
	for k, v := range e.GetMeta() {
		ce.Meta().Set(k, v)
	}
	return ce
}

// acquireRPC is a try of Acquire; notify (nil: none) gets the carried
// completions when a session answers them before the leases.
func (c *Client) acquireRPC(notify func([]*pb.CompleteItemResult)) sessionRPC[pb.AcquireRequest, pb.AcquireResponse] {
	return viaSession(c.sess, c.workerSvc().Acquire,
		func(m *pb.AcquireRequest) *pb.SessionRequest {
			return &pb.SessionRequest{Op: &pb.SessionRequest_Acquire{Acquire: m}}
		},
		func(r *pb.SessionResponse) *pb.AcquireResponse { return r.GetAcquire() }, notify)
}

func (c *Client) completeManyRPC() sessionRPC[pb.CompleteManyRequest, pb.CompleteManyResponse] {
	return viaSession(c.sess, c.workerSvc().CompleteMany,
		func(m *pb.CompleteManyRequest) *pb.SessionRequest {
			return &pb.SessionRequest{Op: &pb.SessionRequest_CompleteMany{CompleteMany: m}}
		},
		func(r *pb.SessionResponse) *pb.CompleteManyResponse { return r.GetCompleteMany() }, nil)
}

func (c *Client) completeRPC() sessionRPC[pb.CompleteRequest, pb.CompleteResponse] {
	return viaSession(c.sess, c.workerSvc().Complete,
		func(m *pb.CompleteRequest) *pb.SessionRequest {
			return &pb.SessionRequest{Op: &pb.SessionRequest_Complete{Complete: m}}
		},
		func(r *pb.SessionResponse) *pb.CompleteResponse { return r.GetComplete() }, nil)
}

// enqueueManyRPC is a try of EnqueueMany, as a producer session's message
// when Config.ProducerSession is on (C8).
func (c *Client) enqueueManyRPC() sessionRPC[pb.EnqueueManyRequest, pb.EnqueueManyResponse] {
	return viaSession(c.psess, c.producerSvc().EnqueueMany,
		func(m *pb.EnqueueManyRequest) *pb.SessionRequest {
			return &pb.SessionRequest{Op: &pb.SessionRequest_EnqueueMany{EnqueueMany: m}}
		},
		func(r *pb.SessionResponse) *pb.EnqueueManyResponse { return r.GetEnqueueMany() }, nil)
}
