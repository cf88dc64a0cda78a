package distributed

// Goal: per-operation cost of ResultAggregator at a tiny state and at the
// maximum state (65 536 stored results of 64 bytes, MaximumResultLimits),
// plus snapshot export/restore at 1 024 results.
//
// Method: b.Loop with b.ReportAllocs. A Stored command needs a free slot, so
// the store benchmarks refill from a prepared base state (a shallow map
// clone; stored entries are immutable) with the timer stopped whenever the
// window of fresh task IDs is used up.

import (
	"crypto/rand"
	"maps"
	"strconv"
	"testing"
)

const benchResultBytes = 64

func benchTaskIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "scan-7:task-" + strconv.Itoa(100000+i)
	}
	return ids
}

// benchAggregator stores the first n of ids with MaximumResultLimits.
func benchAggregator(b *testing.B, ids []string, n int) *ResultAggregator {
	b.Helper()
	a := newTestAggregator(b, MaximumResultLimits())
	payload := make([]byte, benchResultBytes)
	for i := range n {
		if _, err := a.StoreResult(uint64(i), testReceipt(ids[i]), payload); err != nil {
			b.Fatal(err)
		}
	}
	return a
}

func cloneBenchAggregator(a *ResultAggregator) *ResultAggregator {
	return &ResultAggregator{limits: a.limits, revision: a.revision, totalBytes: a.totalBytes, results: maps.Clone(a.results)}
}

var benchStates = []struct {
	name   string
	stored int // results before the measured window
	window int // fresh task IDs per refill (store benchmarks)
}{
	{"tiny", 0, 1024},
	{"maximum", MaxResults - 16384, 16384},
}

func BenchmarkResultAggregator_StoreResult(b *testing.B) {
	ids := benchTaskIDs(MaxResults)
	receipts := make([]CompletionReceipt, len(ids))
	for i, id := range ids {
		receipts[i] = testReceipt(id)
	}
	payload := make([]byte, benchResultBytes)
	for _, st := range benchStates {
		b.Run(st.name, func(b *testing.B) {
			base := benchAggregator(b, ids, st.stored)
			a := cloneBenchAggregator(base)
			k := 0
			b.ReportAllocs()
			for b.Loop() {
				if k == st.window {
					b.StopTimer()
					a, k = cloneBenchAggregator(base), 0
					b.StartTimer()
				}
				if _, err := a.StoreResult(a.revision, receipts[st.stored+k], payload); err != nil {
					b.Fatal(err)
				}
				k++
			}
		})
	}
	// The replay path at the maximum state: every slot is taken.
	b.Run("already_stored/maximum", func(b *testing.B) {
		a := benchAggregator(b, ids, MaxResults)
		rev := a.Revision()
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			got, err := a.StoreResult(rev, receipts[i], payload)
			if err != nil || got.Value.Kind != AlreadyStored {
				b.Fatal(got, err)
			}
			i = (i + 7919) % MaxResults
		}
	})
}

func BenchmarkResultAggregator_GetResult(b *testing.B) {
	ids := benchTaskIDs(MaxResults)
	for _, st := range []struct {
		name string
		n    int
	}{{"tiny", 100}, {"maximum", MaxResults}} {
		b.Run(st.name, func(b *testing.B) {
			a := benchAggregator(b, ids, st.n)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				if _, ok, err := a.GetResult(ids[i]); !ok || err != nil {
					b.Fatal(ok, err)
				}
				i = (i + 7919) % st.n
			}
		})
	}
}

func BenchmarkResultAggregator_AggregateResults100(b *testing.B) {
	ids := benchTaskIDs(MaxResults)
	for _, st := range []struct {
		name string
		n    int
	}{{"tiny", 100}, {"maximum", MaxResults}} {
		b.Run(st.name, func(b *testing.B) {
			a := benchAggregator(b, ids, st.n)
			req := make([]string, 100)
			for i := range req {
				req[i] = ids[(i*7919)%st.n] // spread over the state, not in stored order
			}
			b.ReportAllocs()
			b.SetBytes(100 * benchResultBytes)
			for b.Loop() {
				if got, err := a.AggregateResults(req); err != nil || len(got) != 100 {
					b.Fatal(len(got), err)
				}
			}
		})
	}
}

func BenchmarkResultAggregator_ExportState1024(b *testing.B) {
	a := benchAggregator(b, benchTaskIDs(1024), 1024)
	data, _ := a.ExportState()
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := a.ExportState(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRestoreResultAggregator1024(b *testing.B) {
	benchRestore(b, benchAggregator(b, benchTaskIDs(1024), 1024))
}

// benchRestore measures RestoreResultAggregator of a's export.
func benchRestore(b *testing.B, a *ResultAggregator) {
	data, _ := a.ExportState()
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := RestoreResultAggregator(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRestoreResultAggregator64K restores 1 024 results of 64 KiB
// (64 MiB): what a node's restart pays per stored result byte (issue 15).
func BenchmarkRestoreResultAggregator64K(b *testing.B) {
	a := newTestAggregator(b, MaximumResultLimits())
	ids := benchTaskIDs(1024)
	payload := make([]byte, 64<<10)
	if _, err := rand.Read(payload); err != nil {
		b.Fatal(err)
	}
	for i, id := range ids {
		if _, err := a.StoreResult(uint64(i), testReceipt(id), payload); err != nil {
			b.Fatal(err)
		}
	}
	benchRestore(b, a)
}
