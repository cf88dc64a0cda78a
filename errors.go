package distributed

import (
	"strconv"
	"strings"
)

// ErrorKind classifies every failure of the core. Each kind has one sentinel
// (ErrXxx) that errors.Is matches by kind.
type ErrorKind uint8

// The error kinds of contract A.12. The zero value is not a valid kind.
const (
	KindInvalidLimit ErrorKind = iota + 1
	KindInvalidLimitRelationship
	KindCountLimitExceedsMaximum
	KindTimeLimitExceedsMaximum
	KindRetryLimitExceedsMaximum
	KindInvalidTask
	KindInvalidWorker
	KindRevisionConflict
	KindLogicalTimeRegression
	KindCounterExhausted
	KindTaskAlreadyExists
	KindTaskNotFound
	KindWorkerAlreadyExists
	KindWorkerNotFound
	KindWorkerGenerationConflict
	KindTaskRecordCapacityReached
	KindActiveTaskCapacityReached
	KindQueuedTaskCapacityReached
	KindTerminalCapacityReserved
	KindWorkerCapacityReached
	KindNoQueuedTask
	KindNoAvailableWorker
	KindWorkerUnavailable
	KindWorkerAtCapacity
	KindTaskNotQueued
	KindInvalidTransition
	KindStaleOwnership
	KindLeaseExpired
	KindLeaseTTLOutOfRange
	KindConflictingResult
	KindMismatchedResultReceipt
	KindResultCapacityReached
	KindResultTooLarge
	KindTotalResultBytesExceeded
	KindAggregateItemLimitExceeded
	KindDuplicateAggregateTask
	KindMissingResult
	KindAggregateBytesExceeded
	KindStateInvariant
	KindInvalidState
	// KindTaskPurged is a Part F addition (docs/adr/0002-purge.md).
	KindTaskPurged
	// KindFailureReasonTooLong and KindAttemptTimedOut are beyond contract
	// Part A (attempts.go).
	KindFailureReasonTooLong
	KindAttemptTimedOut
	// Beyond contract A.12 (Part F, scheduling):
	KindTaskNotLeasable
	KindScanCapacityReached
	kindEnd
)

var kindNames = [...]string{
	KindInvalidLimit:               "invalid_limit",
	KindInvalidLimitRelationship:   "invalid_limit_relationship",
	KindCountLimitExceedsMaximum:   "count_limit_exceeds_maximum",
	KindTimeLimitExceedsMaximum:    "time_limit_exceeds_maximum",
	KindRetryLimitExceedsMaximum:   "retry_limit_exceeds_maximum",
	KindInvalidTask:                "invalid_task",
	KindInvalidWorker:              "invalid_worker",
	KindRevisionConflict:           "revision_conflict",
	KindLogicalTimeRegression:      "logical_time_regression",
	KindCounterExhausted:           "counter_exhausted",
	KindTaskAlreadyExists:          "task_already_exists",
	KindTaskNotFound:               "task_not_found",
	KindWorkerAlreadyExists:        "worker_already_exists",
	KindWorkerNotFound:             "worker_not_found",
	KindWorkerGenerationConflict:   "worker_generation_conflict",
	KindTaskRecordCapacityReached:  "task_record_capacity_reached",
	KindActiveTaskCapacityReached:  "active_task_capacity_reached",
	KindQueuedTaskCapacityReached:  "queued_task_capacity_reached",
	KindTerminalCapacityReserved:   "terminal_capacity_reserved",
	KindWorkerCapacityReached:      "worker_capacity_reached",
	KindNoQueuedTask:               "no_queued_task",
	KindNoAvailableWorker:          "no_available_worker",
	KindWorkerUnavailable:          "worker_unavailable",
	KindWorkerAtCapacity:           "worker_at_capacity",
	KindTaskNotQueued:              "task_not_queued",
	KindInvalidTransition:          "invalid_transition",
	KindStaleOwnership:             "stale_ownership",
	KindLeaseExpired:               "lease_expired",
	KindLeaseTTLOutOfRange:         "lease_ttl_out_of_range",
	KindConflictingResult:          "conflicting_result",
	KindMismatchedResultReceipt:    "mismatched_result_receipt",
	KindResultCapacityReached:      "result_capacity_reached",
	KindResultTooLarge:             "result_too_large",
	KindTotalResultBytesExceeded:   "total_result_bytes_exceeded",
	KindAggregateItemLimitExceeded: "aggregate_item_limit_exceeded",
	KindDuplicateAggregateTask:     "duplicate_aggregate_task",
	KindMissingResult:              "missing_result",
	KindAggregateBytesExceeded:     "aggregate_bytes_exceeded",
	KindStateInvariant:             "state_invariant",
	KindInvalidState:               "invalid_state",
	KindTaskPurged:                 "task_purged",
	KindFailureReasonTooLong:       "failure_reason_too_long",
	KindAttemptTimedOut:            "attempt_timed_out",
	KindTaskNotLeasable:            "task_not_leasable",
	KindScanCapacityReached:        "scan_capacity_reached",
}

// String returns the snake_case name of the kind, e.g. "revision_conflict".
func (k ErrorKind) String() string {
	if k == 0 || k >= kindEnd {
		return "unknown_error_kind(" + strconv.Itoa(int(k)) + ")"
	}
	return kindNames[k]
}

// Valid reports whether k is one of the declared kinds.
func (k ErrorKind) Valid() bool { return k > 0 && k < kindEnd }

// AllErrorKinds returns every declared kind in declaration order.
func AllErrorKinds() []ErrorKind {
	out := make([]ErrorKind, 0, int(kindEnd)-1)
	for k := ErrorKind(1); k < kindEnd; k++ {
		out = append(out, k)
	}
	return out
}

// ParseErrorKind maps a name produced by ErrorKind.String back to the kind.
func ParseErrorKind(name string) (ErrorKind, bool) {
	for k := ErrorKind(1); k < kindEnd; k++ {
		if kindNames[k] == name {
			return k, true
		}
	}
	return 0, false
}

// Error is the only error type the core returns. Kind says what went wrong;
// the other fields carry the details named by contract A.12 for that kind and are
// zero otherwise. Match kinds with errors.Is(err, ErrXxx); read details with
// errors.As(err, &e).
//
// NB: TaskID and WorkerID are only ever set to identifiers that passed
// validation; an invalid identifier is never copied into an error.
type Error struct {
	Kind      ErrorKind
	Name      string
	Reason    string
	Operation string
	Counter   string
	TaskID    string
	WorkerID  string
	Status    TaskStatus
	Expected  uint64
	Actual    uint64
	Maximum   uint64
	Limit     uint64
	Current   uint64
	Proposed  uint64
}

// Is reports whether target is an *Error of the same kind, so that
// errors.Is(err, ErrRevisionConflict) matches any revision conflict.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && e != nil && t.Kind == e.Kind
}

// Error renders the kind and its details. It never contains a target
// reference, result bytes or an identifier that failed validation.
func (e *Error) Error() string {
	if e == nil {
		return "distributed: <nil>"
	}
	var b strings.Builder
	b.WriteString("distributed: ")
	b.WriteString(strings.ReplaceAll(e.Kind.String(), "_", " "))
	kv := func(k, v string) {
		if v == "" {
			return
		}
		b.WriteString(" ")
		b.WriteString(k)
		b.WriteString("=")
		b.WriteString(v)
	}
	num := func(k string, v uint64) {
		if v != 0 {
			kv(k, strconv.FormatUint(v, 10))
		}
	}
	kv("name", e.Name)
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	kv("operation", e.Operation)
	kv("counter", e.Counter)
	kv("task_id", e.TaskID)
	kv("worker_id", e.WorkerID)
	if e.Kind == KindTaskNotQueued || e.Kind == KindInvalidTransition {
		kv("status", e.Status.String())
	}
	switch e.Kind {
	case KindRevisionConflict, KindWorkerGenerationConflict:
		kv("expected", strconv.FormatUint(e.Expected, 10))
		kv("actual", strconv.FormatUint(e.Actual, 10))
	default:
		num("expected", e.Expected)
		num("actual", e.Actual)
	}
	num("maximum", e.Maximum)
	num("limit", e.Limit)
	if e.Kind == KindLogicalTimeRegression {
		kv("current", strconv.FormatUint(e.Current, 10))
		kv("proposed", strconv.FormatUint(e.Proposed, 10))
	}
	return b.String()
}

// Sentinels, one per kind. Each is matched by kind with errors.Is.
var (
	// ErrInvalidLimit: a limit is zero (Name says which).
	ErrInvalidLimit = &Error{Kind: KindInvalidLimit}
	// ErrInvalidLimitRelationship: two limits contradict each other (Reason).
	ErrInvalidLimitRelationship = &Error{Kind: KindInvalidLimitRelationship}
	// ErrCountLimitExceedsMaximum: a configured count limit is above its hard ceiling.
	ErrCountLimitExceedsMaximum = &Error{Kind: KindCountLimitExceedsMaximum}
	// ErrTimeLimitExceedsMaximum: a configured time limit is above its hard
	// ceiling.
	ErrTimeLimitExceedsMaximum = &Error{Kind: KindTimeLimitExceedsMaximum}
	// ErrRetryLimitExceedsMaximum: the configured limit Limits.MaxRetries is
	// above the hard ceiling distributed.MaxRetries (32).
	ErrRetryLimitExceedsMaximum = &Error{Kind: KindRetryLimitExceedsMaximum}
	// ErrInvalidTask: a task spec or task command identifier is invalid (Reason).
	ErrInvalidTask = &Error{Kind: KindInvalidTask}
	// ErrInvalidWorker: a worker spec, observation or identifier is invalid (Reason).
	ErrInvalidWorker = &Error{Kind: KindInvalidWorker}
	// ErrRevisionConflict: the expected revision is not the current one.
	ErrRevisionConflict = &Error{Kind: KindRevisionConflict}
	// ErrLogicalTimeRegression: the command's time is before logical time.
	ErrLogicalTimeRegression = &Error{Kind: KindLogicalTimeRegression}
	// ErrCounterExhausted: a counter (Counter) would overflow.
	ErrCounterExhausted = &Error{Kind: KindCounterExhausted}
	// ErrTaskAlreadyExists: a task with this ID was already admitted.
	ErrTaskAlreadyExists = &Error{Kind: KindTaskAlreadyExists}
	// ErrTaskNotFound: no task has this ID.
	ErrTaskNotFound = &Error{Kind: KindTaskNotFound}
	// ErrWorkerAlreadyExists: a worker with this ID is registered (or, for
	// ReactivateWorker, is not offline).
	ErrWorkerAlreadyExists = &Error{Kind: KindWorkerAlreadyExists}
	// ErrWorkerNotFound: no worker has this ID.
	ErrWorkerNotFound = &Error{Kind: KindWorkerNotFound}
	// ErrWorkerGenerationConflict: the caller's worker generation is not current.
	ErrWorkerGenerationConflict = &Error{Kind: KindWorkerGenerationConflict}
	// ErrTaskRecordCapacityReached: MaxTaskRecords records are retained.
	ErrTaskRecordCapacityReached = &Error{Kind: KindTaskRecordCapacityReached}
	// ErrActiveTaskCapacityReached: MaxActiveTasks tasks are non-terminal.
	ErrActiveTaskCapacityReached = &Error{Kind: KindActiveTaskCapacityReached}
	// ErrQueuedTaskCapacityReached: the queue would exceed MaxQueuedTasks.
	ErrQueuedTaskCapacityReached = &Error{Kind: KindQueuedTaskCapacityReached}
	// ErrTerminalCapacityReserved: admitting would break the terminal reservation.
	ErrTerminalCapacityReserved = &Error{Kind: KindTerminalCapacityReserved}
	// ErrWorkerCapacityReached: MaxWorkers workers are registered.
	ErrWorkerCapacityReached = &Error{Kind: KindWorkerCapacityReached}
	// ErrNoQueuedTask: the queue is empty.
	ErrNoQueuedTask = &Error{Kind: KindNoQueuedTask}
	// ErrNoAvailableWorker: no worker is eligible.
	ErrNoAvailableWorker = &Error{Kind: KindNoAvailableWorker}
	// ErrWorkerUnavailable: the worker is offline, not healthy, or dead.
	ErrWorkerUnavailable = &Error{Kind: KindWorkerUnavailable}
	// ErrWorkerAtCapacity: the worker has no available slot.
	ErrWorkerAtCapacity = &Error{Kind: KindWorkerAtCapacity}
	// ErrTaskNotQueued: the task is not queued (Status says what it is).
	ErrTaskNotQueued = &Error{Kind: KindTaskNotQueued}
	// ErrInvalidTransition: the operation is not allowed in the task's status.
	ErrInvalidTransition = &Error{Kind: KindInvalidTransition}
	// ErrStaleOwnership: a lease, fence or receipt does not match the record.
	ErrStaleOwnership = &Error{Kind: KindStaleOwnership}
	// ErrLeaseExpired: a matching lease was used at or after its expiry.
	ErrLeaseExpired = &Error{Kind: KindLeaseExpired}
	// ErrLeaseTTLOutOfRange: a lease TTL is zero or above the limit.
	ErrLeaseTTLOutOfRange = &Error{Kind: KindLeaseTTLOutOfRange}
	// ErrConflictingResult: the same receipt was stored with other bytes.
	ErrConflictingResult = &Error{Kind: KindConflictingResult}
	// ErrMismatchedResultReceipt: the task's result was stored under another receipt.
	ErrMismatchedResultReceipt = &Error{Kind: KindMismatchedResultReceipt}
	// ErrResultCapacityReached: MaxResults results are stored.
	ErrResultCapacityReached = &Error{Kind: KindResultCapacityReached}
	// ErrResultTooLarge: one result is above MaxResultBytes.
	ErrResultTooLarge = &Error{Kind: KindResultTooLarge}
	// ErrTotalResultBytesExceeded: storing would exceed MaxTotalBytes.
	ErrTotalResultBytesExceeded = &Error{Kind: KindTotalResultBytesExceeded}
	// ErrAggregateItemLimitExceeded: more IDs than MaxAggregateItems.
	ErrAggregateItemLimitExceeded = &Error{Kind: KindAggregateItemLimitExceeded}
	// ErrDuplicateAggregateTask: an aggregate request names a task twice.
	ErrDuplicateAggregateTask = &Error{Kind: KindDuplicateAggregateTask}
	// ErrMissingResult: an aggregate request names a task without a result.
	ErrMissingResult = &Error{Kind: KindMissingResult}
	// ErrAggregateBytesExceeded: the aggregate would exceed MaxAggregateBytes.
	ErrAggregateBytesExceeded = &Error{Kind: KindAggregateBytesExceeded}
	// ErrStateInvariant: an invariant does not hold (Reason names it).
	ErrStateInvariant = &Error{Kind: KindStateInvariant}
	// ErrInvalidState: exported state bytes are corrupt, truncated or hostile.
	ErrInvalidState = &Error{Kind: KindInvalidState}
	// ErrTaskPurged: a lease or fence names a task life that PurgeTasks
	// removed (its generation is below the task's current life, or below
	// the generation floor when no task has the ID). Beyond contract Part A
	// (Part F, docs/adr/0002-purge.md); never returned before a purge.
	ErrTaskPurged = &Error{Kind: KindTaskPurged}
	// ErrFailureReasonTooLong: FailTaskWithReason got a reason longer than
	// MaxFailureReasonBytes (Actual, Limit).
	ErrFailureReasonTooLong = &Error{Kind: KindFailureReasonTooLong}
	// ErrAttemptTimedOut: RenewLease at or after the attempt's deadline,
	// AcquiredAt + AttemptTimeoutSecs (TaskID; Limit is the deadline).
	ErrAttemptTimedOut = &Error{Kind: KindAttemptTimedOut}
	// ErrTaskNotLeasable: AssignTask named a queued task that its scheduling
	// keeps from that worker now (Reason: scheduled for later, a required
	// tag missing, scan paused, scan at its in-flight limit).
	ErrTaskNotLeasable = &Error{Kind: KindTaskNotLeasable}
	// ErrScanCapacityReached: UpdateScan would configure more scans than
	// MaxTaskRecords (Limit).
	ErrScanCapacityReached = &Error{Kind: KindScanCapacityReached}
)

// Reasons used for invalid command identifiers (contract A.6).
const (
	reasonTaskCommandID   = "task command identifier is invalid"
	reasonWorkerCommandID = "worker command identifier is invalid"
)

// CheckTaskCommandID returns nil when id is a valid identifier
// (ValidIdentifier) and otherwise the InvalidTask error the core returns for
// an invalid task command identifier (contract A.6). Shells use it for the
// task and scan IDs they check before a read or a proposal, so a remote
// caller gets the same error as an in-process one.
func CheckTaskCommandID(id string) error {
	if !ValidIdentifier(id) {
		return invalidTaskID()
	}
	return nil
}

// NewTaskNotFoundError returns the TaskNotFound error of taskID, for a shell
// whose read found no such task. An invalid taskID gives the InvalidTask
// error of CheckTaskCommandID instead: an invalid identifier is never copied
// into an error.
func NewTaskNotFoundError(taskID string) *Error {
	if !ValidIdentifier(taskID) {
		return invalidTaskID()
	}
	return &Error{Kind: KindTaskNotFound, TaskID: taskID}
}

// NewInvalidTaskError returns an InvalidTask error with reason, for a shell
// that refuses a task spec before the core sees it (e.g. a wire priority
// that does not fit a TaskPriority). The reason must not quote a target or
// an invalid identifier.
func NewInvalidTaskError(reason string) *Error {
	return &Error{Kind: KindInvalidTask, Reason: reason}
}

// NewInvalidWorkerError returns an InvalidWorker error with reason, for a
// shell that refuses a worker spec or observation before the core sees it
// (e.g. a wire value out of its type's range). The reason must not quote an
// invalid identifier.
func NewInvalidWorkerError(reason string) *Error {
	return &Error{Kind: KindInvalidWorker, Reason: reason}
}

func invalidTaskID() *Error   { return &Error{Kind: KindInvalidTask, Reason: reasonTaskCommandID} }
func invalidWorkerID() *Error { return &Error{Kind: KindInvalidWorker, Reason: reasonWorkerCommandID} }

func invariantError(reason string) *Error {
	return &Error{Kind: KindStateInvariant, Reason: reason}
}
