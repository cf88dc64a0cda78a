package sim

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/distributedtest/model"
)

// Outcome is one side's answer to a command, in model vocabulary: the
// revision a mutating command reported, its error (nil on success) and its
// value (model types; reads return a Read).
type Outcome struct {
	Rev   uint64
	Err   *distributed.Error
	Value any
}

// Read is the value of a read: the record (if any) and whether it was found.
type Read struct {
	Found  bool
	Record any
}

func (o Outcome) String() string {
	if o.Err != nil {
		return fmt.Sprintf("error %s %+v", o.Err.Kind, *o.Err)
	}
	return fmt.Sprintf("ok rev=%d value=%+v", o.Rev, o.Value)
}

func sameOutcome(a, b Outcome) bool {
	if (a.Err == nil) != (b.Err == nil) {
		return false
	}
	if a.Err != nil {
		return *a.Err == *b.Err
	}
	return a.Rev == b.Rev && reflect.DeepEqual(a.Value, b.Value)
}

// errUnencodable marks a command whose proof cannot be expressed to the core
// (it cannot happen for generated commands; fuzzed ones are skipped).
var errUnencodable = errors.New("sim: proof cannot be encoded for the core")

func toErr(err error) *distributed.Error {
	if err == nil {
		return nil
	}
	if de, ok := errors.AsType[*distributed.Error](err); ok {
		c := *de
		return &c
	}
	// Not an *Error at all: a contract violation that always diverges.
	return &distributed.Error{Reason: "non-*Error: " + err.Error()}
}

func coreOut[T, V any](tr distributed.Transition[T], err error, conv func(T) V) Outcome {
	if err != nil {
		return Outcome{Err: toErr(err)}
	}
	return Outcome{Rev: tr.Revision, Value: conv(tr.Value)}
}

func modelOut[T any](v T, rev uint64, err error) Outcome {
	if err != nil {
		return Outcome{Err: modelErr(err)}
	}
	return Outcome{Rev: rev, Value: any(v)}
}

// modelErr is toErr for the model's errors: a non-*Error is marked as the
// model's, so that it never matches the core's.
func modelErr(err error) *distributed.Error {
	var de *distributed.Error
	if err == nil || errors.As(err, &de) {
		return toErr(err)
	}
	return &distributed.Error{Reason: "model non-*Error: " + err.Error()}
}

// readOut is the Outcome of a read: its error, or the record (converted by
// view) if found.
func readOut[T, V any](v T, ok bool, err *distributed.Error, view func(T) V) Outcome {
	if err != nil {
		return Outcome{Err: err}
	}
	r := Read{Found: ok}
	if ok {
		r.Record = view(v)
	}
	return Outcome{Value: r}
}

func id[T any](v T) T { return v }

func taskValues(ts []distributed.ScanTask) []model.Task {
	out := make([]model.Task, len(ts))
	for i, t := range ts {
		out[i] = ModelTask(t)
	}
	return out
}
func completionValue(c distributed.CompletionOutcome) model.Completion {
	return model.Completion{Kind: c.Kind, Receipt: ModelReceipt(c.Receipt)}
}

// applyCore runs c on the core.
func applyCore(p *distributed.WorkerPool, a *distributed.ResultAggregator, c Command) (Outcome, error) {
	q := p.TaskQueue()
	switch c.Op {
	case OpStoreResult:
		rc, err := CoreReceipt(c.Receipt)
		if err != nil {
			return Outcome{}, errUnencodable
		}
		tr, err := a.StoreResult(c.Rev, rc, c.Data)
		return coreOut(tr, err, id[distributed.StoreResultOutcome]), nil
	case OpGetResult:
		b, ok, err := a.GetResult(c.TaskID)
		if err != nil {
			return Outcome{Err: toErr(err)}, nil
		}
		return Outcome{Value: Read{Found: ok, Record: string(b)}}, nil
	case OpAggregate:
		rs, err := a.AggregateResults(c.IDs)
		if err != nil {
			return Outcome{Err: toErr(err)}, nil
		}
		return Outcome{Value: aggregateValue(rs)}, nil
	case OpPurgeResults:
		tr, err := a.PurgeResults(c.Rev, c.IDs)
		return coreOut(tr, err, id[int]), nil
	case OpPurge:
		tr, err := q.PurgeTasks(c.Rev, c.Now, c.Purge)
		return coreOut(tr, err, func(v distributed.PurgeOutcome) any { return v.TaskIDs }), nil
	case OpEnqueue:
		tr, err := q.Enqueue(c.Rev, c.Now, c.TaskSpec)
		return coreOut(tr, err, ModelTask), nil
	case OpEnqueueBatch:
		tr, err := q.EnqueueBatch(c.Rev, c.Now, c.TaskSpecs)
		return coreOut(tr, err, taskValues), nil
	case OpRegister:
		tr, err := p.RegisterWorker(c.Rev, c.Now, c.WorkerSpec)
		return coreOut(tr, err, ModelWorker), nil
	case OpUpdate:
		tr, err := p.UpdateWorker(c.Rev, c.Now, c.WorkerID, c.Generation, c.Obs)
		return coreOut(tr, err, ModelWorker), nil
	case OpDeregister:
		tr, err := p.DeregisterWorker(c.Rev, c.Now, c.WorkerID, c.Generation)
		return coreOut(tr, err, id[distributed.RecoverySummary]), nil
	case OpPrune:
		tr, err := p.PruneDeadWorkers(c.Rev, c.Now)
		return coreOut(tr, err, id[distributed.RecoverySummary]), nil
	case OpReactivate:
		tr, err := p.ReactivateWorker(c.Rev, c.Now, c.Generation, c.WorkerSpec)
		return coreOut(tr, err, ModelWorker), nil
	case OpAssignNextAvailable:
		tr, err := p.AssignNextAvailable(c.Rev, c.Now, c.TTL)
		return coreOut(tr, err, ModelLease), nil
	case OpAssignNext:
		tr, err := p.AssignNext(c.Rev, c.Now, c.WorkerID, c.TTL)
		return coreOut(tr, err, ModelLease), nil
	case OpAssignTask:
		tr, err := p.AssignTask(c.Rev, c.Now, c.TaskID, c.WorkerID, c.TTL)
		return coreOut(tr, err, ModelLease), nil
	case OpStart, OpComplete, OpFail, OpRenew:
		l, err := CoreLease(c.Lease)
		if err != nil {
			return Outcome{}, errUnencodable
		}
		switch c.Op {
		case OpStart:
			tr, err := p.StartTask(c.Rev, c.Now, l)
			return coreOut(tr, err, id[distributed.StartOutcome]), nil
		case OpComplete:
			tr, err := p.CompleteTask(c.Rev, c.Now, l)
			return coreOut(tr, err, completionValue), nil
		case OpFail:
			if c.Reason != "" {
				tr, err := p.FailTaskWithReason(c.Rev, c.Now, l, c.Reason)
				return coreOut(tr, err, id[distributed.FailureOutcome]), nil
			}
			tr, err := p.FailTask(c.Rev, c.Now, l)
			return coreOut(tr, err, id[distributed.FailureOutcome]), nil
		default:
			tr, err := p.RenewLease(c.Rev, c.Now, l, c.TTL)
			return coreOut(tr, err, ModelLease), nil
		}
	case OpCancelByID:
		tr, err := q.CancelTaskByID(c.Rev, c.Now, c.TaskID)
		return coreOut(tr, err, id[distributed.CancellationOutcome]), nil
	case OpRerun:
		tr, err := q.RerunTasks(c.Rev, c.Now, c.Rerun)
		return coreOut(tr, err, id[distributed.RerunOutcome]), nil
	case OpCancel:
		o, err := CoreOwnership(c.Own)
		if err != nil {
			return Outcome{}, errUnencodable
		}
		tr, err := q.CancelTask(c.Rev, c.Now, o)
		return coreOut(tr, err, id[distributed.CancellationOutcome]), nil
	case OpRecover:
		tr, err := p.RecoverExpiredLeases(c.Rev, c.Now)
		return coreOut(tr, err, id[distributed.RecoverySummary]), nil
	case OpExpire:
		tr, err := q.ExpireOldTasks(c.Rev, c.Now, c.MaxAge)
		return coreOut(tr, err, id[int]), nil
	case OpGetTask:
		t, ok, err := q.GetTask(c.TaskID)
		return readOut(t, ok, toErr(err), ModelTask), nil
	case OpGetWorker:
		w, ok, err := p.GetWorker(c.WorkerID)
		return readOut(w, ok, toErr(err), ModelWorker), nil
	case OpPeek:
		t, ok := q.PeekNext()
		return readOut(t, ok, nil, ModelTask), nil
	case OpAvailable:
		w, ok, err := p.GetAvailableWorker(c.Now)
		return readOut(w, ok, toErr(err), ModelWorker), nil
	}
	return Outcome{}, fmt.Errorf("sim: op %v has no core mapping", c.Op)
}

// aggregateValue renders aggregated results comparably.
func aggregateValue(rs []distributed.AggregatedResult) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.TaskID+"="+string(r.Result))
	}
	return out
}

// applyModel runs c on the model.
func applyModel(m *model.Model, rm *model.Results, c Command) Outcome {
	switch c.Op {
	case OpStoreResult:
		return modelOut(rm.StoreResult(c.Rev, c.Receipt, c.Data))
	case OpGetResult:
		b, ok, err := rm.GetResult(c.TaskID)
		if err != nil {
			return Outcome{Err: modelErr(err)}
		}
		return Outcome{Value: Read{Found: ok, Record: string(b)}}
	case OpAggregate:
		rs, err := rm.AggregateResults(c.IDs)
		if err != nil {
			return Outcome{Err: modelErr(err)}
		}
		return Outcome{Value: aggregateValue(rs)}
	case OpPurgeResults:
		return modelOut(rm.PurgeResults(c.Rev, c.IDs))
	case OpPurge:
		return modelOut(m.Purge(c.Rev, c.Now, c.Purge))
	case OpEnqueue:
		t, r, err := m.Enqueue(c.Rev, c.Now, c.TaskSpec)
		return modelOut(TaskView(t), r, err)
	case OpEnqueueBatch:
		ts, r, err := m.EnqueueBatch(c.Rev, c.Now, c.TaskSpecs)
		var views []model.Task
		for _, t := range ts {
			views = append(views, TaskView(t))
		}
		return modelOut(views, r, err)
	case OpRegister:
		return modelOut(m.RegisterWorker(c.Rev, c.Now, c.WorkerSpec))
	case OpUpdate:
		return modelOut(m.UpdateWorker(c.Rev, c.Now, c.WorkerID, c.Generation, c.Obs))
	case OpDeregister:
		return modelOut(m.DeregisterWorker(c.Rev, c.Now, c.WorkerID, c.Generation))
	case OpPrune:
		return modelOut(m.PruneDeadWorkers(c.Rev, c.Now))
	case OpReactivate:
		return modelOut(m.ReactivateWorker(c.Rev, c.Now, c.Generation, c.WorkerSpec))
	case OpAssignNextAvailable:
		return modelOut(m.AssignNextAvailable(c.Rev, c.Now, c.TTL))
	case OpAssignNext:
		return modelOut(m.AssignNext(c.Rev, c.Now, c.WorkerID, c.TTL))
	case OpAssignTask:
		return modelOut(m.AssignTask(c.Rev, c.Now, c.TaskID, c.WorkerID, c.TTL))
	case OpStart:
		return modelOut(m.StartTask(c.Rev, c.Now, c.Lease))
	case OpComplete:
		return modelOut(m.CompleteTask(c.Rev, c.Now, c.Lease))
	case OpFail:
		if c.Reason != "" {
			return modelOut(m.FailTaskWithReason(c.Rev, c.Now, c.Lease, c.Reason))
		}
		return modelOut(m.FailTask(c.Rev, c.Now, c.Lease))
	case OpRerun:
		return modelOut(m.RerunTasks(c.Rev, c.Now, c.Rerun))
	case OpRenew:
		return modelOut(m.RenewLease(c.Rev, c.Now, c.Lease, c.TTL))
	case OpCancel:
		return modelOut(m.CancelTask(c.Rev, c.Now, c.Own))
	case OpCancelByID:
		return modelOut(m.CancelTaskByID(c.Rev, c.Now, c.TaskID))
	case OpRecover:
		return modelOut(m.RecoverExpiredLeases(c.Rev, c.Now))
	case OpExpire:
		return modelOut(m.ExpireOldTasks(c.Rev, c.Now, c.MaxAge))
	case OpGetTask:
		t, ok, err := m.GetTask(c.TaskID)
		return readOut(t, ok, modelErr(err), TaskView)
	case OpGetWorker:
		w, ok, err := m.GetWorker(c.WorkerID)
		return readOut(w, ok, modelErr(err), WorkerView)
	case OpPeek:
		t, ok := m.PeekNext()
		return readOut(t, ok, nil, TaskView)
	case OpAvailable:
		w, ok, err := m.GetAvailableWorker(c.Now)
		return readOut(w, ok, modelErr(err), WorkerView)
	}
	return Outcome{Err: &distributed.Error{Reason: "model: unknown op"}}
}

// normalize makes model values comparable with converted core values.
func normalize(o Outcome) Outcome {
	switch v := o.Value.(type) {
	case model.Worker:
		o.Value = WorkerView(v)
	case model.Task:
		o.Value = TaskView(v)
	}
	return o
}

// Accepted is one successful mutating command and the core's outcome, in
// the order applied (the command log that replay must reproduce).
type Accepted struct {
	Cmd Command
	Out Outcome
}

// Harness applies commands to the core and the model and checks them.
type Harness struct {
	Limits       distributed.Limits
	ResultLimits distributed.ResultLimits
	Core         *distributed.WorkerPool
	Model        *model.Model
	Results      *distributed.ResultAggregator
	ResultsModel *model.Results
	Log          []Accepted
	Stats        Stats
	chk          *checker
}

// Stats counts what a run did.
type Stats struct {
	Steps, Accepted, Replays, Rejected, Reads, Restarts, Skipped int
	// Purges counts accepted PurgeTasks commands, Purged the tasks they
	// removed, Relived the purged IDs that were enqueued again.
	Purges, Purged, Relived int
	Kinds                   map[string]int
}

// NewHarness returns a harness over fresh core and model instances with the
// default simulator result limits.
func NewHarness(l distributed.Limits) (*Harness, error) {
	return NewHarnessFor(Profile{Limits: l})
}

// NewHarnessFor returns a harness with the profile's limits.
func NewHarnessFor(pr Profile) (*Harness, error) {
	l, rl := pr.Limits, pr.ResultLimits()
	p, err := distributed.NewWorkerPoolWithLimits(l)
	if err != nil {
		return nil, err
	}
	m, err := model.New(l)
	if err != nil {
		return nil, err
	}
	a, err := distributed.NewResultAggregatorWithLimits(rl)
	if err != nil {
		return nil, err
	}
	rm, err := model.NewResults(rl)
	if err != nil {
		return nil, err
	}
	return &Harness{Limits: l, ResultLimits: rl, Core: p, Model: m, Results: a, ResultsModel: rm,
		chk: newChecker(l), Stats: Stats{Kinds: map[string]int{}}}, nil
}

// Resolve fills c.Rev and c.Now from the deltas and the current state.
func (h *Harness) Resolve(c Command) Command {
	if !c.AbsRev {
		base := h.Model.Revision()
		if !c.Op.pool() && c.Op != OpRestart {
			base = h.ResultsModel.Revision()
		}
		c.Rev = addDelta(base, c.RevDelta)
	}
	if !c.AbsNow {
		c.Now = addDelta(h.Model.LogicalTime(), c.NowDelta)
	}
	return c
}

func addDelta(base uint64, d int64) uint64 {
	if d < 0 {
		if uint64(-d) > base {
			return 0
		}
		return base - uint64(-d)
	}
	return base + uint64(d)
}

// Step resolves and applies c, compares both sides and runs every per-step
// check. It returns the resolved command, the model's outcome and the first
// divergence or violated check.
func (h *Harness) Step(c Command) (Command, Outcome, error) {
	c = h.Resolve(c)
	h.Stats.Steps++
	if c.Op == OpRestart {
		h.Stats.Restarts++
		return c, Outcome{}, h.restart()
	}
	if !c.Op.pool() {
		return h.resultStep(c)
	}
	before := h.Model.Snapshot()
	co, mo, skipped, err := h.compare(c)
	if skipped || err != nil {
		return c, mo, err
	}
	h.count(c, co, mo, before.Revision)
	return c, mo, h.chk.step(h, c, before, co)
}

// resultStep applies a result-store op to the core's ResultAggregator and
// the model's and checks revision, counts and invariants.
func (h *Harness) resultStep(c Command) (Command, Outcome, error) {
	beforeRev := h.ResultsModel.Revision()
	co, mo, skipped, err := h.compare(c)
	if skipped || err != nil {
		return c, mo, err
	}
	h.count(c, co, mo, beforeRev)
	return c, mo, h.compareResults(c, beforeRev, co)
}

// compare applies c to the core and the model (pool outcomes normalized)
// and requires the same outcome; skipped is true for a command the core
// cannot be given (errUnencodable).
func (h *Harness) compare(c Command) (co, mo Outcome, skipped bool, err error) {
	co, err = applyCore(h.Core, h.Results, c)
	if errors.Is(err, errUnencodable) {
		h.Stats.Skipped++
		return co, Outcome{Err: &distributed.Error{Reason: "skipped"}}, true, nil
	}
	if err != nil {
		return co, Outcome{}, false, err
	}
	mo = applyModel(h.Model, h.ResultsModel, c)
	if c.Op.pool() {
		co, mo = normalize(co), normalize(mo)
	}
	if !sameOutcome(co, mo) {
		return co, mo, false, fmt.Errorf("outcome diverges:\n\tcore:  %s\n\tmodel: %s", co, mo)
	}
	return co, mo, false, nil
}

// count adds c's outcome to the stats (a failed result read by kind too)
// and an accepted command, replays included, to the log.
func (h *Harness) count(c Command, co, mo Outcome, beforeRev uint64) {
	switch {
	case !c.Op.Mutating():
		h.Stats.Reads++
		if mo.Err != nil && !c.Op.pool() {
			h.Stats.Kinds["read:"+mo.Err.Kind.String()]++
		}
	case mo.Err != nil:
		h.Stats.Rejected++
		h.Stats.Kinds[mo.Err.Kind.String()]++
	case mo.Rev == beforeRev:
		h.Stats.Replays++
		h.Log = append(h.Log, Accepted{c, co})
	default:
		h.Stats.Accepted++
		h.Log = append(h.Log, Accepted{c, co})
	}
}

func (h *Harness) compareResults(c Command, beforeRev uint64, co Outcome) error {
	a, rm := h.Results, h.ResultsModel
	if a.Revision() != rm.Revision() || a.ResultCount() != rm.ResultCount() || a.TotalBytes() != rm.TotalBytes() {
		return fmt.Errorf("results diverge: core rev %d count %d bytes %d, model rev %d count %d bytes %d",
			a.Revision(), a.ResultCount(), a.TotalBytes(), rm.Revision(), rm.ResultCount(), rm.TotalBytes())
	}
	if err := a.CheckInvariants(); err != nil {
		return fmt.Errorf("ResultAggregator CheckInvariants: %v", err)
	}
	if c.Op == OpPurgeResults {
		switch {
		case co.Err != nil && a.Revision() != beforeRev:
			return fmt.Errorf("rejected purge moved the results revision %d -> %d", beforeRev, a.Revision())
		case co.Err == nil && (a.Revision() != beforeRev+1 || co.Rev != a.Revision()):
			return fmt.Errorf("purge moved the results revision %d -> %d (reported %d)", beforeRev, a.Revision(), co.Rev)
		}
	}
	if c.Op == OpStoreResult {
		v, _ := co.Value.(distributed.StoreResultOutcome)
		switch {
		case co.Err != nil || v.Kind == distributed.AlreadyStored:
			if a.Revision() != beforeRev || (co.Err == nil && co.Rev != beforeRev) {
				return fmt.Errorf("store rejection or replay moved the results revision %d -> %d", beforeRev, a.Revision())
			}
		case a.Revision() != beforeRev+1 || co.Rev != a.Revision():
			return fmt.Errorf("store moved the results revision %d -> %d (reported %d)", beforeRev, a.Revision(), co.Rev)
		}
	}
	l := h.ResultLimits
	if a.ResultCount() > l.MaxResults || a.TotalBytes() > l.MaxTotalBytes {
		return fmt.Errorf("results outside limits: %d results, %d bytes", a.ResultCount(), a.TotalBytes())
	}
	return nil
}

// restart exports the core's state, restores a new pool from the bytes and
// continues on it (the crash-and-recover fault); the bytes must round-trip.
func (h *Harness) restart() error {
	p, err := roundTrip(h.Core, distributed.RestoreWorkerPool)
	if err != nil {
		return fmt.Errorf("WorkerPool: %v", err)
	}
	if p.Snapshot() != h.Core.Snapshot() || p.Limits() != h.Core.Limits() {
		return fmt.Errorf("restored snapshot %+v, want %+v", p.Snapshot(), h.Core.Snapshot())
	}
	h.Core = p
	a, err := roundTrip(h.Results, distributed.RestoreResultAggregator)
	if err != nil {
		return fmt.Errorf("ResultAggregator: %v", err)
	}
	h.Results = a
	if err := h.compareResults(Command{Op: OpRestart}, a.Revision(), Outcome{}); err != nil {
		return err
	}
	return h.chk.compareState(h)
}

// exporter is a core object with an exported state.
type exporter interface{ ExportState() ([]byte, error) }

// roundTrip restores a copy of x from its ExportState and requires the
// copy to export the same bytes.
func roundTrip[T exporter](x T, restore func([]byte) (T, error)) (T, error) {
	b, err := x.ExportState()
	if err != nil {
		return x, fmt.Errorf("ExportState: %v", err)
	}
	y, err := restore(b)
	if err != nil {
		return x, fmt.Errorf("restore(ExportState()) = %v", err)
	}
	return y, exportDiff(y, x)
}

// exportDiff fails when got and want export different states.
func exportDiff(got, want exporter) error {
	g, err := got.ExportState()
	if err != nil {
		return err
	}
	w, err := want.ExportState()
	if err != nil {
		return err
	}
	if !bytes.Equal(g, w) {
		return fmt.Errorf("ExportState differs (%d vs %d bytes)", len(g), len(w))
	}
	return nil
}

// ReplayLog applies the accepted command log to a fresh pool and requires
// every outcome and the final ExportState to be identical (determinism).
func (h *Harness) ReplayLog() error {
	p, err := distributed.NewWorkerPoolWithLimits(h.Limits)
	if err != nil {
		return err
	}
	agg, err := distributed.NewResultAggregatorWithLimits(h.ResultLimits)
	if err != nil {
		return err
	}
	for i, a := range h.Log {
		out, err := applyCore(p, agg, a.Cmd)
		if err != nil {
			return err
		}
		if out = normalize(out); !sameOutcome(out, a.Out) {
			return fmt.Errorf("replay of accepted command %d (%s) = %s, first run %s", i, a.Cmd, out, a.Out)
		}
	}
	if err := exportDiff(p, h.Core); err != nil {
		return fmt.Errorf("replaying %d accepted commands: %v", len(h.Log), err)
	}
	if err := exportDiff(agg, h.Results); err != nil {
		return fmt.Errorf("replaying the accepted stores: ResultAggregator %v", err)
	}
	return nil
}
