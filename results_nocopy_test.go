package distributed

import (
	"bytes"
	"crypto/rand"
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
	l := smallResultLimits
	l.MaxResultBytes, l.MaxTotalBytes = 1024, 4096
	a := newTestAggregator(t, l)
	data := make([]byte, 100) // NB: above any size stored inline with its entry
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(data)
	want[0] ^= 0xff
	if _, err := a.StoreResultOwned(0, testReceipt("t1"), data); err != nil {
		t.Fatalf("StoreResultOwned = %v", err)
	}
	if _, err := a.StoreResultOwned(1, testReceipt("t2"), nil); err != nil {
		t.Fatalf("StoreResultOwned(nil) = %v", err)
	}
	if err := a.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	data[0] ^= 0xff // kept, not copied: the caller handed it over
	if b, ok, err := a.GetResult("t1"); err != nil || !ok || !bytes.Equal(b, want) {
		t.Fatalf("GetResult(t1) = %v, %v; want the handed-over slice", ok, err)
	}
	before := observeResults(t, a, "t1", "t2")
	_, err := a.StoreResultOwned(2, testReceipt("t1"), []byte("other"))
	requireError(t, err, &Error{Kind: KindConflictingResult, TaskID: "t1"})
	requireUnchanged(t, before, observeResults(t, a, "t1", "t2"))
}

// TestResultAggregator_ExportStateParts checks that the parts join to
// exactly ExportState's bytes (empty, small and large results), that a
// large result is the stored slice itself, and that the parts do not change
// when the aggregator purges and stores afterwards.
func TestResultAggregator_ExportStateParts(t *testing.T) {
	l := smallResultLimits
	l.MaxResults, l.MaxResultBytes, l.MaxTotalBytes = 8, 8<<10, 64<<10
	a := newTestAggregator(t, l)
	join := func(parts [][]byte) []byte { return bytes.Join(parts, nil) }
	parts, err := a.ExportStateParts()
	if want, _ := a.ExportState(); err != nil || !bytes.Equal(join(parts), want) {
		t.Fatalf("empty: parts join to %x, want %x (err %v)", join(parts), want, err)
	}
	big := make([]byte, 4<<10)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	mustStore(t, a, testReceipt("a-small"), []byte("abc"))
	mustStore(t, a, testReceipt("b-big"), big)
	mustStore(t, a, testReceipt("c-empty"), nil)
	mustStore(t, a, testReceipt("d-exact"), big[:exportPartMinBytes])
	parts, err = a.ExportStateParts()
	want, _ := a.ExportState()
	if err != nil || !bytes.Equal(join(parts), want) {
		t.Fatalf("parts join to %d bytes, want ExportState's %d (err %v)", len(join(parts)), len(want), err)
	}
	aliased := 0
	for _, p := range parts {
		for _, id := range []string{"b-big", "d-exact"} {
			if d := a.results[id].data; len(p) == len(d) && &p[0] == &d[0] {
				aliased++
			}
		}
	}
	if aliased != 2 {
		t.Fatalf("%d results of at least %d bytes are parts of their own, want 2", aliased, exportPartMinBytes)
	}
	if _, err := a.PurgeResults(a.Revision(), []string{"b-big"}); err != nil {
		t.Fatal(err)
	}
	mustStore(t, a, testReceipt("b-big"), bytes.Repeat([]byte{7}, 2<<10))
	if !bytes.Equal(join(parts), want) {
		t.Fatal("captured parts changed after a purge and a store")
	}
	var nilAgg *ResultAggregator
	if _, err := nilAgg.ExportStateParts(); err == nil {
		t.Fatal("ExportStateParts on a nil aggregator = nil error")
	}
}
