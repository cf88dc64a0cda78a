package distributed

import "slices"

// CheckInvariants audits the whole state (O(n)) and returns ErrStateInvariant
// naming the first invariant that does not hold. It is meant for tests, the
// simulator and Restore; commands never call it.
func (p *WorkerPool) CheckInvariants() error { return p.c.checkInvariants() }

// CheckInvariants audits the whole state; see WorkerPool.CheckInvariants.
func (q *TaskQueue) CheckInvariants() error { return q.c.checkInvariants() }

func (c *coordinator) checkInvariants() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.audit(); err != nil {
		return err
	}
	return nil
}

// audit checks the invariants I1–I13 of ARCHITECTURE.md, one group at a
// time, in one pass over the tasks (the scheduling checks of I13 included).
// The caller holds the lock (or owns c exclusively, as Restore does).
func (c *coordinator) audit() *Error { return c.auditWith(nil, false) }

// auditRestored is the audit Restore runs. rebuildIndexes has just built
// the queue, the expiry index and the age and finish lists from the
// records themselves: every queued record into the queue and every record
// holding a lease into the expiry index, each once (it refuses a
// duplicate), every record into the list of its state, in time order. So
// the checks of each record's membership in those four (I2, I3) hold by
// construction there; they are skipped (indexesDerived) instead of
// searching each index again for every record; and the records are
// visited in order (task-ID order, the order they were decoded and
// allocated in), whose IDs key the task map by construction, instead of
// in the map's order. Every other check runs as in audit — on the
// records, their leases and proofs, the counters and the index sizes, the
// workers, ranks and live-worker index — and so refuses every input audit refuses. In
// invariants builds the full audit runs as well.
func (c *coordinator) auditRestored(order []*taskRec) *Error {
	if len(order) != len(c.tasks) {
		return auditError("I2: the task map differs from the restored records")
	}
	if err := c.auditWith(order, true); err != nil {
		return err
	}
	if invariantsEnabled {
		return c.audit()
	}
	return nil
}

// auditWith is audit; indexesDerived skips the membership checks that hold
// by construction after rebuildIndexes and visits the records of order
// (auditRestored).
func (c *coordinator) auditWith(order []*taskRec, indexesDerived bool) *Error {
	if err := c.limits.Validate(); err != nil {
		return auditError("I1: limits are invalid")
	}
	if err := c.auditSchedOpts(); err != nil {
		return err
	}
	tally := taskTally{leasesByWorker: map[string]int{}, seenLease: map[uint64]bool{}, indexesDerived: indexesDerived}
	sched := schedTally{counts: map[string]*ScanState{}}
	if err := c.auditTasks(order, &tally, &sched); err != nil {
		return err
	}
	if err := c.auditCounts(&tally); err != nil {
		return err
	}
	linked := 0
	for id, w := range c.workers {
		if err := c.auditWorker(id, w, tally.leasesByWorker[id]); err != nil {
			return err
		}
		if w.status != WorkerOffline {
			linked++
		}
	}
	if err := c.auditRanks(); err != nil {
		return err
	}
	if err := c.auditLive(linked); err != nil {
		return err
	}
	return c.auditSched(&sched)
}

func auditError(reason string) *Error { return invariantError(reason) }

// auditTasks runs the per-task checks on every record: on those of order
// when the indexes were derived from them (auditRestored), else on those
// of the task map, each against its key.
func (c *coordinator) auditTasks(order []*taskRec, tally *taskTally, sched *schedTally) *Error {
	if tally.indexesDerived {
		for _, t := range order {
			if err := c.auditTaskAll(t, tally, sched); err != nil {
				return err
			}
		}
		return nil
	}
	for id, t := range c.tasks {
		if id != t.id {
			return auditError("I2: task map key differs from its record")
		}
		if err := c.auditTaskAll(t, tally, sched); err != nil {
			return err
		}
	}
	return nil
}

// auditTaskAll runs every per-task check on t (auditTask, auditSchedTask).
func (c *coordinator) auditTaskAll(t *taskRec, tally *taskTally, sched *schedTally) *Error {
	if err := c.auditTask(t, tally); err != nil {
		return err
	}
	return c.auditSchedTask(t, sched)
}

// taskTally accumulates what the per-task checks count.
type taskTally struct {
	active, terminal, queued, leased int
	leasesByWorker                   map[string]int
	seenLease                        map[uint64]bool
	// indexesDerived: the queue, expiry index and lists were just built
	// from the records (auditRestored); membership is not searched.
	indexesDerived bool
}

// auditTask checks one task record: its spec and counters (I2, I5, I8),
// its index memberships (I2, I3), its lease (I3, I4, I7, I8) and its
// retained proof (I10).
func (c *coordinator) auditTask(t *taskRec, tally *taskTally) *Error {
	if validateTaskSpec(TaskSpec{TaskID: t.id, ScanID: t.scanID(), TargetRef: t.target, Phases: []uint8(t.phases()), Priority: t.priority}) != nil {
		return auditError("I2: a task record holds an invalid spec")
	}
	if !t.status.Valid() || t.version == 0 {
		return auditError("I2: task status or record version is invalid")
	}
	if err := c.auditGeneration(t); err != nil {
		return err
	}
	if t.attempt < uint32(t.retryCount) {
		return auditError("I5: attempt is below the retry count")
	}
	if t.createdAt > c.logicalTime {
		return auditError("I8: task created after logical time")
	}
	if !t.status.Terminal() && t.finishedAt != 0 {
		return auditError("I8: finish time on a task that is not terminal")
	}
	if t.status.Terminal() && (t.finishedAt < t.createdAt || t.finishedAt > c.logicalTime) {
		return auditError("I8: finish time is before creation, after logical time, or not the completion time")
	}
	if err := c.auditTaskIndexes(t, tally); err != nil {
		return err
	}
	if err := c.auditAttempts(t); err != nil {
		return err
	}
	if t.hasLease {
		if err := c.auditLease(t, tally); err != nil {
			return err
		}
	}
	return c.auditTaskProof(t)
}

// auditGeneration checks I5 and I11 for one task: its generation is the
// base of its current run (runBase: the life's base, or after a re-run the
// generation the re-run started) plus its retry count, within max_retries;
// a re-run starts above the life's base (each re-run adds one generation at
// least); the life's base is at most the generation floor.
func (c *coordinator) auditGeneration(t *taskRec) *Error {
	rb := t.rerunBaseValue()
	if uint32(t.retryCount) > c.limits.MaxRetries || (t.reruns == 0) != (rb == 0) ||
		(t.reruns > 0 && (rb <= t.lifeBase || uint64(t.reruns) > rb-t.lifeBase)) {
		return auditError("I5: retry or re-run counters are inconsistent")
	}
	if b := t.runBase(); t.generation < b || t.generation-b != uint64(t.retryCount) {
		return auditError("I5: the task generation must be its run's base plus the retry count")
	}
	if t.lifeBase > c.generationFloor {
		return auditError("I11: a task life starts above the generation floor")
	}
	return nil
}

// auditTaskIndexes checks that the age index holds exactly the
// non-terminal tasks, the queue exactly the queued ones (I2, I3), and that
// the status agrees with the lease and the start and completion times.
func (c *coordinator) auditTaskIndexes(t *taskRec, tally *taskTally) *Error {
	// List membership is checked whole in auditCounts (auditList).
	if t.status.Terminal() {
		tally.terminal++
	} else {
		tally.active++
	}
	inQueue := t.status == TaskQueued // by construction when derived
	if !tally.indexesDerived {
		inQueue = c.queue.Has(t)
	}
	if (t.status == TaskQueued) != inQueue {
		return auditError("I2: queue membership differs from queued status")
	}
	if inQueue {
		tally.queued++
		if t.ordinal == 0 || t.ordinal > c.lastOrdinal {
			return auditError("I2: queued task has an invalid ordinal")
		}
	}
	wantLease := t.status == TaskLeased || t.status == TaskRunning
	if wantLease != t.hasLease {
		return auditError("I3: lease presence differs from leased/running status")
	}
	if !t.hasLease && t.status != TaskQueued && (t.xprev != nil || t.xnext != nil) {
		return auditError("I3: a task neither queued nor leased is linked into the queue or expiry index")
	}
	if !t.status.Terminal() && t.hasStarted != (t.status == TaskRunning) {
		return auditError("I3: started time on a task that is not running")
	}
	return nil
}

// auditLease checks a leased or running task's lease: it matches the task
// (I3), was issued once (I7), has consistent times (I8), is in the expiry
// index (I3) and is held by a live worker of its generation (I4).
func (c *coordinator) auditLease(t *taskRec, tally *taskTally) *Error {
	tally.leased++
	ls := t.lease // names the task's ID, generation and attempt by construction (compact.go)
	if t.hasProof {
		return auditError("I3: a task holds a lease and a terminal proof")
	}
	if ls.leaseID == 0 || ls.leaseID > c.lastLeaseID || tally.seenLease[ls.leaseID] {
		return auditError("I7: lease ID is zero, unissued or duplicated")
	}
	tally.seenLease[ls.leaseID] = true
	if ls.acquiredAt > c.logicalTime || ls.expiresAt <= ls.acquiredAt {
		return auditError("I8: lease times are inconsistent")
	}
	if !tally.indexesDerived && !c.byExpiry.Has(t) {
		return auditError("I3: lease missing from the expiry index")
	}
	w := ls.worker
	if w == nil || c.workers[w.id] != w || w.status == WorkerOffline || w.generation != ls.workerGeneration ||
		int(t.leaseSlot) >= len(w.leases) || w.leases[t.leaseSlot] != t {
		return auditError("I4: lease is not held by a live worker of its generation")
	}
	tally.leasesByWorker[w.id]++
	return nil
}

// auditTaskProof checks the proof a terminal task retains (I10).
func (c *coordinator) auditTaskProof(t *taskRec) *Error {
	// The proof lease names the task's ID, generation and attempt, a fence
	// the version before the cancellation, and a receipt is the proof lease
	// (compact.go): those hold by construction; the rest is checked here.
	proofLease := t.lease
	leaseProofOK := t.hasProof && !t.proofIsFence && proofLease.leaseID != 0 && proofLease.leaseID <= c.lastLeaseID &&
		proofLease.worker != nil && c.workers[proofLease.worker.id] == proofLease.worker
	switch t.status {
	case TaskCompleted:
		if !t.hasProof || !leaseProofOK {
			return auditError("I10: completed task lacks its retained lease and matching receipt")
		}
	case TaskFailed:
		if !t.hasProof || !leaseProofOK || uint32(t.retryCount) != c.limits.MaxRetries {
			return auditError("I10: failed task lacks its exhausting lease or has retries left")
		}
	case TaskCancelled:
		fenceOK := t.proofIsFence && t.lease == leaseRec{}
		if !t.hasProof || !(fenceOK || leaseProofOK) {
			return auditError("I10: cancelled task lacks the ownership that cancelled it")
		}
	default:
		if t.hasProof || t.proofIsFence || t.lastAttemptImplicit || (!t.hasLease && t.lease != leaseRec{}) {
			return auditError("I10: non-terminal or expired task retains a terminal proof")
		}
	}
	return nil
}

// auditCounts compares the tallies with the counters, the index sizes and
// the bounds (I1, I2).
func (c *coordinator) auditCounts(tally *taskTally) *Error {
	l := c.limits
	if tally.active != c.active || tally.terminal != c.terminal {
		return auditError("I1: active/terminal counters differ from the records")
	}
	if tally.queued != c.queue.Len() || tally.leased != c.byExpiry.Len() || !c.queue.audit() || !c.byExpiry.audit() {
		return auditError("I2: an index holds records it should not")
	}
	if !tally.indexesDerived && (!c.auditList(&c.ages, false, tally.active, createdAtOf) || !c.auditList(&c.finished, true, tally.terminal, finishedAtOf)) {
		return auditError("I3: the age or finish list differs from the non-terminal or terminal tasks, or is out of time order")
	}
	if len(c.tasks) > l.MaxTaskRecords || tally.active > l.MaxActiveTasks || tally.queued > l.MaxQueuedTasks ||
		tally.terminal+tally.active > l.MaxTerminalTasks {
		return auditError("I1: a task bound is exceeded")
	}
	if len(c.workers) > l.MaxWorkers {
		return auditError("I1: the worker bound is exceeded")
	}
	return nil
}

// auditWorker checks one worker record (I4, I8, I9); leases is the number
// of live leases the tasks name it as holder of.
func (c *coordinator) auditWorker(id string, w *workerRec, leases int) *Error {
	if id != w.id || !ValidIdentifier(id) {
		return auditError("I4: worker map key differs from its record")
	}
	if w.generation == 0 || !w.status.Valid() || w.capacity == 0 || w.capacity > MaxWorkerCapacity {
		return auditError("I4: worker record is invalid")
	}
	if validateUtilization(w.cpu, w.mem, w.net) != nil || w.tagBits>>(TagExternal+1) != 0 {
		return auditError("I4: worker utilization or tags are invalid")
	}
	if w.lastHeartbeat > c.logicalTime {
		return auditError("I8: heartbeat after logical time")
	}
	if int(w.current) != len(w.leases) || leases != len(w.leases) {
		return auditError("I4: CurrentTasks differs from the leases the worker holds")
	}
	if w.status == WorkerOffline && w.current != 0 {
		return auditError("I4: an offline worker holds leases")
	}
	if w.status == WorkerOffline && w.slot != -1 {
		return auditError("I9: an offline worker is linked into the live-worker index")
	}
	return nil
}

// auditLive checks the live-worker index (I9): exactly the linked
// workers, each in the slot it names, the slots in use between head and
// tail in LastHeartbeat order, cached selection keys, and every tree node
// the best of its children.
func (c *coordinator) auditLive(linked int) *Error {
	x := &c.alive
	if !x.shapeOK() || !x.slotsOK(c.workers) || x.n != linked || !x.treeOK() {
		return auditError("I9: the live-worker index differs from the worker records")
	}
	return nil
}

// shapeOK checks the index's arrays: the lengths and level offsets a
// ring of a power-of-two number of slots implies, and a run of positions
// 0 ≤ head ≤ tail ≤ head + slots.
func (x *liveIndex) shapeOK() bool {
	size := len(x.slots)
	if len(x.hb) != size || size&(size-1) != 0 || (size > 0 && size < liveFan) || x.head < 0 || x.head > x.tail || x.tail-x.head > size {
		return false
	}
	if size == 0 {
		return len(x.off) == 0 && len(x.key) == 0
	}
	off, total := liveLevels(size)
	return slices.Equal(x.off, off) && len(x.key) == total
}

// slotsOK checks every slot: vacant outside the run of positions [head,
// tail) and at head unless nothing is linked, otherwise a live worker of
// ws that names the slot, with its heartbeat and key copied right;
// heartbeats non-decreasing along the run; x.n the count.
func (x *liveIndex) slotsOK(ws map[string]*workerRec) bool {
	count := 0
	for p := x.head; p < x.tail; p++ {
		if p > x.head && x.hb[x.slotOf(p-1)] > x.hb[x.slotOf(p)] {
			return false
		}
	}
	for i, w := range x.slots {
		inRun := (i-x.slotOf(x.head))&(len(x.slots)-1) < x.tail-x.head
		if (w != nil && !inRun) || (w == nil && x.key[i] != 0) {
			return false
		}
		if w == nil {
			continue
		}
		count++
		if ws[w.id] != w || w.status == WorkerOffline || int(w.slot) != i ||
			x.hb[i] != w.lastHeartbeat || w.key != w.wantKey() || x.key[i] != w.key {
			return false
		}
	}
	return count == x.n && (x.n == 0 || x.first() != nil)
}

// treeOK checks every node above the slots against a rebuild, and the
// cached best slot when it is marked valid.
func (x *liveIndex) treeOK() bool {
	if len(x.slots) == 0 {
		return len(x.key) == 0 && (!x.bestOK || x.best == -1)
	}
	var want liveIndex
	want.alloc(len(x.slots))
	copy(want.slots, x.slots)
	want.rebuild()
	return slices.Equal(x.key, want.key) && (!x.bestOK || x.best == x.findBest())
}
