package distributed

// Hard ceilings (contract A.2): compile-time constants that no configured
// limit may exceed. NB: several share the name of a Limits field
// (distributed.MaxRetries is the ceiling, Limits.MaxRetries the configured
// limit, which Validate checks against it); the names are the contract's
// and stay. Read "ceiling" for the constant and "limit" for the field.
const (
	MaxIdentifierBytes      = 256
	MaxTargetRefBytes       = 1024
	MaxTaskPhases           = 256
	MaxWorkerTags           = 5
	UtilizationBasisPoints  = 10000
	MaxTaskRecords          = 65536
	MaxActiveTasks          = 16384
	MaxWorkers              = 4096
	MaxRetries              = 32
	MaxWorkerCapacity       = 4096
	MaxLeaseTTLSecs         = 86400
	MaxTaskTTLSecs          = 31 * 86400
	MaxHeartbeatTimeoutSecs = 86400
	MaxResults              = 65536
	MaxResultBytes          = 16 << 20
	MaxTotalResultBytes     = 256 << 20
	MaxAggregateItems       = 65536
)

// Limits bounds one coordinator (a WorkerPool and its TaskQueue): the
// configured limits. Every field must be non-zero and at most the hard
// ceiling of the same name (the package constants above); see Validate.
type Limits struct {
	MaxTaskRecords   int // retained task records, terminal included
	MaxActiveTasks   int // non-terminal tasks
	MaxQueuedTasks   int // queued tasks
	MaxTerminalTasks int // terminal reservation: terminal + non-terminal never exceeds it
	MaxWorkers       int // registered workers, offline included

	MaxRetries uint32 // retries before a failing task becomes failed

	MaxLeaseTTLSecs      uint64 // the longest lease a command may ask for
	MaxTaskTTLSecs       uint64 // the longest maxAgeSecs ExpireOldTasks accepts
	HeartbeatTimeoutSecs uint64 // a worker is dead when now-LastHeartbeat >= this
}

// DefaultLimits returns the seed's defaults: 4096 records, 1024 active, 1024
// queued, 4096 terminal, 256 workers, 3 retries, 3600 s leases, 86400 s task
// TTL and a 60 s heartbeat timeout.
func DefaultLimits() Limits {
	return Limits{
		MaxTaskRecords:       4096,
		MaxActiveTasks:       1024,
		MaxQueuedTasks:       1024,
		MaxTerminalTasks:     4096,
		MaxWorkers:           256,
		MaxRetries:           3,
		MaxLeaseTTLSecs:      3600,
		MaxTaskTTLSecs:       86400,
		HeartbeatTimeoutSecs: 60,
	}
}

// MaximumLimits returns every limit at its hard ceiling.
func MaximumLimits() Limits {
	return Limits{
		MaxTaskRecords:       MaxTaskRecords,
		MaxActiveTasks:       MaxActiveTasks,
		MaxQueuedTasks:       MaxActiveTasks,
		MaxTerminalTasks:     MaxTaskRecords,
		MaxWorkers:           MaxWorkers,
		MaxRetries:           MaxRetries,
		MaxLeaseTTLSecs:      MaxLeaseTTLSecs,
		MaxTaskTTLSecs:       MaxTaskTTLSecs,
		HeartbeatTimeoutSecs: MaxHeartbeatTimeoutSecs,
	}
}

type countLimit struct {
	name    string
	value   int
	maximum int
}

type timeLimit struct {
	name    string
	value   uint64
	maximum uint64
}

// Validate checks l in the order of contract A.3 and returns the first failure:
// zero count (ErrInvalidLimit), count above ceiling
// (ErrCountLimitExceedsMaximum), time above ceiling
// (ErrTimeLimitExceedsMaximum), retries above 32
// (ErrRetryLimitExceedsMaximum), zero time (ErrInvalidLimit), then the
// relations between counts (ErrInvalidLimitRelationship).
func (l Limits) Validate() error {
	counts := [...]countLimit{
		{"max_task_records", l.MaxTaskRecords, MaxTaskRecords},
		{"max_active_tasks", l.MaxActiveTasks, MaxActiveTasks},
		{"max_queued_tasks", l.MaxQueuedTasks, MaxActiveTasks},
		{"max_terminal_tasks", l.MaxTerminalTasks, MaxTaskRecords},
		{"max_workers", l.MaxWorkers, MaxWorkers},
	}
	times := [...]timeLimit{
		{"max_lease_ttl_secs", l.MaxLeaseTTLSecs, MaxLeaseTTLSecs},
		{"max_task_ttl_secs", l.MaxTaskTTLSecs, MaxTaskTTLSecs},
		{"heartbeat_timeout_secs", l.HeartbeatTimeoutSecs, MaxHeartbeatTimeoutSecs},
	}
	for _, c := range counts {
		if c.value <= 0 {
			return &Error{Kind: KindInvalidLimit, Name: c.name}
		}
	}
	for _, c := range counts {
		if c.value > c.maximum {
			return &Error{Kind: KindCountLimitExceedsMaximum, Name: c.name, Actual: uint64(c.value), Maximum: uint64(c.maximum)}
		}
	}
	for _, t := range times {
		if t.value > t.maximum {
			return &Error{Kind: KindTimeLimitExceedsMaximum, Name: t.name, Actual: t.value, Maximum: t.maximum}
		}
	}
	if l.MaxRetries > MaxRetries {
		return &Error{Kind: KindRetryLimitExceedsMaximum, Actual: uint64(l.MaxRetries), Maximum: MaxRetries}
	}
	for _, t := range times {
		if t.value == 0 {
			return &Error{Kind: KindInvalidLimit, Name: t.name}
		}
	}
	switch {
	case l.MaxActiveTasks > l.MaxTaskRecords:
		return &Error{Kind: KindInvalidLimitRelationship, Reason: "max_active_tasks exceeds max_task_records"}
	case l.MaxQueuedTasks > l.MaxActiveTasks:
		return &Error{Kind: KindInvalidLimitRelationship, Reason: "max_queued_tasks exceeds max_active_tasks"}
	case l.MaxTerminalTasks > l.MaxTaskRecords:
		return &Error{Kind: KindInvalidLimitRelationship, Reason: "max_terminal_tasks exceeds max_task_records"}
	case l.MaxTerminalTasks < l.MaxActiveTasks:
		return &Error{Kind: KindInvalidLimitRelationship, Reason: "max_terminal_tasks is smaller than max_active_tasks"}
	}
	return nil
}

// ResultLimits bounds one ResultAggregator; see Validate.
type ResultLimits struct {
	MaxResults        int // stored results
	MaxResultBytes    int // bytes of one result
	MaxTotalBytes     int // bytes of all stored results
	MaxAggregateItems int // IDs in one AggregateResults call
	MaxAggregateBytes int // bytes returned by one AggregateResults call
}

// DefaultResultLimits returns 1024 results, 1 MiB per result, 16 MiB in
// total, 1024 aggregate items and 16 MiB per aggregate.
func DefaultResultLimits() ResultLimits {
	return ResultLimits{
		MaxResults:        1024,
		MaxResultBytes:    1 << 20,
		MaxTotalBytes:     16 << 20,
		MaxAggregateItems: 1024,
		MaxAggregateBytes: 16 << 20,
	}
}

// MaximumResultLimits returns every result limit at its hard ceiling.
func MaximumResultLimits() ResultLimits {
	return ResultLimits{
		MaxResults:        MaxResults,
		MaxResultBytes:    MaxResultBytes,
		MaxTotalBytes:     MaxTotalResultBytes,
		MaxAggregateItems: MaxAggregateItems,
		MaxAggregateBytes: MaxTotalResultBytes,
	}
}

// Validate checks l: a zero limit (ErrInvalidLimit), a limit above its
// ceiling (ErrCountLimitExceedsMaximum), then MaxResultBytes above
// MaxTotalBytes (ErrInvalidLimitRelationship), first failure wins.
func (l ResultLimits) Validate() error {
	counts := [...]countLimit{
		{"max_results", l.MaxResults, MaxResults},
		{"max_result_bytes", l.MaxResultBytes, MaxResultBytes},
		{"max_total_bytes", l.MaxTotalBytes, MaxTotalResultBytes},
		{"max_aggregate_items", l.MaxAggregateItems, MaxAggregateItems},
		{"max_aggregate_bytes", l.MaxAggregateBytes, MaxTotalResultBytes},
	}
	for _, c := range counts {
		if c.value <= 0 {
			return &Error{Kind: KindInvalidLimit, Name: c.name}
		}
	}
	for _, c := range counts {
		if c.value > c.maximum {
			return &Error{Kind: KindCountLimitExceedsMaximum, Name: c.name, Actual: uint64(c.value), Maximum: uint64(c.maximum)}
		}
	}
	if l.MaxResultBytes > l.MaxTotalBytes {
		return &Error{Kind: KindInvalidLimitRelationship, Reason: "max_result_bytes exceeds max_total_bytes"}
	}
	return nil
}
