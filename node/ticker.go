package node

import (
	"context"
	"time"

	"github.com/termivar/distributed/raftfsm"
)

// tickLoop is the leader's background recovery: on every tick it proposes,
// for each tenant that has something to recover, RecoverExpiredLeases,
// PruneDeadWorkers and ExpireOldTasks. Followers do nothing. It returns
// when ctx (the node's lifetime) ends.
func (n *Node) tickLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n.RaftState() != "Leader" {
			continue
		}
		// NB: a running round is not cancelled by Close (see memberLoop).
		n.Tick(context.WithoutCancel(ctx))
	}
}

// Tick runs one round of background recovery now. It proposes only the
// commands that would do something (a read-only check first), so an idle
// cluster does not grow its log or move revisions.
func (n *Node) Tick(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	now := max(n.fsm.LastTime(), uint64(max(n.cfg.NowFunc().Unix(), 0)))
	for _, name := range n.fsm.TenantNames() {
		tv, ok := n.fsm.Tenant(name)
		if !ok {
			continue
		}
		for _, op := range tv.RecoveryCommands(now, n.cfg.TaskTTLSecs) {
			r, err := n.Propose(ctx, op)
			if err != nil {
				n.log.Warn("background recovery not proposed", "tenant", name, "error", err)
				return
			}
			if r.Err != nil {
				n.log.Warn("background recovery rejected", "tenant", name, "kind", raftfsm.KindOf(r.Err))
				continue
			}
			n.logRecovery(name, op, r)
		}
	}
}
