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
// largeResultAggregator is an empty aggregator that takes results of
// up to 8 KiB, and a random 4 KiB result.
func largeResultAggregator(t *testing.T) (*ResultAggregator, []byte) {
	l := smallResultLimits
	l.MaxResults, l.MaxResultBytes, l.MaxTotalBytes = 8, 8<<10, 64<<10
	big := make([]byte, 4<<10)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	return newTestAggregator(t, l), big
}

func TestResultAggregator_ExportStateParts(t *testing.T) {
	a, big := largeResultAggregator(t)
	join := func(parts [][]byte) []byte { return bytes.Join(parts, nil) }
	parts, err := a.ExportStateParts()
	if want, _ := a.ExportState(); err != nil || !bytes.Equal(join(parts), want) {
		t.Fatalf("empty: parts join to %x, want %x (err %v)", join(parts), want, err)
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

// TestEqualParts: RestoreResultAggregator's canonical check compares its
// re-export's parts with its input; equality must hold exactly when the
// parts' concatenation is the input.
func TestEqualParts(t *testing.T) {
	big := make([]byte, 2<<10)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	data := append(append([]byte("head"), big...), "tail"...)
	flipped := bytes.Clone(big)
	flipped[len(flipped)/2] ^= 1
	for _, c := range []struct {
		name  string
		parts [][]byte
		want  bool
	}{
		{"exact", [][]byte{[]byte("head"), big, []byte("tail")}, true},
		{"split elsewhere", [][]byte{[]byte("he"), []byte("ad"), big, nil, []byte("tail")}, true},
		{"a byte of a large part differs", [][]byte{[]byte("head"), flipped, []byte("tail")}, false},
		{"shorter", [][]byte{[]byte("head"), big, []byte("tai")}, false},
		{"longer", [][]byte{[]byte("head"), big, []byte("tails")}, false},
		{"a part missing", [][]byte{[]byte("head"), []byte("tail")}, false},
		{"none", nil, false},
	} {
		if got := equalParts(c.parts, data); got != c.want {
			t.Errorf("equalParts(%s) = %v, want %v", c.name, got, c.want)
		}
	}
	if !equalParts(nil, nil) || equalParts([][]byte{{0}}, nil) {
		t.Error("equalParts of empty inputs")
	}
}

// TestRestoreResultAggregator_LargeResultsOwnTheirBytes: a restored
// aggregator keeps copies of its results (not slices of the input, which
// the caller may reuse) and re-exports its input exactly.
func TestRestoreResultAggregator_LargeResultsOwnTheirBytes(t *testing.T) {
	a, big := largeResultAggregator(t)
	mustStore(t, a, testReceipt("a-small"), []byte("abc"))
	mustStore(t, a, testReceipt("b-big"), big)
	mustStore(t, a, testReceipt("c-empty"), nil)
	data := exportOf(t, a)
	r, err := RestoreResultAggregator(bytes.Clone(data))
	if err != nil {
		t.Fatal(err)
	}
	input := bytes.Clone(data)
	r2, err := RestoreResultAggregator(input)
	if err != nil {
		t.Fatal(err)
	}
	clear(input)
	for _, got := range []*ResultAggregator{r, r2} {
		if !bytes.Equal(exportOf(t, got), data) {
			t.Fatal("a restored aggregator re-exports other bytes")
		}
	}
	if got, ok, err := r2.GetResult("c-empty"); err != nil || !ok || got == nil || len(got) != 0 {
		t.Fatalf("restored empty result = %v, %v, %v; want an empty, non-nil result", got, ok, err)
	}
}
