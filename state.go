package distributed

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/google/btree"
)

// taskRec is the retained record of one task. Invariants are numbered as in
// ARCHITECTURE.md.
//
// The record is kept compact (issue 15; docs/benchmarks.md, memory; 216
// bytes, the 224-byte size class): the scan ID and the phases are interned
// as one shared pair (taskMeta, one pointer), and what the record
// implies is not stored again (compact.go) — a lease's task ID,
// generation and attempt are the record's own (I3, I10), the fence a
// cancelled queued task retains is its generation and previous record
// version (I10), a completed task's receipt is its proof lease plus its
// generation and version (I10), its completion time is its finish time
// (I8), the last re-run's base generation is generation − retryCount (I5).
// currentLease, proofValue, receiptValue, completedAtValue and
// rerunBaseValue rebuild them. Second counts bounded by MaxTaskTTLSecs
// (the attempt timeout, the backoff base and cap) are uint32.
type taskRec struct {
	// The fields an assignment reads or writes (and the lease value it
	// returns) come first, then the list links, then the rest: at maximum
	// state an assignment reaches a queued record untouched since it was
	// enqueued, and grouped these span two or three cache lines of the
	// 216-byte record instead of all of it (docs/benchmarks.md, issue 15).
	id       string
	priority TaskPriority
	status   TaskStatus
	// hasLease iff status is leased or running (I3); then lease is the
	// current lease.
	hasLease bool
	// hasProof: the task retains its terminal proof (I10): the fence when
	// proofIsFence, else the lease held in lease.
	hasProof     bool
	proofIsFence bool
	// lastAttemptImplicit: the completing attempt of a completed task is
	// not in history but derived from the retained proof (I12).
	lastAttemptImplicit bool
	tagMask             uint8 // scheduling (schedule.go; zero: none)
	hasStarted          bool

	// retryCount ≤ MaxRetries (32) and leaseSlot < MaxWorkerCapacity
	// (4096) fit 16 bits, which keeps the record small.
	retryCount uint16
	// leaseSlot is the task's index in its lease's worker's leases while
	// hasLease (I4).
	leaseSlot uint16
	attempt   uint32 // Invariant (I5): only increases.
	// generation is the base of the current run plus retryCount: the
	// life's base (lifeBase) or, after a re-run, the generation the last
	// re-run started (rerunBaseValue).
	// Invariant (I5): only increases; = runBase() + retryCount.
	generation uint64
	version    uint64 // Invariant (I6): +1 on every change of the record.
	// xprev and xnext link a queued task into its priority's queue list
	// (queue.go, I2), a leased or running task into its expiry second's
	// list (expiry.go, I3); nil otherwise. No task is in both.
	xprev, xnext *taskRec

	// lease is the current lease while hasLease, the retained proof lease
	// of a terminal task while hasProof && !proofIsFence, else zero.
	lease leaseRec

	// prev and next link the task into the age list while it is not
	// terminal, into the finish list while it is (tasklist.go, I3).
	prev, next *taskRec
	meta       *taskMeta // the scan ID and phases, interned (compact.go)
	target     string
	createdAt  uint64
	startedAt  uint64
	// finishedAt is when the task became terminal; 0 while it is not (I8).
	// A completed task's completion time (completedAtValue).
	finishedAt uint64

	// Beyond contract Part A (attempts.go, rerun.go): the re-runs and the
	// attempt timeout (≤ MaxTaskTTLSecs).
	reruns  uint32
	timeout uint32
	// Scheduling (schedule.go; zero: none), each ≤ MaxBackoffSecs.
	backoffBase, backoffCap uint32

	// lifeBase is the generation this life of the task ID started at: the
	// coordinator's generationFloor at admission (I11: ≤ generationFloor).
	// Proofs of lower generations are of purged lives (purge.go).
	lifeBase uint64
	ordinal  uint64 // enqueue ordinal of the current queue entry
	// notBefore (schedule.go; zero: none) is also the not-before time a
	// backed-off retry got; it never changes while the task is in the
	// scheduling index's delayed tree (I11).
	notBefore uint64

	// history holds the last ended attempts (I12), but for the implicit
	// one of a completed task; nil while there are none (most tasks).
	history *[]AttemptRecord
}

// workerRec is the retained record of one worker plus its place in the
// live-worker index (liveindex.go).
//
// The record is padded to 128 bytes, a size class whose objects are
// 64-byte aligned, and the fields a heartbeat or an assignment's refresh
// reads come first: the selection key and rank, the slot, then the fields
// UpdateWorker checks and the WorkerNode view returns
// (TestWorkerRec_HotFieldsFirst pins the layout).
type workerRec struct {
	// key is w's selection key (liveindex.go, selectionKey): its cached
	// availableSlots() when eligible ignoring time and its rank packed into
	// one integer, 0 when not eligible (I9).
	key  uint64
	rank uint64 // tie-break in ID order (ranks.go, I9)
	// slot is w's slot in the live-worker index while it is linked (not
	// offline), -1 otherwise (I9).
	slot          int32
	status        WorkerStatus
	tagBits       uint8 // the declared tags, bit t for WorkerTag t: a set, sorted and distinct by construction
	cpu, mem, net uint16
	id            string
	generation    uint64
	lastHeartbeat uint64
	capacity      uint32
	current       uint32 // Invariant (I4): equals len(leases).
	completed     uint64

	// leases are the tasks whose lease w holds, in no particular order
	// (workerLeases sorts them), for worker-loss recovery; a task knows its
	// slot (taskRec.leaseSlot), so adding and dropping are O(1).
	leases []*taskRec

	_ [24]byte // to 128 bytes (see above)
}

func (w *workerRec) effectiveCapacity() uint32 {
	return effectiveCapacity(w.capacity, w.cpu, w.mem, w.net)
}

func (w *workerRec) availableSlots() uint32 {
	e := w.effectiveCapacity()
	if e <= w.current {
		return 0
	}
	return e - w.current
}

// coordinator is the state shared by a WorkerPool and its TaskQueue.
type coordinator struct {
	mu     sync.Mutex
	limits Limits

	revision    uint64
	logicalTime uint64
	lastLeaseID uint64 // Invariant (I7): every issued lease ID is ≤ lastLeaseID.
	lastOrdinal uint64
	// generationFloor is the generation a newly admitted task starts at:
	// above every generation of every purged task, so that no proof of a
	// purged life matches a later life of the same task ID.
	// Invariant (I11): only increases; 0 until the first purge.
	generationFloor uint64

	tasks    map[string]*taskRec
	queue    *queueIndex  // queued tasks in lease order (queue.go, I2)
	byExpiry *expiryIndex // leased/running tasks by ExpiresAt (expiry.go)
	ages     taskList     // non-terminal tasks by CreatedAt (tasklist.go)
	finished taskList     // terminal tasks by finish time, for purge
	active   int          // non-terminal tasks
	terminal int          // terminal tasks

	workers map[string]*workerRec
	byID    *btree.BTreeG[*workerRec] // every worker in ID order, for ranks (I9)
	alive   liveIndex                 // the non-offline workers (liveindex.go, I9)

	// sched is the scheduling index (fairness.go), nil until a scheduling
	// feature is used (I11).
	sched *scheduler

	// interned shares the (scan ID, phases) pairs of task records
	// (compact.go, internMeta); lastMeta is the pair it returned last.
	interned map[taskMeta]*taskMeta
	lastMeta *taskMeta
}

func queueLess(a, b *taskRec) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	if a.ordinal != b.ordinal {
		return a.ordinal < b.ordinal
	}
	return a.id < b.id
}

const btreeDegree = 32

func newCoordinator(l Limits) *coordinator {
	return &coordinator{
		limits:   l,
		tasks:    make(map[string]*taskRec),
		queue:    newQueueIndex(),
		byExpiry: newExpiryIndex(),
		workers:  make(map[string]*workerRec),
		byID:     newWorkerIndex(),
		interned: make(map[taskMeta]*taskMeta),
	}
}

// WorkerPool is the coordinator: workers, tasks, leases and recovery under one
// mutex and one revision. All methods are safe for concurrent use. Every
// mutating method takes the expected revision and the caller's logical second
// first, returns a Transition on success, and on failure returns an *Error and
// changes nothing.
type WorkerPool struct {
	c *coordinator
}

// TaskQueue is the task-side facade of a coordinator. The TaskQueue returned
// by WorkerPool.TaskQueue shares the pool's state, lock and revision; one made
// by NewTaskQueue has a coordinator of its own with no workers.
type TaskQueue struct {
	c *coordinator
}

// NewWorkerPool returns an empty pool with DefaultLimits.
func NewWorkerPool() *WorkerPool {
	return &WorkerPool{c: newCoordinator(DefaultLimits())}
}

// NewWorkerPoolWithLimits returns an empty pool, or the first Limits.Validate
// error.
func NewWorkerPoolWithLimits(l Limits) (*WorkerPool, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &WorkerPool{c: newCoordinator(l)}, nil
}

// NewTaskQueue returns a standalone queue with DefaultLimits.
func NewTaskQueue() *TaskQueue { return &TaskQueue{c: newCoordinator(DefaultLimits())} }

// NewTaskQueueWithLimits returns a standalone queue, or the first
// Limits.Validate error.
func NewTaskQueueWithLimits(l Limits) (*TaskQueue, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &TaskQueue{c: newCoordinator(l)}, nil
}

// TaskQueue returns the pool's task facade: same state, same lock.
func (p *WorkerPool) TaskQueue() *TaskQueue { return &TaskQueue{c: p.c} }

// Limits returns the pool's limits.
func (p *WorkerPool) Limits() Limits { return p.c.limits }

// Limits returns the queue's limits.
func (q *TaskQueue) Limits() Limits { return q.c.limits }

// Snapshot returns the pool's counters (a StateSnapshot; the whole state
// is ExportState).
func (p *WorkerPool) Snapshot() StateSnapshot { return p.c.snapshot() }

// Snapshot returns the queue's counters (the pool's, for a facade).
func (q *TaskQueue) Snapshot() StateSnapshot { return q.c.snapshot() }

func (c *coordinator) snapshot() StateSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return StateSnapshot{
		Revision:      c.revision,
		LogicalTime:   c.logicalTime,
		TaskRecords:   len(c.tasks),
		ActiveTasks:   c.active,
		QueuedTasks:   c.queue.Len(),
		TerminalTasks: c.terminal,
		Workers:       len(c.workers),
	}
}

// PeekNext returns the task the next assignment would lease, if any.
func (q *TaskQueue) PeekNext() (ScanTask, bool) {
	q.c.mu.Lock()
	defer q.c.mu.Unlock()
	t, ok := q.c.peek()
	if !ok {
		return ScanTask{}, false
	}
	return t.view(), true
}

// PeekNext returns the task the next assignment would lease, if any.
func (p *WorkerPool) PeekNext() (ScanTask, bool) { return p.TaskQueue().PeekNext() }

// GetTask returns a copy of the task. The error is ErrInvalidTask, only for an
// invalid identifier.
func (q *TaskQueue) GetTask(taskID string) (ScanTask, bool, error) {
	if !ValidIdentifier(taskID) {
		return ScanTask{}, false, invalidTaskID()
	}
	q.c.mu.Lock()
	defer q.c.mu.Unlock()
	t, ok := q.c.tasks[taskID]
	if !ok {
		return ScanTask{}, false, nil
	}
	return t.view(), true, nil
}

// GetTask returns a copy of the task; see TaskQueue.GetTask.
func (p *WorkerPool) GetTask(taskID string) (ScanTask, bool, error) {
	return p.TaskQueue().GetTask(taskID)
}

// Tasks returns copies of every task record in task-ID order. Only the
// copying holds the lock; the sort runs after it is released.
func (q *TaskQueue) Tasks() []ScanTask {
	q.c.mu.Lock()
	out := make([]ScanTask, 0, len(q.c.tasks))
	for _, t := range q.c.tasks {
		out = append(out, t.view())
	}
	q.c.mu.Unlock()
	slices.SortFunc(out, func(a, b ScanTask) int { return strings.Compare(a.taskID, b.taskID) })
	return out
}

// TaskIDs returns every task ID in order, without copying the records (for
// paging through Tasks with GetTask). Only the copying holds the lock.
func (q *TaskQueue) TaskIDs() []string {
	q.c.mu.Lock()
	ids := make([]string, 0, len(q.c.tasks))
	for id := range q.c.tasks {
		ids = append(ids, id)
	}
	q.c.mu.Unlock()
	slices.Sort(ids)
	return ids
}

// TaskIDs returns every task ID in order; see TaskQueue.TaskIDs.
func (p *WorkerPool) TaskIDs() []string { return p.TaskQueue().TaskIDs() }

// Tasks returns copies of every task record in task-ID order.
func (p *WorkerPool) Tasks() []ScanTask { return p.TaskQueue().Tasks() }

// QueuedTasks returns copies of the queued tasks in lease order.
func (q *TaskQueue) QueuedTasks() []ScanTask {
	q.c.mu.Lock()
	defer q.c.mu.Unlock()
	out := make([]ScanTask, 0, q.c.queue.Len())
	q.c.queue.Ascend(func(t *taskRec) bool {
		out = append(out, t.view())
		return true
	})
	return out
}

func (c *coordinator) sortedTaskIDs() []string {
	ids := make([]string, 0, len(c.tasks))
	for id := range c.tasks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// sortedWorkers returns every worker record in ID order: byID's order
// (I9), so nothing is sorted again.
func (c *coordinator) sortedWorkers() []*workerRec {
	ws := make([]*workerRec, 0, c.byID.Len())
	c.byID.Ascend(func(w *workerRec) bool {
		ws = append(ws, w)
		return true
	})
	return ws
}

// GetWorker returns a copy of the worker. The error is ErrInvalidWorker, only
// for an invalid identifier.
func (p *WorkerPool) GetWorker(workerID string) (WorkerNode, bool, error) {
	if !ValidIdentifier(workerID) {
		return WorkerNode{}, false, invalidWorkerID()
	}
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	w, ok := p.c.workers[workerID]
	if !ok {
		return WorkerNode{}, false, nil
	}
	return w.view(), true, nil
}

// Workers returns copies of every worker record in worker-ID order.
func (p *WorkerPool) Workers() []WorkerNode {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	ws := p.c.sortedWorkers()
	out := make([]WorkerNode, len(ws))
	for i, w := range ws {
		out[i] = w.view()
	}
	return out
}

// GetAvailableWorker returns the worker AssignNextAvailable would choose at
// now, without changing anything. now earlier than logical time fails with
// ErrLogicalTimeRegression.
func (p *WorkerPool) GetAvailableWorker(now uint64) (WorkerNode, bool, error) {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	if now < p.c.logicalTime {
		return WorkerNode{}, false, &Error{Kind: KindLogicalTimeRegression, Current: p.c.logicalTime, Proposed: now}
	}
	w := p.c.bestWorker(now)
	if w == nil {
		return WorkerNode{}, false, nil
	}
	return w.view(), true, nil
}

// RecoveryDue reports, without changing anything, whether at now
// RecoverExpiredLeases would find an expired lease, PruneDeadWorkers a dead
// worker, and ExpireOldTasks(maxAgeSecs) an old task (maxAgeSecs 0: never).
// It reads the minimum of three indexes, O(log n), so a host can poll it
// often and propose recovery commands only when they would do something.
func (p *WorkerPool) RecoveryDue(now, maxAgeSecs uint64) (expiredLeases, deadWorkers, oldTasks bool) {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.byExpiry.Min(); ok {
		expiredLeases = t.lease.expiresAt <= now
	}
	if t := c.ages.head; t != nil && maxAgeSecs > 0 {
		oldTasks = now >= t.createdAt && now-t.createdAt >= maxAgeSecs
	}
	if w := c.alive.first(); w != nil {
		deadWorkers = c.dead(w, now)
	}
	return expiredLeases, deadWorkers, oldTasks
}

// bestWorker returns the eligible worker with the most available slots (ties:
// smallest ID) at now, or nil.
func (c *coordinator) bestWorker(now uint64) *workerRec {
	t := c.limits.HeartbeatTimeoutSecs
	if now < t {
		return c.alive.bestAlive(0, true)
	}
	return c.alive.bestAlive(now-t, false)
}

// dead reports whether w's heartbeat is stale at now.
func (c *coordinator) dead(w *workerRec, now uint64) bool {
	return now >= w.lastHeartbeat && now-w.lastHeartbeat >= c.limits.HeartbeatTimeoutSecs
}

func (t *taskRec) view() ScanTask {
	return ScanTask{
		taskID:         t.id,
		scanID:         t.scanID(),
		targetRef:      t.target,
		phases:         t.phases(),
		status:         t.status,
		priority:       t.priority,
		createdAt:      t.createdAt,
		startedAt:      t.startedAt,
		hasStarted:     t.hasStarted,
		finishedAt:     t.finishedAt,
		retryCount:     uint32(t.retryCount),
		attempt:        t.attempt,
		taskGeneration: t.generation,
		recordVersion:  t.version,
		lease:          t.currentLease(),
		hasLease:       t.hasLease,
		scheduling:     t.scheduling(),
		timeout:        uint64(t.timeout),
		history:        t.attempts(),
		reruns:         t.reruns,
	}
}

func (w *workerRec) view() WorkerNode {
	return WorkerNode{
		workerID:           w.id,
		generation:         w.generation,
		status:             w.status,
		capacity:           w.capacity,
		currentTasks:       w.current,
		completedTasks:     w.completed,
		lastHeartbeat:      w.lastHeartbeat,
		cpuBasisPoints:     w.cpu,
		memoryBasisPoints:  w.mem,
		networkBasisPoints: w.net,
		tags:               w.tagList(),
	}
}

// begin runs the common checks 2 and 3 of contract A.6 (revision, then time).
// The caller holds the lock and has already validated its arguments.
func (c *coordinator) begin(rev, now uint64) *Error {
	if rev != c.revision {
		return &Error{Kind: KindRevisionConflict, Expected: rev, Actual: c.revision}
	}
	if now < c.logicalTime {
		return &Error{Kind: KindLogicalTimeRegression, Current: c.logicalTime, Proposed: now}
	}
	return nil
}

// canCommit is check 5 for the revision counter itself.
func (c *coordinator) canCommit() *Error {
	if c.revision == math.MaxUint64 {
		return exhausted("revision")
	}
	return nil
}

// commit finishes a successful command: one revision, logical time = now.
// In invariants builds it then audits the state (assertAfterCommand).
func (c *coordinator) commit(now uint64) uint64 {
	c.revision++
	c.logicalTime = now
	if c.sched != nil {
		c.sched.wake(now) // I11: delayed holds exactly the tasks not yet due
	}
	if invariantsEnabled {
		c.assertAfterCommand()
	}
	return c.revision
}

// auditEveryCommandRecords bounds the state size up to which invariants
// builds audit after every command; larger states are audited every
// auditLargeStateEvery commands, so a test that fills a pool to its hard
// ceilings stays O(n) per audit amortised, not O(n²).
const (
	auditEveryCommandRecords = 2048
	auditLargeStateEvery     = 1024
)

// assertAfterCommand runs the full audit after a command (invariants
// builds only) and panics naming the broken invariant: a programmer error
// in the core, caught at the command that caused it. NB: release builds
// never get here, so the core still never panics in production.
func (c *coordinator) assertAfterCommand() {
	if len(c.tasks)+len(c.workers) > auditEveryCommandRecords && c.revision%auditLargeStateEvery != 0 {
		return
	}
	if err := c.audit(); err != nil {
		panic("distributed: invariant broken by the command that committed revision " + strconv.FormatUint(c.revision, 10) + ": " + err.Reason)
	}
}

func exhausted(counter string) *Error { return &Error{Kind: KindCounterExhausted, Counter: counter} }

// canBump reports whether v+1 does not overflow.
func canBump(v uint64) bool { return v < math.MaxUint64 }
