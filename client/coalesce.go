package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Bounds of one coalesced call (Producer.EnqueueMany).
const (
	// DefaultEnqueueCallsInFlight is Config.EnqueueCallsInFlight's
	// default, as the node's proposer keeps two log entries in flight: one
	// on the wire while the next one fills.
	DefaultEnqueueCallsInFlight = 2
	// DefaultSessionEnqueueCallsInFlight is Config.EnqueueCallsInFlight's
	// default with Config.ProducerSession: a message in flight costs no
	// HTTP request, so more of them cost little (30–33 µs per Enqueue at
	// 2, 37–41 at 4, 45–48 at 16 with 16 callers, against 107–132 at 16
	// as HTTP/1.1 calls). NB: 4 is the middle, not a measured optimum:
	// the sittings could not separate 2, 4 and 16 (docs/benchmarks.md,
	// "One task per call, session 7").
	DefaultSessionEnqueueCallsInFlight = 4
	// maxCoalescedRequests is the server's MaxEnqueueMany.
	maxCoalescedRequests = 256
	// maxCoalescedBytes bounds the requests of one coalesced call (the
	// server takes producer requests up to 8 MiB).
	maxCoalescedBytes = 1 << 20
	// maxCoalescableBytes is the largest request that shares a call; a
	// larger one is a batch already and goes alone.
	maxCoalescableBytes = 64 << 10
)

const (
	opEnqueue     = "Producer.Enqueue"
	opEnqueueMany = "Producer.EnqueueMany"
)

// enqueueCall is one caller's Enqueue waiting in a coalescer; done is
// closed once res or err is set.
type enqueueCall struct {
	ctx  context.Context
	req  *pb.EnqueueRequest
	size int
	done chan struct{}
	res  *pb.EnqueueResponse
	err  error
}

// coalescer shares Enqueue calls among concurrent callers of one Client
// ("natural batching", as the node's proposer does with log entries): at
// most max calls are in flight; callers that arrive meanwhile wait and are
// sent together in the next call, one Producer.EnqueueMany whose requests
// the server answers one by one. A caller alone is sent at once, in a
// call of its own: no added latency and no timer. A Client holds one key,
// so a call never mixes keys or tenants.
type coalescer struct {
	c   *Client
	max int

	mu       sync.Mutex
	inFlight int            // calls on the wire; Invariant: 0 ≤ inFlight ≤ max
	pending  []*enqueueCall // callers waiting for a slot, in arrival order
	// single is set when the server does not know EnqueueMany (an older
	// node): every Enqueue is then a call of its own.
	single atomic.Bool
	// joined, when set (tests, before the first Enqueue), receives one
	// value for each caller that joins pending.
	joined chan<- struct{}
}

// enqueue queues one caller's request and waits for its own outcome.
func (q *coalescer) enqueue(ctx context.Context, req *pb.EnqueueRequest, size int) (*pb.EnqueueResponse, error) {
	if ctx.Done() != nil {
		// NB: a caller whose context ends returns before the call it
		// joined is sent, and may then reuse its request: the call gets a
		// copy (at most maxCoalescableBytes).
		req = proto.CloneOf(req)
	}
	ec := &enqueueCall{ctx: ctx, req: req, size: size, done: make(chan struct{})}
	q.mu.Lock()
	q.pending = append(q.pending, ec)
	if q.joined != nil {
		q.joined <- struct{}{}
	}
	var batch []*enqueueCall
	if q.inFlight < q.max {
		q.inFlight++
		batch = q.take()
	}
	q.mu.Unlock()
	if batch != nil {
		// NB: in its own goroutine, so a caller whose context ends returns
		// at once while the call it carries goes on for the others.
		go q.sendAll(batch)
	}
	select {
	case <-ec.done:
		return ec.res, ec.err
	case <-ctx.Done():
		return nil, wrapErr(opEnqueue, connect.NewError(connect.CodeOf(ctx.Err()), ctx.Err()))
	}
}

// take removes the next call's callers from pending (callers whose
// context ended are dropped); nil when none is left. Called with mu held.
func (q *coalescer) take() []*enqueueCall {
	n, bytes := 0, 0
	var batch []*enqueueCall
	for _, ec := range q.pending {
		if ec.ctx.Err() != nil {
			n++
			continue
		}
		if len(batch) == maxCoalescedRequests || len(batch) > 0 && bytes+ec.size > maxCoalescedBytes {
			break
		}
		batch, bytes, n = append(batch, ec), bytes+ec.size, n+1
	}
	q.pending = q.pending[n:]
	if len(q.pending) == 0 {
		q.pending = nil // let the backing array go
	}
	return batch
}

// sendAll sends batch, then every batch that queued meanwhile, and frees
// its slot when none is left.
func (q *coalescer) sendAll(batch []*enqueueCall) {
	for batch != nil {
		q.send(batch)
		q.mu.Lock()
		batch = q.take()
		if batch == nil {
			q.inFlight--
		}
		q.mu.Unlock()
	}
}

// send makes one call for batch and hands every caller its outcome: one
// caller is an Enqueue of its own (with its own context); several share
// an EnqueueMany. Over a producer session (client/session.go C8) one
// caller is an EnqueueMany of one request too: a message costs far less
// than an HTTP call.
func (q *coalescer) send(batch []*enqueueCall) {
	if (len(batch) == 1 && !q.c.psess.on()) || q.single.Load() {
		q.sendEach(batch)
		return
	}
	ctx, cancel := batchContext(batch)
	defer cancel()
	reqs := make([]*pb.EnqueueRequest, len(batch))
	for i, ec := range batch {
		reqs[i] = ec.req
	}
	res, err := invoke(ctx, q.c, opEnqueueMany, 0, &pb.EnqueueManyRequest{Requests: reqs}, q.c.enqueueManyRPC())
	if connect.CodeOf(err) == connect.CodeUnimplemented {
		q.single.Store(true)
		q.sendEach(batch)
		return
	}
	if err == nil && len(res.GetResults()) != len(batch) {
		err = wrapErr(opEnqueueMany, connect.NewError(connect.CodeInternal, fmt.Errorf("%d results for %d requests", len(res.GetResults()), len(batch))))
	}
	for i, ec := range batch {
		if err != nil {
			ec.err = withOp(err, opEnqueue)
		} else {
			ec.res, ec.err = res.GetResults()[i].GetResponse(), enqueueItemErr(res.GetResults()[i])
		}
		close(ec.done)
	}
}

// sendEach sends every caller of batch its own Enqueue, concurrently.
func (q *coalescer) sendEach(batch []*enqueueCall) {
	var wg sync.WaitGroup
	for _, ec := range batch {
		wg.Go(func() {
			ec.res, ec.err = q.c.enqueueOne(ec.ctx, ec.req)
			close(ec.done)
		})
	}
	wg.Wait()
}

// batchContext is the context of a shared call: the first caller's values,
// cancelled by none of the callers (one caller giving up must not fail the
// others), bounded by the latest of their deadlines when all have one.
// Without one the call is bounded by the client's attempts (MaxAttempts
// tries of AttemptTimeout: EnqueueMany is safe to replay).
func batchContext(batch []*enqueueCall) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(batch[0].ctx)
	var latest time.Time
	for _, ec := range batch {
		d, ok := ec.ctx.Deadline()
		if !ok {
			return context.WithCancel(ctx)
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(ctx, latest)
}

// enqueueItemErr is the error of one EnqueueMany result, nil when it
// succeeded: the *Error the request's own Enqueue call would have
// returned (code, message, detail; the core error rebuilt).
func enqueueItemErr(item *pb.EnqueueItemResult) error {
	if item.GetError() == nil && item.GetCode() == 0 {
		return nil
	}
	ce := connect.NewError(connect.Code(item.GetCode()), errors.New(item.GetMessage()))
	if d, err := connect.NewErrorDetail(item.GetError()); err == nil {
		ce.AddDetail(d)
	}
	return wrapErr(opEnqueue, ce)
}

// withOp is err, an *Error of a shared call, as the error of op.
func withOp(err error, op string) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	c := *e
	c.Op = op
	return &c
}

// coalescable reports whether req may share a call, and its size.
func coalescable(req *pb.EnqueueRequest) (int, bool) {
	n := proto.Size(req)
	return n, n <= maxCoalescableBytes
}
