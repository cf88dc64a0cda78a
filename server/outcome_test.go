// Goal: a proposal that failed after raft appended its entry (the node
// lost leadership; node.ErrOutcomeUnknown) reaches the caller as
// Unavailable with OutcomeHeader: OutcomeUnknown, never as a failure that
// changed nothing, and the client then re-sends only calls that are safe
// to replay; a refusal before the log (node.ErrNotLeader alone) stays a
// plain not_leader that every call may retry. Method: toConnect over the
// node's errors, and the real handlers over a backend whose every proposal
// fails with node.ErrLeadershipLost, driven by client.Client.
package server

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wireerr"
	"github.com/termivar/distributed/node"
	"github.com/termivar/distributed/raftfsm"
)

func TestToConnect_OutcomeUnknown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		err     error
		kind    string
		unknown bool
	}{
		{"leadership lost", node.ErrLeadershipLost, KindNotLeader, true},
		{"leadership lost, wrapped", fmt.Errorf("propose: %w", node.ErrLeadershipLost), KindNotLeader, true},
		{"closed after the commit", fmt.Errorf("%w (%w)", node.ErrClosed, node.ErrOutcomeUnknown), KindUnavailable, true},
		{"raft error after the append", fmt.Errorf("%w (%w)", errors.New("disk on fire"), node.ErrOutcomeUnknown), KindUnavailable, true},
		{"not leader", node.ErrNotLeader, KindNotLeader, false},
		{"closed", node.ErrClosed, KindUnavailable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ce, ok := errors.AsType[*connect.Error](toConnect(tc.err))
			if !ok || ce.Code() != connect.CodeUnavailable {
				t.Fatalf("toConnect(%v) = %v, want Unavailable", tc.err, ce)
			}
			if d, ok := wireerr.DetailOf(ce); !ok || d.GetKind() != tc.kind {
				t.Errorf("toConnect(%v) kind = %v, want %s", tc.err, d.GetKind(), tc.kind)
			}
			if got := ce.Meta().Get(OutcomeHeader) == OutcomeUnknown; got != tc.unknown {
				t.Errorf("toConnect(%v) outcome unknown = %v, want %v", tc.err, got, tc.unknown)
			}
		})
	}
}

// lostLeadershipBackend is a node whose every proposal fails as raft fails
// an appended entry when the leader steps down.
type lostLeadershipBackend struct {
	*node.Node
	proposals atomic.Int64
}

func (b *lostLeadershipBackend) Propose(context.Context, *pb.Command) (raftfsm.Response, error) {
	b.proposals.Add(1)
	return raftfsm.Response{}, node.ErrLeadershipLost
}

func (b *lostLeadershipBackend) ProposeAll(context.Context, []*pb.Command) ([]raftfsm.Response, error) {
	b.proposals.Add(1)
	return nil, node.ErrLeadershipLost
}

func TestServer_LeadershipLostIsUnknownOutcome(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	be := &lostLeadershipBackend{Node: tb.node}
	srv := httptest.NewServer(New(Config{Backend: be}).Handler())
	t.Cleanup(srv.Close)
	c, err := client.New(client.Config{ServerURL: srv.URL, Key: tb.adminKey, MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := context.Background()

	_, err = c.CreateKey(ctx, &pb.CreateKeyRequest{Role: "worker"})
	if !client.IsUnreachable(err) || !client.MayHaveApplied(err) || be.proposals.Load() != 1 {
		t.Fatalf("CreateKey after leadership lost = %v after %d proposals; want unreachable after 1 (not safe to replay)", err, be.proposals.Load())
	}
	be.proposals.Store(0)
	_, err = c.Heartbeat(ctx, &pb.HeartbeatRequest{WorkerId: "w", Generation: 1})
	if !client.IsUnreachable(err) || be.proposals.Load() != 3 {
		t.Fatalf("Heartbeat after leadership lost = %v after %d proposals; want unreachable after 3 (safe to replay)", err, be.proposals.Load())
	}
}
