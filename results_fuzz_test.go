package distributed

// Goal: RestoreResultAggregator never panics, and whatever it accepts is a
// canonical, audited state: re-exporting gives exactly the input bytes and
// CheckInvariants passes.
//
// Method: each input is tried twice — as is, and with its last four bytes
// replaced by a valid CRC-32C of the rest — so that mutations reach the
// decoder instead of dying at the checksum. The committed seed corpus in
// testdata/fuzz/FuzzRestoreResultAggregator holds valid exports and
// corruptions of them; regenerate it with
//
//	go test -run TestWriteResultFuzzCorpus -results.write-fuzz-corpus .

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var writeResultFuzzCorpus = flag.Bool("results.write-fuzz-corpus", false,
	"rewrite testdata/fuzz/FuzzRestoreResultAggregator from resultFuzzSeeds")

// resultFuzzSeeds returns named seeds: valid exports and corruptions.
func resultFuzzSeeds(t testing.TB) map[string][]byte {
	t.Helper()
	seeds := map[string][]byte{}

	empty := exportOf(t, NewResultAggregator())
	seeds["valid-empty-default"] = empty

	small := newTestAggregator(t, smallResultLimits)
	mustStore(t, small, testReceipt("t1"), []byte("one"))
	mustStore(t, small, testReceipt("t2"), nil)
	mustStore(t, small, testReceipt("t3"), []byte("three"))
	smallData := exportOf(t, small)
	seeds["valid-small-three-results"] = smallData

	maxed := newTestAggregator(t, MaximumResultLimits())
	long := testReceipt(strings.Repeat("L", MaxIdentifierBytes))
	long.workerID = strings.Repeat("w", MaxIdentifierBytes)
	long.leaseID, long.taskGeneration = 1<<63, 1<<40
	mustStore(t, maxed, long, bytes.Repeat([]byte{0xA5}, 300))
	for i := range 8 {
		mustStore(t, maxed, testReceipt(fmt.Sprintf("scan:%d.task_%d", i%3, i)), []byte(strings.Repeat("r", i)))
	}
	seeds["valid-maximum-limits-long-ids"] = exportOf(t, maxed)

	flip := append([]byte(nil), smallData...)
	flip[20] ^= 0x04
	seeds["corrupt-bit-flip"] = flip
	seeds["corrupt-truncated"] = smallData[:len(smallData)/2]
	seeds["corrupt-trailing-byte"] = reframe(append(append([]byte(nil), smallData[:len(smallData)-4]...), 0, 0, 0, 0, 0))
	version := append([]byte(nil), empty...)
	version[4] = 2
	seeds["corrupt-version-2"] = reframe(version)
	seeds["hostile-unsorted-ids"] = craftResultState(smallResultLimits, 2, 2,
		[]craftedResult{{testReceipt("t2"), nil}, {testReceipt("t1"), nil}})
	seeds["hostile-count-claims-maximum"] = craftResultState(MaximumResultLimits(), MaxResults, MaxResults, nil)
	seeds["hostile-non-canonical-count"] = reframe([]byte("TVRA\x01\x03\x08\x14\x04\x0c\x00\x80\x00"))
	return seeds
}

func FuzzRestoreResultAggregator(f *testing.F) {
	for _, seed := range resultFuzzSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkResultRestore(t, data)
		if len(data) >= 4 {
			checkResultRestore(t, reframe(data[:len(data)-4]))
		}
	})
}

func checkResultRestore(t *testing.T, data []byte) {
	input := append([]byte(nil), data...)
	a, err := RestoreResultAggregator(data)
	if !bytes.Equal(input, data) {
		t.Fatalf("RestoreResultAggregator modified its input")
	}
	if err != nil {
		var e *Error
		if !errors.As(err, &e) || e.Kind != KindInvalidState || a != nil {
			t.Fatalf("RestoreResultAggregator = %v, %v; want nil, *Error InvalidState", a, err)
		}
		return
	}
	if err := a.CheckInvariants(); err != nil {
		t.Fatalf("restored state fails CheckInvariants: %v", err)
	}
	again, err := a.ExportState()
	if err != nil || !bytes.Equal(again, data) {
		t.Fatalf("re-export differs from the accepted input (err %v):\n got %x\nwant %x", err, again, data)
	}
	// The restored aggregator must serve what it holds.
	ids := make([]string, 0, a.ResultCount())
	for id := range a.results {
		ids = append(ids, id)
	}
	for _, id := range ids {
		if _, ok, err := a.GetResult(id); !ok || err != nil {
			t.Fatalf("GetResult(%s) = %v, %v after restore", id, ok, err)
		}
	}
	if len(ids) <= a.limits.MaxAggregateItems && a.totalBytes <= a.limits.MaxAggregateBytes {
		if got, err := a.AggregateResults(ids); err != nil || len(got) != len(ids) {
			t.Fatalf("AggregateResults(all) = %d, %v after restore", len(got), err)
		}
	}
}

// TestWriteResultFuzzCorpus rewrites the committed seed corpus when run with
// -results.write-fuzz-corpus; otherwise it checks that every seed is present.
func TestWriteResultFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzRestoreResultAggregator")
	for name, data := range resultFuzzSeeds(t) {
		file := filepath.Join(dir, name)
		content := fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", data)
		if *writeResultFuzzCorpus {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, content, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(file)
		if err != nil || !bytes.Equal(got, content) {
			t.Fatalf("seed corpus file %s is missing or stale (err %v); rerun with -results.write-fuzz-corpus", file, err)
		}
	}
}
