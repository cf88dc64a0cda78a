// Package distributed is the pure core of the termivar coordinator: a
// deterministic, bounded, in-process state machine that hands scan tasks to
// workers under fenced leases, retries failures, recovers lost work when the
// caller asks, and keeps results in a bounded store. It is contract Part A.
//
// The package does no I/O, reads no clock, starts no goroutine and uses no
// randomness: the same accepted command sequence gives byte-for-byte equal
// state, snapshots and outputs. The durable, replicated service (node/,
// cmd/termivar-coord) is a shell around it.
//
// # Usage
//
//	pool := distributed.NewWorkerPool()               // DefaultLimits
//	results := distributed.NewResultAggregator()      // DefaultResultLimits
//	w, _ := pool.RegisterWorker(pool.Snapshot().Revision, now, distributed.WorkerSpec{WorkerID: "w1", Capacity: 4})
//	t, _ := pool.Enqueue(w.Revision, now, distributed.TaskSpec{TaskID: "t1", ScanID: "s1", TargetRef: "10.0.0.1"})
//	lease, _ := pool.AssignNextAvailable(t.Revision, now, 30)
//	started, _ := pool.StartTask(lease.Revision, now, lease.Value)
//	done, _ := pool.CompleteTask(started.Revision, now, lease.Value)
//	results.StoreResult(results.Revision(), done.Value.Receipt, output)
//
// # Command model
//
// Every mutating method takes the expected revision and the caller's logical
// second first. Checks run in this order: argument validation, the revision
// (ErrRevisionConflict), time (ErrLogicalTimeRegression: now may not be
// earlier than logical time), the operation's own rules, then counter
// overflow (ErrCounterExhausted). A success increments the revision exactly
// once and sets logical time to now; a failure returns an *Error and changes
// nothing at all. An exact terminal replay (the same proof for a task that
// already reached that outcome) returns the retained outcome at the current
// revision and changes nothing, logical time included.
//
// # Concurrency
//
// One mutex guards one coordinator. A WorkerPool and the TaskQueue returned by
// its TaskQueue method share that mutex and revision; a ResultAggregator has
// its own. All methods are safe for concurrent use; concurrent commands on
// the same revision have exactly one winner, the others get
// ErrRevisionConflict.
//
// # Choices where the contract is silent
//
// docs/adr/0001-core-semantics.md lists them; the main ones:
//   - Lease-using commands check: task exists, exact terminal replay, the
//     lease equals the current lease (else ErrStaleOwnership), now <
//     ExpiresAt (else ErrLeaseExpired), then the status rule
//     (ErrInvalidTransition for complete/fail of a leased task).
//   - Cancellation by lease also requires an unexpired lease; an expired one
//     is recovered first and the task then cancelled by its queued fence.
//   - Worker loss and lease expiry use FailTask's retry rule, so a lost
//     attempt counts as a retry. Attempt counts leases and never resets.
//   - Duplicate tags are allowed; more than five distinct values is "too
//     many tags", then an undeclared value is "tag is invalid".
//   - ExpireOldTasks's maxAgeSecs 0 is ErrInvalidLimit and above
//     Limits.MaxTaskTTLSecs is ErrTimeLimitExceedsMaximum, both named
//     "max_age_secs".
//   - ReactivateWorker of a worker that is not offline is
//     ErrWorkerAlreadyExists.
//
// # Complexity
//
// Every command is O(log n) in tasks and workers (plus O(k log k) in the k
// records a recovery command changes): the queue, the lease expiries and the
// task ages are B-trees, and the live workers are a ring of slots in
// heartbeat order under an 8-ary tournament tree of selection keys (its
// packs O(n), amortised O(1)), so selection and dead-worker discovery
// never scan. CheckInvariants is the only O(n) audit and is meant for
// tests.
//
// # Redaction
//
// TaskSpec, ScanTask, AggregatedResult, *WorkerPool, *TaskQueue and
// *ResultAggregator redact targets and result bytes in every fmt verb and in
// slog; getters return real values. Error messages never contain a target, a
// result or an identifier that failed validation.
//
// # Trust boundary
//
// Leases, fences and receipts are structural fences for one coordinator
// epoch, not capabilities: MarshalBinary/UnmarshalBinary let a host carry
// them, and the node wraps them in HMAC-signed tokens bound to the cluster
// epoch and tenant.
package distributed
