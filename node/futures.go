package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Waits on raft futures outside the node's loops. hashicorp/raft v1.8.0
// answers a future only from its main loop: one still queued in a
// buffered channel when Shutdown stops that loop (VerifyLeader's verifyCh,
// Apply/Barrier's applyCh with BatchApplyCh, LeadershipTransfer's channel)
// is never answered, and its Error() blocks forever. So the node (a)
// refuses new calls once Close began, (b) waits for each future on a
// goroutine it tracks, while the caller returns at ctx's or the node's
// end, and (c) Close lets raft, still running, answer every tracked
// future before it shuts raft down (raft answers all of them: a leader
// replies or steps down within its lease, a follower refuses at once).

// errCutAppend is what await returns for a cut wait on a change that may
// already be in the log (a configuration change): it may still apply.
var errCutAppend = fmt.Errorf("%w before the change committed; it may still be applied (%w)", ErrClosed, ErrOutcomeUnknown)

// raftCalls counts the futures being waited for; closed refuses new ones.
type raftCalls struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func (c *raftCalls) add() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	return true
}

// close refuses new calls and waits, up to grace, for the tracked ones;
// false when some still wait.
func (c *raftCalls) close(grace time.Duration) bool {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(grace):
		return false
	}
}

// await makes the call (which enqueues a raft future) and returns the
// future's error mapped by mapRaftErr; ErrClosed after Close began; cut
// (ErrClosed or errCutAppend) when the node's lifetime ends first; ctx's
// error when ctx does.
func (n *Node) await(ctx context.Context, cut error, call func() raft.Future) error {
	if !n.calls.add() {
		return ErrClosed
	}
	f := call()
	errc := make(chan error, 1)
	go func() {
		defer n.calls.wg.Done()
		errc <- f.Error()
	}()
	select {
	case err := <-errc:
		return mapRaftErr(err)
	case <-n.life.Done():
		return cut
	case <-ctx.Done():
		if cut == errCutAppend {
			return fmt.Errorf("%w (%w)", ctx.Err(), ErrOutcomeUnknown)
		}
		return ctx.Err()
	}
}
