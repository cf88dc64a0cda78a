package distributed

import (
	"errors"
	"testing"
)

// TestResultAggregator_ResultSize checks that ResultSize agrees with
// GetResult's length for stored, empty and missing results and refuses an
// invalid ID and a nil aggregator.
func TestResultAggregator_ResultSize(t *testing.T) {
	a := newTestAggregator(t, smallResultLimits)
	mustStore(t, a, testReceipt("t1"), []byte("abc"))
	mustStore(t, a, testReceipt("t2"), nil)
	for _, c := range []struct {
		id   string
		size int
		ok   bool
	}{{"t1", 3, true}, {"t2", 0, true}, {"t3", 0, false}} {
		size, ok, err := a.ResultSize(c.id)
		if err != nil || size != c.size || ok != c.ok {
			t.Errorf("ResultSize(%q) = %d, %v, %v; want %d, %v, nil", c.id, size, ok, err, c.size, c.ok)
		}
	}
	if _, _, err := a.ResultSize(""); !errors.Is(err, ErrInvalidTask) {
		t.Errorf("ResultSize(\"\") = %v, want ErrInvalidTask", err)
	}
	var nilAgg *ResultAggregator
	if _, _, err := nilAgg.ResultSize("t1"); err == nil {
		t.Error("ResultSize on a nil aggregator = nil error")
	}
}

// TestResultAggregator_StoreResultOwned checks that an owned result is
// kept without a copy, that an empty one is stored non-nil (the
// invariants hold), and that its checks are StoreResult's: a conflicting
// second result is refused and changes nothing.
func TestResultAggregator_StoreResultOwned(t *testing.T) {
	a := newTestAggregator(t, smallResultLimits)
	data := []byte("abc")
	if _, err := a.StoreResultOwned(0, testReceipt("t1"), data); err != nil {
		t.Fatalf("StoreResultOwned = %v", err)
	}
	if _, err := a.StoreResultOwned(1, testReceipt("t2"), nil); err != nil {
		t.Fatalf("StoreResultOwned(nil) = %v", err)
	}
	if err := a.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	data[0] = 'X' // kept, not copied: the caller handed it over
	if b, ok, err := a.GetResult("t1"); err != nil || !ok || string(b) != "Xbc" {
		t.Fatalf("GetResult(t1) = %q, %v, %v; want the handed-over slice", b, ok, err)
	}
	before := observeResults(t, a, "t1", "t2")
	_, err := a.StoreResultOwned(2, testReceipt("t1"), []byte("other"))
	requireError(t, err, &Error{Kind: KindConflictingResult, TaskID: "t1"})
	requireUnchanged(t, before, observeResults(t, a, "t1", "t2"))
}
