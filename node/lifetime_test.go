// Tests for the node's lifetime (lifetime.go). Goal: Stop ends every loop
// and every call derived from the lifetime, may be called twice, and a
// closed node refuses proposals at once. Method: loops that block on their
// context; a real node closed twice.
package node

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/raftfsm"
)

func TestLifetime_StopEndsLoopsAndTolerantOfDoubleStop(t *testing.T) {
	t.Parallel()
	l := newLifetime()
	ended := make(chan struct{}, 2)
	for range 2 {
		l.Go(func(ctx context.Context) {
			<-ctx.Done()
			ended <- struct{}{}
		})
	}
	l.Stop()
	if len(ended) != 2 {
		t.Fatalf("Stop returned with %d of 2 loops ended", len(ended))
	}
	l.Stop() // a second Stop returns too
	select {
	case <-l.Done():
	default:
		t.Fatal("Done is open after Stop")
	}
}

func TestLifetime_Bound(t *testing.T) {
	t.Parallel()
	l := newLifetime()
	caller, cancelCaller := context.WithCancel(context.Background())
	ctx, stop := l.bound(caller)
	cancelCaller()
	<-ctx.Done() // ends with the caller's context
	stop()

	ctx, stop = l.bound(context.Background())
	defer stop()
	if ctx.Err() != nil {
		t.Fatalf("bound context ended early: %v", ctx.Err())
	}
	l.Stop()
	<-ctx.Done() // and with the lifetime
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("bound context: %v, want Canceled", ctx.Err())
	}
}

func TestNode_CloseTwiceAndProposeAfterClose(t *testing.T) {
	t.Parallel()
	n := openNode(t, t.TempDir(), func(c *Config) { c.TickInterval = 10 * time.Millisecond })
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// The deadline only bounds a failing run: a proposal queued after Close
	// would wait for an answer that never comes.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := &pb.Command{Tenant: raftfsm.SystemTenant, Op: &pb.Command_PruneDeadWorkers{PruneDeadWorkers: &pb.PruneDeadWorkers{}}}
	if _, err := n.Propose(ctx, cmd); !errors.Is(err, ErrClosed) {
		t.Fatalf("Propose after Close: %v, want ErrClosed", err)
	}
	if _, err := n.ProposeAll(ctx, []*pb.Command{cmd}); !errors.Is(err, ErrClosed) {
		t.Fatalf("ProposeAll after Close: %v, want ErrClosed", err)
	}
}
