package raftfsm

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wire"
)

// CommandVersion is the only Command.version the FSM applies.
const CommandVersion = 1

// SystemTenant is created at bootstrap; its admin keys administer the
// cluster (create tenants, create keys for any tenant).
const SystemTenant = "default"

// EpochBytes is the length of the cluster epoch ID.
const EpochBytes = 16

// MaxBatchCommands bounds the commands of one Batch entry.
const MaxBatchCommands = 4096

// MaxAcquireTasks bounds AcquireTasks.max_tasks.
const MaxAcquireTasks = 256

// MaxEnqueueTasks bounds the tasks of one EnqueueTasks command.
const MaxEnqueueTasks = 4096

// Role names stored in key records.
const (
	RoleAdmin    = "admin"
	RoleProducer = "producer"
	RoleWorker   = "worker"
)

// Options configure an FSM.
type Options struct {
	// Logger receives shell diagnostics; nil discards them.
	Logger *slog.Logger
	// NotifyFunc, when set, is called from the apply goroutine after a
	// command that may have made queued tasks available in a tenant
	// (enqueue, failure, recovery). It must not block.
	NotifyFunc func(tenant string)
	// WakeFunc, when set, is called instead of NotifyFunc, once per
	// tenant after each applied entry (a batch's commands summed) that
	// leaves a task leasable, with how many tasks its commands may have
	// made leasable: the tasks an enqueue added, 1 for each completion or
	// failure (a freed slot, a requeued task), notify.All when a command
	// cannot say (wake.go). Acquire long-polls wake about that many
	// waiters (internal/notify.Queue). It must not block.
	WakeFunc func(tenant string, tasks int)
	// ProgressFunc, when set, is called from the apply goroutine after a
	// command that may have made tasks of a tenant terminal (completion,
	// failure, cancellation, expiry, recovery): result followers wait on
	// it. It must not block.
	ProgressFunc func(tenant string)
	// FatalFunc, when set, is called once from the apply goroutine when a
	// committed entry fails its integrity check, does not decode, or needs
	// a newer binary (fatal.go, version.go). It must not block; the FSM
	// applies nothing after it.
	FatalFunc func(err error)
	// MaxVersion is the highest cluster version this FSM applies (0:
	// SupportedVersion). Lower values emulate an older release, for
	// mixed-version tests of rolling upgrades (version.go).
	MaxVersion uint32
	// OwnEntries, when set, holds the entries this node's proposer framed
	// and raft holds in memory only: Apply does not recompute their
	// checksum (own.go).
	OwnEntries *OwnEntries
}

// KeyRecord is one API key as the cluster stores it: never the secret.
type KeyRecord struct {
	ID     string
	Hash   []byte // SHA-256 of the secret; nil in a revoked record
	Tenant string
	Role   string
	// CreatedSecs is the logical time of the key's creation (0: created
	// before it was recorded); RevokedSecs of its revocation (0: live).
	CreatedSecs, RevokedSecs uint64
}

// Response is the result of applying one command. Err is a
// *distributed.Error, an *Error, or nil; Value's type depends on the
// operation (see the apply* methods); Revision is the tenant's WorkerPool
// revision after the command.
type Response struct {
	Revision uint64
	Value    any
	Err      error
}

// ProposalErr is the one error of a proposal's answer: the proposer's
// (infrastructure) error, else the command's own, r.Err.
func ProposalErr(r Response, err error) error {
	if err != nil {
		return err
	}
	return r.Err
}

// Acquired is one lease granted by AcquireTasks.
type Acquired struct {
	Lease     distributed.TaskLease
	Task      distributed.ScanTask
	Started   bool
	StartedAt uint64
}

// CancelByIDValue is the value of CancelTaskByID.
type CancelByIDValue struct {
	// Outcome is Cancelled, or AlreadyCancelled for a task that was
	// cancelled before.
	Outcome distributed.CancellationOutcome
	// PreviousStatus is the task's status before the command.
	PreviousStatus distributed.TaskStatus
}

// CompleteValue is the value of CompleteTask: the completion outcome (with
// its receipt) and the result store outcome.
type CompleteValue struct {
	Completion distributed.CompletionOutcome
	Store      distributed.StoreResultOutcome
}

// Tenant is one namespace. Pool and results have their own locks; the maps
// are guarded by the FSM's mutex.
type Tenant struct {
	name         string
	limits       distributed.Limits
	resultLimits distributed.ResultLimits
	pool         *distributed.WorkerPool
	results      *distributed.ResultAggregator
	owners       map[string]string    // worker ID → key ID of the worker key that registered it
	scans        map[string][]string  // scan ID → task IDs in enqueue order (purged IDs removed)
	meta         map[string]*scanMeta // scan ID → what else is recorded of it (scans.go); same keys as scans
	// retentionSecs is the result retention policy: terminal tasks older
	// than this are purged by the leader's ticker (0: off; purge.go).
	retentionSecs uint64
	schedules     map[string]*pb.Schedule // recurring scans by name (recurring.go)
}

// FSM implements raft.FSM. Create it with New.
type FSM struct {
	opts Options
	log  *slog.Logger

	mu       sync.RWMutex
	epoch    []byte
	lastTime uint64
	keys     map[string]KeyRecord // live keys, the only ones Key returns
	revoked  map[string]KeyRecord // revoked keys (no hash); disjoint from keys (keys.go)
	tenants  map[string]*Tenant
	nodes    map[string]nodeRecord // node ID → advertised API URL, incarnation and version (cluster.go)
	// clusterVersion is the replicated cluster version (version.go),
	// written under mu, read without it (node.Node.Propose reads it for
	// every proposal and must not wait for an Apply holding mu).
	// Invariant: it only increases, and never exceeds maxVersion.
	clusterVersion atomic.Uint32
	lastBackup     *pb.BackupRecord // the last RecordBackup, or nil
	maxVersion     uint32           // Options.MaxVersion, defaulted
	// unsupportedState is the error of a snapshot Restore refused for
	// needing a newer binary (snapshot.go).
	unsupportedState atomic.Pointer[error]

	appliedIndex atomic.Uint64
	// appliedResultBytes sums the result bytes of every command Apply
	// decoded (AppliedResultBytes). Invariant: it only increases.
	appliedResultBytes atomic.Int64
	// fatal is set once, by the first corrupt committed entry; from then on
	// Apply applies nothing and Snapshot fails (fatal.go).
	fatal atomic.Pointer[EntryError]
	// applyMu is held by Apply and Restore across the state change and the
	// applied index, so StateHash reads the two as one pair.
	applyMu sync.Mutex
	// indexKnown is false after a snapshot restore until the next Apply
	// (Restore is not told the snapshot's index). Guarded by applyMu.
	indexKnown bool
	// decoded is true while Apply applies a command it decoded itself
	// (applyCommand); guarded by mu.
	decoded bool
	// wakes are the wake-ups of the command being applied, a batch's
	// summed per tenant, delivered once it is applied (wake.go); guarded
	// by mu.
	wakes []tenantWake

	// pubKeys and pubTenants are keys and tenants as the API's hot reads
	// see them, without mu; lastTimePub is lastTime for them (published.go,
	// P1, P2). Their next generations are written under mu.
	pubKeys     cowTable[KeyRecord]
	pubTenants  cowTable[*Tenant]
	lastTimePub atomic.Uint64
}

var _ raft.FSM = (*FSM)(nil)

// New returns an empty FSM (no epoch, no tenants, no keys).
func New(opts Options) *FSM {
	l := cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	mv := opts.MaxVersion
	if mv == 0 || mv > SupportedVersion {
		mv = SupportedVersion
	}
	f := &FSM{opts: opts, log: l, keys: map[string]KeyRecord{}, revoked: map[string]KeyRecord{}, tenants: map[string]*Tenant{}, nodes: map[string]nodeRecord{},
		maxVersion: mv}
	f.clusterVersion.Store(MinClusterVersion)
	f.publishAll()
	return f
}

// Apply checks one log entry's integrity frame (frame.go; the checksum of
// an OwnEntries entry is not computed again, own.go), decodes it and
// applies it. It returns a Response, or a []Response for a Batch (one per
// element, in order). A committed entry that fails the check or does not
// decode is never applied as a rejected command: the FSM records a fatal
// *EntryError naming the index, calls FatalFunc and applies nothing from
// then on (every later Apply answers the fatal error).
func (f *FSM) Apply(l *raft.Log) any {
	if f.Fatal() != nil {
		return f.ApplyDecoded(l, Decoded{}) // answers the fatal error, decodes nothing
	}
	cmd, err := f.decode(l)
	return f.ApplyDecoded(l, Decoded{Cmd: cmd, Err: err})
}

// decode is DecodeEntry of l, without the checksum when l is one of
// OwnEntries' (own.go).
func (f *FSM) decode(l *raft.Log) (*pb.Command, error) {
	return decodeEntry(l.Index, l.Data, !f.opts.OwnEntries.take(l.Data))
}

// ApplyDecoded is Apply of the entry l that DecodeEntry (or DecodeAhead)
// already decoded into d: the same checks in the same order, the same
// responses, the same fatal error on an entry that does not decode. The
// zero Decoded (nothing decoded) is only for an FSM that is fatal already
// (Apply, DecodeAhead); given to one that is not, it panics rather than
// mark l applied without applying it.
func (f *FSM) ApplyDecoded(l *raft.Log, d Decoded) any {
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	if err := f.Fatal(); err != nil {
		return Response{Err: err}
	}
	cmd, err := d.Cmd, d.Err
	if cmd == nil && err == nil {
		// Invariant: only a fatal FSM is given nothing decoded.
		panic("raftfsm: ApplyDecoded needs DecodeEntry's result")
	}
	if err != nil {
		return Response{Err: f.setFatal(err)}
	}
	if reason := unsupported(cmd, f.maxVersion); reason != "" {
		// I-version-1: stop rather than apply what others apply otherwise.
		return Response{Err: f.setFatal(&EntryError{Index: l.Index, Reason: reason, Unsupported: true})}
	}
	f.appliedResultBytes.Add(resultBytes(cmd))
	defer f.markApplied(l.Index)
	return f.applyCommand(cmd, true)
}

// ApplyCommand applies an already decoded command; Apply calls it. It is
// exported for tests and tools that drive the FSM without raft, and must
// only be called from one goroutine at a time, like Apply.
func (f *FSM) ApplyCommand(cmd *pb.Command) any { return f.applyCommand(cmd, false) }

// applyCommand applies cmd; decoded says that Apply decoded it from a log
// entry just now, so that its results are slices of the entry, which
// nothing writes (frame_results.go) and the result store may keep without
// a copy.
func (f *FSM) applyCommand(cmd *pb.Command, decoded bool) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.deliverWakes() // after the publish: a woken Acquire reads what it published
	defer f.publish()      // under mu, before Apply marks the entry applied (P2)
	f.decoded = decoded
	// NB: time advances only with a command that succeeds, so a rejected
	// command leaves the whole FSM state byte-for-byte unchanged.
	now := max(cmd.GetNowSecs(), f.lastTime)
	if b := cmd.GetBatch(); b != nil {
		if cmd.GetVersion() != CommandVersion {
			return Response{Err: fsmErr(KindInvalidCommand, "unknown command version")}
		}
		if len(b.GetCommands()) > MaxBatchCommands {
			return Response{Err: fsmErr(KindInvalidCommand, "batch is too large")}
		}
		out := make([]Response, len(b.GetCommands()))
		for i, c := range b.GetCommands() {
			out[i] = f.applyOne(c, now)
		}
		return out
	}
	return f.applyOne(cmd, now)
}

// applyOne applies one non-batch command at logical time now.
func (f *FSM) applyOne(cmd *pb.Command, now uint64) Response {
	r := f.applyOneAt(cmd, now)
	if r.Err == nil {
		f.lastTime = now
	}
	return r
}

func (f *FSM) applyOneAt(cmd *pb.Command, now uint64) Response {
	if cmd.GetVersion() != CommandVersion {
		return Response{Err: fsmErr(KindInvalidCommand, "unknown command version")}
	}
	if err := f.checkClusterVersion(cmd); err != nil {
		return Response{Err: err}
	}
	switch op := cmd.GetOp().(type) {
	case *pb.Command_InitCluster:
		return f.applyInit(op.InitCluster)
	case *pb.Command_CreateTenant:
		return f.applyCreateTenant(op.CreateTenant)
	case *pb.Command_CreateKey:
		return f.applyCreateKey(op.CreateKey, now)
	case *pb.Command_RevokeKey:
		return f.applyRevokeKey(cmd.GetPrincipal(), op.RevokeKey, now)
	case *pb.Command_RotateKey:
		return f.applyRotateKey(cmd.GetPrincipal(), op.RotateKey, now)
	case *pb.Command_SetNodeInfo:
		return f.applySetNodeInfo(op.SetNodeInfo)
	case *pb.Command_SetClusterVersion:
		return f.applySetClusterVersion(op.SetClusterVersion, now)
	case *pb.Command_RecordBackup:
		return f.applyRecordBackup(op.RecordBackup, now)
	case *pb.Command_UpdateTenant:
		return f.applyUpdateTenant(op.UpdateTenant)
	case *pb.Command_Batch, nil:
		return Response{Err: fsmErr(KindInvalidCommand, "operation is missing or nested")}
	}
	t, ok := f.tenants[cmd.GetTenant()]
	if !ok {
		return Response{Err: fsmErr(KindUnknownTenant, "")}
	}
	rev := t.pool.Snapshot().Revision
	if cmd.ExpectedRevision != nil {
		rev = cmd.GetExpectedRevision()
	}
	r := f.applyTenant(t, cmd, rev, now)
	r.Revision = t.pool.Snapshot().Revision
	return r
}

func resp[T any](tr distributed.Transition[T], err error) Response {
	if err != nil {
		return Response{Err: err}
	}
	return Response{Revision: tr.Revision, Value: tr.Value}
}

// principalKey returns the key record of principal if it may act in tenant.
// An empty principal is the node itself and may do anything.
func (f *FSM) principalKey(principal, tenant string) (KeyRecord, bool, error) {
	if principal == "" {
		return KeyRecord{}, false, nil
	}
	k, ok := f.keys[principal]
	if !ok {
		return KeyRecord{}, false, fsmErr(KindPermissionDenied, "unknown principal")
	}
	if k.Tenant != tenant {
		return KeyRecord{}, false, fsmErr(KindPermissionDenied, "principal belongs to another tenant")
	}
	return k, true, nil
}

// bind records that the worker key principal registered workerID, so that
// needWorker admits that key for it (tenantops.go).
func (f *FSM) bind(t *Tenant, principal, workerID string) {
	if k, ok := f.keys[principal]; ok && k.Role == RoleWorker {
		t.owners[workerID] = principal
	}
}

// applyEnqueue admits every task or none (value: []distributed.ScanTask)
// through the core's EnqueueBatch, which validates every spec, rejects
// duplicates and checks every bound for the whole batch before it writes,
// and commits the batch as one core command.
func (f *FSM) applyEnqueue(c tenantCall) Response {
	t, e := c.t, c.cmd.GetEnqueue()
	n := len(e.GetTasks())
	if n == 0 && e.GetDeclareScanId() != "" {
		return f.applyDeclare(t, e, c.now)
	}
	if n == 0 || n > MaxEnqueueTasks || e.GetDeclareScanId() != "" {
		return Response{Err: fsmErr(KindInvalidCommand, "enqueue needs 1 to 4096 tasks")}
	}
	specs := make([]distributed.TaskSpec, n)
	for i, s := range e.GetTasks() {
		if s.GetPriority() > math.MaxUint8 {
			return Response{Err: distributed.NewInvalidTaskError("priority is invalid")}
		}
		sched, err := taskScheduling(s, c.now) // schedule.go
		if err != nil {
			return Response{Err: err}
		}
		specs[i] = distributed.TaskSpec{
			TaskID:    s.GetTaskId(),
			ScanID:    s.GetScanId(),
			TargetRef: string(s.GetTargetRef()),
			Phases:    s.GetPhases(),
			Priority:  distributed.TaskPriority(s.GetPriority()),

			AttemptTimeoutSecs: s.GetAttemptTimeoutSecs(),
			Scheduling:         sched,
		}
	}
	if e.GetDeclaredTotal() != 0 && !oneScan(specs) {
		return Response{Err: fsmErr(KindInvalidCommand, "a declared total needs every task in one scan")}
	}
	tr, err := t.pool.EnqueueBatch(c.rev, c.now, specs)
	if err != nil {
		return Response{Err: err}
	}
	t.noteEnqueued(specs, c.now, e.GetDeclaredTotal())
	return Response{Revision: tr.Revision, Value: tr.Value}
}

// oneScan reports whether every spec names the scan of the first.
func oneScan(specs []distributed.TaskSpec) bool {
	for _, s := range specs {
		if s.ScanID != specs[0].ScanID {
			return false
		}
	}
	return true
}

// applyAcquire leases up to max_tasks tasks to one worker (value:
// []Acquired). It fails only when the first assignment fails.
func (f *FSM) applyAcquire(c tenantCall) Response {
	a, rev, now := c.cmd.GetAcquireTasks(), c.rev, c.now
	n := cmp.Or(int(a.GetMaxTasks()), 1)
	if n > MaxAcquireTasks {
		return Response{Err: fsmErr(KindInvalidCommand, "max_tasks is above 256")}
	}
	p := c.t.pool
	// NB: sized once: no assignment leases more than the queued tasks, and
	// growing it by doubling allocated twice the 400-byte elements (8 % of
	// the bytes a 16-worker bench allocated; docs/benchmarks.md, "1 024
	// workers, session 7").
	out := make([]Acquired, 0, min(n, p.Snapshot().QueuedTasks))
	for i := range n {
		tr, err := p.AssignNext(rev, now, a.GetWorkerId(), a.GetLeaseTtlSecs())
		if err != nil {
			if i == 0 {
				return refusal(c.t, err)
			}
			break
		}
		rev = tr.Revision
		acq := Acquired{Lease: tr.Value}
		if a.GetStart() {
			st, err := p.StartTask(rev, now, tr.Value)
			if err != nil {
				f.log.Error("start after assignment failed", "kind", KindOf(err))
			} else {
				rev = st.Revision
				acq.Started, acq.StartedAt = true, st.Value.StartedAt
			}
		}
		acq.Task, _, _ = p.GetTask(tr.Value.TaskID())
		out = append(out, acq)
	}
	return Response{Revision: rev, Value: out}
}

// applyComplete completes a task and stores its result in one command
// (value: CompleteValue). A fresh completion is prechecked with the result
// store's own CheckStore so that it cannot complete without its result.
func (f *FSM) applyComplete(c tenantCall) Response {
	t, lease, result := c.t, c.lease, c.cmd.GetCompleteTask().GetResult()
	task, found, err := t.pool.GetTask(lease.TaskID())
	if err != nil {
		return Response{Err: err}
	}
	if found && task.Status() == distributed.TaskRunning {
		// A fresh completion: the result store must accept this result
		// before the task is completed.
		if err := t.results.CheckStore(lease.TaskID(), len(result)); err != nil {
			return Response{Err: err}
		}
	}
	tr, err := t.pool.CompleteTask(c.rev, c.now, lease)
	if err != nil {
		return Response{Err: err}
	}
	store := t.results.StoreResult
	if f.decoded {
		// NB: Apply decoded the result aliasing the entry's data, which
		// nothing writes after it is proposed (frame_results.go); the
		// store keeps it instead of a copy.
		store = t.results.StoreResultOwned
	}
	st, err := store(t.results.Revision(), tr.Value.Receipt, result)
	if tr.Value.Kind == distributed.Completed {
		stored := 0
		if err == nil {
			stored = len(result)
		}
		t.noteCompleted(task.ScanID(), lease.TaskID(), stored)
	}
	if err != nil {
		if tr.Value.Kind == distributed.Completed {
			// NB: unreachable after the precheck above; reported loudly.
			f.log.Error("result store failed after completion", "kind", KindOf(err))
		}
		return Response{Revision: tr.Revision, Err: err}
	}
	return Response{Revision: tr.Revision, Value: CompleteValue{Completion: tr.Value, Store: st.Value}}
}

// applyCancelByID cancels a queued, leased or running task with the
// ownership it holds now — also when its lease has expired — through the
// core's CancelTaskByID, one core command (value: CancelByIDValue). A
// cancelled task answers AlreadyCancelled; any other terminal task
// InvalidTransition.
func (f *FSM) applyCancelByID(c tenantCall) Response {
	p, id := c.t.pool, c.cmd.GetCancelTaskById().GetTaskId()
	prev := distributed.TaskStatus(0)
	if task, found, err := p.GetTask(id); err == nil && found {
		prev = task.Status()
	}
	tr, err := p.CancelTaskByID(c.rev, c.now, id)
	if err != nil {
		return Response{Err: err}
	}
	return Response{Value: CancelByIDValue{Outcome: tr.Value, PreviousStatus: prev}}
}

func (f *FSM) applyInit(c *pb.InitCluster) Response {
	if f.epoch != nil {
		return Response{Err: fsmErr(KindAlreadyInitialized, "")}
	}
	if len(c.GetEpochId()) != EpochBytes {
		return Response{Err: fsmErr(KindInvalidCommand, "epoch ID must be 16 bytes")}
	}
	f.epoch = append([]byte(nil), c.GetEpochId()...)
	return Response{}
}

func (f *FSM) applyCreateTenant(c *pb.CreateTenant) Response {
	if !distributed.ValidIdentifier(c.GetName()) {
		return Response{Err: fsmErr(KindInvalidCommand, "tenant name is invalid")}
	}
	if _, ok := f.tenants[c.GetName()]; ok {
		return Response{Err: fsmErr(KindTenantExists, "")}
	}
	lim, err := wire.LimitsFromProto(c.GetLimits())
	if err != nil {
		return Response{Err: err}
	}
	rl, err := wire.ResultLimitsFromProto(c.GetResultLimits())
	if err != nil {
		return Response{Err: err}
	}
	if err := checkRetention(c.GetResultRetentionSecs()); err != nil {
		return Response{Err: err}
	}
	t, err := newTenant(c.GetName(), lim, rl, SchedulingFromProto(c.GetScheduling()))
	if err != nil {
		return Response{Err: err}
	}
	t.retentionSecs = c.GetResultRetentionSecs()
	f.putTenant(t)
	return Response{}
}

func newTenant(name string, lim distributed.Limits, rl distributed.ResultLimits, o distributed.SchedulingOptions) (*Tenant, error) {
	pool, err := distributed.NewWorkerPoolWithOptions(lim, o)
	if err != nil {
		return nil, err
	}
	res, err := distributed.NewResultAggregatorWithLimits(rl)
	if err != nil {
		return nil, err
	}
	return &Tenant{name: name, limits: lim, resultLimits: rl, pool: pool, results: res,
		owners: map[string]string{}, scans: map[string][]string{}, meta: map[string]*scanMeta{},
		schedules: map[string]*pb.Schedule{}}, nil
}

// KindOf names the kind of an apply error: a core ErrorKind name, an FSM
// ErrorKind name, or "internal".
func KindOf(err error) string {
	if de, ok := errors.AsType[*distributed.Error](err); ok {
		return de.Kind.String()
	}
	if fe, ok := errors.AsType[*Error](err); ok {
		return fe.Kind.String()
	}
	return "internal"
}

// ValueAs returns r.Value as a T, or an error naming op when the FSM
// answered op with a value of another type (a shell and FSM out of step:
// reported, never a panic). Callers check r.Err first.
func ValueAs[T any](r Response, op string) (T, error) {
	v, ok := r.Value.(T)
	if !ok {
		var zero T
		return zero, fmt.Errorf("raftfsm: %s answered with a %T value, want %T", op, r.Value, zero)
	}
	return v, nil
}
