package distributed

// Goal: prove every rule of contract A.11 for ResultAggregator — limit
// validation, the exact check order of StoreResult and AggregateResults, the
// detail fields of every error kind, exact boundaries (limit and limit+1),
// error atomicity, copy semantics, concurrency and redaction.
//
// Method: table-driven cases over small, hand-picked limits so that every
// boundary is cheap to reach; each failing case snapshots the observable
// state (Revision, ResultCount, TotalBytes, ExportState bytes and GetResult
// of the touched IDs) before and after and requires it unchanged. A seeded
// random walk compares the aggregator with a naive reference model.

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// smallResultLimits makes every store boundary reachable with a few bytes.
var smallResultLimits = ResultLimits{
	MaxResults:        3,
	MaxResultBytes:    8,
	MaxTotalBytes:     20,
	MaxAggregateItems: 4,
	MaxAggregateBytes: 12,
}

func testReceipt(taskID string) CompletionReceipt {
	return CompletionReceipt{
		taskID:           taskID,
		taskGeneration:   2,
		attempt:          3,
		leaseID:          41,
		workerID:         "worker-1",
		workerGeneration: 5,
		recordVersion:    9,
	}
}

func newTestAggregator(t testing.TB, l ResultLimits) *ResultAggregator {
	t.Helper()
	a, err := NewResultAggregatorWithLimits(l)
	if err != nil {
		t.Fatalf("NewResultAggregatorWithLimits(%+v) = %v", l, err)
	}
	return a
}

// mustStore stores at the current revision, requires Stored at revision+1
// and a passing audit.
func mustStore(t testing.TB, a *ResultAggregator, r CompletionReceipt, data []byte) {
	t.Helper()
	rev := a.Revision()
	got, err := a.StoreResult(rev, r, data)
	if err != nil {
		t.Fatalf("StoreResult(%d, %s, %d bytes) = %v", rev, r.taskID, len(data), err)
	}
	want := Transition[StoreResultOutcome]{Revision: rev + 1, Value: StoreResultOutcome{Kind: Stored}}
	if got != want {
		t.Fatalf("StoreResult(%d, %s) = %+v, want %+v", rev, r.taskID, got, want)
	}
	if err := a.CheckInvariants(); err != nil {
		t.Fatalf("CheckInvariants() after store = %v", err)
	}
}

type resultObservation struct {
	revision uint64
	count    int
	total    int
	export   []byte
	results  map[string][]byte // valid touched IDs; nil value = absent
}

func observeResults(t testing.TB, a *ResultAggregator, ids ...string) resultObservation {
	t.Helper()
	export, err := a.ExportState()
	if err != nil {
		t.Fatalf("ExportState() = %v", err)
	}
	o := resultObservation{
		revision: a.Revision(),
		count:    a.ResultCount(),
		total:    a.TotalBytes(),
		export:   export,
		results:  map[string][]byte{},
	}
	for _, id := range ids {
		if !ValidIdentifier(id) {
			continue
		}
		b, ok, err := a.GetResult(id)
		if err != nil {
			t.Fatalf("GetResult(%q) = %v", id, err)
		}
		if ok && b == nil {
			t.Fatalf("GetResult(%q) = nil, true; want a non-nil slice", id)
		}
		o.results[id] = b
	}
	return o
}

func requireUnchanged(t testing.TB, before, after resultObservation) {
	t.Helper()
	if before.revision != after.revision || before.count != after.count || before.total != after.total {
		t.Errorf("state changed: revision/count/total %d/%d/%d -> %d/%d/%d",
			before.revision, before.count, before.total, after.revision, after.count, after.total)
	}
	if !bytes.Equal(before.export, after.export) {
		t.Errorf("ExportState bytes changed")
	}
	if !reflect.DeepEqual(before.results, after.results) {
		t.Errorf("GetResult of touched IDs changed: %v -> %v", before.results, after.results)
	}
}

// requireError checks err is exactly want (all fields) and that errors.Is
// matches want's sentinel.
func requireError(t testing.TB, err error, want *Error) {
	t.Helper()
	var got *Error
	if !errors.As(err, &got) {
		t.Fatalf("error = %v (%T), want *Error %v", err, err, want)
	}
	if *got != *want {
		t.Fatalf("error = %#v, want %#v", *got, *want)
	}
	if !errors.Is(err, &Error{Kind: want.Kind}) {
		t.Fatalf("errors.Is(%v, kind %v) = false", err, want.Kind)
	}
}

func TestResultLimits_Validate(t *testing.T) {
	ok := smallResultLimits
	with := func(f func(*ResultLimits)) ResultLimits { l := ok; f(&l); return l }
	tests := []struct {
		name   string
		limits ResultLimits
		want   *Error // nil = valid
	}{
		{"default", DefaultResultLimits(), nil},
		{"maximum", MaximumResultLimits(), nil},
		{"small", ok, nil},
		{"result bytes equal total", with(func(l *ResultLimits) { l.MaxResultBytes = 20 }), nil},
		{"all ones", ResultLimits{1, 1, 1, 1, 1}, nil},
		{"zero value", ResultLimits{}, &Error{Kind: KindInvalidLimit, Name: "max_results"}},
		{"zero max_results", with(func(l *ResultLimits) { l.MaxResults = 0 }), &Error{Kind: KindInvalidLimit, Name: "max_results"}},
		{"negative max_results", with(func(l *ResultLimits) { l.MaxResults = -1 }), &Error{Kind: KindInvalidLimit, Name: "max_results"}},
		{"zero max_result_bytes", with(func(l *ResultLimits) { l.MaxResultBytes = 0 }), &Error{Kind: KindInvalidLimit, Name: "max_result_bytes"}},
		{"zero max_total_bytes", with(func(l *ResultLimits) { l.MaxTotalBytes = 0 }), &Error{Kind: KindInvalidLimit, Name: "max_total_bytes"}},
		{"zero max_aggregate_items", with(func(l *ResultLimits) { l.MaxAggregateItems = 0 }), &Error{Kind: KindInvalidLimit, Name: "max_aggregate_items"}},
		{"zero max_aggregate_bytes", with(func(l *ResultLimits) { l.MaxAggregateBytes = 0 }), &Error{Kind: KindInvalidLimit, Name: "max_aggregate_bytes"}},
		{"max_results above ceiling", with(func(l *ResultLimits) { l.MaxResults = MaxResults + 1 }),
			&Error{Kind: KindCountLimitExceedsMaximum, Name: "max_results", Actual: MaxResults + 1, Maximum: MaxResults}},
		{"max_result_bytes above ceiling", with(func(l *ResultLimits) { l.MaxResultBytes = MaxResultBytes + 1 }),
			&Error{Kind: KindCountLimitExceedsMaximum, Name: "max_result_bytes", Actual: MaxResultBytes + 1, Maximum: MaxResultBytes}},
		{"max_total_bytes above ceiling", with(func(l *ResultLimits) { l.MaxTotalBytes = MaxTotalResultBytes + 1 }),
			&Error{Kind: KindCountLimitExceedsMaximum, Name: "max_total_bytes", Actual: MaxTotalResultBytes + 1, Maximum: MaxTotalResultBytes}},
		{"max_aggregate_items above ceiling", with(func(l *ResultLimits) { l.MaxAggregateItems = MaxAggregateItems + 1 }),
			&Error{Kind: KindCountLimitExceedsMaximum, Name: "max_aggregate_items", Actual: MaxAggregateItems + 1, Maximum: MaxAggregateItems}},
		{"max_aggregate_bytes above ceiling", with(func(l *ResultLimits) { l.MaxAggregateBytes = MaxTotalResultBytes + 1 }),
			&Error{Kind: KindCountLimitExceedsMaximum, Name: "max_aggregate_bytes", Actual: MaxTotalResultBytes + 1, Maximum: MaxTotalResultBytes}},
		{"relationship", with(func(l *ResultLimits) { l.MaxResultBytes = 21 }),
			&Error{Kind: KindInvalidLimitRelationship, Reason: "max_result_bytes exceeds max_total_bytes"}},
		// Ordering: every zero before any ceiling, every ceiling before the relation.
		{"zero after ceiling still wins", with(func(l *ResultLimits) { l.MaxResults = MaxResults + 1; l.MaxAggregateBytes = 0 }),
			&Error{Kind: KindInvalidLimit, Name: "max_aggregate_bytes"}},
		{"first zero wins", with(func(l *ResultLimits) { l.MaxTotalBytes = 0; l.MaxResultBytes = 0 }),
			&Error{Kind: KindInvalidLimit, Name: "max_result_bytes"}},
		{"first ceiling wins", with(func(l *ResultLimits) { l.MaxAggregateItems = MaxAggregateItems + 1; l.MaxResults = MaxResults + 1 }),
			&Error{Kind: KindCountLimitExceedsMaximum, Name: "max_results", Actual: MaxResults + 1, Maximum: MaxResults}},
		{"ceiling before relationship", ResultLimits{1, MaxResultBytes + 1, 1, 1, 1},
			&Error{Kind: KindCountLimitExceedsMaximum, Name: "max_result_bytes", Actual: MaxResultBytes + 1, Maximum: MaxResultBytes}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.limits.Validate()
			a, nerr := NewResultAggregatorWithLimits(tt.limits)
			if tt.want == nil {
				if err != nil || nerr != nil {
					t.Fatalf("Validate() = %v, New = %v; want nil", err, nerr)
				}
				if got := a.Limits(); got != tt.limits {
					t.Fatalf("Limits() = %+v, want %+v", got, tt.limits)
				}
				return
			}
			requireError(t, err, tt.want)
			if a != nil {
				t.Fatalf("NewResultAggregatorWithLimits returned an aggregator with error %v", nerr)
			}
			if !reflect.DeepEqual(nerr, err) {
				t.Fatalf("NewResultAggregatorWithLimits error = %v, want Validate's %v as is", nerr, err)
			}
		})
	}
}

func TestNewResultAggregator(t *testing.T) {
	for name, a := range map[string]*ResultAggregator{
		"constructor": NewResultAggregator(),
		"zero value":  new(ResultAggregator),
	} {
		t.Run(name, func(t *testing.T) {
			if got := a.Limits(); got != DefaultResultLimits() {
				t.Fatalf("Limits() = %+v, want %+v", got, DefaultResultLimits())
			}
			if a.Revision() != 0 || a.ResultCount() != 0 || a.TotalBytes() != 0 {
				t.Fatalf("new aggregator: revision %d count %d total %d", a.Revision(), a.ResultCount(), a.TotalBytes())
			}
			if err := a.CheckInvariants(); err != nil {
				t.Fatalf("CheckInvariants() = %v", err)
			}
			mustStore(t, a, testReceipt("t1"), []byte("x"))
		})
	}
	if got, want := DefaultResultLimits(), (ResultLimits{1024, 1 << 20, 16 << 20, 1024, 16 << 20}); got != want {
		t.Fatalf("DefaultResultLimits() = %+v, want %+v", got, want)
	}
}

func TestResultAggregator_NilReceiver(t *testing.T) {
	var a *ResultAggregator
	if _, err := a.StoreResult(0, testReceipt("t1"), nil); !errors.Is(err, ErrStateInvariant) {
		t.Fatalf("nil StoreResult = %v", err)
	}
	if _, _, err := a.GetResult("t1"); !errors.Is(err, ErrStateInvariant) {
		t.Fatalf("nil GetResult = %v", err)
	}
	if _, err := a.AggregateResults(nil); !errors.Is(err, ErrStateInvariant) {
		t.Fatalf("nil AggregateResults = %v", err)
	}
	if _, err := a.ExportState(); !errors.Is(err, ErrStateInvariant) {
		t.Fatalf("nil ExportState = %v", err)
	}
	if err := a.CheckInvariants(); !errors.Is(err, ErrStateInvariant) {
		t.Fatalf("nil CheckInvariants = %v", err)
	}
	if a.Revision() != 0 || a.ResultCount() != 0 || a.TotalBytes() != 0 || a.Limits() != (ResultLimits{}) {
		t.Fatalf("nil getters not zero")
	}
	if s := fmt.Sprintf("%v %+v %#v %s", a, a, a, a); !strings.Contains(s, "nil") {
		t.Fatalf("nil formatting = %q", s)
	}
}

func TestResultAggregator_StoreResult(t *testing.T) {
	a := newTestAggregator(t, smallResultLimits)
	input := []byte("abc")
	got, err := a.StoreResult(0, testReceipt("t1"), input)
	if err != nil {
		t.Fatalf("StoreResult = %v", err)
	}
	if want := (Transition[StoreResultOutcome]{Revision: 1, Value: StoreResultOutcome{Kind: Stored}}); got != want {
		t.Fatalf("StoreResult = %+v, want %+v", got, want)
	}
	input[0] = 'X' // the aggregator stored a copy
	if b, ok, err := a.GetResult("t1"); err != nil || !ok || string(b) != "abc" {
		t.Fatalf("GetResult(t1) = %q, %v, %v; want abc, true, nil", b, ok, err)
	}
	if a.Revision() != 1 || a.ResultCount() != 1 || a.TotalBytes() != 3 {
		t.Fatalf("revision %d count %d total %d, want 1 1 3", a.Revision(), a.ResultCount(), a.TotalBytes())
	}
	mustStore(t, a, testReceipt("t2"), nil)
	mustStore(t, a, testReceipt("t3"), []byte{})
	if a.Revision() != 3 || a.ResultCount() != 3 || a.TotalBytes() != 3 {
		t.Fatalf("revision %d count %d total %d, want 3 3 3", a.Revision(), a.ResultCount(), a.TotalBytes())
	}
	for _, id := range []string{"t2", "t3"} {
		b, ok, err := a.GetResult(id)
		if err != nil || !ok || b == nil || len(b) != 0 {
			t.Fatalf("GetResult(%s) = %v, %v, %v; want non-nil empty, true, nil", id, b, ok, err)
		}
	}
}

func TestResultAggregator_StoreResultAlreadyStored(t *testing.T) {
	tests := []struct {
		name    string
		stored  []byte
		replay  []byte
		prepare func(t testing.TB, a *ResultAggregator)
	}{
		{name: "same bytes", stored: []byte("abc"), replay: []byte("abc")},
		{name: "nil after empty", stored: []byte{}, replay: nil},
		{name: "empty after nil", stored: nil, replay: []byte{}},
		{name: "max size", stored: []byte("12345678"), replay: []byte("12345678")},
		{name: "aggregator full", stored: []byte("abc"), replay: []byte("abc"), prepare: func(t testing.TB, a *ResultAggregator) {
			mustStore(t, a, testReceipt("t2"), []byte("12345678"))
			mustStore(t, a, testReceipt("t3"), []byte("123456789")[:8])
		}},
		{name: "revision exhausted", stored: []byte("abc"), replay: []byte("abc"), prepare: func(_ testing.TB, a *ResultAggregator) {
			a.revision = math.MaxUint64
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newTestAggregator(t, smallResultLimits)
			mustStore(t, a, testReceipt("t1"), tt.stored)
			if tt.prepare != nil {
				tt.prepare(t, a)
			}
			before := observeResults(t, a, "t1", "t2", "t3")
			got, err := a.StoreResult(a.Revision(), testReceipt("t1"), tt.replay)
			if err != nil {
				t.Fatalf("replay StoreResult = %v", err)
			}
			want := Transition[StoreResultOutcome]{Revision: before.revision, Value: StoreResultOutcome{Kind: AlreadyStored}}
			if got != want {
				t.Fatalf("replay StoreResult = %+v, want %+v", got, want)
			}
			requireUnchanged(t, before, observeResults(t, a, "t1", "t2", "t3"))
		})
	}
}

func TestResultAggregator_StoreResultErrors(t *testing.T) {
	long := strings.Repeat("t", MaxIdentifierBytes+1)
	receiptWith := func(f func(*CompletionReceipt)) CompletionReceipt { r := testReceipt("t1"); f(&r); return r }
	fill := func(sizes ...int) func(testing.TB, *ResultAggregator) {
		return func(t testing.TB, a *ResultAggregator) {
			for i, n := range sizes {
				mustStore(t, a, testReceipt("t"+strconv.Itoa(i+1)), bytes.Repeat([]byte{'A' + byte(i)}, n))
			}
		}
	}
	exhaust := func(sizes ...int) func(testing.TB, *ResultAggregator) {
		return func(t testing.TB, a *ResultAggregator) { fill(sizes...)(t, a); a.revision = math.MaxUint64 }
	}
	tooLarge := &Error{Kind: KindResultTooLarge, Actual: 9, Limit: 8}
	tests := []struct {
		name    string
		setup   func(testing.TB, *ResultAggregator)
		revOff  int64 // added to the current revision
		receipt CompletionReceipt
		data    []byte
		want    *Error
	}{
		// 1. Argument validation, before the revision check.
		{name: "zero receipt", receipt: CompletionReceipt{}, want: invalidTaskID()},
		{name: "empty task ID", receipt: receiptWith(func(r *CompletionReceipt) { r.taskID = "" }), want: invalidTaskID()},
		{name: "task ID too long", receipt: receiptWith(func(r *CompletionReceipt) { r.taskID = long }), want: invalidTaskID()},
		{name: "task ID space", receipt: receiptWith(func(r *CompletionReceipt) { r.taskID = "bad id" }), want: invalidTaskID()},
		{name: "task ID slash", receipt: receiptWith(func(r *CompletionReceipt) { r.taskID = "bad/id" }), want: invalidTaskID()},
		{name: "task ID NUL", receipt: receiptWith(func(r *CompletionReceipt) { r.taskID = "bad\x00" }), want: invalidTaskID()},
		{name: "task ID non-ASCII", receipt: receiptWith(func(r *CompletionReceipt) { r.taskID = "bäd" }), want: invalidTaskID()},
		{name: "empty worker ID", receipt: receiptWith(func(r *CompletionReceipt) { r.workerID = "" }), want: invalidWorkerID()},
		{name: "worker ID unsafe", receipt: receiptWith(func(r *CompletionReceipt) { r.workerID = "bad worker" }), want: invalidWorkerID()},
		{name: "worker ID too long", receipt: receiptWith(func(r *CompletionReceipt) { r.workerID = long }), want: invalidWorkerID()},
		{name: "task ID checked before worker ID", receipt: receiptWith(func(r *CompletionReceipt) { r.taskID = "bad id"; r.workerID = "" }), want: invalidTaskID()},
		{name: "invalid task ID before revision", setup: fill(1), revOff: 5, receipt: receiptWith(func(r *CompletionReceipt) { r.taskID = "bad id" }), want: invalidTaskID()},
		{name: "invalid worker ID before revision", setup: fill(1), revOff: -1, receipt: receiptWith(func(r *CompletionReceipt) { r.workerID = "bad worker" }), want: invalidWorkerID()},
		// 2. Revision check, before the occupied-ID rules.
		{name: "stale revision", setup: fill(1), revOff: -1, receipt: testReceipt("t9"), want: &Error{Kind: KindRevisionConflict, Expected: 0, Actual: 1}},
		{name: "future revision", setup: fill(1), revOff: 4, receipt: testReceipt("t9"), want: &Error{Kind: KindRevisionConflict, Expected: 5, Actual: 1}},
		{name: "future revision on empty", revOff: 1, receipt: testReceipt("t9"), want: &Error{Kind: KindRevisionConflict, Expected: 1, Actual: 0}},
		{name: "exact replay with stale revision", setup: fill(1, 1), revOff: -1, receipt: testReceipt("t1"), data: []byte("A"), want: &Error{Kind: KindRevisionConflict, Expected: 1, Actual: 2}},
		{name: "oversized with stale revision", setup: fill(1), revOff: -1, receipt: testReceipt("t9"), data: []byte("123456789"), want: &Error{Kind: KindRevisionConflict, Expected: 0, Actual: 1}},
		// 3. Occupied task ID.
		{name: "conflicting bytes", setup: fill(4), receipt: testReceipt("t1"), data: []byte("BBBB"), want: &Error{Kind: KindConflictingResult, TaskID: "t1"}},
		{name: "conflicting longer", setup: fill(4), receipt: testReceipt("t1"), data: []byte("AAAAA"), want: &Error{Kind: KindConflictingResult, TaskID: "t1"}},
		{name: "conflicting empty vs stored", setup: fill(4), receipt: testReceipt("t1"), data: nil, want: &Error{Kind: KindConflictingResult, TaskID: "t1"}},
		{name: "conflicting bytes vs stored empty", setup: fill(0), receipt: testReceipt("t1"), data: []byte("x"), want: &Error{Kind: KindConflictingResult, TaskID: "t1"}},
		{name: "conflicting beats too large", setup: fill(4), receipt: testReceipt("t1"), data: []byte("123456789"), want: &Error{Kind: KindConflictingResult, TaskID: "t1"}},
		{name: "conflicting when full", setup: fill(8, 8, 4), receipt: testReceipt("t1"), data: []byte("x"), want: &Error{Kind: KindConflictingResult, TaskID: "t1"}},
		{name: "mismatched task generation", setup: fill(4), receipt: receiptWith(func(r *CompletionReceipt) { r.taskGeneration++ }), data: []byte("AAAA"), want: &Error{Kind: KindMismatchedResultReceipt, TaskID: "t1"}},
		{name: "mismatched attempt", setup: fill(4), receipt: receiptWith(func(r *CompletionReceipt) { r.attempt++ }), data: []byte("AAAA"), want: &Error{Kind: KindMismatchedResultReceipt, TaskID: "t1"}},
		{name: "mismatched lease ID", setup: fill(4), receipt: receiptWith(func(r *CompletionReceipt) { r.leaseID++ }), data: []byte("AAAA"), want: &Error{Kind: KindMismatchedResultReceipt, TaskID: "t1"}},
		{name: "mismatched worker ID", setup: fill(4), receipt: receiptWith(func(r *CompletionReceipt) { r.workerID = "worker-2" }), data: []byte("AAAA"), want: &Error{Kind: KindMismatchedResultReceipt, TaskID: "t1"}},
		{name: "mismatched worker generation", setup: fill(4), receipt: receiptWith(func(r *CompletionReceipt) { r.workerGeneration++ }), data: []byte("AAAA"), want: &Error{Kind: KindMismatchedResultReceipt, TaskID: "t1"}},
		{name: "mismatched record version", setup: fill(4), receipt: receiptWith(func(r *CompletionReceipt) { r.recordVersion++ }), data: []byte("AAAA"), want: &Error{Kind: KindMismatchedResultReceipt, TaskID: "t1"}},
		{name: "mismatched with other bytes", setup: fill(4), receipt: receiptWith(func(r *CompletionReceipt) { r.leaseID = 1 }), data: []byte("ZZ"), want: &Error{Kind: KindMismatchedResultReceipt, TaskID: "t1"}},
		{name: "mismatched beats too large", setup: fill(4), receipt: receiptWith(func(r *CompletionReceipt) { r.attempt = 1 }), data: []byte("123456789"), want: &Error{Kind: KindMismatchedResultReceipt, TaskID: "t1"}},
		{name: "mismatched when revision exhausted", setup: exhaust(4), receipt: receiptWith(func(r *CompletionReceipt) { r.attempt = 1 }), data: []byte("AAAA"), want: &Error{Kind: KindMismatchedResultReceipt, TaskID: "t1"}},
		// 4. Limits, in order.
		{name: "too large (limit+1)", receipt: testReceipt("t1"), data: []byte("123456789"), want: tooLarge},
		{name: "too large way above", receipt: testReceipt("t1"), data: make([]byte, 1<<20), want: &Error{Kind: KindResultTooLarge, Actual: 1 << 20, Limit: 8}},
		{name: "too large beats capacity", setup: fill(1, 1, 1), receipt: testReceipt("t9"), data: []byte("123456789"), want: tooLarge},
		{name: "too large beats revision exhausted", setup: exhaust(1), receipt: testReceipt("t9"), data: []byte("123456789"), want: tooLarge},
		{name: "capacity (MaxResults+1)", setup: fill(1, 1, 1), receipt: testReceipt("t9"), data: []byte("x"), want: &Error{Kind: KindResultCapacityReached, Limit: 3}},
		{name: "capacity with empty result", setup: fill(0, 0, 0), receipt: testReceipt("t9"), data: nil, want: &Error{Kind: KindResultCapacityReached, Limit: 3}},
		{name: "capacity beats total bytes", setup: fill(8, 8, 4), receipt: testReceipt("t9"), data: []byte("x"), want: &Error{Kind: KindResultCapacityReached, Limit: 3}},
		{name: "capacity beats revision exhausted", setup: exhaust(1, 1, 1), receipt: testReceipt("t9"), data: nil, want: &Error{Kind: KindResultCapacityReached, Limit: 3}},
		{name: "total bytes (limit+1)", setup: fill(8, 8), receipt: testReceipt("t9"), data: []byte("12345"), want: &Error{Kind: KindTotalResultBytesExceeded, Actual: 21, Limit: 20}},
		{name: "total bytes with max result", setup: fill(8, 8), receipt: testReceipt("t9"), data: []byte("12345678"), want: &Error{Kind: KindTotalResultBytesExceeded, Actual: 24, Limit: 20}},
		{name: "total bytes beats revision exhausted", setup: exhaust(8, 8), receipt: testReceipt("t9"), data: []byte("12345"), want: &Error{Kind: KindTotalResultBytesExceeded, Actual: 21, Limit: 20}},
		// 5. Counter overflow, last.
		{name: "revision exhausted", setup: exhaust(1), receipt: testReceipt("t9"), data: []byte("x"), want: &Error{Kind: KindCounterExhausted, Counter: "revision"}},
		{name: "revision exhausted on empty", setup: exhaust(), receipt: testReceipt("t9"), want: &Error{Kind: KindCounterExhausted, Counter: "revision"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newTestAggregator(t, smallResultLimits)
			if tt.setup != nil {
				tt.setup(t, a)
			}
			touched := []string{tt.receipt.taskID, "t1", "t2", "t3", "t9"}
			before := observeResults(t, a, touched...)
			rev := uint64(int64(a.Revision()) + tt.revOff)
			got, err := a.StoreResult(rev, tt.receipt, tt.data)
			requireError(t, err, tt.want)
			if got != (Transition[StoreResultOutcome]{}) {
				t.Errorf("failed StoreResult returned %+v, want the zero transition", got)
			}
			requireUnchanged(t, before, observeResults(t, a, touched...))
			msg := err.Error()
			if !ValidIdentifier(tt.receipt.taskID) && tt.receipt.taskID != "" && strings.Contains(msg, tt.receipt.taskID) {
				t.Errorf("error %q echoes the invalid task ID", msg)
			}
			if !ValidIdentifier(tt.receipt.workerID) && tt.receipt.workerID != "" && strings.Contains(msg, tt.receipt.workerID) {
				t.Errorf("error %q echoes the invalid worker ID", msg)
			}
			if len(tt.data) >= 4 && strings.Contains(msg, string(tt.data)) {
				t.Errorf("error %q contains the result bytes", msg)
			}
			if err := a.CheckInvariants(); err != nil {
				t.Errorf("CheckInvariants() after failure = %v", err)
			}
		})
	}
}

func TestResultAggregator_StoreResultBoundaries(t *testing.T) {
	t.Run("identifier of 256 bytes", func(t *testing.T) {
		a := newTestAggregator(t, smallResultLimits)
		r := testReceipt(strings.Repeat("t", MaxIdentifierBytes))
		r.workerID = strings.Repeat("w", MaxIdentifierBytes)
		mustStore(t, a, r, []byte("x"))
	})
	t.Run("result at MaxResultBytes", func(t *testing.T) {
		a := newTestAggregator(t, smallResultLimits)
		mustStore(t, a, testReceipt("t1"), []byte("12345678"))
	})
	t.Run("MaxResults results then capacity", func(t *testing.T) {
		a := newTestAggregator(t, smallResultLimits)
		for i := range smallResultLimits.MaxResults {
			mustStore(t, a, testReceipt("t"+strconv.Itoa(i)), []byte("x"))
		}
		_, err := a.StoreResult(a.Revision(), testReceipt("tx"), nil)
		requireError(t, err, &Error{Kind: KindResultCapacityReached, Limit: 3})
	})
	t.Run("total exactly at MaxTotalBytes", func(t *testing.T) {
		a := newTestAggregator(t, smallResultLimits)
		mustStore(t, a, testReceipt("t1"), []byte("12345678"))
		mustStore(t, a, testReceipt("t2"), []byte("12345678"))
		mustStore(t, a, testReceipt("t3"), []byte("1234"))
		if a.TotalBytes() != 20 {
			t.Fatalf("TotalBytes() = %d, want 20", a.TotalBytes())
		}
	})
	t.Run("last revision", func(t *testing.T) {
		a := newTestAggregator(t, smallResultLimits)
		a.revision = math.MaxUint64 - 1
		mustStore(t, a, testReceipt("t1"), nil)
		if a.Revision() != math.MaxUint64 {
			t.Fatalf("Revision() = %d, want MaxUint64", a.Revision())
		}
	})
	t.Run("default MaxResultBytes and +1", func(t *testing.T) {
		a := NewResultAggregator()
		limit := DefaultResultLimits().MaxResultBytes
		_, err := a.StoreResult(0, testReceipt("big"), make([]byte, limit+1))
		requireError(t, err, &Error{Kind: KindResultTooLarge, Actual: uint64(limit + 1), Limit: uint64(limit)})
		mustStore(t, a, testReceipt("big"), make([]byte, limit))
	})
	t.Run("maximum MaxResults and +1", func(t *testing.T) {
		if testing.Short() {
			t.Skip("stores 65536 results")
		}
		a := newTestAggregator(t, MaximumResultLimits())
		for i := range MaxResults {
			if _, err := a.StoreResult(uint64(i), testReceipt("t"+strconv.Itoa(i)), []byte{byte(i)}); err != nil {
				t.Fatalf("store %d: %v", i, err)
			}
		}
		before := observeResults(t, a, "t0", "over")
		_, err := a.StoreResult(a.Revision(), testReceipt("over"), nil)
		requireError(t, err, &Error{Kind: KindResultCapacityReached, Limit: MaxResults})
		requireUnchanged(t, before, observeResults(t, a, "t0", "over"))
		if err := a.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestResultAggregator_GetResult(t *testing.T) {
	a := newTestAggregator(t, smallResultLimits)
	mustStore(t, a, testReceipt("t1"), []byte("abc"))
	for _, id := range []string{"", "bad id", strings.Repeat("x", MaxIdentifierBytes+1), "ä"} {
		b, ok, err := a.GetResult(id)
		requireError(t, err, invalidTaskID())
		if b != nil || ok {
			t.Fatalf("GetResult(%q) = %v, %v, want nil, false", id, b, ok)
		}
	}
	if b, ok, err := a.GetResult("t2"); b != nil || ok || err != nil {
		t.Fatalf("GetResult(absent) = %v, %v, %v; want nil, false, nil", b, ok, err)
	}
	b, _, _ := a.GetResult("t1")
	b[0] = 'X'
	_ = append(b[:1], 'Y', 'Z', 'W')
	if again, _, _ := a.GetResult("t1"); string(again) != "abc" {
		t.Fatalf("GetResult after mutating a returned copy = %q, want abc", again)
	}
}

func TestResultAggregator_AggregateResults(t *testing.T) {
	limits := ResultLimits{MaxResults: 8, MaxResultBytes: 8, MaxTotalBytes: 64, MaxAggregateItems: 4, MaxAggregateBytes: 12}
	stored := []struct {
		id   string
		data string
	}{{"t1", "aaaa"}, {"t2", "bbbbbbbb"}, {"t3", ""}, {"t4", "d"}, {"t5", "eeeeeee"}}
	build := func(t *testing.T) *ResultAggregator {
		a := newTestAggregator(t, limits)
		for _, s := range stored {
			mustStore(t, a, testReceipt(s.id), []byte(s.data))
		}
		return a
	}
	data := map[string]string{}
	for _, s := range stored {
		data[s.id] = s.data
	}
	tests := []struct {
		name string
		ids  []string
		want *Error // nil = success
	}{
		{name: "nil request", ids: nil},
		{name: "empty request", ids: []string{}},
		{name: "one", ids: []string{"t2"}},
		{name: "empty result", ids: []string{"t3"}},
		{name: "items and bytes exactly at limit, request order", ids: []string{"t5", "t3", "t4", "t1"}},
		{name: "bytes exactly at limit", ids: []string{"t2", "t1"}},
		{name: "items limit+1", ids: []string{"t1", "t2", "t3", "t4", "t5"}, want: &Error{Kind: KindAggregateItemLimitExceeded, Actual: 5, Limit: 4}},
		{name: "items limit beats invalid IDs", ids: []string{"bad id", "", "t1", "t1", "zz"}, want: &Error{Kind: KindAggregateItemLimitExceeded, Actual: 5, Limit: 4}},
		{name: "invalid ID", ids: []string{"t1", "bad id"}, want: invalidTaskID()},
		{name: "empty ID", ids: []string{""}, want: invalidTaskID()},
		{name: "invalid beats earlier missing", ids: []string{"zz", "bad/id"}, want: invalidTaskID()},
		{name: "invalid beats earlier duplicate", ids: []string{"t1", "t1", "bad id"}, want: invalidTaskID()},
		{name: "invalid beats earlier bytes", ids: []string{"t2", "t5", "bad id"}, want: invalidTaskID()},
		{name: "duplicate", ids: []string{"t1", "t1"}, want: &Error{Kind: KindDuplicateAggregateTask, TaskID: "t1"}},
		{name: "duplicate not adjacent", ids: []string{"t3", "t1", "t4", "t3"}, want: &Error{Kind: KindDuplicateAggregateTask, TaskID: "t3"}},
		{name: "missing", ids: []string{"t1", "zz"}, want: &Error{Kind: KindMissingResult, TaskID: "zz"}},
		{name: "missing before its duplicate", ids: []string{"zz", "zz"}, want: &Error{Kind: KindMissingResult, TaskID: "zz"}},
		{name: "duplicate before later missing", ids: []string{"t1", "t1", "zz"}, want: &Error{Kind: KindDuplicateAggregateTask, TaskID: "t1"}},
		{name: "missing before later bytes", ids: []string{"zz", "t2", "t5"}, want: &Error{Kind: KindMissingResult, TaskID: "zz"}},
		{name: "bytes limit+1", ids: []string{"t2", "t1", "t4"}, want: &Error{Kind: KindAggregateBytesExceeded, Actual: 13, Limit: 12}},
		{name: "bytes before later missing", ids: []string{"t2", "t5", "zz"}, want: &Error{Kind: KindAggregateBytesExceeded, Actual: 15, Limit: 12}},
		{name: "bytes before later duplicate", ids: []string{"t2", "t5", "t2"}, want: &Error{Kind: KindAggregateBytesExceeded, Actual: 15, Limit: 12}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := build(t)
			touched := append([]string{"t1", "t2", "t3", "t4", "t5"}, tt.ids...)
			before := observeResults(t, a, touched...)
			got, err := a.AggregateResults(tt.ids)
			requireUnchanged(t, before, observeResults(t, a, touched...))
			if tt.want != nil {
				requireError(t, err, tt.want)
				if got != nil {
					t.Fatalf("failed AggregateResults returned %v", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("AggregateResults(%q) = %v", tt.ids, err)
			}
			if got == nil || len(got) != len(tt.ids) {
				t.Fatalf("AggregateResults(%q) returned %d results (nil=%v), want %d", tt.ids, len(got), got == nil, len(tt.ids))
			}
			for i, r := range got {
				if r.TaskID != tt.ids[i] || string(r.Result) != data[tt.ids[i]] || r.Result == nil {
					t.Fatalf("result %d = %s %q, want %s %q", i, r.TaskID, r.Result, tt.ids[i], data[tt.ids[i]])
				}
			}
			// No aliasing: overwrite every returned result, then append to
			// each; an append must never spill into its neighbour.
			for i := range got {
				for j := range got[i].Result {
					got[i].Result[j] = '#'
				}
			}
			for i := range got {
				_ = append(got[i].Result, '!') // one byte: fits any spare capacity
			}
			for i, r := range got {
				if strings.Trim(string(r.Result), "#") != "" {
					t.Fatalf("result %d was overwritten by an append to another: %q", i, r.Result)
				}
			}
			requireUnchanged(t, before, observeResults(t, a, touched...))
		})
	}
}

func TestResultAggregator_AggregateResultsDefaultItemLimit(t *testing.T) {
	a := NewResultAggregator()
	limit := DefaultResultLimits().MaxAggregateItems
	ids := make([]string, limit+1)
	for i := range ids {
		ids[i] = "t" + strconv.Itoa(i)
		if i < limit {
			mustStore(t, a, testReceipt(ids[i]), []byte(ids[i]))
		}
	}
	_, err := a.AggregateResults(ids)
	requireError(t, err, &Error{Kind: KindAggregateItemLimitExceeded, Actual: uint64(limit + 1), Limit: uint64(limit)})
	got, err := a.AggregateResults(ids[:limit])
	if err != nil || len(got) != limit {
		t.Fatalf("AggregateResults(%d ids) = %d results, %v", limit, len(got), err)
	}
	// The last ID is a duplicate of the first: found even at the far end.
	dup := append(append([]string(nil), ids[:limit-1]...), ids[0])
	_, err = a.AggregateResults(dup)
	requireError(t, err, &Error{Kind: KindDuplicateAggregateTask, TaskID: "t0"})
}

func TestResultAggregator_CheckInvariants(t *testing.T) {
	corruptions := map[string]func(a *ResultAggregator){
		"total bytes":      func(a *ResultAggregator) { a.totalBytes++ },
		"revision below":   func(a *ResultAggregator) { a.revision = 1 },
		"key mismatch":     func(a *ResultAggregator) { a.results["other"] = a.results["t1"]; delete(a.results, "t1") },
		"nil entry":        func(a *ResultAggregator) { a.results["t1"] = nil },
		"nil data":         func(a *ResultAggregator) { a.totalBytes -= len(a.results["t1"].data); a.results["t1"].data = nil },
		"oversized data":   func(a *ResultAggregator) { a.results["t1"].data = make([]byte, 9); a.totalBytes = 9 + 1 },
		"invalid limits":   func(a *ResultAggregator) { a.limits.MaxResultBytes = 0 },
		"count over limit": func(a *ResultAggregator) { a.limits.MaxResults = 1 },
		"total over limit": func(a *ResultAggregator) {
			a.limits.MaxTotalBytes = 8
			a.limits.MaxResultBytes = 8
			a.results["t1"].data = make([]byte, 8)
			a.totalBytes = 9
		},
		"invalid worker ID": func(a *ResultAggregator) { a.results["t1"].receipt.workerID = "bad id" },
		"invalid task ID": func(a *ResultAggregator) {
			r := a.results["t1"]
			delete(a.results, "t1")
			r.receipt.taskID = "bad id"
			a.results["bad id"] = r
		},
		"negative total sum": func(a *ResultAggregator) { a.totalBytes = -1 },
	}
	for name, corrupt := range corruptions {
		t.Run(name, func(t *testing.T) {
			a := newTestAggregator(t, smallResultLimits)
			mustStore(t, a, testReceipt("t1"), []byte("a"))
			mustStore(t, a, testReceipt("t2"), []byte("b"))
			corrupt(a)
			err := a.CheckInvariants()
			if !errors.Is(err, ErrStateInvariant) {
				t.Fatalf("CheckInvariants() after %s = %v, want ErrStateInvariant", name, err)
			}
		})
	}
}

// TestResultAggregator_Concurrent races writers on the same and on different
// task IDs with readers; run with -race.
func TestResultAggregator_Concurrent(t *testing.T) {
	const (
		tasks   = 64
		writers = 8
	)
	a := newTestAggregator(t, MaximumResultLimits())
	type storedAt struct {
		task     int
		revision uint64
	}
	var (
		mu       sync.Mutex
		stored   []storedAt
		replays  int
		rejected int
	)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range tasks {
				task := (i + w*7) % tasks
				r := testReceipt("t" + strconv.Itoa(task))
				data := []byte("result-" + strconv.Itoa(task))
				if w%4 == 3 { // a competing worker with another receipt
					r.leaseID = uint64(1000 + w)
				}
				for {
					got, err := a.StoreResult(a.Revision(), r, data)
					if errors.Is(err, ErrRevisionConflict) {
						continue
					}
					mu.Lock()
					switch {
					case err == nil && got.Value.Kind == Stored:
						stored = append(stored, storedAt{task, got.Revision})
					case err == nil && got.Value.Kind == AlreadyStored:
						replays++
					case errors.Is(err, ErrMismatchedResultReceipt):
						rejected++
					default:
						t.Errorf("StoreResult = %+v, %v", got, err)
					}
					mu.Unlock()
					break
				}
			}
		})
	}
	for range 4 {
		wg.Go(func() {
			for i := range tasks {
				_, _, _ = a.GetResult("t" + strconv.Itoa(i))
				_, _ = a.AggregateResults([]string{"t" + strconv.Itoa(i)})
				_, _ = a.ExportState()
				_ = fmt.Sprint(a)
				_ = a.ResultCount() + a.TotalBytes()
			}
		})
	}
	wg.Wait()

	if len(stored) != tasks || a.ResultCount() != tasks || a.Revision() != tasks {
		t.Fatalf("stored %d, count %d, revision %d; want %d each", len(stored), a.ResultCount(), a.Revision(), tasks)
	}
	if got, want := len(stored)+replays+rejected, tasks*writers; got != want {
		t.Fatalf("outcomes = %d, want %d", got, want)
	}
	perTask := map[int]int{}
	revisions := map[uint64]bool{}
	for _, s := range stored {
		perTask[s.task]++
		if revisions[s.revision] || s.revision < 1 || s.revision > tasks {
			t.Fatalf("Stored revision %d repeated or out of range", s.revision)
		}
		revisions[s.revision] = true
	}
	for task := range tasks {
		if perTask[task] != 1 {
			t.Fatalf("task %d stored %d times, want exactly once", task, perTask[task])
		}
	}
	if err := a.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// resultModel is a naive reference for StoreResult and AggregateResults,
// written from contract A.11 independently of the implementation.
type resultModel struct {
	limits   ResultLimits
	revision uint64
	receipts map[string]CompletionReceipt
	data     map[string]string
}

func (m *resultModel) store(rev uint64, r CompletionReceipt, b []byte) (Transition[StoreResultOutcome], *Error) {
	var zero Transition[StoreResultOutcome]
	if !ValidIdentifier(r.taskID) {
		return zero, invalidTaskID()
	}
	if !ValidIdentifier(r.workerID) {
		return zero, invalidWorkerID()
	}
	if rev != m.revision {
		return zero, &Error{Kind: KindRevisionConflict, Expected: rev, Actual: m.revision}
	}
	if old, ok := m.receipts[r.taskID]; ok {
		if old != r {
			return zero, &Error{Kind: KindMismatchedResultReceipt, TaskID: r.taskID}
		}
		if m.data[r.taskID] != string(b) {
			return zero, &Error{Kind: KindConflictingResult, TaskID: r.taskID}
		}
		return Transition[StoreResultOutcome]{m.revision, StoreResultOutcome{AlreadyStored}}, nil
	}
	total := 0
	for _, d := range m.data {
		total += len(d)
	}
	switch {
	case len(b) > m.limits.MaxResultBytes:
		return zero, &Error{Kind: KindResultTooLarge, Actual: uint64(len(b)), Limit: uint64(m.limits.MaxResultBytes)}
	case len(m.data) >= m.limits.MaxResults:
		return zero, &Error{Kind: KindResultCapacityReached, Limit: uint64(m.limits.MaxResults)}
	case total+len(b) > m.limits.MaxTotalBytes:
		return zero, &Error{Kind: KindTotalResultBytesExceeded, Actual: uint64(total + len(b)), Limit: uint64(m.limits.MaxTotalBytes)}
	}
	m.receipts[r.taskID] = r
	m.data[r.taskID] = string(b)
	m.revision++
	return Transition[StoreResultOutcome]{m.revision, StoreResultOutcome{Stored}}, nil
}

func (m *resultModel) aggregate(ids []string) ([]string, *Error) {
	if len(ids) > m.limits.MaxAggregateItems {
		return nil, &Error{Kind: KindAggregateItemLimitExceeded, Actual: uint64(len(ids)), Limit: uint64(m.limits.MaxAggregateItems)}
	}
	for _, id := range ids {
		if !ValidIdentifier(id) {
			return nil, invalidTaskID()
		}
	}
	var out []string
	total := 0
	for i, id := range ids {
		for _, prev := range ids[:i] { // quadratic on purpose: the model is naive
			if prev == id {
				return nil, &Error{Kind: KindDuplicateAggregateTask, TaskID: id}
			}
		}
		d, ok := m.data[id]
		if !ok {
			return nil, &Error{Kind: KindMissingResult, TaskID: id}
		}
		total += len(d)
		if total > m.limits.MaxAggregateBytes {
			return nil, &Error{Kind: KindAggregateBytesExceeded, Actual: uint64(total), Limit: uint64(m.limits.MaxAggregateBytes)}
		}
		out = append(out, d)
	}
	return out, nil
}

func TestResultAggregator_Model(t *testing.T) {
	seed := uint64(0x7e57_a11)
	t.Logf("seed %#x", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	limits := ResultLimits{MaxResults: 6, MaxResultBytes: 6, MaxTotalBytes: 14, MaxAggregateItems: 4, MaxAggregateBytes: 10}
	ids := []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "bad id", ""}
	payloads := []string{"", "a", "bb", "ccc", "dddddd", "eeeeeee"}
	for run := range 50 {
		a := newTestAggregator(t, limits)
		m := &resultModel{limits: limits, receipts: map[string]CompletionReceipt{}, data: map[string]string{}}
		for step := range 200 {
			if rng.IntN(3) > 0 {
				r := testReceipt(ids[rng.IntN(len(ids))])
				r.leaseID = uint64(rng.IntN(2))
				if rng.IntN(10) == 0 {
					r.workerID = "bad worker"
				}
				rev := m.revision
				if rng.IntN(8) == 0 {
					rev = uint64(rng.IntN(6))
				}
				b := []byte(payloads[rng.IntN(len(payloads))])
				if rng.IntN(4) == 0 {
					b = nil
				}
				got, err := a.StoreResult(rev, r, b)
				want, werr := m.store(rev, r, b)
				if got != want || !sameResultError(err, werr) {
					t.Fatalf("run %d step %d: StoreResult(%d, %s, %q) = %+v, %v; model %+v, %v", run, step, rev, r.taskID, b, got, err, want, werr)
				}
			} else {
				req := make([]string, rng.IntN(6))
				for i := range req {
					req[i] = ids[rng.IntN(len(ids))]
				}
				got, err := a.AggregateResults(req)
				want, werr := m.aggregate(req)
				if !sameResultError(err, werr) {
					t.Fatalf("run %d step %d: AggregateResults(%q) = %v; model %v", run, step, req, err, werr)
				}
				for i := range want {
					if got[i].TaskID != req[i] || string(got[i].Result) != want[i] {
						t.Fatalf("run %d step %d: AggregateResults(%q)[%d] = %s; model %q", run, step, req, i, got[i], want[i])
					}
				}
			}
			if err := a.CheckInvariants(); err != nil {
				t.Fatalf("run %d step %d: %v", run, step, err)
			}
		}
		if a.Revision() != m.revision || a.ResultCount() != len(m.data) {
			t.Fatalf("run %d: revision %d count %d; model %d %d", run, a.Revision(), a.ResultCount(), m.revision, len(m.data))
		}
	}
}

func sameResultError(got error, want *Error) bool {
	if want == nil {
		return got == nil
	}
	var e *Error
	return errors.As(got, &e) && *e == *want
}

// secretResult is what every redaction test hides; hex and base64 forms are
// checked too, since %x and JSON would print those.
var secretResult = []byte("SECRET-result-PAYLOAD")

func requireNoSecret(t *testing.T, what, out string) {
	t.Helper()
	for _, form := range []string{
		string(secretResult),
		hex.EncodeToString(secretResult),
		strings.ToUpper(hex.EncodeToString(secretResult)),
		base64.StdEncoding.EncodeToString(secretResult),
		"SECRET",
		fmt.Sprint([]byte("SECRET")[:3]), // "[83 69 67]": a byte-slice dump
		strings.Trim(fmt.Sprint([]byte("SECRET")), "[]"),
	} {
		if strings.Contains(out, form) {
			t.Fatalf("%s = %q leaks the result bytes (%q)", what, out, form)
		}
	}
}

func TestResultAggregator_Redaction(t *testing.T) {
	a := newTestAggregator(t, DefaultResultLimits())
	mustStore(t, a, testReceipt("t1"), secretResult)
	agg, err := a.AggregateResults([]string{"t1"})
	if err != nil {
		t.Fatal(err)
	}
	ar := agg[0]
	if !bytes.Equal(ar.Result, secretResult) {
		t.Fatalf("getter must return the real bytes")
	}
	verbs := []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10.3v", "%T"}
	values := map[string]any{
		"AggregatedResult":    ar,
		"*AggregatedResult":   &ar,
		"[]AggregatedResult":  agg,
		"map":                 map[string]AggregatedResult{"k": ar},
		"struct field":        struct{ R AggregatedResult }{ar},
		"*ResultAggregator":   a,
		"[]*ResultAggregator": []*ResultAggregator{a},
	}
	for name, v := range values {
		for _, verb := range verbs {
			requireNoSecret(t, "Sprintf("+verb+", "+name+")", fmt.Sprintf(verb, v))
		}
		requireNoSecret(t, "Sprint("+name+")", fmt.Sprint(v))
		requireNoSecret(t, "Sprintln("+name+")", fmt.Sprintln(v))
	}
	if got, want := ar.String(), "AggregatedResult{TaskID:t1 Result:<redacted 21 bytes>}"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	if got, want := fmt.Sprintf("%#v", ar), `distributed.AggregatedResult{TaskID:"t1", Result:<redacted 21 bytes>}`; got != want {
		t.Fatalf("%%#v = %q, want %q", got, want)
	}
	if got, want := fmt.Sprintf("%v", a), "ResultAggregator{Revision:1 Results:1 TotalBytes:21}"; got != want {
		t.Fatalf("%%v = %q, want %q", got, want)
	}
	if got, want := fmt.Sprintf("%#v", a), "&distributed.ResultAggregator{Revision:1, Results:1, TotalBytes:21}"; got != want {
		t.Fatalf("%%#v = %q, want %q", got, want)
	}
	if got, want := fmt.Sprintf("%q", ar), strconv.Quote(ar.String()); got != want {
		t.Fatalf("%%q = %q, want %q", got, want)
	}

	for _, handler := range []string{"json", "text"} {
		var buf bytes.Buffer
		var h slog.Handler = slog.NewJSONHandler(&buf, nil)
		if handler == "text" {
			h = slog.NewTextHandler(&buf, nil)
		}
		log := slog.New(h)
		log.Info("stored", "result", ar, "ptr", &ar, "aggregator", a)
		log.Info("grouped", slog.Group("g", slog.Any("result", ar)))
		out := buf.String()
		requireNoSecret(t, handler+" handler", out)
		for _, want := range []string{"t1", "result_bytes", "21", "revision", "total_bytes"} {
			if !strings.Contains(out, want) {
				t.Fatalf("%s handler output %q lacks %q", handler, out, want)
			}
		}
	}

	// Errors never carry result bytes either.
	_, err = a.StoreResult(a.Revision(), testReceipt("t1"), []byte("SECRET-other"))
	requireError(t, err, &Error{Kind: KindConflictingResult, TaskID: "t1"})
	requireNoSecret(t, "conflict error", err.Error())
}

// TestResultAggregator_CheckStoreAgreesWithStore: CheckStore predicts, for a
// fresh receipt, exactly the error StoreResult then returns (or success), and
// neither CheckStore nor HasResult changes anything.
func TestResultAggregator_CheckStoreAgreesWithStore(t *testing.T) {
	l := ResultLimits{MaxResults: 2, MaxResultBytes: 8, MaxTotalBytes: 12, MaxAggregateItems: 4, MaxAggregateBytes: 12}
	cases := []struct {
		name  string
		setup []string // results stored first (task IDs, 6 bytes each)
		task  string
		size  int
		want  ErrorKind // 0: accepted
	}{
		{"fits", nil, "t1", 8, 0},
		{"too large", nil, "t1", 9, KindResultTooLarge},
		{"total exceeded", []string{"a"}, "t1", 7, KindTotalResultBytesExceeded},
		{"capacity", []string{"a", "b"}, "t1", 0, KindResultCapacityReached},
		{"occupied", []string{"t1"}, "t1", 1, KindMismatchedResultReceipt},
		{"invalid id", nil, "bad id", 1, KindInvalidTask},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestAggregator(t, l)
			for _, id := range tc.setup {
				mustStore(t, a, testReceipt(id), []byte("abcdef"))
			}
			before, _ := a.ExportState()
			err := a.CheckStore(tc.task, tc.size)
			has, _ := a.HasResult("t1")
			if after, _ := a.ExportState(); !bytes.Equal(before, after) {
				t.Fatal("CheckStore or HasResult changed the state")
			}
			if has != slices.Contains(tc.setup, "t1") {
				t.Fatalf("HasResult(t1) = %v", has)
			}
			r := testReceipt(tc.task)
			r.leaseID += 100 // a receipt the store has not seen
			_, storeErr := a.StoreResult(a.Revision(), r, make([]byte, tc.size))
			for _, e := range []error{err, storeErr} {
				var got ErrorKind
				var de *Error
				if errors.As(e, &de) {
					got = de.Kind
				}
				if got != tc.want {
					t.Fatalf("CheckStore = %v, StoreResult = %v; want kind %v", err, storeErr, tc.want)
				}
			}
		})
	}
}

// Results of up to 32 bytes share their entry's allocation
// (newStoredResult); at and around each size boundary the stored bytes
// must equal the input, survive the caller reusing its slice, replay as
// AlreadyStored, and round-trip through export.
func TestResultAggregator_StoreSizesAroundInline(t *testing.T) {
	a := newTestAggregator(t, DefaultResultLimits())
	want := map[string][]byte{}
	for _, n := range []int{0, 1, tinyResultBytes - 1, tinyResultBytes, tinyResultBytes + 1, smallResultBytes, smallResultBytes + 1, 64} {
		id := "size-" + strconv.Itoa(n)
		in := bytes.Repeat([]byte{byte('a' + n%26)}, n)
		want[id] = bytes.Clone(in)
		mustStore(t, a, testReceipt(id), in)
		for i := range in {
			in[i] = '!'
		}
		got, ok, err := a.GetResult(id)
		if err != nil || !ok || !bytes.Equal(got, want[id]) || got == nil {
			t.Fatalf("GetResult(%s) = %q, %v, %v; want %q", id, got, ok, err, want[id])
		}
		tr, err := a.StoreResult(a.Revision(), testReceipt(id), want[id])
		if err != nil || tr.Value.Kind != AlreadyStored {
			t.Fatalf("replay of %s = %+v, %v; want AlreadyStored", id, tr, err)
		}
	}
	state, _ := a.ExportState()
	b, err := RestoreResultAggregator(state)
	if err != nil {
		t.Fatal(err)
	}
	for id, w := range want {
		if got, _, _ := b.GetResult(id); !bytes.Equal(got, w) {
			t.Fatalf("restored GetResult(%s) = %q, want %q", id, got, w)
		}
	}
}
