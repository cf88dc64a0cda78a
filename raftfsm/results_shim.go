package raftfsm

// TODO(node): remove this shim once main's ResultAggregator is merged; it
// mirrors the SPEC A.11 method set the FSM uses so the FSM compiles and can
// be tested before then.

import (
	"bytes"
	"encoding/gob"
	"sort"
	"sync"

	distributed "github.com/termivar/distributed"
)

type shimStored struct {
	Receipt []byte
	Data    []byte
}

type resultAggregator struct {
	mu       sync.Mutex
	limits   distributed.ResultLimits
	revision uint64
	total    int
	results  map[string]shimStored
}

func newResultAggregatorWithLimits(l distributed.ResultLimits) (*resultAggregator, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &resultAggregator{limits: l, results: map[string]shimStored{}}, nil
}

func (a *resultAggregator) StoreResult(rev uint64, r distributed.CompletionReceipt, b []byte) (distributed.Transition[distributed.StoreResultOutcome], error) {
	var none distributed.Transition[distributed.StoreResultOutcome]
	a.mu.Lock()
	defer a.mu.Unlock()
	if rev != a.revision {
		return none, &distributed.Error{Kind: distributed.KindRevisionConflict, Expected: rev, Actual: a.revision}
	}
	rb, _ := r.MarshalBinary()
	if prev, ok := a.results[r.TaskID()]; ok {
		if !bytes.Equal(prev.Receipt, rb) {
			return none, &distributed.Error{Kind: distributed.KindMismatchedResultReceipt}
		}
		if !bytes.Equal(prev.Data, b) {
			return none, &distributed.Error{Kind: distributed.KindConflictingResult}
		}
		return distributed.Transition[distributed.StoreResultOutcome]{Revision: a.revision, Value: distributed.StoreResultOutcome{Kind: distributed.AlreadyStored}}, nil
	}
	if len(b) > a.limits.MaxResultBytes {
		return none, &distributed.Error{Kind: distributed.KindResultTooLarge}
	}
	if len(a.results) >= a.limits.MaxResults {
		return none, &distributed.Error{Kind: distributed.KindResultCapacityReached}
	}
	if a.total+len(b) > a.limits.MaxTotalBytes {
		return none, &distributed.Error{Kind: distributed.KindTotalResultBytesExceeded}
	}
	a.results[r.TaskID()] = shimStored{Receipt: rb, Data: bytes.Clone(b)}
	a.total += len(b)
	a.revision++
	return distributed.Transition[distributed.StoreResultOutcome]{Revision: a.revision, Value: distributed.StoreResultOutcome{Kind: distributed.Stored}}, nil
}

func (a *resultAggregator) GetResult(id string) ([]byte, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.results[id]
	return bytes.Clone(s.Data), ok, nil
}

func (a *resultAggregator) Revision() uint64 { a.mu.Lock(); defer a.mu.Unlock(); return a.revision }
func (a *resultAggregator) ResultCount() int { a.mu.Lock(); defer a.mu.Unlock(); return len(a.results) }
func (a *resultAggregator) TotalBytes() int  { a.mu.Lock(); defer a.mu.Unlock(); return a.total }
func (a *resultAggregator) Limits() distributed.ResultLimits {
	return a.limits
}

func (a *resultAggregator) AggregateResults(ids []string) ([]distributed.AggregatedResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(ids) > a.limits.MaxAggregateItems {
		return nil, &distributed.Error{Kind: distributed.KindAggregateItemLimitExceeded}
	}
	seen := map[string]bool{}
	out := []distributed.AggregatedResult{}
	n := 0
	for _, id := range ids {
		if seen[id] {
			return nil, &distributed.Error{Kind: distributed.KindDuplicateAggregateTask}
		}
		seen[id] = true
		s, ok := a.results[id]
		if !ok {
			return nil, &distributed.Error{Kind: distributed.KindMissingResult}
		}
		n += len(s.Data)
		if n > a.limits.MaxAggregateBytes {
			return nil, &distributed.Error{Kind: distributed.KindAggregateBytesExceeded}
		}
		out = append(out, distributed.AggregatedResult{TaskID: id, Result: bytes.Clone(s.Data)})
	}
	return out, nil
}

type shimState struct {
	Limits   distributed.ResultLimits
	Revision uint64
	IDs      []string
	Results  []shimStored
}

func (a *resultAggregator) ExportState() ([]byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := shimState{Limits: a.limits, Revision: a.revision}
	for id := range a.results {
		st.IDs = append(st.IDs, id)
	}
	sort.Strings(st.IDs)
	for _, id := range st.IDs {
		st.Results = append(st.Results, a.results[id])
	}
	var buf bytes.Buffer
	err := gob.NewEncoder(&buf).Encode(st)
	return buf.Bytes(), err
}

func restoreResultAggregator(b []byte) (*resultAggregator, error) {
	var st shimState
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&st); err != nil {
		return nil, &distributed.Error{Kind: distributed.KindInvalidState}
	}
	a := &resultAggregator{limits: st.Limits, revision: st.Revision, results: map[string]shimStored{}}
	for i, id := range st.IDs {
		if i < len(st.Results) {
			a.results[id] = st.Results[i]
			a.total += len(st.Results[i].Data)
		}
	}
	return a, nil
}
