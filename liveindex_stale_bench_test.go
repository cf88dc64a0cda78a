package distributed

import (
	"fmt"
	"testing"
)

// poolOfWorkers is a pool of n workers w0000… (capacity 4) registered at
// time 1, heartbeat timeout the longest, and its revision.
func poolOfWorkers(tb testing.TB, n int) (*WorkerPool, []string, uint64) {
	tb.Helper()
	l := DefaultLimits()
	l.MaxWorkers = n
	l.HeartbeatTimeoutSecs = MaxHeartbeatTimeoutSecs
	p, err := NewWorkerPoolWithLimits(l)
	if err != nil {
		tb.Fatal(err)
	}
	rev := uint64(0)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("w%04d", i)
		tr, err := p.RegisterWorker(rev, 1, WorkerSpec{WorkerID: ids[i], Capacity: 4})
		if err != nil {
			tb.Fatal(err)
		}
		rev = tr.Revision
	}
	return p, ids, rev
}

// BenchmarkLiveIndex_HeartbeatsPastStaleWorker: n workers, w0000 never heartbeats
// again (a crashed worker not yet pruned), the others heartbeat in turn,
// one new second per round.
func BenchmarkLiveIndex_HeartbeatsPastStaleWorker(b *testing.B) {
	for _, n := range []int{16, 256, 4096} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			p, ids, rev := poolOfWorkers(b, n)
			now := uint64(1)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j := 1 + i%(n-1)
				if j == 1 {
					now++
				}
				tr, err := p.UpdateWorker(rev, now, ids[j], 1, WorkerObservation{})
				if err != nil {
					b.Fatal(err)
				}
				rev = tr.Revision
			}
		})
	}
}

// TestLiveIndex_CompactsInPlace: while a worker that stopped heartbeating
// holds the oldest slot, the others' heartbeats fill the ring again and
// again; each time it is compacted in its own arrays (no new ring of the
// same size, no garbage per heartbeat), and the index stays right.
func TestLiveIndex_CompactsInPlace(t *testing.T) {
	const n = 64
	p, ids, rev := poolOfWorkers(t, n)
	now := uint64(1)
	x := &p.c.alive
	ring, size, full := &x.slots[0], len(x.slots), 0
	for round := 0; round < 8*size/n; round++ {
		now++
		for _, id := range ids[1:] {
			tr, err := p.UpdateWorker(rev, now, id, 1, WorkerObservation{})
			if err != nil {
				t.Fatal(err)
			}
			rev = tr.Revision
			if x.tail-x.head == size {
				full++ // the next heartbeat packs
			}
		}
	}
	if full < 4 {
		t.Fatalf("the ring of %d slots filled %d times, want at least 4", size, full)
	}
	if &x.slots[0] != ring || len(x.slots) != size {
		t.Fatalf("the ring of %d slots was replaced (now %d slots): a compaction allocated", size, len(x.slots))
	}
	if err := p.c.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	if w, ok, err := p.GetAvailableWorker(now); err != nil || !ok || w.WorkerID() != ids[0] {
		t.Fatalf("best worker %v, %v, %v; want %s (most free slots, smallest ID)", w.WorkerID(), ok, err, ids[0])
	}
}
