package sim

import (
	"fmt"
	"reflect"

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
}

func newChecker(l distributed.Limits) *checker {
	return &checker{
		limits:      l,
		issued:      map[uint64]model.Lease{},
		prevWorkers: map[string]model.Worker{},
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
	if err := k.compareRecords(h, rejected); err != nil {
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
	j := 0 // walks k.prevTasks (both in task-ID order; records are never removed)
	for i := range ct {
		got, want := ModelTask(ct[i]), TaskView(mt[i])
		if !eqTask(got, want) {
			return fmt.Errorf("task record diverges:\n\tcore:  %+v\n\tmodel: %+v", got, want)
		}
		views[i] = got
		if j < len(k.prevTasks) && k.prevTasks[j].TaskID < got.TaskID {
			return fmt.Errorf("task %s disappeared", k.prevTasks[j].TaskID)
		}
		seen := j < len(k.prevTasks) && k.prevTasks[j].TaskID == got.TaskID
		if seen {
			prev := k.prevTasks[j]
			j++
			if unchanged && !eqTask(prev, got) {
				return fmt.Errorf("task %s changed without an accepted command:\n\tbefore: %+v\n\tafter:  %+v", got.TaskID, prev, got)
			}
			if got.TaskGeneration < prev.TaskGeneration || got.Attempt < prev.Attempt || got.RetryCount < prev.RetryCount || got.RecordVersion < prev.RecordVersion {
				return fmt.Errorf("task %s went backwards: %+v -> %+v", got.TaskID, prev, got)
			}
			if got.RecordVersion == prev.RecordVersion && !eqTask(prev, got) {
				return fmt.Errorf("task %s changed without a new record version: %+v -> %+v", got.TaskID, prev, got)
			}
			if prev.Status.Terminal() && got.Status != prev.Status {
				return fmt.Errorf("terminal task %s changed status %v -> %v", got.TaskID, prev.Status, got.Status)
			}
			if got.TaskGeneration > prev.TaskGeneration && got.TaskGeneration != prev.TaskGeneration+1 {
				return fmt.Errorf("task %s generation jumped %d -> %d", got.TaskID, prev.TaskGeneration, got.TaskGeneration)
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
	if j != len(k.prevTasks) {
		return fmt.Errorf("task %s disappeared", k.prevTasks[j].TaskID)
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
		a.CompletedAt == b.CompletedAt && a.HasCompleted == b.HasCompleted &&
		a.RetryCount == b.RetryCount && a.Attempt == b.Attempt && a.TaskGeneration == b.TaskGeneration &&
		a.RecordVersion == b.RecordVersion && a.Lease == b.Lease && a.HasLease == b.HasLease &&
		reflect.DeepEqual(a.Scheduling, b.Scheduling)
}

// eqWorker compares two worker views field by field.
func eqWorker(a, b model.Worker) bool {
	if len(a.Tags) != len(b.Tags) {
		return false
	}
	for i := range a.Tags {
		if a.Tags[i] != b.Tags[i] {
			return false
		}
	}
	return a.WorkerID == b.WorkerID && a.Generation == b.Generation && a.Status == b.Status &&
		a.Capacity == b.Capacity && a.CurrentTasks == b.CurrentTasks && a.CompletedTasks == b.CompletedTasks &&
		a.LastHeartbeat == b.LastHeartbeat && a.CPUBasisPoints == b.CPUBasisPoints &&
		a.MemoryBasisPoints == b.MemoryBasisPoints && a.NetworkBasisPoints == b.NetworkBasisPoints
}
