package node

import "github.com/hashicorp/raft"

// snapshotPrefetch restores the newest snapshot into the FSM while Open
// runs its startup check of the log, instead of after it: raft.NewRaft
// restores the snapshot only once the check has passed, so a restart spent
// the check's serial read of the WAL (scanWALSegments, verifyDataDir) and
// then the snapshot's serial read and decode one after the other
// (docs/benchmarks.md, "Restart of a 1 M-task node").
//
// Nothing changes for raft or for the check: the restore only reads the
// snapshot store, and raft starts after both are done. When the newest
// snapshot restored, raft is told not to restore it again
// (raft.Config.NoSnapshotRestoreOnStart: it takes the newest snapshot's
// index, term and configuration from its metadata, as after its own
// restore). When it did not (unreadable, invalid, of a newer version),
// raft restores as before — the newest snapshot, then older ones — and
// fails or succeeds exactly as it did.
type snapshotPrefetch struct {
	id   string // the snapshot restored; "" when none was
	done chan struct{}
}

// prefetchSnapshot starts restoring the newest snapshot of snaps into fsm,
// if there is one.
func prefetchSnapshot(snaps *indexedSnapshots, fsm raft.FSM) *snapshotPrefetch {
	p := &snapshotPrefetch{done: make(chan struct{})}
	metas, err := snaps.List()
	if err != nil || len(metas) == 0 {
		close(p.done)
		return p
	}
	id := metas[0].ID // List returns the newest first
	go func() {
		defer close(p.done)
		if restoreSnapshotID(snaps, fsm, id) {
			p.id = id
		}
	}()
	return p
}

// restoreSnapshotID restores the snapshot id into fsm.
func restoreSnapshotID(snaps raft.SnapshotStore, fsm raft.FSM, id string) bool {
	_, rc, err := snaps.Open(id)
	if err != nil {
		return false
	}
	defer rc.Close()
	return fsm.Restore(rc) == nil
}

// wait waits for the restore; Open waits on every path, so the restore
// never outlives Open.
func (p *snapshotPrefetch) wait() { <-p.done }

// restored waits for the restore and reports whether the FSM holds the
// snapshot raft would restore now: the newest in snaps.
func (p *snapshotPrefetch) restored(snaps raft.SnapshotStore) bool {
	p.wait()
	if p.id == "" {
		return false
	}
	metas, err := snaps.List()
	return err == nil && len(metas) > 0 && metas[0].ID == p.id
}
