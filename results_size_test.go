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
