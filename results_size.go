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
