package distributed

// ResultSize returns the length in bytes of the task's stored result and
// true, or 0 and false if the task has no result, without copying the
// result (GetResult copies it: a restore that only sums result sizes
// would copy every stored result once more). An invalid task ID fails
// with ErrInvalidTask.
func (a *ResultAggregator) ResultSize(taskID string) (int, bool, error) {
	if a == nil {
		return 0, false, errNilResultAggregator()
	}
	if !ValidIdentifier(taskID) {
		return 0, false, invalidTaskID()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.initLocked()
	r, ok := a.results[taskID]
	if !ok {
		return 0, false, nil
	}
	return len(r.data), true, nil
}

// StoreResultOwned is StoreResult for a result the caller hands over: on
// Stored the aggregator keeps result itself, not a copy, so the caller
// must never modify it afterwards (the FSM passes the result it just
// decoded from a log entry, a fresh slice nothing else holds; copying it
// again was one of a 64 KiB result's needless copies). Checks, errors and
// outcomes are exactly StoreResult's. Stored results are never modified
// in place, so a result kept this way stays as stored.
func (a *ResultAggregator) StoreResultOwned(expectedRevision uint64, receipt CompletionReceipt, result []byte) (Transition[StoreResultOutcome], error) {
	return a.storeResult(expectedRevision, receipt, result, true)
}
