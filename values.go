package distributed

import "strconv"

// TaskPriority orders the queue: higher priorities are leased first.
type TaskPriority uint8

// The four priorities; any other value is invalid.
const (
	PriorityLow TaskPriority = iota
	PriorityNormal
	PriorityHigh
	PriorityCritical
)

var priorityNames = [...]string{"low", "normal", "high", "critical"}

// String returns "low", "normal", "high" or "critical".
func (p TaskPriority) String() string {
	if int(p) < len(priorityNames) {
		return priorityNames[p]
	}
	return "priority(" + strconv.Itoa(int(p)) + ")"
}

// Valid reports whether p is one of the four priorities.
func (p TaskPriority) Valid() bool { return p <= PriorityCritical }

// AllTaskPriorities returns the priorities from lowest to highest.
func AllTaskPriorities() []TaskPriority {
	return []TaskPriority{PriorityLow, PriorityNormal, PriorityHigh, PriorityCritical}
}

// ParseTaskPriority maps a name produced by String back to the priority.
func ParseTaskPriority(s string) (TaskPriority, bool) {
	for i, n := range priorityNames {
		if n == s {
			return TaskPriority(i), true
		}
	}
	return 0, false
}

// TaskStatus is where a task is in its lifecycle (see ARCHITECTURE.md).
type TaskStatus uint8

// Task statuses. Completed, failed, cancelled and expired are terminal.
const (
	TaskQueued TaskStatus = iota
	TaskLeased
	TaskRunning
	TaskCompleted
	TaskFailed
	TaskCancelled
	TaskExpired
)

var taskStatusNames = [...]string{"queued", "leased", "running", "completed", "failed", "cancelled", "expired"}

// String returns the lowercase status name, e.g. "queued".
func (s TaskStatus) String() string {
	if int(s) < len(taskStatusNames) {
		return taskStatusNames[s]
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// Valid reports whether s is a declared status.
func (s TaskStatus) Valid() bool { return s <= TaskExpired }

// Terminal reports whether s is completed, failed, cancelled or expired.
func (s TaskStatus) Terminal() bool { return s >= TaskCompleted && s <= TaskExpired }

// AllTaskStatuses returns every status in lifecycle order.
func AllTaskStatuses() []TaskStatus {
	return []TaskStatus{TaskQueued, TaskLeased, TaskRunning, TaskCompleted, TaskFailed, TaskCancelled, TaskExpired}
}

// ParseTaskStatus maps a name produced by String back to the status.
func ParseTaskStatus(s string) (TaskStatus, bool) {
	for i, n := range taskStatusNames {
		if n == s {
			return TaskStatus(i), true
		}
	}
	return 0, false
}

// WorkerStatus is a worker's reported health. Only healthy workers receive
// new leases; offline is reached only through DeregisterWorker or
// PruneDeadWorkers.
type WorkerStatus uint8

// Worker statuses.
const (
	WorkerHealthy WorkerStatus = iota
	WorkerBusy
	WorkerDegraded
	WorkerOffline
)

var workerStatusNames = [...]string{"healthy", "busy", "degraded", "offline"}

// String returns "healthy", "busy", "degraded" or "offline".
func (s WorkerStatus) String() string {
	if int(s) < len(workerStatusNames) {
		return workerStatusNames[s]
	}
	return "worker_status(" + strconv.Itoa(int(s)) + ")"
}

// Valid reports whether s is a declared worker status.
func (s WorkerStatus) Valid() bool { return s <= WorkerOffline }

// AllWorkerStatuses returns every worker status.
func AllWorkerStatuses() []WorkerStatus {
	return []WorkerStatus{WorkerHealthy, WorkerBusy, WorkerDegraded, WorkerOffline}
}

// ParseWorkerStatus maps a name produced by String back to the status.
func ParseWorkerStatus(s string) (WorkerStatus, bool) {
	for i, n := range workerStatusNames {
		if n == s {
			return WorkerStatus(i), true
		}
	}
	return 0, false
}

// WorkerTag is observational metadata about a worker. Tags are stored and
// returned but never used for eligibility or scoring.
type WorkerTag uint8

// Worker tags.
const (
	TagLinux WorkerTag = iota
	TagWindows
	TagGPU
	TagInternal
	TagExternal
)

var workerTagNames = [...]string{"linux", "windows", "gpu", "internal", "external"}

// String returns the lowercase tag name, e.g. "gpu".
func (t WorkerTag) String() string {
	if int(t) < len(workerTagNames) {
		return workerTagNames[t]
	}
	return "tag(" + strconv.Itoa(int(t)) + ")"
}

// Valid reports whether t is a declared tag.
func (t WorkerTag) Valid() bool { return t <= TagExternal }

// AllWorkerTags returns every tag.
func AllWorkerTags() []WorkerTag {
	return []WorkerTag{TagLinux, TagWindows, TagGPU, TagInternal, TagExternal}
}

// ParseWorkerTag maps a name produced by String back to the tag.
func ParseWorkerTag(s string) (WorkerTag, bool) {
	for i, n := range workerTagNames {
		if n == s {
			return WorkerTag(i), true
		}
	}
	return 0, false
}

// TaskSpec is what a producer submits. TargetRef is opaque: stored and
// returned, never interpreted, and redacted in every formatted form.
type TaskSpec struct {
	TaskID    string
	ScanID    string
	TargetRef string
	Phases    []uint8
	Priority  TaskPriority
	// Scheduling is beyond contract Part A (Part F); the zero value asks
	// for nothing.
	Scheduling TaskScheduling

	// AttemptTimeoutSecs (beyond contract Part A; 0: none) bounds each
	// attempt: a lease is not renewed at or after its AcquiredAt +
	// AttemptTimeoutSecs (ErrAttemptTimedOut). At most MaxTaskTTLSecs.
	AttemptTimeoutSecs uint64
}

// WorkerSpec describes a worker at registration or reactivation.
type WorkerSpec struct {
	WorkerID           string
	Capacity           uint32
	CPUBasisPoints     uint16
	MemoryBasisPoints  uint16
	NetworkBasisPoints uint16
	Tags               []WorkerTag
}

// WorkerObservation is what a heartbeat reports.
type WorkerObservation struct {
	Status             WorkerStatus
	CPUBasisPoints     uint16
	MemoryBasisPoints  uint16
	NetworkBasisPoints uint16
}

// Transition is the result of every successful mutating call: the revision
// the call committed (or, for an exact terminal replay, the current one) and
// the call's value.
type Transition[T any] struct {
	Revision uint64
	Value    T
}

// StateSnapshot summarizes a coordinator: counters (tasks per status,
// workers, leases, revision), comparable with ==. NB: despite the
// contract's name it is not a state snapshot; the state itself is exported
// by ExportState, and raft's snapshots (raftfsm) are built from that.
type StateSnapshot struct {
	Revision      uint64
	LogicalTime   uint64
	TaskRecords   int
	ActiveTasks   int
	QueuedTasks   int
	TerminalTasks int
	Workers       int
}

// RecoverySummary counts what a recovery command did.
type RecoverySummary struct {
	WorkersAffected int
	TasksRequeued   int
	TasksFailed     int
}

// ValidIdentifier reports whether s is 1–256 bytes of ASCII letters, digits,
// '.', '_', ':' and '-' — the rule for task, scan and worker IDs.
func ValidIdentifier(s string) bool {
	return identifierProblem(s) == ""
}

// identifierProblem returns "" for a valid identifier, else "empty",
// "too long" or "contains unsafe characters".
func identifierProblem(s string) string {
	if len(s) == 0 {
		return "is empty"
	}
	if len(s) > MaxIdentifierBytes {
		return "is too long"
	}
	for i := 0; i < len(s); i++ {
		if !identifierByte[s[i]] {
			return "contains unsafe characters"
		}
	}
	return ""
}

var identifierByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "._:-" {
		t[c] = true
	}
	return t
}()
