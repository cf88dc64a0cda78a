package distributed

// Goal: close two gaps that mutation testing found (issue 14): each test
// here fails on the named single-line mutant. Method: build inputs that only
// the removed check rejects.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"testing"
)

// exportTasksInOrder encodes p's state with the task records in the given
// order (which may repeat or reorder IDs).
func exportTasksInOrder(p *WorkerPool, ids []string) []byte {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	return p.c.exportTasks(ids)
}

// Mutant: RestoreWorkerPool's check that task records are in strict
// task-ID order removed (export.go). Unsorted records would restore into
// the map and re-export differently; a duplicate would silently overwrite.
func TestRestoreWorkerPool_RejectsUnsortedOrDuplicateTasks(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 2)
	h.enqueue("a", PriorityNormal)
	h.enqueue("b", PriorityHigh)
	h.enqueue("c", PriorityLow)
	ids := []string{"a", "b", "c"}
	if got := exportTasksInOrder(h.p, ids); !bytes.Equal(got, h.export()) {
		t.Fatal("the test's encoder does not match ExportState")
	}
	rev := slices.Clone(ids)
	slices.Reverse(rev)
	for name, order := range map[string][]string{
		"reversed":  rev,
		"swapped":   {"b", "a", "c"},
		"duplicate": {"a", "b", "b", "c"},
	} {
		if _, err := RestoreWorkerPool(exportTasksInOrder(h.p, order)); !errors.Is(err, ErrInvalidState) {
			t.Errorf("%s task records: RestoreWorkerPool = %v, want InvalidState", name, err)
		}
	}
}

// Mutant: a proof's UnmarshalBinary accepts trailing bytes (proofs.go).
// Every proof has exactly one encoding; anything after it is refused and
// the receiver is left unchanged.
func TestProofs_RejectTrailingBytes(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 1)
	q := h.enqueue("q", PriorityNormal)
	l := h.assign("q", "w", 60)
	h.start(l)
	own, _ := h.task("q").Ownership()
	fence := QueuedTaskFence{taskID: q.TaskID(), taskGeneration: q.TaskGeneration(), recordVersion: q.RecordVersion()}
	receipt := CompletionReceipt{taskID: "q", taskGeneration: 1, attempt: 1, leaseID: 1, workerID: "w", workerGeneration: 1, recordVersion: 3}
	type proof interface {
		MarshalBinary() ([]byte, error)
	}
	cases := map[string]struct {
		p   proof
		dst interface{ UnmarshalBinary([]byte) error }
	}{
		"lease":     {l, new(TaskLease)},
		"fence":     {fence, new(QueuedTaskFence)},
		"receipt":   {receipt, new(CompletionReceipt)},
		"ownership": {own, new(TaskOwnership)},
	}
	for name, c := range cases {
		b, err := c.p.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.dst.UnmarshalBinary(b); err != nil {
			t.Fatalf("%s: canonical encoding refused: %v", name, err)
		}
		for _, tail := range [][]byte{{0}, {0xff}, b} {
			// Trailing bytes inside a valid frame (checksum recomputed), so
			// that the decoder's own end check must refuse them.
			body := append(bytes.Clone(b[:len(b)-4]), tail...)
			framed := binary.BigEndian.AppendUint32(body, crc32.Checksum(body, castagnoli))
			err := c.dst.UnmarshalBinary(framed)
			if !errors.Is(err, ErrInvalidState) {
				t.Errorf("%s with %d trailing bytes: UnmarshalBinary = %v, want InvalidState", name, len(tail), err)
			}
		}
	}
}
