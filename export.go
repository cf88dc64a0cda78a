package distributed

import (
	"cmp"
	"slices"
)

// State export (contract A.13). Layout, version 2, inside the codec frame
// ("TVWP" | 2 | body | CRC-32C):
//
//	limits: MaxTaskRecords MaxActiveTasks MaxQueuedTasks MaxTerminalTasks
//	        MaxWorkers MaxRetries MaxLeaseTTLSecs MaxTaskTTLSecs HeartbeatTimeoutSecs
//	revision logicalTime lastLeaseID lastOrdinal generationFloor
//	tasks:   count, then each task in task-ID order (see encodeTask)
//	workers: count, then each worker in worker-ID order (see encodeWorker)
//	extensions (only if some task has any; attempts_export.go): count ≥ 1,
//	         then per such task in task-ID order its ID, attempt timeout,
//	         re-runs (with the re-run and life bases) and attempt history
//
// Derived data (queue, indexes, counters, CurrentTasks, the worker lease sets,
// the live-worker index) is not encoded; Restore rebuilds it and then runs the
// invariant audit (auditRestored: every check but the index memberships
// that hold by construction), so any inconsistency in the input is
// ErrInvalidState.
//
// Version 1 (before purge, docs/adr/0002-purge.md) has no generationFloor
// and no per-task finish time; Restore still reads it: the floor is 0, a
// completed task finished at its completion and any other terminal task at
// the state's logical time (the latest time it can have finished, so that
// retention never purges it early). Such a pool re-exports as version 2.
// Version 1 has no extensions section (attempt timeouts, histories and
// re-runs came after it).

const (
	poolMagic     = "TVWP"
	poolVersion   = 2
	poolVersionV1 = 1
)

// ExportState encodes the complete state deterministically: equal states give
// equal bytes. It never fails; the error is for interface symmetry.
func (p *WorkerPool) ExportState() ([]byte, error) {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exportTasks(c.sortedTaskIDs()), nil
}

// exportTasks encodes the state with the task records in the order of ids
// (ExportState passes every ID sorted; tests pass other orders to prove
// that restore refuses them). The caller holds the lock.
func (c *coordinator) exportTasks(ids []string) []byte {
	sched := c.exportsSched()
	version := uint8(poolVersion)
	if sched {
		version = poolVersionSched // schedule_export.go
	}
	e := newEncoder(poolMagic, version)
	e.buf = append(make([]byte, 0, c.exportSizeHint(ids)), e.buf...) // export_size.go
	l := c.limits
	for _, v := range [...]uint64{
		uint64(l.MaxTaskRecords), uint64(l.MaxActiveTasks), uint64(l.MaxQueuedTasks),
		uint64(l.MaxTerminalTasks), uint64(l.MaxWorkers), uint64(l.MaxRetries),
		l.MaxLeaseTTLSecs, l.MaxTaskTTLSecs, l.HeartbeatTimeoutSecs,
		c.revision, c.logicalTime, c.lastLeaseID, c.lastOrdinal, c.generationFloor,
	} {
		e.uvarint(v)
	}
	if sched {
		c.sched.opts.encode(e)
	}
	e.uvarint(uint64(len(ids)))
	for _, id := range ids {
		t := c.tasks[id]
		t.encode(e)
		if sched {
			t.encodeSched(e)
		}
	}
	e.uvarint(uint64(c.byID.Len()))
	c.byID.Ascend(func(w *workerRec) bool { // every worker, in ID order (I9)
		w.encode(e)
		return true
	})
	if sched {
		c.sched.encodeScans(e)
	}
	c.encodeTaskExtensions(e, ids)
	return e.finish()
}

func (t *taskRec) encode(e *encoder) {
	e.str(t.id)
	e.str(t.scanID())
	e.str(t.target)
	e.str(t.phases())
	e.uvarint(uint64(t.priority))
	e.uvarint(uint64(t.status))
	e.uvarint(t.createdAt)
	e.boolean(t.hasStarted)
	e.uvarint(t.startedAt)
	e.boolean(t.status == TaskCompleted)
	e.uvarint(t.completedAtValue())
	e.uvarint(t.finishedAt)
	e.uvarint(uint64(t.retryCount))
	e.uvarint(uint64(t.attempt))
	e.uvarint(t.generation)
	e.uvarint(t.version)
	e.uvarint(t.ordinal)
	e.boolean(t.hasLease)
	if t.hasLease {
		t.currentLease().encode(e)
	}
	e.boolean(t.hasProof)
	if t.hasProof {
		t.proofValue().encode(e)
	}
	if t.status == TaskCompleted {
		t.receiptValue().encode(e)
	}
}

// decodeTask decodes one task record; false when its lease, proof or
// receipt is not what the record implies (compactDecoded). The scan ID
// and the phases are interned straight from the input (compact.go), and
// the task ID and the target share one allocation: they live as long as
// the record.
func (c *coordinator) decodeTask(d *decoder, version uint8, slab *restoreSlab) (*taskRec, bool) {
	id := d.rawBytes(MaxIdentifierBytes)
	scanID := d.rawBytes(MaxIdentifierBytes)
	target := d.rawBytes(MaxTargetRefBytes)
	phases := d.rawBytes(MaxTaskPhases)
	idTarget := slab.idTarget(id, target)
	t := slab.record()
	t.id, t.target = idTarget[:len(id)], idTarget[len(id):]
	t.meta = internMeta(c, scanID, phases)
	t.priority = TaskPriority(d.u8())
	t.status = TaskStatus(d.u8())
	t.createdAt = d.uvarint()
	t.hasStarted = d.boolean()
	t.startedAt = d.uvarint()
	hasCompleted, completedAt := d.boolean(), d.uvarint()
	if version != poolVersionV1 {
		t.finishedAt = d.uvarint()
	} else if hasCompleted {
		t.finishedAt = completedAt // version 1: finished at its completion
	}
	t.retryCount = uint16(min(d.u32(), MaxRetries+1)) // above MaxRetries stays above: the audit refuses it
	t.attempt = d.u32()
	t.generation = d.uvarint()
	t.version = d.uvarint()
	t.ordinal = d.uvarint()
	d.ids.task = t.id // a proof names it (compactDecoded)
	var lease TaskLease
	var proof TaskOwnership
	var receipt CompletionReceipt
	if t.hasLease = d.boolean(); t.hasLease {
		lease = decodeLease(d)
	}
	if t.hasProof = d.boolean(); t.hasProof {
		proof = decodeOwnership(d)
	}
	if t.status == TaskCompleted {
		receipt = decodeReceipt(d)
	}
	// The completion time is the finish time (I8), completed iff the status
	// says so (I3).
	completionOK := hasCompleted == (t.status == TaskCompleted) && completedAt == t.completedAtValue()
	return t, d.failed || (completionOK && t.compactDecoded(lease, proof, receipt, d.ids))
}

func (w *workerRec) encode(e *encoder) {
	e.str(w.id)
	e.uvarint(w.generation)
	e.uvarint(uint64(w.status))
	e.uvarint(uint64(w.capacity))
	e.uvarint(w.completed)
	e.uvarint(w.lastHeartbeat)
	e.uvarint(uint64(w.cpu))
	e.uvarint(uint64(w.mem))
	e.uvarint(uint64(w.net))
	e.uvarint(uint64(w.tagCount()))
	for t := range tagsOf(w.tagBits) {
		e.uvarint(uint64(t))
	}
}

// decodeWorker reads one worker record. tagsOK is false when its tags
// are not valid and strictly increasing (the export's form): a set cannot
// hold others, and a state that would not re-export to its own bytes is
// refused with its own reason (RestoreWorkerPool), not as a truncation.
func decodeWorker(d *decoder) (w *workerRec, tagsOK bool) {
	w = &workerRec{
		slot:          -1, // linked by the restore (liveindex.go)
		id:            d.str(MaxIdentifierBytes),
		generation:    d.uvarint(),
		status:        WorkerStatus(d.u8()),
		capacity:      d.u32(),
		completed:     d.uvarint(),
		lastHeartbeat: d.uvarint(),
		cpu:           d.u16(),
		mem:           d.u16(),
		net:           d.u16(),
	}
	tagsOK = true
	n := d.count(MaxWorkerTags, 1)
	for i := 0; i < n; i++ {
		t := WorkerTag(d.u8())
		if tagsOK = tagsOK && t.Valid() && w.tagBits>>t == 0; tagsOK {
			w.tagBits |= 1 << t
		}
	}
	return w, tagsOK
}

func invalidState(reason string) *Error { return &Error{Kind: KindInvalidState, Reason: reason} }

// RestoreWorkerPool rebuilds a pool from ExportState bytes. It validates the
// frame, the limits, every bound, identifier and record, and every invariant;
// any corrupt, truncated or hostile input returns ErrInvalidState (never a
// panic). A restored pool re-exports to exactly the input bytes.
func RestoreWorkerPool(data []byte) (*WorkerPool, error) {
	version := uint8(poolVersion)
	d, ok := newDecoder(data, poolMagic, version)
	for _, v := range []uint8{poolVersionV1, poolVersionSched} {
		if !ok {
			version = v
			d, ok = newDecoder(data, poolMagic, version)
		}
	}
	sched := version == poolVersionSched // schedule_export.go: version 2 plus scheduling
	if !ok {
		return nil, invalidState("pool state frame is invalid")
	}
	d.ids = &idTable{}
	var l Limits
	l.MaxTaskRecords = int(d.bounded(MaxTaskRecords))
	l.MaxActiveTasks = int(d.bounded(MaxActiveTasks))
	l.MaxQueuedTasks = int(d.bounded(MaxActiveTasks))
	l.MaxTerminalTasks = int(d.bounded(MaxTaskRecords))
	l.MaxWorkers = int(d.bounded(MaxWorkers))
	l.MaxRetries = uint32(d.bounded(MaxRetries))
	l.MaxLeaseTTLSecs = d.bounded(MaxLeaseTTLSecs)
	l.MaxTaskTTLSecs = d.bounded(MaxTaskTTLSecs)
	l.HeartbeatTimeoutSecs = d.bounded(MaxHeartbeatTimeoutSecs)
	if d.failed || l.Validate() != nil {
		return nil, invalidState("pool limits are invalid")
	}
	c := newCoordinator(l)
	c.revision = d.uvarint()
	c.logicalTime = d.uvarint()
	c.lastLeaseID = d.uvarint()
	c.lastOrdinal = d.uvarint()
	if version != poolVersionV1 {
		c.generationFloor = d.uvarint()
	}
	var opts SchedulingOptions
	if sched {
		opts = decodeSchedulingOptions(d)
	}

	// A task takes at least 20 bytes encoded; a worker at least 11.
	n := d.count(uint64(l.MaxTaskRecords), 20)
	c.tasks = make(map[string]*taskRec, n)
	order := make([]*taskRec, 0, n) // the records in task-ID order
	slab := newRestoreSlab(n)
	for i := 0; i < n && !d.failed; i++ {
		t, proofsOK := c.decodeTask(d, version, slab)
		if sched {
			t.decodeSched(d)
		}
		if d.failed {
			break
		}
		if !proofsOK {
			return nil, invalidState("a task's lease, proof or receipt differs from its record (I3, I10)")
		}
		if (i > 0 && t.id <= order[i-1].id) || !ValidIdentifier(t.id) {
			return nil, invalidState("task records are not in strict task-ID order")
		}
		order = append(order, t)
		c.tasks[t.id] = t
	}
	nw := d.count(uint64(l.MaxWorkers), 11)
	c.workers = make(map[string]*workerRec, nw)
	prev := ""
	for i := 0; i < nw && !d.failed; i++ {
		w, tagsOK := decodeWorker(d)
		if d.failed {
			break
		}
		if (i > 0 && w.id <= prev) || !ValidIdentifier(w.id) {
			return nil, invalidState("worker records are not in strict worker-ID order")
		}
		if !tagsOK {
			return nil, invalidState("a worker's tags are not sorted, distinct and valid (I4)")
		}
		prev = w.id
		c.workers[w.id] = w
	}
	var scans []decodedScan
	if sched {
		var err *Error
		if scans, err = decodeScans(d, l.MaxTaskRecords); err != nil {
			return nil, err
		}
	}
	if version != poolVersionV1 {
		if err := c.decodeTaskExtensions(d); err != nil {
			return nil, err
		}
	}
	for _, t := range order {
		t.deriveLifeBase()
		t.adoptImplicitAttempt()
	}
	if !d.done() {
		return nil, invalidState("pool state is truncated or has trailing bytes")
	}
	if version == poolVersionV1 {
		c.upgradeV1FinishTimes(order)
	}
	if err := c.rebuildIndexes(order); err != nil {
		return nil, err
	}
	if sched {
		if err := c.restoreSched(opts, scans); err != nil {
			return nil, err
		}
	}
	if err := c.auditRestored(order); err != nil {
		return nil, invalidState("restored pool breaks an invariant: " + err.Reason)
	}
	return &WorkerPool{c: c}, nil
}

// upgradeV1FinishTimes gives the terminal tasks of a version 1 state their
// finish time: the completion time, else the state's logical time.
func (c *coordinator) upgradeV1FinishTimes(order []*taskRec) {
	for _, t := range order {
		switch {
		case t.status == TaskCompleted:
			// set from the completion time by decodeTask
		case t.status.Terminal():
			t.finishedAt = c.logicalTime
		}
	}
}

// linkLease points a restored record's lease (current or retained as the
// proof) at its worker record, and a current one into the worker's lease
// set (I4); rebuildIndexes fills the expiry index.
// Duplicate lease IDs are left for the audit (I7).
func (c *coordinator) linkLease(t *taskRec) *Error {
	if !t.hasLease && (!t.hasProof || t.proofIsFence) {
		return nil
	}
	w := c.workers[t.lease.worker.id] // the decoder's stub
	if w == nil {
		return invalidState("a lease names an unknown worker")
	}
	t.lease.worker = w
	if !t.hasLease {
		return nil
	}
	if w.current == MaxWorkerCapacity {
		return invalidState("a worker holds more leases than any capacity")
	}
	w.addLease(t)
	w.current++
	return nil
}

// rebuildIndexes derives the queue, indexes, counters, worker lease sets and
// the live-worker index from decoded records (order: every record, in task-ID order),
// rejecting what cannot be linked. The queue and the expiry index are
// filled in their own order, the lists linked in time order
// (fillIndex, rebuildList): the inputs are sorted once at most, not
// searched per record.
func (c *coordinator) rebuildIndexes(order []*taskRec) *Error {
	for _, w := range c.workers {
		if !w.status.Valid() {
			return invalidState("worker status is invalid")
		}
	}
	n := len(order)
	live, ended, queued := make([]*taskRec, 0, n), make([]*taskRec, 0, n), make([]*taskRec, 0, n)
	var leased []*taskRec
	for _, t := range order {
		if !t.status.Valid() || !t.priority.Valid() {
			return invalidState("task status or priority is invalid")
		}
		if t.status.Terminal() {
			ended = append(ended, t)
		} else {
			live = append(live, t)
		}
		if t.status == TaskQueued {
			queued = append(queued, t)
		}
		if err := c.linkLease(t); err != nil {
			return err
		}
		if t.hasLease {
			leased = append(leased, t)
		}
	}
	// Sorted first, the queue's lists are appended in lease order and need
	// no settling on first read (queue.go); the expiry index buckets by
	// second and needs no order.
	if !slices.IsSortedFunc(queued, lessCmp(queueLess)) {
		slices.SortFunc(queued, lessCmp(queueLess))
	}
	if !fillIndex(c.queue, queued) {
		return invalidState("duplicate queue entry")
	}
	if !fillIndex(c.byExpiry, leased) {
		return invalidState("duplicate lease expiry entry")
	}
	c.active, c.terminal = len(live), len(ended)
	c.ages, c.finished = rebuildList(live, createdAtOf), rebuildList(ended, finishedAtOf)
	for _, w := range c.workers {
		c.byID.ReplaceOrInsert(w)
	}
	c.rerank() // ranks are derived: evenly spaced in ID order (I9)
	c.alive.fill(liveByHeartbeat(c.workers))
	return nil
}

// taskIndex is an index Restore fills: the queue and the expiry index.
type taskIndex interface {
	ReplaceOrInsert(t *taskRec) (*taskRec, bool)
}

// fillIndex inserts ts into the empty index ix in their order; false on a
// duplicate.
func fillIndex(ix taskIndex, ts []*taskRec) bool {
	for _, t := range ts {
		if _, dup := ix.ReplaceOrInsert(t); dup {
			return false
		}
	}
	return true
}

// lessCmp turns a less function into a three-way comparison.
func lessCmp(less func(a, b *taskRec) bool) func(a, b *taskRec) int {
	return func(a, b *taskRec) int {
		switch {
		case less(a, b):
			return -1
		case less(b, a):
			return 1
		}
		return 0
	}
}

// liveByHeartbeat returns the non-offline workers in LastHeartbeat order
// (ties by rank), the order the live-worker index holds them in (I9).
func liveByHeartbeat(ws map[string]*workerRec) []*workerRec {
	live := make([]*workerRec, 0, len(ws))
	for _, w := range ws {
		if w.status != WorkerOffline {
			live = append(live, w)
		}
	}
	slices.SortFunc(live, func(a, b *workerRec) int {
		return cmp.Or(cmp.Compare(a.lastHeartbeat, b.lastHeartbeat), cmp.Compare(a.rank, b.rank))
	})
	return live
}
