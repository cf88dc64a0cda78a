package node

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/metrics"
	"github.com/termivar/distributed/internal/notify"
	"github.com/termivar/distributed/raftfsm"
)

// observedFSM is the FSM raft runs: the node's FSM (every method promoted
// unchanged) whose snapshots are timed, measured and logged once written
// (docs/observability.md).
type observedFSM struct {
	*raftfsm.FSM
	m   *metrics.Node
	log *slog.Logger
	// changed is woken after every applied entry and restored snapshot
	// (Node.ChangeChan); snapshots after every snapshot written.
	changed, snapshots *notify.Notifier
	// trig counts applied log bytes for snapshots by size (snapbytes.go).
	trig *snapTrigger
	// opened is the snapshot store whose last opened snapshot Restore
	// installs: its size sizes the read, its index becomes the FSM's
	// applied index. Invariant: non-nil, like changed and snapshots.
	opened *indexedSnapshots
}

// observedFSM returns the FSM raft runs on this node, restoring from
// snaps.
func (n *Node) observedFSM(snaps *indexedSnapshots) observedFSM {
	return observedFSM{FSM: n.fsm, m: n.cfg.Metrics, log: n.log, changed: &n.changed,
		snapshots: &n.snapshots, trig: n.snapTrig, opened: snaps}
}

// Apply applies the entry, then wakes the waiters of Node.ChangeChan.
func (f observedFSM) Apply(l *raft.Log) any {
	return f.applied(l, f.FSM.AppliedResultBytes(), f.FSM.Apply(l))
}

// applied counts the applied entry l (and the result bytes it added to
// the store since resultsBefore) for snapshots by size and wakes the
// waiters of Node.ChangeChan; it returns r, l's response.
func (f observedFSM) applied(l *raft.Log, resultsBefore int64, r any) any {
	f.trig.add(int64(len(l.Data)), f.FSM.AppliedResultBytes()-resultsBefore)
	f.changed.Notify("")
	return r
}

var _ raft.BatchingFSM = observedFSM{}

// ApplyBatch is raft.BatchingFSM's: the command entries of logs are
// applied in order exactly as Apply applies each, while the next one
// decodes (raftfsm.FSM.DecodeAhead; a replay after a restart is hundreds of
// large entries). Other entries (configuration) get a nil response, as
// raft gives them without a batching FSM.
func (f observedFSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	ahead := f.FSM.DecodeAhead(logs)
	for i, l := range logs {
		if l.Type == raft.LogCommand {
			results := f.FSM.AppliedResultBytes()
			out[i] = f.applied(l, results, f.FSM.ApplyDecoded(l, <-ahead))
		}
	}
	return out
}

// Restore installs a snapshot, records the snapshot's raft index as the
// FSM's applied index (raft does not tell the FSM; Admin.Status reports it
// before any entry is applied), then wakes the waiters of
// Node.ChangeChan.
func (f observedFSM) Restore(rc io.ReadCloser) error {
	err := f.FSM.RestoreSized(rc, f.opened.lastSize())
	if err == nil {
		f.trig.restored(f.FSM.StoredResultBytes())
		f.FSM.SetRestoredIndex(f.opened.lastIndex())
	}
	f.changed.Notify("")
	return err
}

// Snapshot wraps the FSM's snapshot so that Persist is observed.
func (f observedFSM) Snapshot() (raft.FSMSnapshot, error) {
	s, err := f.FSM.Snapshot()
	if err != nil {
		return nil, err
	}
	// NB: raft calls Snapshot on the FSM goroutine, so no Apply ran since
	// the capture: the stored results are the snapshot's.
	return &observedSnapshot{FSMSnapshot: s, m: f.m, log: f.log, snapshots: f.snapshots, trig: f.trig,
		covered: f.trig.captured(), results: f.FSM.StoredResultBytes()}, nil
}

type observedSnapshot struct {
	raft.FSMSnapshot
	m         *metrics.Node
	log       *slog.Logger
	snapshots *notify.Notifier
	trig      *snapTrigger
	covered   snapCount // log bytes applied since the previous snapshot
	results   int64     // result bytes the snapshot holds
}

// Persist writes the snapshot through a byte counter and records its
// duration and size; it logs one line per snapshot written.
func (s *observedSnapshot) Persist(sink raft.SnapshotSink) error {
	start := time.Now()
	cs := &countingSink{SnapshotSink: sink}
	err := s.FSMSnapshot.Persist(cs)
	d := time.Since(start)
	if err != nil {
		s.trig.failed(s.covered)
		s.log.Warn("raft snapshot failed", "snapshot_id", sink.ID(), "error", err)
		return err
	}
	s.trig.written(s.results)
	s.m.ObserveSnapshot(cs.n, d)
	s.log.Info("raft snapshot written", "snapshot_id", sink.ID(), "bytes", cs.n, "duration", d,
		"result_bytes", s.results, "log_bytes", s.covered.applied, "log_result_bytes", s.covered.applied-s.covered.commands)
	s.snapshots.Notify("")
	return nil
}

type countingSink struct {
	raft.SnapshotSink
	n int64
}

func (c *countingSink) Write(p []byte) (int, error) {
	n, err := c.SnapshotSink.Write(p)
	c.n += int64(n)
	return n, err
}

var _ io.Writer = (*countingSink)(nil) // NB: raft's sink is an io.WriteCloser

// leaderLoop logs one line per leader change observed on ch (registered
// by startLeaderLoop) and counts it, until ctx (the node's lifetime) ends.
func (n *Node) leaderLoop(ctx context.Context, ch chan raft.Observation) {
	for {
		select {
		case <-ctx.Done():
			return
		case o := <-ch:
			lo, _ := o.Data.(raft.LeaderObservation)
			n.cfg.Metrics.LeaderChanged()
			if lo.LeaderID == "" {
				n.log.Warn("raft leader lost", "node_id", n.cfg.NodeID, "term", n.raft.CurrentTerm())
				continue
			}
			n.log.Info("raft leader changed", "leader_id", string(lo.LeaderID), "leader_addr", string(lo.LeaderAddr),
				"self", string(lo.LeaderID) == n.cfg.NodeID, "term", n.raft.CurrentTerm())
		}
	}
}

// startLeaderLoop registers the leader observer before it returns and
// runs leaderLoop: a sole voter elects itself as soon as it is told to
// (campaignIfSoleVoter, called after this), and an observer registered
// inside the loop's goroutine missed that first election's line.
func (n *Node) startLeaderLoop() {
	ch := make(chan raft.Observation, 16)
	deregister := n.observeLeader(ch)
	n.life.Go(func(ctx context.Context) {
		defer deregister()
		n.leaderLoop(ctx, ch)
	})
}

// observeLeader registers ch for raft's leader observations (a full ch
// drops them, blocking nothing); it returns the deregistration.
func (n *Node) observeLeader(ch chan raft.Observation) (deregister func()) {
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.raft.RegisterObserver(obs)
	return func() { n.raft.DeregisterObserver(obs) }
}

// RaftStats returns hashicorp/raft's statistics (state, term, indexes,
// peers), for the metrics collector.
func (n *Node) RaftStats() map[string]string { return n.raft.Stats() }

// logRecovery logs and counts what one background recovery command did
// (its response carries no domain error). Recoveries that changed nothing
// are not logged; no task or worker ID is (counts only).
func (n *Node) logRecovery(tenant string, op *pb.Command, r raftfsm.Response) {
	m := n.cfg.Metrics
	switch op.Op.(type) {
	case *pb.Command_ExpireOldTasks:
		expired, err := raftfsm.ValueAs[int](r, "ExpireOldTasks")
		if err == nil && expired > 0 {
			m.Recovered(tenant, "tasks_expired", expired)
			n.log.Info("old tasks expired", "tenant", tenant, "tasks", expired)
		}
		return
	}
	sum, err := raftfsm.ValueAs[distributed.RecoverySummary](r, "recovery")
	if err != nil || sum.TasksRequeued+sum.TasksFailed+sum.WorkersAffected == 0 {
		return
	}
	m.Recovered(tenant, "tasks_requeued", sum.TasksRequeued)
	m.Recovered(tenant, "tasks_failed", sum.TasksFailed)
	if _, dead := op.Op.(*pb.Command_PruneDeadWorkers); dead {
		m.Recovered(tenant, "workers_dead", sum.WorkersAffected)
		n.log.Warn("workers declared dead", "tenant", tenant, "workers", sum.WorkersAffected,
			"tasks_requeued", sum.TasksRequeued, "tasks_failed", sum.TasksFailed)
		return
	}
	n.log.Info("expired leases recovered", "tenant", tenant, "workers", sum.WorkersAffected,
		"tasks_requeued", sum.TasksRequeued, "tasks_failed", sum.TasksFailed)
}
