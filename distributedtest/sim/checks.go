package sim

import (
	"fmt"
	"reflect"
	"slices"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/distributedtest/model"
)

// checker holds what the whole-run checks remember between steps: every
// lease the core ever granted, and the last view of every task and worker.
type checker struct {
	limits      distributed.Limits
	issued      map[uint64]model.Lease
	maxLeaseID  uint64
	prevTasks   []model.Task // the last compared task views, in task-ID order
	prevWorkers map[string]model.Worker
	steps       int
	// purging holds the IDs the current step's accepted purge removed: the
	// only records that may disappear, and only when they were terminal.
	purging map[string]bool
	// purgedGen is the highest generation of any purged life per task ID:
	// a later life of the ID must start above it (docs/adr/0002-purge.md).
	purgedGen map[string]uint64
	relived   int
}

func newChecker(l distributed.Limits) *checker {
	return &checker{
		limits:      l,
		issued:      map[uint64]model.Lease{},
		prevWorkers: map[string]model.Worker{},
		purgedGen:   map[string]uint64{},
	}
}

func isReplayValue(v any) bool {
	switch v := v.(type) {
	case distributed.StartOutcome:
		return v.Kind == distributed.StartAlreadyStarted
	case model.Completion:
		return v.Kind == distributed.AlreadyCompleted
	case distributed.FailureOutcome:
		return v.Kind == distributed.RetryExhausted
	case distributed.CancellationOutcome:
		return v.Kind == distributed.AlreadyCancelled
	}
	return false
}

// step runs every per-step check after command c.
func (k *checker) step(h *Harness, c Command, before distributed.StateSnapshot, co Outcome) error {
	after := h.Core.Snapshot()
	if ms := h.Model.Snapshot(); after != ms {
		return fmt.Errorf("snapshot diverges:\n\tcore:  %+v\n\tmodel: %+v", after, ms)
	}
	// NB: after an accepted command an invariants build has audited inside
	// the core already (and panicked on a broken invariant).
	if !coreAuditsCommands || co.Err != nil || !c.Op.Mutating() {
		if err := h.Core.CheckInvariants(); err != nil {
			return fmt.Errorf("core CheckInvariants: %v", err)
		}
	}
	k.steps++
	if k.steps%16 == 0 {
		// The same coordinator as the pool's; the model audits itself too.
		if err := h.Core.TaskQueue().CheckInvariants(); err != nil {
			return fmt.Errorf("core TaskQueue CheckInvariants: %v", err)
		}
		if err := h.Model.CheckInvariants(); err != nil {
			return fmt.Errorf("model CheckInvariants: %v", err)
		}
	}
	rejected := co.Err != nil
	if c.Op.Mutating() {
		switch {
		case rejected:
			if after != before {
				return fmt.Errorf("rejected command changed the snapshot: %+v -> %+v", before, after)
			}
		case after.Revision == before.Revision:
			// An exact replay: nothing may change, and it must say so.
			if after != before || co.Rev != before.Revision || !isReplayValue(co.Value) {
				return fmt.Errorf("revision unchanged by a non-replay success (value %+v, rev %d, %+v -> %+v)", co.Value, co.Rev, before, after)
			}
			rejected = true // nothing changed: compare like a rejection
		case after.Revision != before.Revision+1 || co.Rev != after.Revision:
			return fmt.Errorf("accepted command moved the revision %d -> %d (reported %d)", before.Revision, after.Revision, co.Rev)
		case after.LogicalTime != c.Now:
			return fmt.Errorf("accepted command left logical time at %d, want %d", after.LogicalTime, c.Now)
		}
	} else if after != before {
		return fmt.Errorf("read %v changed the snapshot", c.Op)
	}
	if l, ok := co.Value.(model.Lease); ok && co.Err == nil && c.Op.Mutating() {
		if l.LeaseID <= k.maxLeaseID {
			return fmt.Errorf("lease ID %d not above the previous maximum %d", l.LeaseID, k.maxLeaseID)
		}
		k.maxLeaseID = l.LeaseID
		k.issued[l.LeaseID] = l
		prev, _ := k.prevTask(l.TaskID)
		if c.Op == OpRenew {
			if l.Attempt != prev.Attempt || l.TaskGeneration != prev.TaskGeneration {
				return fmt.Errorf("renewal changed attempt or generation: %+v, task was %+v", l, prev)
			}
		} else if l.Attempt != prev.Attempt+1 || l.Attempt <= prev.Attempt {
			return fmt.Errorf("attempt %d does not follow %d", l.Attempt, prev.Attempt)
		}
	}
	if after.TaskRecords > k.limits.MaxTaskRecords || after.ActiveTasks > k.limits.MaxActiveTasks ||
		after.QueuedTasks > k.limits.MaxQueuedTasks || after.TaskRecords > k.limits.MaxTerminalTasks ||
		after.Workers > k.limits.MaxWorkers || after.TerminalTasks+after.ActiveTasks != after.TaskRecords {
		return fmt.Errorf("snapshot %+v outside limits %+v", after, k.limits)
	}
	if ids, ok := co.Value.([]string); ok && c.Op == OpPurge && co.Err == nil {
		k.purging = make(map[string]bool, len(ids))
		for _, id := range ids {
			k.purging[id] = true
		}
		h.Stats.Purges++
		h.Stats.Purged += len(ids)
		if len(ids) > 0 && (after.TaskRecords != before.TaskRecords-len(ids) || after.TerminalTasks != before.TerminalTasks-len(ids)) {
			return fmt.Errorf("purge of %d tasks moved the counters %+v -> %+v", len(ids), before, after)
		}
	}
	err := k.compareRecords(h, rejected)
	k.purging = nil
	h.Stats.Relived = k.relived
	if err != nil {
		return err
	}
	if c.Now >= after.LogicalTime {
		w, ok, err := h.Core.GetAvailableWorker(c.Now)
		mw, mok, merr := h.Model.GetAvailableWorker(c.Now)
		if (err == nil) != (merr == nil) || ok != mok || (ok && !reflect.DeepEqual(ModelWorker(w), WorkerView(mw))) {
			return fmt.Errorf("GetAvailableWorker(%d): core %v %v %v, model %v %v %v", c.Now, w, ok, err, mw, mok, merr)
		}
		if h.Core.WakeDue(c.Now) != h.Model.WakeDue(c.Now) {
			return fmt.Errorf("WakeDue(%d): core %v, model %v", c.Now, h.Core.WakeDue(c.Now), h.Model.WakeDue(c.Now))
		}
	}
	if co, mo := h.Core.SchedulingOptions(), h.Model.SchedulingOptions(); co != mo {
		return fmt.Errorf("scheduling options: core %+v, model %+v", co, mo)
	}
	return nil
}

// vanished accepts a record that is gone only when this step's purge
// removed it and it was terminal, and remembers its last generation.
func (k *checker) vanished(prev model.Task, gone *int) error {
	if !k.purging[prev.TaskID] || !prev.Status.Terminal() {
		return fmt.Errorf("task %s (%v) disappeared without a purge", prev.TaskID, prev.Status)
	}
	*gone++
	k.purgedGen[prev.TaskID] = max(k.purgedGen[prev.TaskID], prev.TaskGeneration)
	return nil
}

// newLife checks a record that was not there at the last step: a purged ID
// enqueued again starts above every generation of its purged lives.
func (k *checker) newLife(got model.Task) error {
	g, purged := k.purgedGen[got.TaskID]
	if !purged {
		return nil
	}
	if got.TaskGeneration <= g {
		return fmt.Errorf("task %s starts a new life at generation %d, a purged life reached %d", got.TaskID, got.TaskGeneration, g)
	}
	k.relived++
	return nil
}

func (k *checker) prevTask(id string) (model.Task, bool) {
	for _, t := range k.prevTasks {
		if t.TaskID == id {
			return t, true
		}
	}
	return model.Task{}, false
}

// compareState compares every record (used after a restart).
func (k *checker) compareState(h *Harness) error {
	if h.Core.Snapshot() != h.Model.Snapshot() {
		return fmt.Errorf("snapshot diverges after restart: core %+v, model %+v", h.Core.Snapshot(), h.Model.Snapshot())
	}
	if err := h.Core.CheckInvariants(); err != nil {
		return fmt.Errorf("core CheckInvariants after restart: %v", err)
	}
	return k.compareRecords(h, true)
}

// compareRecords compares every task and worker record of the core with the
// model, checks monotonic fields against the previous step, and that every
// live lease is one the core granted. unchanged says the step must not have
// changed any record.
func (k *checker) compareRecords(h *Harness, unchanged bool) error {
	ct, mt := h.Core.Tasks(), h.Model.TaskRecords()
	if len(ct) != len(mt) {
		return fmt.Errorf("core has %d tasks, model %d", len(ct), len(mt))
	}
	live := map[uint64]string{}
	views := make([]model.Task, len(ct))
	gone := 0
	j := 0 // walks k.prevTasks (both in task-ID order; only a purge removes records)
	for i := range ct {
		got, want := ModelTask(ct[i]), TaskView(mt[i])
		if !eqTask(got, want) {
			return fmt.Errorf("task record diverges:\n\tcore:  %+v\n\tmodel: %+v", got, want)
		}
		views[i] = got
		for ; j < len(k.prevTasks) && k.prevTasks[j].TaskID < got.TaskID; j++ {
			if err := k.vanished(k.prevTasks[j], &gone); err != nil {
				return err
			}
		}
		seen := j < len(k.prevTasks) && k.prevTasks[j].TaskID == got.TaskID
		if !seen {
			if err := k.newLife(got); err != nil {
				return err
			}
		} else {
			prev := k.prevTasks[j]
			j++
			if unchanged && !eqTask(prev, got) {
				return fmt.Errorf("task %s changed without an accepted command:\n\tbefore: %+v\n\tafter:  %+v", got.TaskID, prev, got)
			}
			rerun := got.Reruns == prev.Reruns+1 // RerunTasks: terminal -> queued, retries reset
			if got.TaskGeneration < prev.TaskGeneration || got.Attempt < prev.Attempt || (got.RetryCount < prev.RetryCount && !rerun) ||
				got.RecordVersion < prev.RecordVersion || got.Reruns < prev.Reruns {
				return fmt.Errorf("task %s went backwards: %+v -> %+v", got.TaskID, prev, got)
			}
			if got.RecordVersion == prev.RecordVersion && !eqTask(prev, got) {
				return fmt.Errorf("task %s changed without a new record version: %+v -> %+v", got.TaskID, prev, got)
			}
			if prev.Status.Terminal() && got.Status != prev.Status && !(rerun && got.Status == distributed.TaskQueued) {
				return fmt.Errorf("terminal task %s changed status %v -> %v", got.TaskID, prev.Status, got.Status)
			}
			if got.TaskGeneration > prev.TaskGeneration && got.TaskGeneration != prev.TaskGeneration+1 {
				return fmt.Errorf("task %s generation jumped %d -> %d", got.TaskID, prev.TaskGeneration, got.TaskGeneration)
			}
			if err := historyAppendOnly(prev.History, got.History); err != nil {
				return fmt.Errorf("task %s: %v", got.TaskID, err)
			}
		}
		if got.HasLease {
			if other, dup := live[got.Lease.LeaseID]; dup {
				return fmt.Errorf("lease ID %d live on tasks %s and %s", got.Lease.LeaseID, other, got.TaskID)
			}
			live[got.Lease.LeaseID] = got.TaskID
			if k.issued[got.Lease.LeaseID] != got.Lease {
				return fmt.Errorf("task %s holds a lease the core never granted: %+v (granted %+v)", got.TaskID, got.Lease, k.issued[got.Lease.LeaseID])
			}
		}
	}
	for ; j < len(k.prevTasks); j++ {
		if err := k.vanished(k.prevTasks[j], &gone); err != nil {
			return err
		}
	}
	if gone != len(k.purging) {
		return fmt.Errorf("purge reported %d tasks, %d disappeared", len(k.purging), gone)
	}
	k.prevTasks = views
	cw, mw := h.Core.Workers(), h.Model.Workers()
	if len(cw) != len(mw) {
		return fmt.Errorf("core has %d workers, model %d", len(cw), len(mw))
	}
	for i := range cw {
		got, want := ModelWorker(cw[i]), WorkerView(mw[i])
		if !eqWorker(got, want) {
			return fmt.Errorf("worker record diverges:\n\tcore:  %+v\n\tmodel: %+v", got, want)
		}
		prev, seen := k.prevWorkers[got.WorkerID]
		if seen {
			if unchanged && !eqWorker(prev, got) {
				return fmt.Errorf("worker %s changed without an accepted command", got.WorkerID)
			}
			if got.Generation < prev.Generation || got.CompletedTasks < prev.CompletedTasks {
				return fmt.Errorf("worker %s went backwards: %+v -> %+v", got.WorkerID, prev, got)
			}
		}
		k.prevWorkers[got.WorkerID] = got
	}
	ct0, cok := h.Core.TaskQueue().PeekNext()
	mt0, mok := h.Model.PeekNext()
	if cok != mok || (cok && !reflect.DeepEqual(ModelTask(ct0), TaskView(mt0))) {
		return fmt.Errorf("PeekNext diverges: core %v %+v, model %v %+v", cok, ModelTask(ct0), mok, TaskView(mt0))
	}
	return nil
}

// eqTask compares two task views field by field (faster than reflection).
func eqTask(a, b model.Task) bool {
	if string(a.Phases) != string(b.Phases) {
		return false
	}
	return a.TaskID == b.TaskID && a.ScanID == b.ScanID && a.TargetRef == b.TargetRef &&
		a.Status == b.Status && a.Priority == b.Priority && a.CreatedAt == b.CreatedAt &&
		a.StartedAt == b.StartedAt && a.HasStarted == b.HasStarted &&
		a.CompletedAt == b.CompletedAt && a.HasCompleted == b.HasCompleted && a.FinishedAt == b.FinishedAt &&
		a.RetryCount == b.RetryCount && a.Attempt == b.Attempt && a.TaskGeneration == b.TaskGeneration &&
		a.RecordVersion == b.RecordVersion && a.Lease == b.Lease && a.HasLease == b.HasLease &&
		a.TimeoutSecs == b.TimeoutSecs && a.Reruns == b.Reruns && slices.Equal(a.History, b.History) &&
		reflect.DeepEqual(a.Scheduling, b.Scheduling)
}

// eqWorker compares two worker views field by field.
func eqWorker(a, b model.Worker) bool {
	return slices.Equal(a.Tags, b.Tags) && a.WorkerID == b.WorkerID && a.Generation == b.Generation && a.Status == b.Status &&
		a.Capacity == b.Capacity && a.CurrentTasks == b.CurrentTasks && a.CompletedTasks == b.CompletedTasks &&
		a.LastHeartbeat == b.LastHeartbeat && a.CPUBasisPoints == b.CPUBasisPoints &&
		a.MemoryBasisPoints == b.MemoryBasisPoints && a.NetworkBasisPoints == b.NetworkBasisPoints
}

// historyAppendOnly checks that an attempt history only ever gains records
// at its end (dropping the oldest beyond the bound): a record of an attempt
// both views hold is unchanged, and no record disappears while the window
// has room.
func historyAppendOnly(prev, got []model.Attempt) error {
	if len(got) < len(prev) {
		return fmt.Errorf("attempt history shrank from %d to %d records", len(prev), len(got))
	}
	for _, p := range prev {
		for _, g := range got {
			if g.Attempt == p.Attempt && g != p {
				return fmt.Errorf("attempt record %d changed: %+v -> %+v", p.Attempt, p, g)
			}
		}
	}
	if len(prev) > 0 && len(got) > 0 && got[len(got)-1].Attempt < prev[len(prev)-1].Attempt {
		return fmt.Errorf("newest attempt record went back from %d to %d", prev[len(prev)-1].Attempt, got[len(got)-1].Attempt)
	}
	return nil
}
