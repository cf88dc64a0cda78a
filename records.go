package distributed

// TaskLease proves that a worker generation owns one attempt of one task
// generation until ExpiresAt. Its fields are unexported so that callers cannot
// fabricate one with a struct literal; a lease comes from an assignment or a
// renewal, or from UnmarshalBinary of bytes a lease produced. The zero value
// is never valid.
type TaskLease struct {
	taskID           string
	workerID         string
	workerGeneration uint64
	taskGeneration   uint64
	attempt          uint32
	leaseID          uint64
	acquiredAt       uint64
	expiresAt        uint64
}

// TaskID returns the leased task's ID.
func (l TaskLease) TaskID() string { return l.taskID }

// WorkerID returns the owning worker's ID.
func (l TaskLease) WorkerID() string { return l.workerID }

// WorkerGeneration returns the owning worker's generation at assignment.
func (l TaskLease) WorkerGeneration() uint64 { return l.workerGeneration }

// TaskGeneration returns the task generation the lease belongs to.
func (l TaskLease) TaskGeneration() uint64 { return l.taskGeneration }

// Attempt returns the attempt number, starting at 1.
func (l TaskLease) Attempt() uint32 { return l.attempt }

// LeaseID returns the lease's globally unique, increasing ID. Workers can use
// it as a fencing token for downstream writes.
func (l TaskLease) LeaseID() uint64 { return l.leaseID }

// AcquiredAt returns the logical second of the assignment.
func (l TaskLease) AcquiredAt() uint64 { return l.acquiredAt }

// ExpiresAt returns the logical second from which the lease is expired.
func (l TaskLease) ExpiresAt() uint64 { return l.expiresAt }

// IsZero reports whether l is the zero lease.
func (l TaskLease) IsZero() bool { return l == TaskLease{} }

// QueuedTaskFence proves knowledge of a queued task's exact record version;
// it is the ownership proof for cancelling a queued task.
type QueuedTaskFence struct {
	taskID         string
	taskGeneration uint64
	recordVersion  uint64
}

// TaskID returns the fenced task's ID.
func (f QueuedTaskFence) TaskID() string { return f.taskID }

// TaskGeneration returns the fenced task generation.
func (f QueuedTaskFence) TaskGeneration() uint64 { return f.taskGeneration }

// RecordVersion returns the fenced record version.
func (f QueuedTaskFence) RecordVersion() uint64 { return f.recordVersion }

// IsZero reports whether f is the zero fence.
func (f QueuedTaskFence) IsZero() bool { return f == QueuedTaskFence{} }

// TaskOwnership holds exactly one of a queued fence or a lease.
type TaskOwnership struct {
	fence   QueuedTaskFence
	lease   TaskLease
	isLease bool
}

// OwnershipFromFence wraps a queued fence.
func OwnershipFromFence(f QueuedTaskFence) TaskOwnership { return TaskOwnership{fence: f} }

// OwnershipFromLease wraps a lease.
func OwnershipFromLease(l TaskLease) TaskOwnership { return TaskOwnership{lease: l, isLease: true} }

// Fence returns the queued fence, if this ownership is one.
func (o TaskOwnership) Fence() (QueuedTaskFence, bool) { return o.fence, !o.isLease }

// Lease returns the lease, if this ownership is one.
func (o TaskOwnership) Lease() (TaskLease, bool) { return o.lease, o.isLease }

// taskGeneration returns the task generation the proof names.
func (o TaskOwnership) taskGeneration() uint64 {
	if o.isLease {
		return o.lease.taskGeneration
	}
	return o.fence.taskGeneration
}

// TaskID returns the task the proof is for.
func (o TaskOwnership) TaskID() string {
	if o.isLease {
		return o.lease.taskID
	}
	return o.fence.taskID
}

// CompletionReceipt is retained by a completed task and required to store its
// result.
type CompletionReceipt struct {
	taskID           string
	taskGeneration   uint64
	attempt          uint32
	leaseID          uint64
	workerID         string
	workerGeneration uint64
	recordVersion    uint64
}

// TaskID returns the completed task's ID.
func (r CompletionReceipt) TaskID() string { return r.taskID }

// TaskGeneration returns the completed task generation.
func (r CompletionReceipt) TaskGeneration() uint64 { return r.taskGeneration }

// Attempt returns the completing attempt.
func (r CompletionReceipt) Attempt() uint32 { return r.attempt }

// LeaseID returns the completing lease's ID.
func (r CompletionReceipt) LeaseID() uint64 { return r.leaseID }

// WorkerID returns the completing worker.
func (r CompletionReceipt) WorkerID() string { return r.workerID }

// WorkerGeneration returns the completing worker generation.
func (r CompletionReceipt) WorkerGeneration() uint64 { return r.workerGeneration }

// RecordVersion returns the task record version after completion.
func (r CompletionReceipt) RecordVersion() uint64 { return r.recordVersion }

// IsZero reports whether r is the zero receipt.
func (r CompletionReceipt) IsZero() bool { return r == CompletionReceipt{} }

// ScanTask is a copy of one task record. It never aliases coordinator state.
type ScanTask struct {
	taskID         string
	scanID         string
	targetRef      string
	phases         string // shared with the record (immutable)
	status         TaskStatus
	priority       TaskPriority
	createdAt      uint64
	startedAt      uint64
	hasStarted     bool
	finishedAt     uint64 // the completion time too, when completed
	retryCount     uint32
	attempt        uint32
	taskGeneration uint64
	recordVersion  uint64
	lease          TaskLease
	hasLease       bool
	scheduling     TaskScheduling
	timeout        uint64
	history        []AttemptRecord
	reruns         uint32
}

// TaskID returns the task's ID.
func (t ScanTask) TaskID() string { return t.taskID }

// ScanID returns the scan the task belongs to.
func (t ScanTask) ScanID() string { return t.scanID }

// TargetRef returns the opaque target reference (real value, not redacted).
func (t ScanTask) TargetRef() string { return t.targetRef }

// Phases returns a copy of the task's phases.
func (t ScanTask) Phases() []uint8 {
	if t.phases == "" {
		return nil
	}
	return []uint8(t.phases)
}

// Status returns the task's status.
func (t ScanTask) Status() TaskStatus { return t.status }

// Priority returns the task's priority.
func (t ScanTask) Priority() TaskPriority { return t.priority }

// CreatedAt returns the logical second of admission.
func (t ScanTask) CreatedAt() uint64 { return t.createdAt }

// StartedAt returns when the current or last attempt started.
func (t ScanTask) StartedAt() (uint64, bool) { return t.startedAt, t.hasStarted }

// CompletedAt returns when the task completed.
func (t ScanTask) CompletedAt() (uint64, bool) {
	if t.status != TaskCompleted {
		return 0, false
	}
	return t.finishedAt, true // I8
}

// FinishedAt returns when the task became terminal (completed, failed,
// cancelled or expired); false while it is not terminal (beyond contract
// Part A: retention and purge select on it, docs/adr/0002-purge.md).
func (t ScanTask) FinishedAt() (uint64, bool) { return t.finishedAt, t.status.Terminal() }

// RetryCount returns how many times the task was requeued after a failure.
func (t ScanTask) RetryCount() uint32 { return t.retryCount }

// Attempt returns the number of leases granted for the task so far.
func (t ScanTask) Attempt() uint32 { return t.attempt }

// TaskGeneration returns the task generation; each retry starts a new one.
func (t ScanTask) TaskGeneration() uint64 { return t.taskGeneration }

// RecordVersion returns the record version; every change increments it.
func (t ScanTask) RecordVersion() uint64 { return t.recordVersion }

// AssignedTo returns the owning worker while the task is leased or running.
func (t ScanTask) AssignedTo() (string, bool) {
	if t.hasLease {
		return t.lease.workerID, true
	}
	return "", false
}

// Lease returns the current lease while the task is leased or running.
func (t ScanTask) Lease() (TaskLease, bool) { return t.lease, t.hasLease }

// AgeSecs returns now − CreatedAt, or 0 if now is earlier.
func (t ScanTask) AgeSecs(now uint64) uint64 {
	if now < t.createdAt {
		return 0
	}
	return now - t.createdAt
}

// Ownership returns the proof that currently owns the task: the queued fence
// of a queued task, the lease of a leased or running task, none for a
// terminal task.
func (t ScanTask) Ownership() (TaskOwnership, bool) {
	switch {
	case t.status == TaskQueued:
		return OwnershipFromFence(QueuedTaskFence{taskID: t.taskID, taskGeneration: t.taskGeneration, recordVersion: t.recordVersion}), true
	case t.hasLease:
		return OwnershipFromLease(t.lease), true
	}
	return TaskOwnership{}, false
}

// WorkerNode is a copy of one worker record (the contract's name; not to be
// confused with node.Node, a raft member running the coordinator).
type WorkerNode struct {
	workerID           string
	generation         uint64
	status             WorkerStatus
	capacity           uint32
	currentTasks       uint32
	completedTasks     uint64
	lastHeartbeat      uint64
	cpuBasisPoints     uint16
	memoryBasisPoints  uint16
	networkBasisPoints uint16
	tags               []WorkerTag
}

// WorkerID returns the worker's ID.
func (w WorkerNode) WorkerID() string { return w.workerID }

// Generation returns the worker generation; deregistration and reactivation
// increment it.
func (w WorkerNode) Generation() uint64 { return w.generation }

// Status returns the last reported status.
func (w WorkerNode) Status() WorkerStatus { return w.status }

// Capacity returns the configured concurrent task capacity.
func (w WorkerNode) Capacity() uint32 { return w.capacity }

// CurrentTasks returns how many leases the worker holds.
func (w WorkerNode) CurrentTasks() uint32 { return w.currentTasks }

// CompletedTasks returns how many tasks the worker completed.
func (w WorkerNode) CompletedTasks() uint64 { return w.completedTasks }

// LastHeartbeat returns the logical second of the last registration or heartbeat.
func (w WorkerNode) LastHeartbeat() uint64 { return w.lastHeartbeat }

// CPUBasisPoints returns the last reported CPU utilization (0–10000).
func (w WorkerNode) CPUBasisPoints() uint16 { return w.cpuBasisPoints }

// MemoryBasisPoints returns the last reported memory utilization (0–10000).
func (w WorkerNode) MemoryBasisPoints() uint16 { return w.memoryBasisPoints }

// NetworkBasisPoints returns the last reported network utilization (0–10000).
func (w WorkerNode) NetworkBasisPoints() uint16 { return w.networkBasisPoints }

// Tags returns a copy of the worker's tags, sorted.
func (w WorkerNode) Tags() []WorkerTag { return append([]WorkerTag(nil), w.tags...) }

// EffectiveCapacity returns ceil(Capacity × (10000 − max utilization) / 10000).
func (w WorkerNode) EffectiveCapacity() uint32 {
	return effectiveCapacity(w.capacity, w.cpuBasisPoints, w.memoryBasisPoints, w.networkBasisPoints)
}

// AvailableSlots returns EffectiveCapacity − CurrentTasks, never negative.
func (w WorkerNode) AvailableSlots() uint32 {
	e := w.EffectiveCapacity()
	if e <= w.currentTasks {
		return 0
	}
	return e - w.currentTasks
}

func effectiveCapacity(capacity uint32, cpu, mem, net uint16) uint32 {
	u := max(cpu, mem, net)
	if u >= UtilizationBasisPoints {
		return 0
	}
	free := uint64(UtilizationBasisPoints - u)
	return uint32((uint64(capacity)*free + UtilizationBasisPoints - 1) / UtilizationBasisPoints)
}

// StartOutcomeKind says whether StartTask started the task or replayed.
type StartOutcomeKind uint8

// Start outcomes.
const (
	StartStarted StartOutcomeKind = iota + 1
	StartAlreadyStarted
)

// StartOutcome is StartTask's value.
type StartOutcome struct {
	Kind      StartOutcomeKind
	StartedAt uint64
}

// CompletionOutcomeKind says whether CompleteTask completed or replayed.
type CompletionOutcomeKind uint8

// Completion outcomes.
const (
	Completed CompletionOutcomeKind = iota + 1
	AlreadyCompleted
)

// CompletionOutcome is CompleteTask's value: the retained receipt.
type CompletionOutcome struct {
	Kind    CompletionOutcomeKind
	Receipt CompletionReceipt
}

// FailureOutcomeKind says whether a failure requeued the task or exhausted
// its retries.
type FailureOutcomeKind uint8

// Failure outcomes.
const (
	Requeued FailureOutcomeKind = iota + 1
	RetryExhausted
)

// FailureOutcome is FailTask's value. For Requeued, TaskGeneration and
// RetryCount are the new ones; for RetryExhausted, RetryCount is final and
// TaskGeneration is the failed generation.
type FailureOutcome struct {
	Kind           FailureOutcomeKind
	TaskGeneration uint64
	RetryCount     uint32
}

// CancellationOutcomeKind says whether CancelTask cancelled or replayed.
type CancellationOutcomeKind uint8

// Cancellation outcomes.
const (
	Cancelled CancellationOutcomeKind = iota + 1
	AlreadyCancelled
)

// CancellationOutcome is CancelTask's value.
type CancellationOutcome struct {
	Kind CancellationOutcomeKind
}

// StoreResultOutcomeKind says whether StoreResult stored or replayed.
type StoreResultOutcomeKind uint8

// Store outcomes.
const (
	Stored StoreResultOutcomeKind = iota + 1
	AlreadyStored
)

// StoreResultOutcome is StoreResult's value.
type StoreResultOutcome struct {
	Kind StoreResultOutcomeKind
}

// AggregatedResult is one entry of AggregateResults. Result is a copy and is
// redacted in every formatted form.
type AggregatedResult struct {
	TaskID string
	Result []byte
}
