package node

// Goal: with a walGate the proposer forms its next entry only once the
// log store has finished a write begun after the previous entry went to
// raft (so the entry takes every proposal that arrived during the write),
// and it does not wait on a write that never comes once the previous
// entry is answered. Method: a stubRaft whose futures are held until the
// test releases them, and a walGate the test drives as the log store
// would (begin, end); proposals are counted in the proposer's queue.

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// heldRaft is a stubRaft whose futures resolve once release is closed;
// handed receives each entry's command count as raft gets it.
type heldRaft struct {
	*stubRaft
	release chan struct{}
	handed  chan int
}

func (h *heldRaft) Apply(data []byte, d time.Duration) raft.ApplyFuture {
	f := h.stubRaft.Apply(data, d)
	sizes := h.entrySizes()
	h.handed <- sizes[len(sizes)-1]
	return heldFuture{ApplyFuture: f, release: h.release}
}

type heldFuture struct {
	raft.ApplyFuture
	release chan struct{}
}

func (f heldFuture) Error() error {
	<-f.release
	return f.ApplyFuture.Error()
}

// gatedProposer is setupProposer over a heldRaft with a walGate.
func gatedProposer(t *testing.T) (*proposerBundle, *heldRaft, *walGate) {
	t.Helper()
	b := setupProposer(t, 64, nil)
	h := &heldRaft{stubRaft: b.stub, release: make(chan struct{}), handed: make(chan int, 8)}
	b.pr.raft = h
	b.pr.wal = newWALGate()
	t.Cleanup(func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
	})
	return b, h, b.pr.wal
}

// handedWithin waits for raft's next entry, failing after 10 s.
func handedWithin(t *testing.T, h *heldRaft) int {
	t.Helper()
	select {
	case n := <-h.handed:
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no entry reached raft within 10 s")
		return 0
	}
}

func TestProposer_NextEntryWhenWALWritten(t *testing.T) {
	t.Parallel()
	b, h, g := gatedProposer(t)
	inProgress := g.begin() // a write under way before the first entry goes to raft
	first := b.queue(t, "a", 1)
	b.start()
	if n := handedWithin(t, h); n != 1 {
		t.Fatalf("first entry of %d commands, want 1", n)
	}
	rest := b.queue(t, "b", 3)
	// b-0 and the second slot taken: the loop holds b-0 at the gate. NB:
	// waiting for the slot too lets the loop run (a proposal handed to a
	// parked loop leaves the queue before the loop has run), so that a
	// proposer without the gate hands [b-0 b-1 b-2] to raft here.
	waitFor(t, "the loop to hold b-0 at the gate", func() bool {
		return len(b.pr.proposals) == 2 && len(b.pr.slots) == 2
	})
	g.end(inProgress) // NB: began before the entry went to raft: the gate stays shut
	rest = append(rest, b.queue(t, "c", 1)...)
	waitFor(t, "c-0 queued", func() bool { return len(b.pr.proposals) == 3 })
	g.end(g.begin()) // the first entry's write
	if n := handedWithin(t, h); n != 4 {
		t.Fatalf("second entry of %d commands, want 4 (every proposal that waited for the write)", n)
	}
	close(h.release)
	for i, r := range results(t, append(first, rest...)) {
		if r.err != nil || r.resp.Err != nil {
			t.Fatalf("proposal %d: %v %v", i, r.err, r.resp.Err)
		}
	}
	if got := b.stub.entrySizes(); !slices.Equal(got, []int{1, 4}) {
		t.Fatalf("entries = %v, want [1 4]", got)
	}
}

func TestProposer_NoWALWriteAnsweredEntryOpens(t *testing.T) {
	t.Parallel()
	b, h, _ := gatedProposer(t)
	first := b.queue(t, "a", 1)
	b.start()
	handedWithin(t, h)
	close(h.release) // answered, and no write is ever reported
	results(t, first)
	next := b.queue(t, "b", 1)
	if n := handedWithin(t, h); n != 1 {
		t.Fatalf("entry of %d commands, want 1", n)
	}
	if r := results(t, next)[0]; r.err != nil || r.resp.Err != nil {
		t.Fatalf("proposal after an answered entry: %v %v", r.err, r.resp.Err)
	}
}
