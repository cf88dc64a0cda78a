package server

import (
	"context"
	"time"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// The dashboard's read RPC (docs/observability.md, "Dashboard"):
// Dashboard.Overview builds one view of the caller's tenant from the
// applied state of the node asked (overview.go) and, with after_revision,
// long-polls until the tenant's revision moves. The web page (ui.go) calls
// it with the Connect JSON protocol and the key the user entered.

// Bounds of Dashboard.Overview.
const (
	// MaxDashboardWaitSecs bounds the long-poll's wait.
	MaxDashboardWaitSecs = 30
	// maxDashboardBuilds bounds the overviews built at once by one
	// server: each costs one pass over the tenant's task records.
	maxDashboardBuilds = 2
	// dashboardRecheck is how often a long-poll re-reads the revision
	// when the backend cannot say when the state changed.
	dashboardRecheck = 250 * time.Millisecond
)

// changeNotifier is the optional side of a Backend that says when the
// applied state changed; node.Node implements it. Without it the
// long-poll re-reads the tenant's revision every dashboardRecheck.
type changeNotifier interface {
	// ChangeChan returns a channel closed after the next log entry is
	// applied (of any tenant).
	ChangeChan() <-chan struct{}
}

// raftStatser is the optional side of a Backend that reports raft's
// statistics (term, commit index, …); node.Node implements it.
type raftStatser interface {
	RaftStats() map[string]string
}

type dashboardHandler struct{ s *Server }

func (h dashboardHandler) Overview(ctx context.Context, req *connect.Request[pb.OverviewRequest]) (*connect.Response[pb.OverviewResponse], error) {
	return call(ctx, h.s, req, false, func(ctx context.Context, p principal, m *pb.OverviewRequest) (*pb.OverviewResponse, uint64, error) {
		if m.GetWaitSecs() > MaxDashboardWaitSecs {
			return nil, 0, errInvalid("wait_secs is above 30")
		}
		if m.AfterRevision != nil {
			h.s.waitRevision(ctx, p.Tenant, m.GetAfterRevision(), time.Duration(m.GetWaitSecs())*time.Second)
		}
		select {
		case h.s.dashSem <- struct{}{}:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
		defer func() { <-h.s.dashSem }()
		return h.s.overview(p), 0, nil
	})
}

// waitRevision returns when tenant's revision differs from after, the wait
// passed, the server closes or ctx ends.
func (s *Server) waitRevision(ctx context.Context, tenant string, after uint64, wait time.Duration) {
	if wait <= 0 {
		return
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		tv, ok := s.node.Reads().Tenant(tenant)
		if !ok || tv.Counters().Revision != after {
			return
		}
		var changed <-chan struct{}
		var recheck <-chan time.Time
		if cn, ok := s.node.(changeNotifier); ok {
			changed = cn.ChangeChan()
			// NB: the channel was taken after the revision was read; an
			// entry applied between the two is caught by one more read.
			if tv.Counters().Revision != after {
				return
			}
		} else {
			recheck = time.After(dashboardRecheck)
		}
		select {
		case <-changed:
		case <-recheck:
		case <-deadline.C:
			return
		case <-s.stopping:
			return
		case <-ctx.Done():
			return
		}
	}
}
