// Package model is a deliberately simple reference implementation of the
// WorkerPool/TaskQueue state machine of contract Part A and ADR 0001, written to be
// obviously correct rather than fast: plain slices, linear scans, no indexes,
// no shared code with the core's logic. The simulator in distributedtest/sim
// and the property tests drive the core and this model with the same commands
// and require equal outcomes.
//
// The model imports the root package only for its shared vocabulary (limits,
// specs, statuses, error kinds, outcome kinds). Its own records have exported
// fields so that tests can build, compare and alter them freely.
package model

import distributed "github.com/termivar/distributed"

// Lease mirrors distributed.TaskLease with exported fields.
type Lease struct {
	TaskID           string
	WorkerID         string
	WorkerGeneration uint64
	TaskGeneration   uint64
	Attempt          uint32
	LeaseID          uint64
	AcquiredAt       uint64
	ExpiresAt        uint64
}

// Fence mirrors distributed.QueuedTaskFence.
type Fence struct {
	TaskID         string
	TaskGeneration uint64
	RecordVersion  uint64
}

// Ownership is exactly one of a fence or a lease (IsLease says which).
type Ownership struct {
	IsLease bool
	Fence   Fence
	Lease   Lease
}

// TaskID returns the task the proof is for.
func (o Ownership) TaskID() string {
	if o.IsLease {
		return o.Lease.TaskID
	}
	return o.Fence.TaskID
}

// Receipt mirrors distributed.CompletionReceipt.
type Receipt struct {
	TaskID           string
	TaskGeneration   uint64
	Attempt          uint32
	LeaseID          uint64
	WorkerID         string
	WorkerGeneration uint64
	RecordVersion    uint64
}

// Task mirrors distributed.ScanTask plus the model's bookkeeping (Ordinal and
// the retained terminal proofs).
type Task struct {
	TaskID         string
	ScanID         string
	TargetRef      string
	Phases         []uint8
	Status         distributed.TaskStatus
	Priority       distributed.TaskPriority
	CreatedAt      uint64
	StartedAt      uint64
	HasStarted     bool
	CompletedAt    uint64
	HasCompleted   bool
	FinishedAt     uint64 // when the task became terminal (0 while it is not)
	RetryCount     uint32
	Attempt        uint32
	TaskGeneration uint64
	RecordVersion  uint64
	Lease          Lease
	HasLease       bool
	// Scheduling holds the task's scheduling fields (contract Part F),
	// required tags sorted and distinct (nil for none).
	Scheduling distributed.TaskScheduling

	// Ordinal is the enqueue ordinal of the current queue entry.
	Ordinal uint64
	// LifeBase is the generation this life of the task ID started at (the
	// generation floor at its admission); older generations are purged lives.
	LifeBase uint64

	// Retained terminal proofs (exact terminal replays).
	CompletedBy   Lease                      // the lease that completed the task
	Receipt       Receipt                    // the retained completion receipt
	FailedBy      Lease                      // the lease whose failure exhausted retries
	FailedOutcome distributed.FailureOutcome // the retained RetryExhausted outcome
	CancelledBy   Ownership                  // the proof that cancelled the task

	// Beyond contract Part A (attempts.go, rerun.go of the core).
	TimeoutSecs uint64    // the per-attempt timeout (0: none)
	History     []Attempt // the last ended attempts, oldest first; never shared after a change
	Reruns      uint32    // how many times RerunTasks re-ran the task
	// RerunBase is the generation the last re-run started (0: never
	// re-run); the generation counts retries from it instead of LifeBase.
	RerunBase uint64
}

// Ownership returns the queued fence of a queued task or the lease of a
// leased or running task, and false for a terminal task.
func (t Task) Ownership() (Ownership, bool) {
	switch {
	case t.Status == distributed.TaskQueued:
		return Ownership{Fence: Fence{TaskID: t.TaskID, TaskGeneration: t.TaskGeneration, RecordVersion: t.RecordVersion}}, true
	case t.HasLease:
		return Ownership{IsLease: true, Lease: t.Lease}, true
	}
	return Ownership{}, false
}

// Worker mirrors distributed.WorkerNode.
type Worker struct {
	WorkerID           string
	Generation         uint64
	Status             distributed.WorkerStatus
	Capacity           uint32
	CurrentTasks       uint32
	CompletedTasks     uint64
	LastHeartbeat      uint64
	CPUBasisPoints     uint16
	MemoryBasisPoints  uint16
	NetworkBasisPoints uint16
	Tags               []distributed.WorkerTag
}

// EffectiveCapacity is ceil(Capacity × (10000 − max utilization) / 10000).
func (w Worker) EffectiveCapacity() uint32 {
	u := w.CPUBasisPoints
	if w.MemoryBasisPoints > u {
		u = w.MemoryBasisPoints
	}
	if w.NetworkBasisPoints > u {
		u = w.NetworkBasisPoints
	}
	if u >= 10000 {
		return 0
	}
	num := uint64(w.Capacity) * uint64(10000-u)
	c := num / 10000
	if num%10000 != 0 {
		c++
	}
	return uint32(c)
}

// AvailableSlots is EffectiveCapacity − CurrentTasks, never negative.
func (w Worker) AvailableSlots() uint32 {
	e := w.EffectiveCapacity()
	if w.CurrentTasks >= e {
		return 0
	}
	return e - w.CurrentTasks
}

// Completion is CompleteTask's value.
type Completion struct {
	Kind    distributed.CompletionOutcomeKind
	Receipt Receipt
}
