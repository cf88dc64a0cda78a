package distributed

import (
	"cmp"
	"slices"
	"sort"
)

func validateUtilization(cpu, mem, net uint16) *Error {
	if cpu > UtilizationBasisPoints || mem > UtilizationBasisPoints || net > UtilizationBasisPoints {
		return &Error{Kind: KindInvalidWorker, Reason: "utilization exceeds 10000 basis points"}
	}
	return nil
}

// normalizeWorkerSpec validates s and returns its tags deduplicated and sorted.
func normalizeWorkerSpec(s WorkerSpec) ([]WorkerTag, *Error) {
	switch {
	case !ValidIdentifier(s.WorkerID):
		return nil, &Error{Kind: KindInvalidWorker, Reason: "worker_id is invalid"}
	case s.Capacity == 0:
		return nil, &Error{Kind: KindInvalidWorker, Reason: "capacity is zero"}
	case s.Capacity > MaxWorkerCapacity:
		return nil, &Error{Kind: KindInvalidWorker, Reason: "capacity exceeds absolute maximum"}
	}
	if err := validateUtilization(s.CPUBasisPoints, s.MemoryBasisPoints, s.NetworkBasisPoints); err != nil {
		return nil, err
	}
	// contract A.4 allows at most five distinct tags; duplicates are fine. Count
	// distinct values first (undeclared ones included), then reject
	// undeclared values.
	var seen [256]bool
	distinct, invalid := 0, false
	for _, t := range s.Tags {
		if !seen[t] {
			seen[t] = true
			distinct++
			invalid = invalid || !t.Valid()
		}
	}
	if distinct > MaxWorkerTags {
		return nil, &Error{Kind: KindInvalidWorker, Reason: "too many tags"}
	}
	if invalid {
		return nil, &Error{Kind: KindInvalidWorker, Reason: "tag is invalid"}
	}
	tags := make([]WorkerTag, 0, distinct)
	for t := TagLinux; t <= TagExternal; t++ {
		if seen[t] {
			tags = append(tags, t)
		}
	}
	if len(tags) == 0 {
		tags = nil
	}
	return tags, nil
}

func (w *workerRec) applySpec(s WorkerSpec, tags []WorkerTag) {
	w.capacity = s.Capacity
	w.cpu, w.mem, w.net = s.CPUBasisPoints, s.MemoryBasisPoints, s.NetworkBasisPoints
	w.tagBits = 0
	for _, t := range tags {
		w.tagBits |= 1 << t
	}
}

// RegisterWorker registers a new healthy worker (generation 1, LastHeartbeat =
// now). Errors: ErrInvalidWorker, ErrRevisionConflict,
// ErrLogicalTimeRegression, ErrWorkerAlreadyExists, ErrWorkerCapacityReached,
// ErrCounterExhausted.
func (p *WorkerPool) RegisterWorker(expectedRevision, nowSecs uint64, spec WorkerSpec) (Transition[WorkerNode], error) {
	tags, verr := normalizeWorkerSpec(spec)
	if verr != nil {
		return Transition[WorkerNode]{}, verr
	}
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return Transition[WorkerNode]{}, err
	}
	if c.workers[spec.WorkerID] != nil {
		return Transition[WorkerNode]{}, &Error{Kind: KindWorkerAlreadyExists, WorkerID: spec.WorkerID}
	}
	if len(c.workers) >= c.limits.MaxWorkers {
		return Transition[WorkerNode]{}, &Error{Kind: KindWorkerCapacityReached, Limit: uint64(c.limits.MaxWorkers)}
	}
	if err := c.canCommit(); err != nil {
		return Transition[WorkerNode]{}, err
	}
	w := &workerRec{
		id:            spec.WorkerID,
		generation:    1,
		status:        WorkerHealthy,
		lastHeartbeat: nowSecs,
	}
	w.applySpec(spec, tags)
	c.workers[w.id] = w
	c.addRanked(w)
	c.alive.insert(w)
	return Transition[WorkerNode]{Revision: c.commit(nowSecs), Value: w.view()}, nil
}

// liveWorker finds the worker a generation-fenced command names: check 4's
// ErrWorkerNotFound, ErrWorkerGenerationConflict, then ErrWorkerUnavailable
// for an offline worker.
func (c *coordinator) liveWorker(id string, generation uint64) (*workerRec, *Error) {
	w := c.workers[id]
	switch {
	case w == nil:
		return nil, &Error{Kind: KindWorkerNotFound, WorkerID: id}
	case w.generation != generation:
		return nil, &Error{Kind: KindWorkerGenerationConflict, WorkerID: id, Expected: generation, Actual: w.generation}
	case w.status == WorkerOffline:
		return nil, &Error{Kind: KindWorkerUnavailable, WorkerID: id}
	}
	return w, nil
}

// UpdateWorker records a heartbeat: status, utilization and LastHeartbeat =
// now. Errors: ErrInvalidWorker (identifier, status, offline status,
// utilization), ErrRevisionConflict, ErrLogicalTimeRegression,
// ErrWorkerNotFound, ErrWorkerGenerationConflict, ErrWorkerUnavailable,
// ErrCounterExhausted.
func (p *WorkerPool) UpdateWorker(expectedRevision, nowSecs uint64, workerID string, generation uint64, obs WorkerObservation) (Transition[WorkerNode], error) {
	var zero Transition[WorkerNode]
	switch {
	case !ValidIdentifier(workerID):
		return zero, invalidWorkerID()
	case !obs.Status.Valid():
		return zero, &Error{Kind: KindInvalidWorker, Reason: "worker status is invalid"}
	case obs.Status == WorkerOffline:
		return zero, &Error{Kind: KindInvalidWorker, Reason: "offline transition requires deregister or prune"}
	}
	if err := validateUtilization(obs.CPUBasisPoints, obs.MemoryBasisPoints, obs.NetworkBasisPoints); err != nil {
		return zero, err
	}
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return zero, err
	}
	w, err := c.liveWorker(workerID, generation)
	if err != nil {
		return zero, err
	}
	if err := c.canCommit(); err != nil {
		return zero, err
	}
	c.touchWorker(w, func() {
		w.status = obs.Status
		w.cpu, w.mem, w.net = obs.CPUBasisPoints, obs.MemoryBasisPoints, obs.NetworkBasisPoints
		w.lastHeartbeat = nowSecs
	})
	return Transition[WorkerNode]{Revision: c.commit(nowSecs), Value: w.view()}, nil
}

// addLease records that w holds t's lease.
func (w *workerRec) addLease(t *taskRec) {
	t.leaseSlot = uint16(len(w.leases)) // < MaxWorkerCapacity (I4)
	w.leases = append(w.leases, t)
}

// dropLease forgets t's lease: the last task takes t's slot.
func (w *workerRec) dropLease(t *taskRec) {
	last := len(w.leases) - 1
	moved := w.leases[last]
	w.leases[t.leaseSlot] = moved
	moved.leaseSlot = t.leaseSlot
	w.leases[last] = nil
	w.leases = w.leases[:last]
}

// workerLeases returns the tasks w holds, in lease-ID order.
func workerLeases(ws ...*workerRec) []*taskRec {
	var ts []*taskRec
	for _, w := range ws {
		ts = append(ts, w.leases...)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].lease.leaseID < ts[j].lease.leaseID })
	return ts
}

// goOffline marks workers offline (generation+1) after their leases were
// recovered.
func (c *coordinator) goOffline(ws []*workerRec) {
	for _, w := range ws {
		c.touchWorker(w, func() {
			w.status = WorkerOffline
			w.generation++
		})
	}
}

// DeregisterWorker takes the exact worker generation offline (generation+1)
// and recovers every lease it holds, in lease-ID order, by the retry rule.
// Errors: ErrInvalidWorker, ErrRevisionConflict, ErrLogicalTimeRegression,
// ErrWorkerNotFound, ErrWorkerGenerationConflict, ErrWorkerUnavailable
// (already offline), ErrQueuedTaskCapacityReached, ErrCounterExhausted.
func (p *WorkerPool) DeregisterWorker(expectedRevision, nowSecs uint64, workerID string, generation uint64) (Transition[RecoverySummary], error) {
	var zero Transition[RecoverySummary]
	if !ValidIdentifier(workerID) {
		return zero, invalidWorkerID()
	}
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return zero, err
	}
	w, err := c.liveWorker(workerID, generation)
	if err != nil {
		return zero, err
	}
	return c.loseWorkers(nowSecs, []*workerRec{w})
}

// loseWorkers is the shared body of DeregisterWorker and PruneDeadWorkers
// after their own checks.
func (c *coordinator) loseWorkers(now uint64, ws []*workerRec) (Transition[RecoverySummary], error) {
	ts := workerLeases(ws...)
	if err := c.planRetries(ts); err != nil {
		return Transition[RecoverySummary]{}, err
	}
	for _, w := range ws {
		if !canBump(w.generation) {
			return Transition[RecoverySummary]{}, exhausted("worker_generation")
		}
	}
	sum := RecoverySummary{WorkersAffected: len(ws)}
	c.endAttempts(ts, now, AttemptWorkerLost)
	c.recoverTasks(ts, &sum, now)
	c.goOffline(ws)
	return Transition[RecoverySummary]{Revision: c.commit(now), Value: sum}, nil
}

// PruneDeadWorkers takes offline every worker whose heartbeat is stale at now
// (now − LastHeartbeat ≥ HeartbeatTimeoutSecs) and recovers all their leases
// in lease-ID order. Finding nothing is still a successful command. Errors:
// ErrRevisionConflict, ErrLogicalTimeRegression,
// ErrQueuedTaskCapacityReached, ErrCounterExhausted.
func (p *WorkerPool) PruneDeadWorkers(expectedRevision, nowSecs uint64) (Transition[RecoverySummary], error) {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return Transition[RecoverySummary]{}, err
	}
	var dead []*workerRec
	if t := c.limits.HeartbeatTimeoutSecs; nowSecs >= t {
		dead = c.alive.dead(nowSecs - t)
	}
	slices.SortFunc(dead, func(a, b *workerRec) int { return cmp.Compare(a.rank, b.rank) }) // ID order (I9)
	return c.loseWorkers(nowSecs, dead)
}

// ReactivateWorker brings back an offline worker whose current generation is
// offlineGeneration, healthy with the new spec and LastHeartbeat = now;
// generation+1. Errors: ErrInvalidWorker, ErrRevisionConflict,
// ErrLogicalTimeRegression, ErrWorkerNotFound, ErrWorkerGenerationConflict,
// ErrWorkerAlreadyExists (the worker is not offline), ErrCounterExhausted.
func (p *WorkerPool) ReactivateWorker(expectedRevision, nowSecs, offlineGeneration uint64, spec WorkerSpec) (Transition[WorkerNode], error) {
	var zero Transition[WorkerNode]
	tags, verr := normalizeWorkerSpec(spec)
	if verr != nil {
		return zero, verr
	}
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return zero, err
	}
	w := c.workers[spec.WorkerID]
	switch {
	case w == nil:
		return zero, &Error{Kind: KindWorkerNotFound, WorkerID: spec.WorkerID}
	case w.generation != offlineGeneration:
		return zero, &Error{Kind: KindWorkerGenerationConflict, WorkerID: spec.WorkerID, Expected: offlineGeneration, Actual: w.generation}
	case w.status != WorkerOffline:
		return zero, &Error{Kind: KindWorkerAlreadyExists, WorkerID: spec.WorkerID}
	}
	if err := c.canCommit(); err != nil {
		return zero, err
	}
	if !canBump(w.generation) {
		return zero, exhausted("worker_generation")
	}
	c.touchWorker(w, func() {
		w.applySpec(spec, tags)
		w.status = WorkerHealthy
		w.lastHeartbeat = nowSecs
		w.generation++
	})
	return Transition[WorkerNode]{Revision: c.commit(nowSecs), Value: w.view()}, nil
}
