package node

import (
	"sync"

	"github.com/hashicorp/raft"
)

// Pipelined replication. hashicorp/raft v1.8 replicates to a healthy
// follower through an AppendPipeline: one goroutine sends AppendEntries
// without waiting for answers (up to maxRPCsInFlight), another
// (pipelineDecode) reads the answers from the pipeline's Consumer. When an
// answer says the follower did not append (a transport error, a log
// mismatch, a newer term), pipelineDecode returns and nothing reads the
// Consumer any more. NetworkTransport's pipeline then deadlocks: its
// decoder blocks handing the next answer to the Consumer, so the sender
// blocks in AppendEntries handing it the next request, and raft never
// reaches the pipeline's Close (deferred in the sender) — replication to
// that follower stops, and raft.Shutdown waits for the sender forever
// (serve hung on SIGTERM: docs/node.md, "Replication").
//
// safePipeline ends that: it hands the answers on itself and, once it has
// handed on one that makes raft stop reading, closes the underlying
// pipeline, so the blocked sender returns ErrPipelineShutdown and raft
// falls back to plain AppendEntries, as it does for any pipeline error.

// maxRPCsInFlight is the replication pipeline's depth per follower (raft's
// NetworkTransportConfig.MaxRPCsInFlight; 1 turns pipelining off).
const maxRPCsInFlight = 8

// pipelinedTransport is a NetworkTransport whose pipelines are
// safePipelines; every other method (and the optional interfaces raft
// looks for: WithClose, WithPreVote, SetHeartbeatHandler) is the
// NetworkTransport's.
type pipelinedTransport struct {
	*raft.NetworkTransport
}

// AppendEntriesPipeline returns a safePipeline over the transport's.
func (t pipelinedTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return newSafePipeline(p), nil
}

// safePipeline forwards an AppendPipeline's answers and closes it after
// the answer that ends raft's reading (pipelineEnds).
type safePipeline struct {
	inner raft.AppendPipeline
	out   chan raft.AppendFuture
	done  chan struct{} // closed by Close
	once  sync.Once
	wg    sync.WaitGroup
}

func newSafePipeline(inner raft.AppendPipeline) *safePipeline {
	p := &safePipeline{inner: inner, out: make(chan raft.AppendFuture), done: make(chan struct{})}
	p.wg.Go(p.forward)
	return p
}

// forward hands each answer on until one ends the pipeline or Close.
func (p *safePipeline) forward() {
	for {
		var f raft.AppendFuture
		select {
		case f = <-p.inner.Consumer():
		case <-p.done:
			return
		}
		// NB: decided before the hand-over: f.Error() caches its result
		// unsynchronised (hashicorp/raft deferError), so only one
		// goroutine may call it first.
		ends := pipelineEnds(f)
		select {
		case p.out <- f:
		case <-p.done:
			return
		}
		if ends {
			// NB: raft's reader has returned (or is about to, on this
			// very answer); unblock the sender.
			_ = p.inner.Close()
			return
		}
	}
}

// pipelineEnds reports whether raft's pipelineDecode stops reading after
// the answer f (hashicorp/raft v1.8 replication.go): a failed RPC (its
// response stays zero, so not Success), a refused append, or a newer
// term.
func pipelineEnds(f raft.AppendFuture) bool {
	if f.Error() != nil {
		return true
	}
	resp, req := f.Response(), f.Request()
	return resp == nil || req == nil || !resp.Success || resp.Term > req.Term
}

// AppendEntries sends one request down the pipeline; it returns
// ErrPipelineShutdown once the pipeline has ended.
func (p *safePipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	return p.inner.AppendEntries(args, resp)
}

// Consumer returns the answers in order.
func (p *safePipeline) Consumer() <-chan raft.AppendFuture { return p.out }

// Close closes the pipeline and stops forwarding; it may be called more
// than once.
func (p *safePipeline) Close() error {
	var err error
	p.once.Do(func() {
		close(p.done)
		err = p.inner.Close()
		p.wg.Wait()
	})
	return err
}
