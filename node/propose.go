package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/metrics"
	"github.com/termivar/distributed/raftfsm"
)

// applyTimeout bounds how long raft may take to accept one entry.
const applyTimeout = 10 * time.Second

// raftApplier is the proposer's seam to raft: the one call it makes.
// *raft.Raft implements it in production; propose_test.go drives the
// proposer through a stub that records every entry and answers each
// future itself. Apply is called only from the proposer's loop; the
// returned future's Error blocks until the entry is applied or has
// failed, and Response then holds the FSM's answer (a raftfsm.Response,
// or a []raftfsm.Response for a Batch entry).
type raftApplier interface {
	Apply(cmd []byte, timeout time.Duration) raft.ApplyFuture
}

var _ raftApplier = (*raft.Raft)(nil)

// proposer coalesces concurrent proposals into log entries: run takes
// every waiting proposal, up to maxBatch commands and maxBytes of them,
// into one entry, and respond hands each proposer its own result in
// proposal order.
type proposer struct {
	raft     raftApplier
	lastTime func() uint64    // the FSM's last applied time
	now      func() time.Time // the wall clock that stamps entries
	maxBatch int              // Invariant: an entry holds 1..maxBatch commands
	maxBytes int              // an entry takes no proposal once its commands reach it
	closed   <-chan struct{}  // the node's lifetime: closed by Close

	proposals chan *proposal
	inflight  chan *inflightBatch // at most two entries in flight
	// slots holds one token per entry handed to raft and not yet answered
	// by respond. Invariant: at most cap(slots) such entries.
	slots chan struct{}
	m     *metrics.Node // apply latency and batch size; nil: none
	// own records each entry from its proposal until its answer, so that
	// the FSM does not checksum the leader's own entries twice
	// (raftfsm/own.go); nil: none.
	own *raftfsm.OwnEntries
	// carry is a group that did not fit the entry being formed; it starts
	// the next one. Only run's goroutine touches it.
	carry *proposal
	// wal, when set, holds the next entry until the log store has written
	// the previous one (walgate.go); nil: entries are formed as soon as a
	// slot is free.
	wal *walGate
}

// maxEntriesInFlight bounds the entries handed to raft and not yet
// answered. NB: run takes a slot before it forms an entry, so proposals
// that arrive while both are in flight (being written, synced, applied)
// wait and share the next entry instead of each making one (issue 15:
// at low rates one entry per command cost more CPU than the commands);
// with a walGate it also waits for the previous entry's write
// (walgate.go).
const maxEntriesInFlight = 2

// DefaultMaxEntryBytes is Config.MaxEntryBytes' default. NB: entries
// of large results coalesced up to MaxBatchCommands reached 16 MiB and
// more (16 workers' CompleteMany calls at once); raft-wal v0.4.1 copies
// each entry into a codec buffer and a segment buffer that grows to the
// largest append, and two entries are in flight. With entries of about
// 2 MiB a 64 KiB-result run peaked at 460–470 MB of RSS instead of
// 517–572 MB (issue 15; docs/benchmarks.md, "64 KiB results"). Small
// commands still coalesce up to MaxBatchCommands: 1 024 completions with
// 32-byte results are ≈ 200 KB.
const DefaultMaxEntryBytes = 2 << 20

// entryBounds bound one log entry: commands (1..raftfsm.MaxBatchCommands)
// and bytes of encoded commands (> 0).
type entryBounds struct{ commands, bytes int }

func newProposer(r raftApplier, lastTime func() uint64, now func() time.Time, bounds entryBounds, closed <-chan struct{}) *proposer {
	maxBatch := bounds.commands
	return &proposer{
		raft: r, lastTime: lastTime, now: now, maxBatch: maxBatch, maxBytes: bounds.bytes, closed: closed,
		proposals: make(chan *proposal, 4*maxBatch),
		inflight:  make(chan *inflightBatch, maxEntriesInFlight),
		slots:     make(chan struct{}, maxEntriesInFlight),
	}
}

type proposal struct {
	cmd   *pb.Command
	bytes int // proto.Size(cmd) when submitted
	done  chan proposalResult
	// rest are the proposals submitted with this one as a group
	// (submitAll): they go into the same entry, right after it. Invariant:
	// 1 + len(rest) ≤ maxBatch and the group's bytes ≤ maxBytes.
	rest []*proposal
}

// group appends p and the rest of its group to batch.
func (p *proposal) group(batch []*proposal) []*proposal {
	return append(append(batch, p), p.rest...)
}

// groupBytes is the encoded size of p's group.
func (p *proposal) groupBytes() int {
	n := p.bytes
	for _, q := range p.rest {
		n += q.bytes
	}
	return n
}

type proposalResult struct {
	resp raftfsm.Response
	err  error
}

type inflightBatch struct {
	fut      raft.ApplyFuture
	props    []*proposal
	err      error
	start    time.Time     // when the entry went to raft
	data     []byte        // the framed entry (nil when it did not marshal)
	walMark  uint64        // the log store's writes begun before it went to raft (walGate.mark)
	answered chan struct{} // closed by respond once every proposer has its answer
}

// Propose stamps cmd with the leader's time, coalesces it with concurrent
// proposals into one log entry and waits until it is applied. The returned
// Response carries domain errors; the error result is for infrastructure
// failures (ErrNotLeader, ErrClosed, a raft error, ctx, or Err() once the
// node has failed). A failure that errors.Is ErrOutcomeUnknown came after
// raft appended the entry (ErrLeadershipLost, a shutdown after the commit):
// the command may still be applied.
//
// NB: if ctx ends first the command may still be applied.
func (n *Node) Propose(ctx context.Context, cmd *pb.Command) (_ raftfsm.Response, err error) {
	if err := n.Err(); err != nil {
		return raftfsm.Response{}, err // a failed node commits nothing more (health.go)
	}
	if err := n.gate(cmd); err != nil {
		return raftfsm.Response{Err: err}, nil // version.go: never reaches the log
	}
	ctx, span := n.tracer.Start(ctx, "raft.propose") // NB: set in start with prop; noop by default
	if span.IsRecording() {
		// NB: only a recording span is named: opName is reflection, and
		// the attribute allocates, on every proposal (issue 15).
		span.SetAttributes(attribute.String("termivar.op", opName(cmd)))
	}
	defer func() { endSpan(span, err) }()
	p, err := n.prop.submit(ctx, cmd)
	if err != nil {
		return raftfsm.Response{}, err
	}
	return p.wait(ctx)
}

// opName is the name of cmd's operation (e.g. "Complete"), for spans.
func opName(cmd *pb.Command) string {
	m := cmd.ProtoReflect()
	if f := m.WhichOneof(m.Descriptor().Oneofs().ByName("op")); f != nil {
		return string(f.Name())
	}
	return "unknown"
}

// endSpan ends a proposal's span, marking an infrastructure failure.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// submit queues cmd for the next entry; ErrClosed once the node's
// lifetime has ended.
func (pr *proposer) submit(ctx context.Context, cmd *pb.Command) (*proposal, error) {
	return pr.send(ctx, newProposal(cmd))
}

// maxGroupShare: a group is at most 1/maxGroupShare of maxBytes.
const maxGroupShare = 8

func newProposal(cmd *pb.Command) *proposal {
	cmd.Version = raftfsm.CommandVersion
	return &proposal{cmd: cmd, bytes: proto.Size(cmd), done: make(chan proposalResult, 1)}
}

// submitAll queues cmds in order; when they fit one entry (maxBatch
// commands) and an eighth of its bytes they go as one group, so that no
// entry formed meanwhile splits them (ProposeAll: an enqueue and the
// leases it grants, completions and the Acquire after them; issue 15).
// NB: larger calls go as single proposals, as before groups: a carried
// group of 1 MiB of 64 KiB results left entries part-filled (5 % more CPU
// per task in that mode). A failure after some were queued returns those
// with the error.
func (pr *proposer) submitAll(ctx context.Context, cmds []*pb.Command) ([]*proposal, error) {
	props := make([]*proposal, len(cmds))
	bytes := 0
	for i, cmd := range cmds {
		props[i] = newProposal(cmd)
		bytes += props[i].bytes
	}
	if len(props) > 1 && len(props) <= pr.maxBatch && bytes <= pr.maxBytes/maxGroupShare {
		props[0].rest = props[1:]
		_, err := pr.send(ctx, props[0])
		if err != nil {
			return nil, err
		}
		return props, nil
	}
	for i, p := range props {
		if _, err := pr.send(ctx, p); err != nil {
			if i > 0 {
				// NB: the commands queued before it may still be applied.
				err = outcomeUnknown(err)
			}
			return props[:i], err
		}
	}
	return props, nil
}

// send queues p (and its group); ErrClosed once the node's lifetime has
// ended.
func (pr *proposer) send(ctx context.Context, p *proposal) (*proposal, error) {
	select {
	case <-pr.closed:
		// NB: checked first, so that a proposal made after Close never
		// lands in the queue that nobody drains any more.
		return nil, ErrClosed
	default:
	}
	return pr.enqueue(ctx, p)
}

// enqueue is send past its check of pr.closed: Close may come between
// the two, and the loop may have drained the queue for the last time, so
// a sender that queued and then sees Close drains the queue itself (every
// proposal is answered: a caller without cancellation waits for it).
func (pr *proposer) enqueue(ctx context.Context, p *proposal) (*proposal, error) {
	select {
	case pr.proposals <- p:
		select {
		case <-pr.closed:
			pr.failQueued()
		default:
		}
		return p, nil
	case <-pr.closed:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// wait returns the proposal's result.
func (p *proposal) wait(ctx context.Context) (raftfsm.Response, error) {
	select {
	case r := <-p.done:
		return r.resp, r.err
	case <-ctx.Done():
		return raftfsm.Response{}, ctx.Err()
	}
}

// run takes every waiting proposal (up to maxBatch), stamps them with one
// time and hands them to raft as one entry, until ctx (the node's
// lifetime) ends. It does not wait for the entry to commit: respond does,
// so batches pipeline while raft shares fsyncs among the entries it has.
func (pr *proposer) run(ctx context.Context) {
	defer close(pr.inflight)
	var lastStamp uint64
	var prev *inflightBatch // the entry last handed to raft
	batch := make([]*proposal, 0, pr.maxBatch)
	for {
		p, ok := pr.next(ctx)
		if !ok {
			pr.failPending()
			return
		}
		batch = p.group(batch[:0])
		select {
		case pr.slots <- struct{}{}:
		case <-ctx.Done():
			failAll(batch, ErrClosed)
			pr.failPending()
			return
		}
		if !pr.waitWritten(ctx, prev) {
			failAll(batch, ErrClosed)
			pr.failPending()
			return
		}
		batch = pr.drain(batch)
		now := max(lastStamp, pr.lastTime(), uint64(max(pr.now().Unix(), 0)))
		lastStamp = now
		ib := &inflightBatch{props: append([]*proposal(nil), batch...), start: time.Now(), answered: make(chan struct{})}
		if pr.wal != nil {
			ib.walMark = pr.wal.mark()
		}
		prev = ib
		// NB: framed with its version and CRC-32C (raftfsm/frame.go); Apply
		// and the startup verification (verify.go) check the frame before
		// they decode.
		data, err := raftfsm.MarshalEntry(batchCommand(batch, now))
		if err != nil {
			ib.err = err
		} else {
			ib.data = data
			pr.own.Add(data) // before raft may apply it
			ib.fut = pr.raft.Apply(data, applyTimeout)
		}
		select {
		case pr.inflight <- ib:
		case <-ctx.Done():
			pr.settle(ib)
			pr.failPending()
			return
		}
	}
}

// waitWritten waits until the log store has finished a write begun after
// prev went to raft, or prev is answered (walgate.go: the next entry then
// takes every proposal that arrived during the write); at once without a
// gate or a previous entry. False when ctx ended first.
func (pr *proposer) waitWritten(ctx context.Context, prev *inflightBatch) bool {
	if pr.wal == nil || prev == nil {
		return true
	}
	for {
		written, changed := pr.wal.writtenAfter(prev.walMark)
		if written {
			return true
		}
		select {
		case <-changed:
		case <-prev.answered:
			return true
		case <-ctx.Done():
			return false
		}
	}
}

// drain adds the proposals already waiting to batch, up to maxBatch, and
// stops once their bytes reach maxBytes (so an entry is at most maxBytes
// plus its last proposal). A group that does not fit whole is carried to
// the next entry.
func (pr *proposer) drain(batch []*proposal) []*proposal {
	n := 0
	for _, p := range batch {
		n += p.bytes
	}
	for len(batch) < pr.maxBatch && n < pr.maxBytes {
		select {
		case p := <-pr.proposals:
			if len(p.rest) > 0 && (len(batch)+1+len(p.rest) > pr.maxBatch || n+p.groupBytes() > pr.maxBytes) {
				pr.carry = p
				return batch
			}
			batch = p.group(batch)
			n += p.groupBytes()
		default:
			return batch
		}
	}
	return batch
}

// next is the first proposal of the next entry: the carried group when
// there is one, else the next in the queue; false once ctx has ended.
func (pr *proposer) next(ctx context.Context) (*proposal, bool) {
	if p := pr.carry; p != nil {
		pr.carry = nil
		return p, true
	}
	select {
	case <-ctx.Done():
		return nil, false
	case p := <-pr.proposals:
		return p, true
	}
}

// failAll answers every proposal of batch with err.
func failAll(batch []*proposal, err error) {
	for _, p := range batch {
		p.done <- proposalResult{err: err}
	}
}

// batchCommand stamps every proposal with now and returns the entry's
// command: the proposal itself when it is alone, else a Batch.
func batchCommand(batch []*proposal, now uint64) *pb.Command {
	if len(batch) == 1 {
		batch[0].cmd.NowSecs = now
		return batch[0].cmd
	}
	b := &pb.Batch{Commands: make([]*pb.Command, len(batch))}
	for i, p := range batch {
		p.cmd.NowSecs = now
		b.Commands[i] = p.cmd
	}
	return &pb.Command{Version: raftfsm.CommandVersion, NowSecs: now, Op: &pb.Command_Batch{Batch: b}}
}

func (pr *proposer) failPending() {
	if pr.carry != nil {
		failAll(pr.carry.group(nil), ErrClosed)
		pr.carry = nil
	}
	pr.failQueued()
}

// failQueued answers every queued proposal ErrClosed (none reached raft).
// Safe from any goroutine: each proposal is received once.
func (pr *proposer) failQueued() {
	for {
		select {
		case p := <-pr.proposals:
			failAll(p.group(nil), ErrClosed)
		default:
			return
		}
	}
}

// respond waits for each batch in proposal order and hands every proposer
// its own response; it returns once run has returned.
func (pr *proposer) respond(context.Context) {
	for ib := range pr.inflight {
		pr.settle(ib)
		close(ib.answered)
		<-pr.slots
		if ib.err == nil {
			pr.m.ObserveApply(len(ib.props), time.Since(ib.start))
		}
	}
}

// settle finishes ib and drops its entry from own: applied, it was taken
// already; failed, it is not applied from this buffer (a later apply of
// the same index reads it from the log store).
func (pr *proposer) settle(ib *inflightBatch) {
	finish(ib)
	pr.own.Forget(ib.data)
}

// finish hands every proposer of ib its result: a failed entry fails
// every one of them with the same error.
func finish(ib *inflightBatch) {
	err := ib.err
	var resp any
	if err == nil {
		err = ib.fut.Error()
		if err == nil {
			resp = ib.fut.Response()
		}
	}
	// NB: an entry refused during a leadership transfer is a not-leader
	// answer too (mapRaftErr), so clients retry it on the new leader.
	err = mapRaftErr(err)
	if err != nil && ib.fut != nil && ib.fut.Index() != 0 {
		err = outcomeUnknown(err)
	}
	if err != nil {
		for _, p := range ib.props {
			p.done <- proposalResult{err: err}
		}
		return
	}
	switch r := resp.(type) {
	case []raftfsm.Response:
		for i, p := range ib.props {
			if i < len(r) {
				p.done <- proposalResult{resp: r[i]}
			} else {
				p.done <- proposalResult{err: errors.New("node: batch response is short")}
			}
		}
	case raftfsm.Response:
		if len(ib.props) == 1 {
			ib.props[0].done <- proposalResult{resp: r}
			return
		}
		// A batch-level failure (e.g. the batch did not decode).
		for _, p := range ib.props {
			p.done <- proposalResult{resp: r}
		}
	default:
		for _, p := range ib.props {
			p.done <- proposalResult{err: errors.New("node: unexpected apply response")}
		}
	}
}

// outcomeUnknown marks err, the failure of an entry raft had given a log
// index (appended by this leader), with ErrOutcomeUnknown: raft answers
// such an entry ErrLeadershipLost when the node steps down and
// ErrRaftShutdown when it shuts down after the entry committed, yet a
// later leader (or this node after a restart) may apply it. An entry
// refused before it reached the log has index 0 (raft's errorFuture, or
// ErrNotLeader from a follower or a stepping-down leader).
func outcomeUnknown(err error) error {
	if errors.Is(err, ErrOutcomeUnknown) {
		return err
	}
	return fmt.Errorf("%w (%w)", err, ErrOutcomeUnknown)
}

// ProposeAll proposes every command before waiting for any, so they share
// log entries; results come back in order. An infrastructure error fails
// the whole call; when some commands were applied (or may be) it
// errors.Is ErrOutcomeUnknown.
func (n *Node) ProposeAll(ctx context.Context, cmds []*pb.Command) ([]raftfsm.Response, error) {
	if err := n.Err(); err != nil {
		return nil, err
	}
	props := make([]*proposal, len(cmds))
	out := make([]raftfsm.Response, len(cmds))
	pass := make([]*pb.Command, 0, len(cmds))
	idx := make([]int, 0, len(cmds))
	for i, cmd := range cmds {
		if err := n.gate(cmd); err != nil {
			out[i] = raftfsm.Response{Err: err} // version.go: never reaches the log
			continue
		}
		pass, idx = append(pass, cmd), append(idx, i)
	}
	sent, err := n.prop.submitAll(ctx, pass)
	if err != nil {
		return nil, err
	}
	for j, p := range sent {
		props[idx[j]] = p
	}
	var firstErr error
	mayApply := false // a command was applied, or may still be
	for i, p := range props {
		if p == nil {
			continue
		}
		select {
		case r := <-p.done:
			out[i] = r.resp
			mayApply = mayApply || r.err == nil || errors.Is(r.err, ErrOutcomeUnknown)
			if r.err != nil && firstErr == nil {
				firstErr = r.err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if firstErr != nil && mayApply {
		// NB: the call fails whole, yet some of its commands took effect
		// (their entries committed before another entry's refusal) or may.
		firstErr = outcomeUnknown(firstErr)
	}
	return out, firstErr
}
