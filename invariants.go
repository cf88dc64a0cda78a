package distributed

import "fmt"

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

// audit checks the invariants I1–I10 of ARCHITECTURE.md. The caller holds the
// lock (or owns c exclusively, as Restore does).
func (c *coordinator) audit() *Error {
	bad := func(format string, args ...any) *Error { return invariantError(fmt.Sprintf(format, args...)) }
	l := c.limits
	if err := l.Validate(); err != nil {
		return bad("I1: limits are invalid")
	}
	active, terminal, queued, leased := 0, 0, 0, 0
	leasesByWorker := make(map[string]int)
	seenLease := make(map[uint64]bool)
	for id, t := range c.tasks {
		if id != t.id {
			return bad("I2: task map key differs from its record")
		}
		if validateTaskSpec(TaskSpec{TaskID: t.id, ScanID: t.scanID, TargetRef: t.target, Phases: t.phases, Priority: t.priority}) != nil {
			return bad("I2: a task record holds an invalid spec")
		}
		if !t.status.Valid() || t.version == 0 {
			return bad("I2: task status or record version is invalid")
		}
		if uint64(t.retryCount) != t.generation || t.retryCount > l.MaxRetries {
			return bad("I5: retry count must equal the task generation and stay within max_retries")
		}
		if t.attempt < t.retryCount {
			return bad("I5: attempt is below the retry count")
		}
		if t.createdAt > c.logicalTime {
			return bad("I8: task created after logical time")
		}
		if t.status.Terminal() {
			terminal++
			if c.byAge.Has(t) {
				return bad("I3: terminal task in the age index")
			}
		} else {
			active++
			if !c.byAge.Has(t) {
				return bad("I3: non-terminal task missing from the age index")
			}
		}
		inQueue := c.queue.Has(t)
		if (t.status == TaskQueued) != inQueue {
			return bad("I2: queue membership differs from queued status")
		}
		if inQueue {
			queued++
			if t.ordinal == 0 || t.ordinal > c.lastOrdinal {
				return bad("I2: queued task has an invalid ordinal")
			}
		}
		wantLease := t.status == TaskLeased || t.status == TaskRunning
		if wantLease != t.hasLease {
			return bad("I3: lease presence differs from leased/running status")
		}
		if !t.status.Terminal() && t.hasStarted != (t.status == TaskRunning) {
			return bad("I3: started time on a task that is not running")
		}
		if t.hasCompleted != (t.status == TaskCompleted) {
			return bad("I3: completion time without completed status")
		}
		if t.hasLease {
			leased++
			ls := t.lease
			if ls.taskID != t.id || ls.taskGeneration != t.generation || ls.attempt != t.attempt {
				return bad("I3: lease does not match its task")
			}
			if ls.leaseID == 0 || ls.leaseID > c.lastLeaseID || seenLease[ls.leaseID] {
				return bad("I7: lease ID is zero, unissued or duplicated")
			}
			seenLease[ls.leaseID] = true
			if ls.acquiredAt > c.logicalTime || ls.expiresAt <= ls.acquiredAt {
				return bad("I8: lease times are inconsistent")
			}
			if !c.byExpiry.Has(t) {
				return bad("I3: lease missing from the expiry index")
			}
			w := c.workers[ls.workerID]
			if w == nil || w.status == WorkerOffline || w.generation != ls.workerGeneration || w.leases[ls.leaseID] != t {
				return bad("I4: lease is not held by a live worker of its generation")
			}
			leasesByWorker[w.id]++
		}
		proofLease, proofIsLease := t.proof.Lease()
		leaseProofOK := proofIsLease && proofLease.taskID == t.id && proofLease.taskGeneration == t.generation &&
			proofLease.attempt == t.attempt && proofLease.leaseID != 0 && proofLease.leaseID <= c.lastLeaseID &&
			ValidIdentifier(proofLease.workerID) && c.workers[proofLease.workerID] != nil
		switch t.status {
		case TaskCompleted:
			r := t.receipt
			if !t.hasProof || !leaseProofOK || r.taskID != t.id || r.recordVersion != t.version ||
				r.taskGeneration != t.generation || r.attempt != proofLease.attempt || r.leaseID != proofLease.leaseID ||
				r.workerID != proofLease.workerID || r.workerGeneration != proofLease.workerGeneration {
				return bad("I10: completed task lacks its retained lease and matching receipt")
			}
		case TaskFailed:
			if !t.hasProof || !leaseProofOK || t.retryCount != l.MaxRetries {
				return bad("I10: failed task lacks its exhausting lease or has retries left")
			}
		case TaskCancelled:
			fence, isFence := t.proof.Fence()
			fenceOK := isFence && fence.taskID == t.id && fence.taskGeneration == t.generation && fence.recordVersion+1 == t.version
			if !t.hasProof || !(fenceOK || leaseProofOK) {
				return bad("I10: cancelled task lacks the ownership that cancelled it")
			}
		default:
			if t.hasProof || !t.receipt.IsZero() {
				return bad("I10: non-terminal or expired task retains a terminal proof")
			}
		}
	}
	if active != c.active || terminal != c.terminal {
		return bad("I1: active/terminal counters differ from the records")
	}
	if queued != c.queue.Len() || leased != c.byExpiry.Len() || active != c.byAge.Len() {
		return bad("I2: an index holds records it should not")
	}
	if len(c.tasks) > l.MaxTaskRecords || active > l.MaxActiveTasks || queued > l.MaxQueuedTasks || terminal+active > l.MaxTerminalTasks {
		return bad("I1: a task bound is exceeded")
	}
	if len(c.workers) > l.MaxWorkers {
		return bad("I1: the worker bound is exceeded")
	}
	linked := 0
	for id, w := range c.workers {
		if id != w.id || !ValidIdentifier(id) {
			return bad("I4: worker map key differs from its record")
		}
		if w.generation == 0 || !w.status.Valid() || w.capacity == 0 || w.capacity > MaxWorkerCapacity {
			return bad("I4: worker record is invalid")
		}
		if validateUtilization(w.cpu, w.mem, w.net) != nil || len(w.tags) > MaxWorkerTags {
			return bad("I4: worker utilization or tags are invalid")
		}
		for i, tag := range w.tags {
			if !tag.Valid() || (i > 0 && w.tags[i-1] >= tag) {
				return bad("I4: worker tags are not sorted, distinct and valid")
			}
		}
		if w.lastHeartbeat > c.logicalTime {
			return bad("I8: heartbeat after logical time")
		}
		if int(w.current) != len(w.leases) || leasesByWorker[id] != len(w.leases) {
			return bad("I4: CurrentTasks differs from the leases the worker holds")
		}
		if w.status == WorkerOffline && w.current != 0 {
			return bad("I4: an offline worker holds leases")
		}
		if w.status == WorkerOffline && (w.parent != nil || w.left != nil || w.right != nil) {
			return bad("I9: an offline worker is linked into the live-worker index")
		}
		if w.status != WorkerOffline {
			linked++
		}
	}
	count := 0
	var prev *workerRec
	ok := treapWalk(c.alive, func(w *workerRec) bool {
		count++
		if c.workers[w.id] != w || w.status == WorkerOffline || (prev != nil && !workerKeyLess(prev, w)) {
			return false
		}
		if (w.left != nil && (w.left.prio > w.prio || w.left.parent != w)) || (w.right != nil && (w.right.prio > w.prio || w.right.parent != w)) {
			return false
		}
		wantScore := uint32(0)
		if w.eligibleIgnoringTime() {
			wantScore = w.availableSlots()
		}
		if w.score != wantScore || w.best != w.subtreeBest() {
			return false
		}
		prev = w
		return true
	})
	if c.alive != nil && c.alive.parent != nil {
		ok = false
	}
	if !ok || count != linked {
		return bad("I9: the live-worker index differs from the worker records")
	}
	return nil
}
