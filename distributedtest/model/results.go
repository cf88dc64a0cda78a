package model

import (
	distributed "github.com/termivar/distributed"
)

// Results is the reference ResultAggregator (contract A.11): a list of stored
// results, each under the receipt that stored it.
type Results struct {
	limits   distributed.ResultLimits
	revision uint64
	stored   []storedResult // insertion order; looked up by linear scan
}

type storedResult struct {
	receipt Receipt
	data    []byte
}

// NewResults returns an empty aggregator, or the limits' validation error.
func NewResults(l distributed.ResultLimits) (*Results, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &Results{limits: l}, nil
}

// Revision returns the number of accepted stores and purges so far (each is one
// revision).
func (r *Results) Revision() uint64 { return r.revision }

// ResultCount returns how many results are stored.
func (r *Results) ResultCount() int { return len(r.stored) }

// TotalBytes returns the bytes of all stored results.
func (r *Results) TotalBytes() int {
	n := 0
	for _, s := range r.stored {
		n += len(s.data)
	}
	return n
}

func (r *Results) find(taskID string) int {
	for i, s := range r.stored {
		if s.receipt.TaskID == taskID {
			return i
		}
	}
	return -1
}

func sameBytes(a, b []byte) bool { return string(a) == string(b) }

// StoreResult stores data under the receipt's task.
func (r *Results) StoreResult(rev uint64, rc Receipt, data []byte) (distributed.StoreResultOutcome, uint64, error) {
	var zero distributed.StoreResultOutcome
	if !distributed.ValidIdentifier(rc.TaskID) {
		return zero, 0, invalidTask(badTaskCommandID)
	}
	if !distributed.ValidIdentifier(rc.WorkerID) {
		return zero, 0, invalidWorker(badWorkerCommandID)
	}
	if rev != r.revision {
		return zero, 0, &distributed.Error{Kind: distributed.KindRevisionConflict, Expected: rev, Actual: r.revision}
	}
	if i := r.find(rc.TaskID); i >= 0 {
		s := r.stored[i]
		switch {
		case s.receipt == rc && sameBytes(s.data, data):
			return distributed.StoreResultOutcome{Kind: distributed.AlreadyStored}, r.revision, nil
		case s.receipt == rc:
			return zero, 0, &distributed.Error{Kind: distributed.KindConflictingResult, TaskID: rc.TaskID}
		default:
			return zero, 0, &distributed.Error{Kind: distributed.KindMismatchedResultReceipt, TaskID: rc.TaskID}
		}
	}
	l := r.limits
	switch {
	case len(data) > l.MaxResultBytes:
		return zero, 0, &distributed.Error{Kind: distributed.KindResultTooLarge, Actual: uint64(len(data)), Limit: uint64(l.MaxResultBytes)}
	case len(r.stored) >= l.MaxResults:
		return zero, 0, &distributed.Error{Kind: distributed.KindResultCapacityReached, Limit: uint64(l.MaxResults)}
	case r.TotalBytes()+len(data) > l.MaxTotalBytes:
		return zero, 0, &distributed.Error{Kind: distributed.KindTotalResultBytesExceeded, Actual: uint64(r.TotalBytes() + len(data)), Limit: uint64(l.MaxTotalBytes)}
	}
	r.stored = append(r.stored, storedResult{receipt: rc, data: append([]byte(nil), data...)})
	r.revision++
	return distributed.StoreResultOutcome{Kind: distributed.Stored}, r.revision, nil
}

// GetResult returns a copy of the task's result.
func (r *Results) GetResult(taskID string) ([]byte, bool, error) {
	if !distributed.ValidIdentifier(taskID) {
		return nil, false, invalidTask(badTaskCommandID)
	}
	i := r.find(taskID)
	if i < 0 {
		return nil, false, nil
	}
	return append([]byte(nil), r.stored[i].data...), true, nil
}

// AggregateResults returns the results of taskIDs in request order.
func (r *Results) AggregateResults(taskIDs []string) ([]distributed.AggregatedResult, error) {
	l := r.limits
	if len(taskIDs) > l.MaxAggregateItems {
		return nil, &distributed.Error{Kind: distributed.KindAggregateItemLimitExceeded, Actual: uint64(len(taskIDs)), Limit: uint64(l.MaxAggregateItems)}
	}
	for _, id := range taskIDs {
		if !distributed.ValidIdentifier(id) {
			return nil, invalidTask(badTaskCommandID)
		}
	}
	out := []distributed.AggregatedResult{}
	total := 0
	for i, id := range taskIDs {
		for _, earlier := range taskIDs[:i] {
			if earlier == id {
				return nil, &distributed.Error{Kind: distributed.KindDuplicateAggregateTask, TaskID: id}
			}
		}
		j := r.find(id)
		if j < 0 {
			return nil, &distributed.Error{Kind: distributed.KindMissingResult, TaskID: id}
		}
		total += len(r.stored[j].data)
		if total > l.MaxAggregateBytes {
			return nil, &distributed.Error{Kind: distributed.KindAggregateBytesExceeded, Actual: uint64(total), Limit: uint64(l.MaxAggregateBytes)}
		}
		out = append(out, distributed.AggregatedResult{TaskID: id, Result: append([]byte(nil), r.stored[j].data...)})
	}
	return out, nil
}
