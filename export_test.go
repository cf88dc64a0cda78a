package distributed

// Goal: ExportState is deterministic and complete (a restored pool behaves
// exactly like the original), and RestoreWorkerPool rejects corrupt,
// truncated and hostile input with ErrInvalidState without panicking.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"testing"
)

// busyPool builds a pool that has every kind of record: queued, leased,
// running, completed, failed, cancelled, expired tasks; healthy, busy and
// offline workers.
func busyPool(t testing.TB) *harness {
	t.Helper()
	l := DefaultLimits()
	l.MaxRetries = 0
	h := newHarness(t, l)
	h.register("a", 4)
	h.register("b", 4)
	h.register("gone", 1)
	h.ok("utilization", func(rev, now uint64) error {
		_, err := h.p.UpdateWorker(rev, now, "b", 1, WorkerObservation{Status: WorkerHealthy, CPUBasisPoints: 1234})
		return err
	})
	h.enqueue("old-queued", 0)
	h.enqueue("old-leased", 0)
	h.assign("old-leased", "a", 60)
	h.now += 10
	h.ok("expire", func(rev, now uint64) error { _, err := h.p.ExpireOldTasks(rev, now, 10); return err })
	h.enqueue("queued", PriorityCritical)
	h.ok("phased", func(rev, now uint64) error {
		_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: "phased", ScanID: "s2", TargetRef: "t", Phases: []uint8{3, 1}, Priority: PriorityLow})
		return err
	})
	h.enqueue("leased", 0)
	h.assign("leased", "a", 60)
	h.running("running", "b", 60)
	done := h.running("done", "a", 60)
	h.ok("complete", func(rev, now uint64) error { _, err := h.p.CompleteTask(rev, now, done); return err })
	failed := h.running("failed", "b", 60)
	h.ok("fail", func(rev, now uint64) error { _, err := h.p.FailTask(rev, now, failed); return err })
	h.enqueue("cancel", 0)
	cOwn, _ := h.task("cancel").Ownership()
	h.ok("cancel", func(rev, now uint64) error { _, err := h.p.CancelTask(rev, now, cOwn); return err })
	cl := h.running("cancel-leased", "a", 60)
	h.ok("cancel leased", func(rev, now uint64) error { _, err := h.p.CancelTask(rev, now, OwnershipFromLease(cl)); return err })
	h.enqueue("young", 0)
	h.ok("deregister", func(rev, now uint64) error { _, err := h.p.DeregisterWorker(rev, now, "gone", 1); return err })
	return h
}

func TestExport_RoundTripIsExact(t *testing.T) {
	h := busyPool(t)
	state := h.export()
	again := h.export()
	if !bytes.Equal(state, again) {
		t.Fatal("two exports of one state differ")
	}
	q, err := RestoreWorkerPool(state)
	if err != nil {
		t.Fatalf("RestoreWorkerPool: %v", err)
	}
	re, _ := q.ExportState()
	if !bytes.Equal(state, re) {
		t.Fatal("re-export differs")
	}
	if q.Snapshot() != h.p.Snapshot() || q.Limits() != h.p.Limits() {
		t.Fatalf("snapshot %+v vs %+v", q.Snapshot(), h.p.Snapshot())
	}
	if err := q.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	// Both pools now answer the same command sequence identically.
	h2 := &harness{t: t, p: q, now: h.now}
	for _, hh := range []*harness{h, h2} {
		hh.now += 100 // workers are dead now, leases expired
		hh.ok("recover", func(rev, now uint64) error { _, err := hh.p.RecoverExpiredLeases(rev, now); return err })
		hh.ok("prune", func(rev, now uint64) error { _, err := hh.p.PruneDeadWorkers(rev, now); return err })
		hh.register("c", 2)
		hh.ok("assign", func(rev, now uint64) error { _, err := hh.p.AssignNextAvailable(rev, now, 30); return err })
	}
	if !bytes.Equal(h.export(), h2.export()) {
		t.Fatal("original and restored pools diverged")
	}
	// Equal states built in different orders give equal bytes.
	x, y := newHarness(t, DefaultLimits()), newHarness(t, DefaultLimits())
	x.register("p", 1)
	x.register("q", 1)
	y.register("p", 1)
	y.register("q", 1)
	if !bytes.Equal(x.export(), y.export()) {
		t.Fatal("export is not deterministic")
	}
}

func TestExport_RestoreRejectsCorruption(t *testing.T) {
	state := busyPool(t).export()
	check := func(name string, data []byte) {
		t.Helper()
		p, err := RestoreWorkerPool(data)
		if p != nil || !errors.Is(err, ErrInvalidState) {
			t.Fatalf("%s: RestoreWorkerPool = %v, %v; want ErrInvalidState", name, p, err)
		}
	}
	check("nil", nil)
	check("empty", []byte{})
	check("magic only", []byte(poolMagic))
	for i := 0; i < len(state); i++ {
		check("truncated", state[:i])
	}
	for i := 0; i < len(state); i++ {
		bad := bytes.Clone(state)
		bad[i] ^= 0x40
		check("bit flip", bad)
	}
	check("trailing byte", append(bytes.Clone(state), 0))
	bad := bytes.Clone(state)
	bad[len(poolMagic)] = poolVersion + 1
	check("future version", bad)
}

// framePool replaces the body of a frame and fixes its checksum, so that the
// semantic validation (not the CRC) must catch the problem.
func framePool(magic string, body []byte) []byte {
	out := append([]byte(magic), poolVersion)
	out = append(out, body...)
	return binary.BigEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
}

func TestExport_RestoreRejectsHostileButWellFramed(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 1)
	l := h.running("t", "w", 60)
	_ = l
	valid := h.export()
	body := valid[len(poolMagic)+1 : len(valid)-4]
	if _, err := RestoreWorkerPool(framePool(poolMagic, body)); err != nil {
		t.Fatalf("reframed valid state rejected: %v", err)
	}
	// Flip every byte of the body with a recomputed checksum: each result is
	// either rejected or, if accepted, a state that passes the full audit and
	// re-exports to itself.
	for i := range body {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			b := bytes.Clone(body)
			b[i] ^= x
			data := framePool(poolMagic, b)
			p, err := RestoreWorkerPool(data)
			if err != nil {
				if !errors.Is(err, ErrInvalidState) {
					t.Fatalf("byte %d: error %v is not InvalidState", i, err)
				}
				continue
			}
			if err := p.CheckInvariants(); err != nil {
				t.Fatalf("byte %d: accepted state breaks invariants: %v", i, err)
			}
			if re, _ := p.ExportState(); !bytes.Equal(re, data) {
				t.Fatalf("byte %d: accepted state does not re-export to its input", i)
			}
		}
	}
	// Hostile counts: a huge task count with no bytes behind it.
	e := newEncoder(poolMagic, poolVersion)
	lim := DefaultLimits()
	for _, v := range []uint64{4096, 1024, 1024, 4096, 256, 3, 3600, 86400, 60, 0, 0, 0, 0, math.MaxUint32} {
		e.uvarint(v)
	}
	if _, err := RestoreWorkerPool(e.finish()); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("huge count: %v", err)
	}
	_ = lim
}

func TestCounters_Exhaustion(t *testing.T) {
	t.Run("revision", func(t *testing.T) {
		h := newHarness(t, DefaultLimits())
		h.p.c.revision = math.MaxUint64
		e := h.fail(KindCounterExhausted, func(rev, now uint64) error {
			_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: "t", ScanID: "s", TargetRef: "x"})
			return err
		})
		if e.Counter != "revision" {
			t.Fatalf("counter = %q", e.Counter)
		}
		// Operation rules come before counters (check 4 before 5).
		h.fail(KindNoQueuedTask, func(rev, now uint64) error { _, err := h.p.AssignNextAvailable(rev, now, 10); return err })
	})
	t.Run("lease id", func(t *testing.T) {
		h := newHarness(t, DefaultLimits())
		h.register("w", 1)
		h.enqueue("t", 0)
		h.p.c.lastLeaseID = math.MaxUint64
		e := h.fail(KindCounterExhausted, func(rev, now uint64) error { _, err := h.p.AssignNextAvailable(rev, now, 10); return err })
		if e.Counter != "lease_id" {
			t.Fatalf("counter = %q", e.Counter)
		}
	})
	t.Run("enqueue ordinal", func(t *testing.T) {
		h := newHarness(t, DefaultLimits())
		h.p.c.lastOrdinal = math.MaxUint64
		e := h.fail(KindCounterExhausted, func(rev, now uint64) error {
			_, err := h.p.Enqueue(rev, now, TaskSpec{TaskID: "t", ScanID: "s", TargetRef: "x"})
			return err
		})
		if e.Counter != "enqueue_ordinal" {
			t.Fatalf("counter = %q", e.Counter)
		}
	})
	t.Run("lease expiry", func(t *testing.T) {
		h := newHarness(t, DefaultLimits())
		h.now = math.MaxUint64 - 5
		h.register("w", 1)
		h.enqueue("t", 0)
		e := h.fail(KindCounterExhausted, func(rev, now uint64) error { _, err := h.p.AssignNextAvailable(rev, now, 10); return err })
		if e.Counter != "lease_expiry" {
			t.Fatalf("counter = %q", e.Counter)
		}
	})
	t.Run("requeue ordinal during recovery", func(t *testing.T) {
		h := newHarness(t, DefaultLimits())
		h.register("w", 1)
		h.running("t", "w", 10)
		h.p.c.lastOrdinal = math.MaxUint64
		h.now += 10
		e := h.fail(KindCounterExhausted, func(rev, now uint64) error { _, err := h.p.RecoverExpiredLeases(rev, now); return err })
		if e.Counter != "enqueue_ordinal" {
			t.Fatalf("counter = %q", e.Counter)
		}
	})
}

// Regression (found by distributedtest/sim FuzzRestoreSimState): a padded,
// non-minimal varint used to be accepted, so an accepted state could
// re-export to different bytes. Only minimal varints are valid now.
func TestExport_RejectsNonMinimalVarints(t *testing.T) {
	d, ok := newDecoder(framePool(poolMagic, []byte{0x80, 0x00}), poolMagic, poolVersion)
	if !ok {
		t.Fatal("frame rejected")
	}
	if d.uvarint(); d.done() {
		t.Fatal("padded zero accepted")
	}
	// The empty pool with its revision re-encoded as a two-byte zero.
	valid, _ := NewWorkerPool().ExportState()
	body := valid[len(poolMagic)+1 : len(valid)-4]
	var padded []byte
	e := newEncoder(poolMagic, poolVersion)
	for _, v := range []uint64{4096, 1024, 1024, 4096, 256, 3, 3600, 86400, 60} {
		e.uvarint(v)
	}
	prefix := len(e.buf) - len(poolMagic) - 1
	padded = append(padded, body[:prefix]...)
	padded = append(padded, 0x80, 0x00)
	padded = append(padded, body[prefix+1:]...)
	if _, err := RestoreWorkerPool(framePool(poolMagic, padded)); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("padded revision: %v", err)
	}
	if _, err := RestoreWorkerPool(framePool(poolMagic, body)); err != nil {
		t.Fatalf("unpadded body rejected: %v", err)
	}
}
