package server

import (
	"context"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/audit"
	"github.com/termivar/distributed/raftfsm"
)

// FollowResults with delete_after_read (docs/adr/0002-purge.md, "Delete
// after read"): the cursor of a call acknowledges every result before it,
// because the follower only sends it after it received them; so the call
// first purges the scan's completed tasks before the cursor, then answers.
// Nothing the follower has not acknowledged is purged: a follower that
// stops (or crashes) before its next call finds those results again from
// its last cursor.

// maxAckWindow bounds the scan entries one acknowledgement reads (and so
// the task IDs of its PurgeTasks). Acknowledged tasks that are not
// completed (failed, cancelled, expired) stay and are read again by every
// later acknowledgement, so the bound keeps a scan full of failures cheap;
// completed tasks past it are purged by the next call.
const maxAckWindow = 4 * maxFollowResults

// ackedCompleted returns the completed tasks of the scan whose ordinal in
// the cursor's order is below the cursor, from the start of the scan's
// remaining entries, at most maxAckWindow entries read. It never returns
// every task of a scan that is not finished (a declared total not yet
// admitted): a purge that empties a scan drops its record and with it the
// ordinals the follower's cursor counts on, so the last task stays until
// the scan is finished.
func ackedCompleted(tv raftfsm.TenantView, scanID string, cur followCursor) []string {
	st, ok := tv.Scan(scanID)
	if !ok {
		return nil
	}
	ids := ackedWindow(tv, scanID, cur)
	if !st.Finished && len(ids) > 0 && len(ids) >= st.Tasks {
		ids = ids[:len(ids)-1]
	}
	return ids
}

// ackedWindow reads the completed tasks below the cursor.
func ackedWindow(tv raftfsm.TenantView, scanID string, cur followCursor) []string {
	var win []raftfsm.ScanEntry
	if cur.completion {
		win = tv.ScanCompletedWindow(scanID, 0, maxAckWindow)
	} else {
		win = tv.ScanTaskWindow(scanID, 0, maxAckWindow)
	}
	var ids []string
	for _, e := range win {
		if e.Ord >= cur.pos {
			break
		}
		if t, ok, _ := tv.GetTask(e.ID); ok && t.Status() == distributed.TaskCompleted {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// purgeAcknowledged proposes the PurgeTasks of the tasks cur acknowledges
// (none: nothing is proposed) and audits it as a FollowResults write. A
// task that stopped being purgeable between the read and the apply (a
// re-run reopened it, a retention purge took it: invalid_transition,
// task_not_found) refuses the whole command and is not an error of the
// follow; its next call tries again.
func (h producerHandler) purgeAcknowledged(ctx context.Context, p principal, scanID string, cur followCursor) (uint32, error) {
	tv, _ := h.s.node.Reads().Tenant(p.Tenant)
	ids := ackedCompleted(tv, scanID, cur)
	if len(ids) == 0 {
		return 0, nil
	}
	v, rev, err := h.purge(ctx, p, &pb.PurgeTasks{TaskIds: ids})
	h.s.audit.Record(ctx, audit.Entry{KeyID: p.KeyID, Tenant: p.Tenant, Method: "Producer.FollowResults",
		Outcome: kindOf(err), Revision: rev, Subject: scanID})
	if err != nil {
		if racedPurge(err) {
			return 0, nil
		}
		return 0, err
	}
	return uint32(len(v.TaskIDs)), nil
}

// racedPurge: the purge of acknowledged tasks lost a race with another
// command on one of them.
func racedPurge(err error) bool {
	k := kindOf(err)
	return k == distributed.KindInvalidTransition.String() || k == distributed.KindTaskNotFound.String()
}
