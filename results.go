package distributed

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
)

// ResultAggregator stores the result bytes of completed tasks, at most one
// per task ID, and returns them in the order a caller asks for (contract A.11).
// It is a pure, bounded state machine: every limit is a ResultLimits field,
// nothing is evicted, and every failure returns an *Error and leaves the
// state exactly as it was.
//
// All methods are safe for concurrent use; one mutex guards the state.
// The zero value behaves like NewResultAggregator() (DefaultResultLimits);
// a nil *ResultAggregator fails every command with ErrStateInvariant instead
// of panicking.
//
// Nil and empty results are the same result: both are stored as an empty,
// non-nil slice, compare equal for AlreadyStored, and read back as an empty,
// non-nil slice.
//
// Result bytes are redacted in every formatted form of the aggregator
// (String, GoString, fmt verbs, slog); GetResult and AggregateResults return
// the real bytes as copies that never alias internal state.
//
// The store cannot authenticate a receipt's origin: it only checks that the
// receipt is well formed and that a task's result is never replaced.
type ResultAggregator struct {
	mu sync.Mutex

	// limits never changes after initialisation.
	// Invariant: limits.Validate() == nil.
	limits ResultLimits

	// revision counts accepted Stored and PurgeResults commands; AlreadyStored replays and
	// failures leave it alone.
	// Invariant: revision >= len(results).
	revision uint64

	// totalBytes is the sum of the stored results' lengths.
	// Invariant: totalBytes == Σ len(results[id].data) <= limits.MaxTotalBytes.
	totalBytes int

	// results maps a task ID to its stored result. Values are pointers, so a
	// by-value copy formatted through reflection shows addresses, never bytes.
	// Invariant: len(results) <= limits.MaxResults; for every entry the key
	// equals receipt.taskID, both receipt identifiers are valid, data is not
	// nil and len(data) <= limits.MaxResultBytes.
	results map[string]*storedResult
}

// storedResult is one retained result. It is never mutated after the store,
// which is why restored and cloned states may share entries.
type storedResult struct {
	receipt CompletionReceipt
	data    []byte // never nil; never aliased outside the aggregator
}

// Results of up to 32 bytes are stored in the same allocation as their
// entry: 96 + 16 bytes is one 112-byte object, 96 + 32 one of 128, where a
// separate copy would be two objects of the same total size — one
// allocation less, no memory more.
const (
	tinyResultBytes  = 16
	smallResultBytes = 32
)

// newStoredResult returns an entry holding receipt and a copy of result.
// An empty result is an empty, non-nil slice (no allocation for it).
func newStoredResult(receipt CompletionReceipt, result []byte) *storedResult {
	n := len(result)
	switch {
	case n == 0 || n > smallResultBytes:
		return &storedResult{receipt: receipt, data: append(make([]byte, 0, n), result...)}
	case n <= tinyResultBytes:
		e := &struct {
			storedResult
			buf [tinyResultBytes]byte
		}{storedResult: storedResult{receipt: receipt}}
		e.data = append(e.buf[:0:n], result...)
		return &e.storedResult
	}
	e := &struct {
		storedResult
		buf [smallResultBytes]byte
	}{storedResult: storedResult{receipt: receipt}}
	e.data = append(e.buf[:0:n], result...)
	return &e.storedResult
}

// NewResultAggregator returns an empty aggregator with DefaultResultLimits.
func NewResultAggregator() *ResultAggregator {
	return newResultAggregator(DefaultResultLimits())
}

// NewResultAggregatorWithLimits returns an empty aggregator with limits, or
// the error of limits.Validate() as is (ErrInvalidLimit,
// ErrCountLimitExceedsMaximum, ErrInvalidLimitRelationship).
func NewResultAggregatorWithLimits(limits ResultLimits) (*ResultAggregator, error) {
	if err := limits.Validate(); err != nil {
		return nil, err
	}
	return newResultAggregator(limits), nil
}

func newResultAggregator(limits ResultLimits) *ResultAggregator {
	return &ResultAggregator{limits: limits, results: make(map[string]*storedResult)}
}

// initLocked makes the zero value usable. Callers hold a.mu.
func (a *ResultAggregator) initLocked() {
	if a.results == nil {
		if a.limits == (ResultLimits{}) {
			a.limits = DefaultResultLimits()
		}
		a.results = make(map[string]*storedResult)
	}
}

func errNilResultAggregator() *Error {
	return invariantError("result aggregator is nil")
}

// StoreResult stores result for the receipt's task and returns the revision
// it committed. Checks, first failure wins:
//
//  1. the receipt's task ID, then its worker ID, must be valid identifiers
//     (ErrInvalidTask / ErrInvalidWorker with the command identifier
//     reasons); a zero receipt fails here;
//  2. expectedRevision must be the current revision (ErrRevisionConflict);
//  3. if the task already has a result: the same receipt and equal bytes
//     return AlreadyStored at the current revision and change nothing; the
//     same receipt with other bytes is ErrConflictingResult; another receipt
//     is ErrMismatchedResultReceipt;
//  4. len(result) above MaxResultBytes (ErrResultTooLarge), MaxResults
//     results already stored (ErrResultCapacityReached), the new total above
//     MaxTotalBytes (ErrTotalResultBytesExceeded);
//  5. a revision counter that would overflow (ErrCounterExhausted
//     "revision").
//
// On success a copy of result is stored, the revision increments once and
// the outcome is Stored. The caller may reuse result afterwards.
func (a *ResultAggregator) StoreResult(expectedRevision uint64, receipt CompletionReceipt, result []byte) (Transition[StoreResultOutcome], error) {
	var none Transition[StoreResultOutcome]
	if a == nil {
		return none, errNilResultAggregator()
	}
	if !ValidIdentifier(receipt.taskID) {
		return none, invalidTaskID()
	}
	if !ValidIdentifier(receipt.workerID) {
		return none, invalidWorkerID()
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	a.initLocked()

	if expectedRevision != a.revision {
		return none, &Error{Kind: KindRevisionConflict, Expected: expectedRevision, Actual: a.revision}
	}
	if prev, ok := a.results[receipt.taskID]; ok {
		switch {
		case prev.receipt != receipt:
			return none, &Error{Kind: KindMismatchedResultReceipt, TaskID: receipt.taskID}
		case !bytes.Equal(prev.data, result):
			return none, &Error{Kind: KindConflictingResult, TaskID: receipt.taskID}
		}
		return Transition[StoreResultOutcome]{Revision: a.revision, Value: StoreResultOutcome{Kind: AlreadyStored}}, nil
	}
	size := len(result)
	if err := a.checkNewLocked(size); err != nil {
		return none, err
	}

	a.results[receipt.taskID] = newStoredResult(receipt, result)
	a.totalBytes += size
	a.revision++
	return Transition[StoreResultOutcome]{Revision: a.revision, Value: StoreResultOutcome{Kind: Stored}}, nil
}

// checkNewLocked runs StoreResult's checks for a new result of size bytes
// after the occupied-ID check: size, count, total bytes, then the revision
// counter. The caller holds a.mu.
func (a *ResultAggregator) checkNewLocked(size int) *Error {
	if size > a.limits.MaxResultBytes {
		return &Error{Kind: KindResultTooLarge, Actual: uint64(size), Limit: uint64(a.limits.MaxResultBytes)}
	}
	if len(a.results) >= a.limits.MaxResults {
		return &Error{Kind: KindResultCapacityReached, Limit: uint64(a.limits.MaxResults)}
	}
	// NB: cannot overflow: totalBytes <= MaxTotalResultBytes and size <= MaxResultBytes.
	if total := a.totalBytes + size; total > a.limits.MaxTotalBytes {
		return &Error{Kind: KindTotalResultBytesExceeded, Actual: uint64(total), Limit: uint64(a.limits.MaxTotalBytes)}
	}
	if a.revision == math.MaxUint64 {
		return &Error{Kind: KindCounterExhausted, Counter: "revision"}
	}
	return nil
}

// CheckStore reports, without changing anything, the error StoreResult
// would return for a result of size bytes stored for taskID under a receipt
// the store has not seen (a fresh completion's): ErrInvalidTask for an
// invalid ID, ErrMismatchedResultReceipt when the task already has a
// result, then ErrResultTooLarge, ErrResultCapacityReached,
// ErrTotalResultBytesExceeded, ErrCounterExhausted. Hosts that complete a
// task and store its result in one step call it before completing, so the
// completion can never be left without its result.
func (a *ResultAggregator) CheckStore(taskID string, size int) error {
	if a == nil {
		return errNilResultAggregator()
	}
	if !ValidIdentifier(taskID) {
		return invalidTaskID()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.initLocked()
	if _, ok := a.results[taskID]; ok {
		return &Error{Kind: KindMismatchedResultReceipt, TaskID: taskID}
	}
	if err := a.checkNewLocked(size); err != nil {
		return err
	}
	return nil
}

// HasResult reports whether the task has a stored result, without copying
// it. An invalid task ID fails with ErrInvalidTask.
func (a *ResultAggregator) HasResult(taskID string) (bool, error) {
	if a == nil {
		return false, errNilResultAggregator()
	}
	if !ValidIdentifier(taskID) {
		return false, invalidTaskID()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.results[taskID]
	return ok, nil
}

// GetResult returns a copy of the task's result and true, or nil and false if
// the task has no result. An invalid task ID fails with ErrInvalidTask
// ("task command identifier is invalid").
func (a *ResultAggregator) GetResult(taskID string) ([]byte, bool, error) {
	if a == nil {
		return nil, false, errNilResultAggregator()
	}
	if !ValidIdentifier(taskID) {
		return nil, false, invalidTaskID()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.initLocked()
	r, ok := a.results[taskID]
	if !ok {
		return nil, false, nil
	}
	return append(make([]byte, 0, len(r.data)), r.data...), true, nil
}

// Revision returns the number of accepted Stored commands.
func (a *ResultAggregator) Revision() uint64 {
	if a == nil {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.revision
}

// ResultCount returns how many results are stored.
func (a *ResultAggregator) ResultCount() int {
	if a == nil {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.results)
}

// TotalBytes returns the sum of the stored results' lengths.
func (a *ResultAggregator) TotalBytes() int {
	if a == nil {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.totalBytes
}

// Limits returns the aggregator's limits.
func (a *ResultAggregator) Limits() ResultLimits {
	if a == nil {
		return ResultLimits{}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.initLocked()
	return a.limits
}

// AggregateResults returns copies of the results of taskIDs, in exactly the
// requested order. Checks, first failure wins:
//
//  1. more IDs than MaxAggregateItems (ErrAggregateItemLimitExceeded);
//  2. any invalid ID (ErrInvalidTask, "task command identifier is invalid");
//  3. per ID, in request order: an ID repeated (ErrDuplicateAggregateTask),
//     an ID without a result (ErrMissingResult), the running byte total above
//     MaxAggregateBytes (ErrAggregateBytesExceeded).
//
// An empty request returns an empty, non-nil slice. The returned results
// share one allocation but never overlap: appending to one never changes
// another, and none aliases the aggregator.
func (a *ResultAggregator) AggregateResults(taskIDs []string) ([]AggregatedResult, error) {
	if a == nil {
		return nil, errNilResultAggregator()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.initLocked()

	if len(taskIDs) > a.limits.MaxAggregateItems {
		return nil, &Error{Kind: KindAggregateItemLimitExceeded, Actual: uint64(len(taskIDs)), Limit: uint64(a.limits.MaxAggregateItems)}
	}
	for _, id := range taskIDs {
		if !ValidIdentifier(id) {
			return nil, invalidTaskID()
		}
	}
	found := make([]*storedResult, len(taskIDs))
	seen := make(map[string]struct{}, len(taskIDs))
	total := 0
	for i, id := range taskIDs {
		if _, dup := seen[id]; dup {
			return nil, &Error{Kind: KindDuplicateAggregateTask, TaskID: id}
		}
		seen[id] = struct{}{}
		r, ok := a.results[id]
		if !ok {
			return nil, &Error{Kind: KindMissingResult, TaskID: id}
		}
		// NB: cannot overflow: total <= MaxAggregateBytes + MaxResultBytes.
		total += len(r.data)
		if total > a.limits.MaxAggregateBytes {
			return nil, &Error{Kind: KindAggregateBytesExceeded, Actual: uint64(total), Limit: uint64(a.limits.MaxAggregateBytes)}
		}
		found[i] = r
	}

	buf := make([]byte, total)
	out := make([]AggregatedResult, len(taskIDs))
	off := 0
	for i, r := range found {
		end := off + copy(buf[off:], r.data)
		out[i] = AggregatedResult{TaskID: r.receipt.taskID, Result: buf[off:end:end]}
		off = end
	}
	return out, nil
}

// CheckInvariants audits the whole state in O(n) and returns
// ErrStateInvariant naming the first broken invariant, or nil. It is meant
// for tests, fuzzers and simulators, not for the hot path.
func (a *ResultAggregator) CheckInvariants() error {
	if a == nil {
		return errNilResultAggregator()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.initLocked()
	return a.checkInvariantsLocked()
}

func (a *ResultAggregator) checkInvariantsLocked() error {
	if a.limits.Validate() != nil {
		return invariantError("result limits are invalid")
	}
	if len(a.results) > a.limits.MaxResults {
		return invariantError("result count exceeds max_results")
	}
	if a.revision < uint64(len(a.results)) {
		return invariantError("revision is smaller than the result count")
	}
	sum := 0
	for id, r := range a.results {
		switch {
		case r == nil:
			return invariantError("stored result is nil")
		case id != r.receipt.taskID:
			return invariantError("result key differs from its receipt's task ID")
		case !ValidIdentifier(r.receipt.taskID):
			return invariantError("stored receipt has an invalid task ID")
		case !ValidIdentifier(r.receipt.workerID):
			return invariantError("stored receipt has an invalid worker ID")
		case r.data == nil:
			return invariantError("stored result bytes are nil")
		case len(r.data) > a.limits.MaxResultBytes:
			return invariantError("stored result exceeds max_result_bytes")
		}
		sum += len(r.data)
	}
	if sum != a.totalBytes {
		return invariantError("total bytes differ from the sum of stored results")
	}
	if a.totalBytes > a.limits.MaxTotalBytes {
		return invariantError("total bytes exceed max_total_bytes")
	}
	return nil
}

// resultAggregatorSummary reads what the formatted forms show. Never bytes.
func (a *ResultAggregator) resultAggregatorSummary() (revision uint64, results, totalBytes int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.revision, len(a.results), a.totalBytes
}

// String returns a summary without result bytes, e.g.
// "ResultAggregator{Revision:3 Results:2 TotalBytes:10}".
func (a *ResultAggregator) String() string {
	if a == nil {
		return "ResultAggregator(nil)"
	}
	rev, n, total := a.resultAggregatorSummary()
	return "ResultAggregator{Revision:" + strconv.FormatUint(rev, 10) +
		" Results:" + strconv.Itoa(n) + " TotalBytes:" + strconv.Itoa(total) + "}"
}

// GoString returns the %#v form, without result bytes.
func (a *ResultAggregator) GoString() string {
	if a == nil {
		return "(*distributed.ResultAggregator)(nil)"
	}
	rev, n, total := a.resultAggregatorSummary()
	return "&distributed.ResultAggregator{Revision:" + strconv.FormatUint(rev, 10) +
		", Results:" + strconv.Itoa(n) + ", TotalBytes:" + strconv.Itoa(total) + "}"
}

// Format implements fmt.Formatter so that every verb (%v %+v %#v %s %q %x
// and the rest) prints the redacted summary.
func (a *ResultAggregator) Format(f fmt.State, verb rune) {
	formatResultRedacted(f, verb, a.String(), a.GoString())
}

// LogValue implements slog.LogValuer: revision, result count and total bytes.
func (a *ResultAggregator) LogValue() slog.Value {
	if a == nil {
		return slog.StringValue("ResultAggregator(nil)")
	}
	rev, n, total := a.resultAggregatorSummary()
	return slog.GroupValue(
		slog.Uint64("revision", rev),
		slog.Int("results", n),
		slog.Int("total_bytes", total),
	)
}

func redactedResultBytes(n int) string {
	return "<redacted " + strconv.Itoa(n) + " bytes>"
}

// String returns the task ID and the result's length, never its bytes, e.g.
// "AggregatedResult{TaskID:t1 Result:<redacted 5 bytes>}".
func (r AggregatedResult) String() string {
	return "AggregatedResult{TaskID:" + r.TaskID + " Result:" + redactedResultBytes(len(r.Result)) + "}"
}

// GoString returns the %#v form, without result bytes.
func (r AggregatedResult) GoString() string {
	return "distributed.AggregatedResult{TaskID:" + strconv.Quote(r.TaskID) + ", Result:" + redactedResultBytes(len(r.Result)) + "}"
}

// Format implements fmt.Formatter so that every verb prints the redacted form.
func (r AggregatedResult) Format(f fmt.State, verb rune) {
	formatResultRedacted(f, verb, r.String(), r.GoString())
}

// LogValue implements slog.LogValuer: the task ID and the result's length.
func (r AggregatedResult) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("task_id", r.TaskID),
		slog.Int("result_bytes", len(r.Result)),
	)
}

// formatResultRedacted writes goSyntax for %#v, a quoted plain form for %q,
// and the plain form for every other verb. Both forms are already redacted.
func formatResultRedacted(f fmt.State, verb rune, plain, goSyntax string) {
	switch {
	case verb == 'v' && f.Flag('#'):
		_, _ = io.WriteString(f, goSyntax)
	case verb == 'q':
		_, _ = io.WriteString(f, strconv.Quote(plain))
	default:
		_, _ = io.WriteString(f, plain)
	}
}
