package node

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestNode_ReadsRacingCloseEnd races linearizable reads with Close: raft
// v1.8.0 never answers a VerifyLeader future still queued in its buffered
// channel at Shutdown, so a read that enqueued one just before Close used
// to wait forever (and goleak failed). Every read must end with ErrClosed
// or ErrNotLeader, and nothing may outlive Close (TestMain's goleak).
func TestNode_ReadsRacingCloseEnd(t *testing.T) {
	for round := range 20 {
		n := openNode(t, t.TempDir(), nil)
		waitFor(t, "the single node to lead", n.IsLeader)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() { errs <- readUntilRefused(n) })
		}
		if err := n.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", round, err)
		}
		if !waitGroupWithin(&wg, 15*time.Second) {
			t.Fatalf("round %d: a read still waits after Close", round)
		}
		close(errs)
		for err := range errs {
			if !errors.Is(err, ErrClosed) && !errors.Is(err, ErrNotLeader) {
				t.Fatalf("round %d: read after Close: %v, want ErrClosed or ErrNotLeader", round, err)
			}
		}
	}
}

func readUntilRefused(n *Node) error {
	for {
		if err := n.LinearizableRead(context.Background()); err != nil {
			return err
		}
	}
}

func waitGroupWithin(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
