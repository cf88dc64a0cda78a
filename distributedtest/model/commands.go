package model

import (
	"sort"

	distributed "github.com/termivar/distributed"
)

// ---------------------------------------------------------------- tasks

// Enqueue admits a new queued task.
func (m *Model) Enqueue(rev, now uint64, spec distributed.TaskSpec) (Task, uint64, error) {
	if err := checkTaskSpec(spec); err != nil {
		return Task{}, 0, err
	}
	if err := m.begin(rev, now); err != nil {
		return Task{}, 0, err
	}
	if m.taskIndex(spec.TaskID) >= 0 {
		return Task{}, 0, &distributed.Error{Kind: distributed.KindTaskAlreadyExists, TaskID: spec.TaskID}
	}
	l := m.limits
	switch {
	case len(m.tasks) >= l.MaxTaskRecords:
		return Task{}, 0, &distributed.Error{Kind: distributed.KindTaskRecordCapacityReached, Limit: uint64(l.MaxTaskRecords)}
	case m.nonTerminal() >= l.MaxActiveTasks:
		return Task{}, 0, &distributed.Error{Kind: distributed.KindActiveTaskCapacityReached, Limit: uint64(l.MaxActiveTasks)}
	case m.count(distributed.TaskQueued) >= l.MaxQueuedTasks:
		return Task{}, 0, &distributed.Error{Kind: distributed.KindQueuedTaskCapacityReached, Limit: uint64(l.MaxQueuedTasks)}
	case len(m.tasks)+1 > l.MaxTerminalTasks:
		return Task{}, 0, &distributed.Error{Kind: distributed.KindTerminalCapacityReserved, Limit: uint64(l.MaxTerminalTasks)}
	}
	if err := m.revisionExhausted(); err != nil {
		return Task{}, 0, err
	}
	t := m.insert(spec, now)
	r := m.commit(now)
	t.Phases = append([]uint8(nil), t.Phases...)
	return t, r, nil
}

// insert adds a queued task for an admitted spec with the next ordinal.
func (m *Model) insert(spec distributed.TaskSpec, now uint64) Task {
	m.lastOrdinal++
	t := Task{
		TaskID:         spec.TaskID,
		ScanID:         spec.ScanID,
		TargetRef:      spec.TargetRef,
		Phases:         append([]uint8(nil), spec.Phases...),
		Status:         distributed.TaskQueued,
		Priority:       spec.Priority,
		CreatedAt:      now,
		RecordVersion:  1,
		Ordinal:        m.lastOrdinal,
		TaskGeneration: m.genFloor,
		LifeBase:       m.genFloor,
		TimeoutSecs:    spec.AttemptTimeoutSecs,
		Scheduling:     spec.Scheduling,
	}
	t.Scheduling.RequiredTags = normalTags(spec.Scheduling.RequiredTags)
	// Keep the slice in task-ID order so that Tasks needs no sort.
	at := 0
	for at < len(m.tasks) && m.tasks[at].TaskID < t.TaskID {
		at++
	}
	m.tasks = append(m.tasks, Task{})
	copy(m.tasks[at+1:], m.tasks[at:])
	m.tasks[at] = t
	return t
}

// EnqueueBatch admits every spec or none, as one command.
func (m *Model) EnqueueBatch(rev, now uint64, specs []distributed.TaskSpec) ([]Task, uint64, error) {
	if len(specs) == 0 {
		return nil, 0, &distributed.Error{Kind: distributed.KindInvalidTask, Reason: "batch is empty"}
	}
	for _, s := range specs {
		if err := checkTaskSpec(s); err != nil {
			return nil, 0, err
		}
	}
	if err := m.begin(rev, now); err != nil {
		return nil, 0, err
	}
	for i, s := range specs {
		dup := m.taskIndex(s.TaskID) >= 0
		for _, earlier := range specs[:i] {
			dup = dup || earlier.TaskID == s.TaskID
		}
		if dup {
			return nil, 0, &distributed.Error{Kind: distributed.KindTaskAlreadyExists, TaskID: s.TaskID}
		}
	}
	l, n := m.limits, len(specs)
	switch {
	case len(m.tasks)+n > l.MaxTaskRecords:
		return nil, 0, &distributed.Error{Kind: distributed.KindTaskRecordCapacityReached, Limit: uint64(l.MaxTaskRecords)}
	case m.nonTerminal()+n > l.MaxActiveTasks:
		return nil, 0, &distributed.Error{Kind: distributed.KindActiveTaskCapacityReached, Limit: uint64(l.MaxActiveTasks)}
	case m.count(distributed.TaskQueued)+n > l.MaxQueuedTasks:
		return nil, 0, &distributed.Error{Kind: distributed.KindQueuedTaskCapacityReached, Limit: uint64(l.MaxQueuedTasks)}
	case len(m.tasks)+n > l.MaxTerminalTasks:
		return nil, 0, &distributed.Error{Kind: distributed.KindTerminalCapacityReserved, Limit: uint64(l.MaxTerminalTasks)}
	}
	if err := m.revisionExhausted(); err != nil {
		return nil, 0, err
	}
	out := make([]Task, n)
	for i, s := range specs {
		out[i] = m.insert(s, now)
		out[i].Phases = append([]uint8(nil), out[i].Phases...)
	}
	return out, m.commit(now), nil
}

// ---------------------------------------------------------------- workers

// RegisterWorker adds a new healthy worker at generation 1.
func (m *Model) RegisterWorker(rev, now uint64, spec distributed.WorkerSpec) (Worker, uint64, error) {
	tags, err := checkWorkerSpec(spec)
	if err != nil {
		return Worker{}, 0, err
	}
	if err := m.begin(rev, now); err != nil {
		return Worker{}, 0, err
	}
	if m.workerIndex(spec.WorkerID) >= 0 {
		return Worker{}, 0, &distributed.Error{Kind: distributed.KindWorkerAlreadyExists, WorkerID: spec.WorkerID}
	}
	if len(m.workers) >= m.limits.MaxWorkers {
		return Worker{}, 0, &distributed.Error{Kind: distributed.KindWorkerCapacityReached, Limit: uint64(m.limits.MaxWorkers)}
	}
	if err := m.revisionExhausted(); err != nil {
		return Worker{}, 0, err
	}
	w := Worker{
		WorkerID:           spec.WorkerID,
		Generation:         1,
		Status:             distributed.WorkerHealthy,
		Capacity:           spec.Capacity,
		LastHeartbeat:      now,
		CPUBasisPoints:     spec.CPUBasisPoints,
		MemoryBasisPoints:  spec.MemoryBasisPoints,
		NetworkBasisPoints: spec.NetworkBasisPoints,
		Tags:               tags,
	}
	at := 0
	for at < len(m.workers) && m.workers[at].WorkerID < w.WorkerID {
		at++
	}
	m.workers = append(m.workers, Worker{})
	copy(m.workers[at+1:], m.workers[at:])
	m.workers[at] = w
	r := m.commit(now)
	w.Tags = append([]distributed.WorkerTag(nil), tags...)
	return w, r, nil
}

// UpdateWorker records a heartbeat.
func (m *Model) UpdateWorker(rev, now uint64, workerID string, generation uint64, obs distributed.WorkerObservation) (Worker, uint64, error) {
	if !distributed.ValidIdentifier(workerID) {
		return Worker{}, 0, invalidWorker(badWorkerCommandID)
	}
	switch {
	case obs.Status > distributed.WorkerOffline:
		return Worker{}, 0, invalidWorker("worker status is invalid")
	case obs.Status == distributed.WorkerOffline:
		return Worker{}, 0, invalidWorker("offline transition requires deregister or prune")
	case utilizationTooHigh(obs.CPUBasisPoints, obs.MemoryBasisPoints, obs.NetworkBasisPoints):
		return Worker{}, 0, invalidWorker("utilization exceeds 10000 basis points")
	}
	if err := m.begin(rev, now); err != nil {
		return Worker{}, 0, err
	}
	i, err := m.workerForCommand(workerID, generation)
	if err != nil {
		return Worker{}, 0, err
	}
	if m.workers[i].Status == distributed.WorkerOffline {
		return Worker{}, 0, &distributed.Error{Kind: distributed.KindWorkerUnavailable, WorkerID: workerID}
	}
	if err := m.revisionExhausted(); err != nil {
		return Worker{}, 0, err
	}
	w := &m.workers[i]
	w.Status = obs.Status
	w.CPUBasisPoints = obs.CPUBasisPoints
	w.MemoryBasisPoints = obs.MemoryBasisPoints
	w.NetworkBasisPoints = obs.NetworkBasisPoints
	w.LastHeartbeat = now
	r := m.commit(now)
	out := *w
	out.Tags = append([]distributed.WorkerTag(nil), w.Tags...)
	return out, r, nil
}

// workerForCommand finds a worker and checks the caller's generation.
func (m *Model) workerForCommand(workerID string, generation uint64) (int, error) {
	i := m.workerIndex(workerID)
	if i < 0 {
		return -1, &distributed.Error{Kind: distributed.KindWorkerNotFound, WorkerID: workerID}
	}
	if m.workers[i].Generation != generation {
		return -1, &distributed.Error{Kind: distributed.KindWorkerGenerationConflict, WorkerID: workerID, Expected: generation, Actual: m.workers[i].Generation}
	}
	return i, nil
}

// DeregisterWorker takes a worker offline and recovers its leases.
func (m *Model) DeregisterWorker(rev, now uint64, workerID string, generation uint64) (distributed.RecoverySummary, uint64, error) {
	if !distributed.ValidIdentifier(workerID) {
		return distributed.RecoverySummary{}, 0, invalidWorker(badWorkerCommandID)
	}
	if err := m.begin(rev, now); err != nil {
		return distributed.RecoverySummary{}, 0, err
	}
	i, err := m.workerForCommand(workerID, generation)
	if err != nil {
		return distributed.RecoverySummary{}, 0, err
	}
	if m.workers[i].Status == distributed.WorkerOffline {
		return distributed.RecoverySummary{}, 0, &distributed.Error{Kind: distributed.KindWorkerUnavailable, WorkerID: workerID}
	}
	return m.takeOffline(now, []int{i})
}

// PruneDeadWorkers takes every dead, not yet offline worker offline and
// recovers all their leases together.
func (m *Model) PruneDeadWorkers(rev, now uint64) (distributed.RecoverySummary, uint64, error) {
	if err := m.begin(rev, now); err != nil {
		return distributed.RecoverySummary{}, 0, err
	}
	var dead []int
	for i, w := range m.workers {
		if w.Status != distributed.WorkerOffline && m.dead(w, now) {
			dead = append(dead, i)
		}
	}
	sort.Slice(dead, func(a, b int) bool { return m.workers[dead[a]].WorkerID < m.workers[dead[b]].WorkerID })
	return m.takeOffline(now, dead)
}

// takeOffline is the shared tail of deregister and prune.
func (m *Model) takeOffline(now uint64, workers []int) (distributed.RecoverySummary, uint64, error) {
	gone := map[string]bool{}
	for _, i := range workers {
		gone[m.workers[i].WorkerID] = true
	}
	var leased []int
	for i, t := range m.tasks {
		if t.HasLease && gone[t.Lease.WorkerID] {
			leased = append(leased, i)
		}
	}
	sum, err := m.recover(leased)
	if err != nil {
		return distributed.RecoverySummary{}, 0, err
	}
	if err := m.revisionExhausted(); err != nil {
		return distributed.RecoverySummary{}, 0, err
	}
	for _, i := range leased {
		m.endAttempt(i, now, distributed.AttemptWorkerLost, "")
	}
	m.applyRecovery(leased, now)
	for _, i := range workers {
		m.workers[i].Status = distributed.WorkerOffline
		m.workers[i].Generation++
	}
	sum.WorkersAffected = len(workers)
	return sum, m.commit(now), nil
}

// ReactivateWorker brings an offline worker back with a new spec.
func (m *Model) ReactivateWorker(rev, now uint64, offlineGeneration uint64, spec distributed.WorkerSpec) (Worker, uint64, error) {
	tags, err := checkWorkerSpec(spec)
	if err != nil {
		return Worker{}, 0, err
	}
	if err := m.begin(rev, now); err != nil {
		return Worker{}, 0, err
	}
	i, err := m.workerForCommand(spec.WorkerID, offlineGeneration)
	if err != nil {
		return Worker{}, 0, err
	}
	if m.workers[i].Status != distributed.WorkerOffline {
		return Worker{}, 0, &distributed.Error{Kind: distributed.KindWorkerAlreadyExists, WorkerID: spec.WorkerID}
	}
	if err := m.revisionExhausted(); err != nil {
		return Worker{}, 0, err
	}
	w := &m.workers[i]
	w.Status = distributed.WorkerHealthy
	w.Capacity = spec.Capacity
	w.CPUBasisPoints = spec.CPUBasisPoints
	w.MemoryBasisPoints = spec.MemoryBasisPoints
	w.NetworkBasisPoints = spec.NetworkBasisPoints
	w.Tags = tags
	w.LastHeartbeat = now
	w.Generation++
	r := m.commit(now)
	out := *w
	out.Tags = append([]distributed.WorkerTag(nil), tags...)
	return out, r, nil
}

// ---------------------------------------------------------------- assignment

// AssignNextAvailable leases the head of the queue to the best eligible worker.
func (m *Model) AssignNextAvailable(rev, now, leaseTTL uint64) (Lease, uint64, error) {
	if err := m.checkTTL(leaseTTL); err != nil {
		return Lease{}, 0, err
	}
	if err := m.begin(rev, now); err != nil {
		return Lease{}, 0, err
	}
	order := m.selectable()
	if len(order) == 0 {
		return Lease{}, 0, kerr(distributed.KindNoQueuedTask)
	}
	if m.bestWorker(now) < 0 {
		return Lease{}, 0, kerr(distributed.KindNoAvailableWorker)
	}
	for _, ti := range order {
		if wi := m.bestWorkerWith(now, m.tasks[ti].Scheduling.RequiredTags); wi >= 0 {
			return m.grant(now, ti, wi, leaseTTL)
		}
	}
	return Lease{}, 0, kerr(distributed.KindNoAvailableWorker)
}

// AssignNext leases the head of the queue to the named worker.
func (m *Model) AssignNext(rev, now uint64, workerID string, leaseTTL uint64) (Lease, uint64, error) {
	if !distributed.ValidIdentifier(workerID) {
		return Lease{}, 0, invalidWorker(badWorkerCommandID)
	}
	if err := m.checkTTL(leaseTTL); err != nil {
		return Lease{}, 0, err
	}
	if err := m.begin(rev, now); err != nil {
		return Lease{}, 0, err
	}
	if m.nextQueued() < 0 {
		return Lease{}, 0, kerr(distributed.KindNoQueuedTask)
	}
	wi, err := m.workerForAssignment(now, workerID)
	if err != nil {
		return Lease{}, 0, err
	}
	for _, ti := range m.selectable() {
		if covers(m.workers[wi].Tags, m.tasks[ti].Scheduling.RequiredTags) {
			return m.grant(now, ti, wi, leaseTTL)
		}
	}
	return Lease{}, 0, kerr(distributed.KindNoQueuedTask)
}

// AssignTask leases the named queued task to the named worker.
func (m *Model) AssignTask(rev, now uint64, taskID, workerID string, leaseTTL uint64) (Lease, uint64, error) {
	if !distributed.ValidIdentifier(taskID) {
		return Lease{}, 0, invalidTask(badTaskCommandID)
	}
	if !distributed.ValidIdentifier(workerID) {
		return Lease{}, 0, invalidWorker(badWorkerCommandID)
	}
	if err := m.checkTTL(leaseTTL); err != nil {
		return Lease{}, 0, err
	}
	if err := m.begin(rev, now); err != nil {
		return Lease{}, 0, err
	}
	ti := m.taskIndex(taskID)
	if ti < 0 {
		return Lease{}, 0, &distributed.Error{Kind: distributed.KindTaskNotFound, TaskID: taskID}
	}
	if st := m.tasks[ti].Status; st != distributed.TaskQueued {
		return Lease{}, 0, &distributed.Error{Kind: distributed.KindTaskNotQueued, TaskID: taskID, Status: st}
	}
	wi, err := m.workerForAssignment(now, workerID)
	if err != nil {
		return Lease{}, 0, err
	}
	if err := m.notLeasable(ti, wi); err != nil {
		return Lease{}, 0, err
	}
	return m.grant(now, ti, wi, leaseTTL)
}

// notLeasable is AssignTask's scheduling check (schedule.go), in the
// core's order: not yet due, a missing tag, paused, at the limit.
func (m *Model) notLeasable(ti, wi int) error {
	t := m.tasks[ti]
	reason := m.notSelectable(t)
	if reason != "task is scheduled for later" && !covers(m.workers[wi].Tags, t.Scheduling.RequiredTags) {
		reason = "worker lacks a required tag"
	}
	if reason == "" {
		return nil
	}
	return &distributed.Error{Kind: distributed.KindTaskNotLeasable, TaskID: t.TaskID, WorkerID: m.workers[wi].WorkerID, Reason: reason}
}

// bestWorkerWith is bestWorker among workers that declared every tag.
func (m *Model) bestWorkerWith(now uint64, tags []distributed.WorkerTag) int {
	best := -1
	for i, w := range m.workers {
		if !m.eligible(w, now) || !covers(w.Tags, tags) {
			continue
		}
		if best < 0 || w.AvailableSlots() > m.workers[best].AvailableSlots() ||
			(w.AvailableSlots() == m.workers[best].AvailableSlots() && w.WorkerID < m.workers[best].WorkerID) {
			best = i
		}
	}
	return best
}

func (m *Model) workerForAssignment(now uint64, workerID string) (int, error) {
	wi := m.workerIndex(workerID)
	if wi < 0 {
		return -1, &distributed.Error{Kind: distributed.KindWorkerNotFound, WorkerID: workerID}
	}
	w := m.workers[wi]
	if w.Status != distributed.WorkerHealthy || m.dead(w, now) {
		return -1, &distributed.Error{Kind: distributed.KindWorkerUnavailable, WorkerID: workerID}
	}
	if w.AvailableSlots() < 1 {
		return -1, &distributed.Error{Kind: distributed.KindWorkerAtCapacity, WorkerID: workerID}
	}
	return wi, nil
}

// grant leases task ti to worker wi.
func (m *Model) grant(now uint64, ti, wi int, ttl uint64) (Lease, uint64, error) {
	if err := m.revisionExhausted(); err != nil {
		return Lease{}, 0, err
	}
	t, w := &m.tasks[ti], &m.workers[wi]
	m.lastLeaseID++
	l := Lease{
		TaskID:           t.TaskID,
		WorkerID:         w.WorkerID,
		WorkerGeneration: w.Generation,
		TaskGeneration:   t.TaskGeneration,
		Attempt:          t.Attempt + 1,
		LeaseID:          m.lastLeaseID,
		AcquiredAt:       now,
		ExpiresAt:        now + ttl,
	}
	t.Status = distributed.TaskLeased
	t.Attempt++
	t.Lease, t.HasLease = l, true
	t.RecordVersion++
	w.CurrentTasks++
	if m.opts.FairScans {
		sc := m.scans[t.ScanID]
		sc.LastServed = l.LeaseID
		m.scans[t.ScanID] = sc
	}
	return l, m.commit(now), nil
}

// ---------------------------------------------------------------- lease commands

// currentLease runs the shared lease checks after a terminal replay did not
// match: the lease must equal the task's current lease and be unexpired.
func (m *Model) currentLease(ti int, now uint64, l Lease) error {
	t := m.tasks[ti]
	if !t.HasLease || t.Lease != l {
		return &distributed.Error{Kind: distributed.KindStaleOwnership, TaskID: t.TaskID}
	}
	if now >= l.ExpiresAt {
		return &distributed.Error{Kind: distributed.KindLeaseExpired, TaskID: t.TaskID}
	}
	return nil
}

func (m *Model) leasedTask(rev, now uint64, l Lease) (int, error) {
	if err := checkLeaseIDs(l); err != nil {
		return -1, err
	}
	if err := m.begin(rev, now); err != nil {
		return -1, err
	}
	ti := m.taskIndex(l.TaskID)
	if err := m.purgedProof(ti, l.TaskID, l.TaskGeneration); err != nil {
		return -1, err
	}
	if ti < 0 {
		return -1, &distributed.Error{Kind: distributed.KindTaskNotFound, TaskID: l.TaskID}
	}
	return ti, nil
}

// StartTask moves a leased task to running.
func (m *Model) StartTask(rev, now uint64, l Lease) (distributed.StartOutcome, uint64, error) {
	ti, err := m.leasedTask(rev, now, l)
	if err != nil {
		return distributed.StartOutcome{}, 0, err
	}
	if err := m.currentLease(ti, now, l); err != nil {
		return distributed.StartOutcome{}, 0, err
	}
	t := &m.tasks[ti]
	if t.Status == distributed.TaskRunning {
		// Replay: nothing changes.
		return distributed.StartOutcome{Kind: distributed.StartAlreadyStarted, StartedAt: t.StartedAt}, m.revision, nil
	}
	if err := m.revisionExhausted(); err != nil {
		return distributed.StartOutcome{}, 0, err
	}
	t.Status = distributed.TaskRunning
	t.StartedAt, t.HasStarted = now, true
	t.RecordVersion++
	return distributed.StartOutcome{Kind: distributed.StartStarted, StartedAt: now}, m.commit(now), nil
}

// CompleteTask completes a running task and retains its receipt.
func (m *Model) CompleteTask(rev, now uint64, l Lease) (Completion, uint64, error) {
	ti, err := m.leasedTask(rev, now, l)
	if err != nil {
		return Completion{}, 0, err
	}
	t := &m.tasks[ti]
	if t.Status == distributed.TaskCompleted && t.CompletedBy == l {
		return Completion{Kind: distributed.AlreadyCompleted, Receipt: t.Receipt}, m.revision, nil
	}
	if err := m.currentLease(ti, now, l); err != nil {
		return Completion{}, 0, err
	}
	if t.Status == distributed.TaskLeased {
		return Completion{}, 0, &distributed.Error{Kind: distributed.KindInvalidTransition, TaskID: t.TaskID, Status: t.Status, Operation: "complete"}
	}
	if err := m.revisionExhausted(); err != nil {
		return Completion{}, 0, err
	}
	m.endAttempt(ti, now, distributed.AttemptCompleted, "")
	m.release(ti)
	wi := m.workerIndex(l.WorkerID)
	m.workers[wi].CompletedTasks++
	t.Status = distributed.TaskCompleted
	t.CompletedAt, t.HasCompleted = now, true
	t.FinishedAt = now
	t.RecordVersion++
	t.CompletedBy = l
	t.Receipt = Receipt{
		TaskID:           t.TaskID,
		TaskGeneration:   t.TaskGeneration,
		Attempt:          l.Attempt,
		LeaseID:          l.LeaseID,
		WorkerID:         l.WorkerID,
		WorkerGeneration: l.WorkerGeneration,
		RecordVersion:    t.RecordVersion,
	}
	return Completion{Kind: distributed.Completed, Receipt: t.Receipt}, m.commit(now), nil
}

// FailTask fails the running attempt: requeue or terminal failure.
func (m *Model) FailTask(rev, now uint64, l Lease) (distributed.FailureOutcome, uint64, error) {
	return m.FailTaskWithReason(rev, now, l, "")
}

// FailTaskWithReason is FailTask retaining the reason in the history.
func (m *Model) FailTaskWithReason(rev, now uint64, l Lease, reason string) (distributed.FailureOutcome, uint64, error) {
	if err := checkReason(reason); err != nil {
		return distributed.FailureOutcome{}, 0, err
	}
	ti, err := m.leasedTask(rev, now, l)
	if err != nil {
		return distributed.FailureOutcome{}, 0, err
	}
	t := &m.tasks[ti]
	if t.Status == distributed.TaskFailed && t.FailedBy == l {
		return t.FailedOutcome, m.revision, nil
	}
	if err := m.currentLease(ti, now, l); err != nil {
		return distributed.FailureOutcome{}, 0, err
	}
	if t.Status == distributed.TaskLeased {
		return distributed.FailureOutcome{}, 0, &distributed.Error{Kind: distributed.KindInvalidTransition, TaskID: t.TaskID, Status: t.Status, Operation: "fail"}
	}
	if _, err := m.recover([]int{ti}); err != nil {
		return distributed.FailureOutcome{}, 0, err
	}
	if err := m.revisionExhausted(); err != nil {
		return distributed.FailureOutcome{}, 0, err
	}
	m.endAttempt(ti, now, distributed.AttemptFailed, reason)
	m.applyRecovery([]int{ti}, now)
	t = &m.tasks[ti]
	var out distributed.FailureOutcome
	if t.Status == distributed.TaskFailed {
		out = t.FailedOutcome
	} else {
		out = distributed.FailureOutcome{Kind: distributed.Requeued, TaskGeneration: t.TaskGeneration, RetryCount: t.RetryCount}
	}
	return out, m.commit(now), nil
}

// RenewLease gives a current lease a new lease ID and expiry.
func (m *Model) RenewLease(rev, now uint64, l Lease, leaseTTL uint64) (Lease, uint64, error) {
	if err := checkLeaseIDs(l); err != nil {
		return Lease{}, 0, err
	}
	if err := m.checkTTL(leaseTTL); err != nil {
		return Lease{}, 0, err
	}
	ti, err := m.leasedTask(rev, now, l)
	if err != nil {
		return Lease{}, 0, err
	}
	if err := m.currentLease(ti, now, l); err != nil {
		return Lease{}, 0, err
	}
	if err := m.beforeDeadline(ti, now); err != nil {
		return Lease{}, 0, err
	}
	if err := m.revisionExhausted(); err != nil {
		return Lease{}, 0, err
	}
	t := &m.tasks[ti]
	m.lastLeaseID++
	t.Lease.LeaseID = m.lastLeaseID
	t.Lease.ExpiresAt = now + leaseTTL
	t.RecordVersion++
	return t.Lease, m.commit(now), nil
}

// CancelTask cancels a queued task by its fence or a leased/running task by
// its lease.
func (m *Model) CancelTask(rev, now uint64, own Ownership) (distributed.CancellationOutcome, uint64, error) {
	if err := checkOwnershipIDs(own); err != nil {
		return distributed.CancellationOutcome{}, 0, err
	}
	if err := m.begin(rev, now); err != nil {
		return distributed.CancellationOutcome{}, 0, err
	}
	ti := m.taskIndex(own.TaskID())
	gen := own.Fence.TaskGeneration
	if own.IsLease {
		gen = own.Lease.TaskGeneration
	}
	if err := m.purgedProof(ti, own.TaskID(), gen); err != nil {
		return distributed.CancellationOutcome{}, 0, err
	}
	if ti < 0 {
		return distributed.CancellationOutcome{}, 0, &distributed.Error{Kind: distributed.KindTaskNotFound, TaskID: own.TaskID()}
	}
	t := &m.tasks[ti]
	if t.Status == distributed.TaskCancelled && t.CancelledBy == own {
		return distributed.CancellationOutcome{Kind: distributed.AlreadyCancelled}, m.revision, nil
	}
	if own.IsLease {
		if err := m.currentLease(ti, now, own.Lease); err != nil {
			return distributed.CancellationOutcome{}, 0, err
		}
	} else {
		f := own.Fence
		if t.Status != distributed.TaskQueued || f.TaskGeneration != t.TaskGeneration || f.RecordVersion != t.RecordVersion {
			return distributed.CancellationOutcome{}, 0, &distributed.Error{Kind: distributed.KindStaleOwnership, TaskID: t.TaskID}
		}
	}
	if err := m.revisionExhausted(); err != nil {
		return distributed.CancellationOutcome{}, 0, err
	}
	if t.HasLease {
		m.endAttempt(ti, now, distributed.AttemptCancelled, "")
		m.release(ti)
	}
	t.Status = distributed.TaskCancelled
	t.FinishedAt = now
	t.RecordVersion++
	t.CancelledBy = own
	return distributed.CancellationOutcome{Kind: distributed.Cancelled}, m.commit(now), nil
}

// CancelTaskByID cancels the named non-terminal task with whatever ownership
// it holds now (an expired lease included); a cancelled task replays.
func (m *Model) CancelTaskByID(rev, now uint64, taskID string) (distributed.CancellationOutcome, uint64, error) {
	if !distributed.ValidIdentifier(taskID) {
		return distributed.CancellationOutcome{}, 0, invalidTask(badTaskCommandID)
	}
	if err := m.begin(rev, now); err != nil {
		return distributed.CancellationOutcome{}, 0, err
	}
	ti := m.taskIndex(taskID)
	if ti < 0 {
		return distributed.CancellationOutcome{}, 0, &distributed.Error{Kind: distributed.KindTaskNotFound, TaskID: taskID}
	}
	t := &m.tasks[ti]
	if t.Status == distributed.TaskCancelled {
		return distributed.CancellationOutcome{Kind: distributed.AlreadyCancelled}, m.revision, nil
	}
	switch t.Status {
	case distributed.TaskCompleted, distributed.TaskFailed, distributed.TaskExpired:
		return distributed.CancellationOutcome{}, 0, &distributed.Error{Kind: distributed.KindInvalidTransition, TaskID: taskID, Status: t.Status, Operation: "cancel"}
	}
	if err := m.revisionExhausted(); err != nil {
		return distributed.CancellationOutcome{}, 0, err
	}
	own := Ownership{Fence: Fence{TaskID: t.TaskID, TaskGeneration: t.TaskGeneration, RecordVersion: t.RecordVersion}}
	if t.HasLease {
		own = Ownership{IsLease: true, Lease: t.Lease}
		m.endAttempt(ti, now, distributed.AttemptCancelled, "")
		m.release(ti)
	}
	t.Status = distributed.TaskCancelled
	t.FinishedAt = now
	t.RecordVersion++
	t.CancelledBy = own
	return distributed.CancellationOutcome{Kind: distributed.Cancelled}, m.commit(now), nil
}

// ---------------------------------------------------------------- recovery

// RecoverExpiredLeases retries or fails every leased or running task whose
// lease has expired at now, in lease-ID order.
func (m *Model) RecoverExpiredLeases(rev, now uint64) (distributed.RecoverySummary, uint64, error) {
	if err := m.begin(rev, now); err != nil {
		return distributed.RecoverySummary{}, 0, err
	}
	var expired []int
	workers := map[string]bool{}
	for i, t := range m.tasks {
		if t.HasLease && t.Lease.ExpiresAt <= now {
			expired = append(expired, i)
			workers[t.Lease.WorkerID] = true
		}
	}
	sum, err := m.recover(expired)
	if err != nil {
		return distributed.RecoverySummary{}, 0, err
	}
	if err := m.revisionExhausted(); err != nil {
		return distributed.RecoverySummary{}, 0, err
	}
	for _, i := range expired {
		m.endAttempt(i, now, m.expiryOutcome(i), "")
	}
	m.applyRecovery(expired, now)
	sum.WorkersAffected = len(workers)
	return sum, m.commit(now), nil
}

// ExpireOldTasks expires every non-terminal task at least maxAgeSecs old.
func (m *Model) ExpireOldTasks(rev, now, maxAgeSecs uint64) (int, uint64, error) {
	if maxAgeSecs == 0 {
		return 0, 0, &distributed.Error{Kind: distributed.KindInvalidLimit, Name: "max_age_secs"}
	}
	if maxAgeSecs > m.limits.MaxTaskTTLSecs {
		return 0, 0, &distributed.Error{Kind: distributed.KindTimeLimitExceedsMaximum, Name: "max_age_secs", Actual: maxAgeSecs, Maximum: m.limits.MaxTaskTTLSecs}
	}
	if err := m.begin(rev, now); err != nil {
		return 0, 0, err
	}
	if err := m.revisionExhausted(); err != nil {
		return 0, 0, err
	}
	n := 0
	for i := range m.tasks {
		t := &m.tasks[i]
		if t.Status.Terminal() || now-t.CreatedAt < maxAgeSecs {
			continue
		}
		if t.HasLease {
			m.endAttempt(i, now, distributed.AttemptTaskExpired, "")
			m.release(i)
		}
		t.Status = distributed.TaskExpired
		t.FinishedAt = now
		t.RecordVersion++
		n++
	}
	return n, m.commit(now), nil
}

// recover checks that the retry rule can be applied to the leased tasks
// (the queue bound) and returns the summary without changing anything.
func (m *Model) recover(tasks []int) (distributed.RecoverySummary, error) {
	var s distributed.RecoverySummary
	for _, i := range tasks {
		if m.tasks[i].RetryCount < m.limits.MaxRetries {
			s.TasksRequeued++
		} else {
			s.TasksFailed++
		}
	}
	if m.count(distributed.TaskQueued)+s.TasksRequeued > m.limits.MaxQueuedTasks {
		return distributed.RecoverySummary{}, &distributed.Error{Kind: distributed.KindQueuedTaskCapacityReached, Limit: uint64(m.limits.MaxQueuedTasks)}
	}
	return s, nil
}

// applyRecovery applies the retry rule to each leased task in lease-ID order.
func (m *Model) applyRecovery(tasks []int, now uint64) {
	order := append([]int(nil), tasks...)
	sort.Slice(order, func(a, b int) bool { return m.tasks[order[a]].Lease.LeaseID < m.tasks[order[b]].Lease.LeaseID })
	for _, i := range order {
		t := &m.tasks[i]
		l := t.Lease
		m.release(i)
		t.RecordVersion++
		if t.RetryCount < m.limits.MaxRetries {
			t.TaskGeneration++
			t.RetryCount++
			t.Status = distributed.TaskQueued
			t.StartedAt, t.HasStarted = 0, false
			m.lastOrdinal++
			t.Ordinal = m.lastOrdinal
			t.Scheduling.NotBeforeSecs = m.retryNotBefore(*t, now)
			continue
		}
		t.Status = distributed.TaskFailed
		t.FinishedAt = now
		t.FailedBy = l
		t.FailedOutcome = distributed.FailureOutcome{Kind: distributed.RetryExhausted, TaskGeneration: t.TaskGeneration, RetryCount: t.RetryCount}
	}
}

// release ends task ti's lease: the worker gives back the slot.
func (m *Model) release(ti int) {
	t := &m.tasks[ti]
	wi := m.workerIndex(t.Lease.WorkerID)
	if wi >= 0 && m.workers[wi].CurrentTasks > 0 {
		m.workers[wi].CurrentTasks--
	}
	t.Lease, t.HasLease = Lease{}, false
}
