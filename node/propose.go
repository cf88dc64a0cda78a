package node

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/raft"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/raftfsm"
)

// applyTimeout bounds how long raft may take to accept one entry.
const applyTimeout = 10 * time.Second

type proposal struct {
	cmd  *pb.Command
	done chan proposalResult
}

type proposalResult struct {
	resp raftfsm.Response
	err  error
}

type inflightBatch struct {
	fut   raft.ApplyFuture
	props []*proposal
	err   error
}

// Propose stamps cmd with the leader's time, coalesces it with concurrent
// proposals into one log entry and waits until it is applied. The returned
// Response carries domain errors; the error result is for infrastructure
// failures (ErrNotLeader, ErrClosed, a raft error, ctx, or Err() once the
// node has failed).
//
// NB: if ctx ends first the command may still be applied.
func (n *Node) Propose(ctx context.Context, cmd *pb.Command) (raftfsm.Response, error) {
	if err := n.Err(); err != nil {
		return raftfsm.Response{}, err // a failed node commits nothing more (health.go)
	}
	cmd.Version = raftfsm.CommandVersion
	p := &proposal{cmd: cmd, done: make(chan proposalResult, 1)}
	select {
	case n.proposals <- p:
	case <-n.stop:
		return raftfsm.Response{}, ErrClosed
	case <-ctx.Done():
		return raftfsm.Response{}, ctx.Err()
	}
	select {
	case r := <-p.done:
		return r.resp, r.err
	case <-ctx.Done():
		return raftfsm.Response{}, ctx.Err()
	}
}

// proposeLoop takes every waiting proposal (up to MaxBatchCommands), stamps
// them with one time and hands them to raft as one entry. It does not wait
// for the entry to commit: respondLoop does, so batches pipeline while raft
// shares fsyncs among the entries it has.
func (n *Node) proposeLoop() {
	defer n.wg.Done()
	defer close(n.inflight)
	var lastStamp uint64
	batch := make([]*proposal, 0, n.cfg.MaxBatchCommands)
	for {
		select {
		case <-n.stop:
			n.failPending()
			return
		case p := <-n.proposals:
			batch = append(batch[:0], p)
		}
	drain:
		for len(batch) < n.cfg.MaxBatchCommands {
			select {
			case p := <-n.proposals:
				batch = append(batch, p)
			default:
				break drain
			}
		}
		now := max(lastStamp, n.fsm.LastTime(), uint64(max(n.cfg.NowFunc().Unix(), 0)))
		lastStamp = now
		var cmd *pb.Command
		if len(batch) == 1 {
			cmd = batch[0].cmd
			cmd.NowSecs = now
		} else {
			b := &pb.Batch{Commands: make([]*pb.Command, len(batch))}
			for i, p := range batch {
				p.cmd.NowSecs = now
				b.Commands[i] = p.cmd
			}
			cmd = &pb.Command{Version: raftfsm.CommandVersion, NowSecs: now, Op: &pb.Command_Batch{Batch: b}}
		}
		ib := &inflightBatch{props: append([]*proposal(nil), batch...)}
		data, err := marshalCommand(cmd)
		if err != nil {
			ib.err = err
		} else {
			ib.fut = n.raft.Apply(data, applyTimeout)
		}
		select {
		case n.inflight <- ib:
		case <-n.stop:
			finish(ib)
			n.failPending()
			return
		}
	}
}

func (n *Node) failPending() {
	for {
		select {
		case p := <-n.proposals:
			p.done <- proposalResult{err: ErrClosed}
		default:
			return
		}
	}
}

// respondLoop waits for each batch in proposal order and hands every
// proposer its own response.
func (n *Node) respondLoop() {
	defer n.wg.Done()
	for ib := range n.inflight {
		finish(ib)
	}
}

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

// ProposeAll proposes every command before waiting for any, so they share
// log entries; results come back in order. An infrastructure error fails
// the whole call (some commands may still have been applied).
func (n *Node) ProposeAll(ctx context.Context, cmds []*pb.Command) ([]raftfsm.Response, error) {
	if err := n.Err(); err != nil {
		return nil, err
	}
	props := make([]*proposal, len(cmds))
	for i, cmd := range cmds {
		cmd.Version = raftfsm.CommandVersion
		props[i] = &proposal{cmd: cmd, done: make(chan proposalResult, 1)}
		select {
		case n.proposals <- props[i]:
		case <-n.stop:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out := make([]raftfsm.Response, len(cmds))
	var firstErr error
	for i, p := range props {
		select {
		case r := <-p.done:
			out[i] = r.resp
			if r.err != nil && firstErr == nil {
				firstErr = r.err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, firstErr
}

// marshalCommand encodes a command for the log, framed with its version
// and CRC-32C (raftfsm/frame.go); Apply and the startup verification
// (verify.go) check the frame before they decode.
func marshalCommand(cmd *pb.Command) ([]byte, error) {
	return raftfsm.MarshalEntry(cmd)
}
