package distributed

// Goal: the live-worker treap answers "best eligible alive worker" and "dead
// workers" exactly like a brute-force scan, across random heartbeats, status
// changes, leases, deregistrations and reactivations (seeded, reproducible).

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"testing"
	"unsafe"
)

func bruteBest(p *WorkerPool, now uint64) string {
	best, bestSlots := "", uint32(0)
	for _, w := range p.Workers() {
		dead := now-w.LastHeartbeat() >= p.Limits().HeartbeatTimeoutSecs
		if w.Status() != WorkerHealthy || dead || w.AvailableSlots() == 0 {
			continue
		}
		if s := w.AvailableSlots(); s > bestSlots || (s == bestSlots && w.WorkerID() < best) {
			best, bestSlots = w.WorkerID(), s
		}
	}
	return best
}

func TestTreap_MatchesBruteForce(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			l := DefaultLimits()
			l.HeartbeatTimeoutSecs = 20
			h := newHarness(t, l)
			h.now = 100
			var leases []TaskLease
			task := 0
			for step := 0; step < 400; step++ {
				if rng.IntN(3) == 0 {
					h.now += uint64(rng.IntN(8))
				}
				id := fmt.Sprint("w", rng.IntN(12))
				w, exists, _ := h.p.GetWorker(id)
				switch op := rng.IntN(6); {
				case !exists:
					h.p.RegisterWorker(h.rev(), h.now, WorkerSpec{WorkerID: id, Capacity: uint32(1 + rng.IntN(4))})
				case op == 0 && w.Status() == WorkerOffline:
					h.p.ReactivateWorker(h.rev(), h.now, w.Generation(), WorkerSpec{WorkerID: id, Capacity: uint32(1 + rng.IntN(4))})
				case op == 0:
					h.p.DeregisterWorker(h.rev(), h.now, id, w.Generation())
				case op == 1:
					h.p.UpdateWorker(h.rev(), h.now, id, w.Generation(), WorkerObservation{
						Status: WorkerStatus(rng.IntN(3)), CPUBasisPoints: uint16(rng.IntN(10001)),
					})
				case op == 2:
					task++
					h.p.Enqueue(h.rev(), h.now, TaskSpec{TaskID: fmt.Sprint("t", task), ScanID: "s", TargetRef: "x"})
					if tr, err := h.p.AssignNextAvailable(h.rev(), h.now, uint64(1+rng.IntN(40))); err == nil {
						leases = append(leases, tr.Value)
					}
				case op == 3 && len(leases) > 0:
					i := rng.IntN(len(leases))
					h.p.CancelTask(h.rev(), h.now, OwnershipFromLease(leases[i]))
					leases = append(leases[:i], leases[i+1:]...)
				case op == 4:
					h.p.PruneDeadWorkers(h.rev(), h.now)
				}
				if err := h.p.CheckInvariants(); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				for _, probe := range []uint64{h.now, h.now + 5, h.now + 25} {
					got, ok, err := h.p.GetAvailableWorker(probe)
					if err != nil {
						t.Fatal(err)
					}
					want := bruteBest(h.p, probe)
					if (want != "") != ok || (ok && got.WorkerID() != want) {
						t.Fatalf("step %d now %d: treap picked %q (%v), brute force %q", step, probe, got.WorkerID(), ok, want)
					}
				}
				var dead, wantDead []string
				if h.now >= l.HeartbeatTimeoutSecs {
					for _, w := range treapDead(h.p.c.alive, h.now-l.HeartbeatTimeoutSecs) {
						dead = append(dead, w.id)
					}
				}
				for _, w := range h.p.Workers() {
					if w.Status() != WorkerOffline && h.now-w.LastHeartbeat() >= l.HeartbeatTimeoutSecs {
						wantDead = append(wantDead, w.WorkerID())
					}
				}
				sort.Strings(dead)
				if fmt.Sprint(dead) != fmt.Sprint(wantDead) {
					t.Fatalf("step %d: dead %v, want %v", step, dead, wantDead)
				}
				// RecoveryDue agrees with brute force on all three questions.
				for _, probe := range []uint64{h.now, h.now + 9, h.now + 30} {
					const maxAge = 15
					wantExpired, wantOld, wantDeadAny := false, false, false
					for _, task := range h.p.Tasks() {
						if l, ok := task.Lease(); ok && l.ExpiresAt() <= probe {
							wantExpired = true
						}
						if !task.Status().Terminal() && task.AgeSecs(probe) >= maxAge {
							wantOld = true
						}
					}
					for _, w := range h.p.Workers() {
						if w.Status() != WorkerOffline && probe-w.LastHeartbeat() >= l.HeartbeatTimeoutSecs {
							wantDeadAny = true
						}
					}
					gotExpired, gotDead, gotOld := h.p.RecoveryDue(probe, maxAge)
					if gotExpired != wantExpired || gotDead != wantDeadAny || gotOld != wantOld {
						t.Fatalf("step %d now %d: RecoveryDue = %v %v %v, want %v %v %v", step, probe,
							gotExpired, gotDead, gotOld, wantExpired, wantDeadAny, wantOld)
					}
				}
			}
		})
	}
}

// Goal: worker ranks stay in ID order (I9) and tie-breaks stay "smallest
// ID" whatever the registration order, including the re-rank that runs
// when two neighbours' ranks leave no room. Method: register IDs in
// increasing order ("a" < "aa" < "aaa" < … < "b": each takes a step above
// the previous) and then in decreasing order just above "a" ("a999",
// "a998", …: each halves the gap left above "a", so about every 24th
// registration re-ranks every worker); audit after each (the audit also
// checks the treap's cached copies of the ranks) and check the chosen
// worker by brute force.
func TestWorkerRanks_IDOrderThroughReranks(t *testing.T) {
	l := DefaultLimits()
	l.MaxWorkers = 300
	h := newHarness(t, l)
	h.register("b", 1)
	h.register("a", 1)
	id := "a"
	for i := 0; i < 50; i++ {
		id += "a"
		h.register(id, 1)
	}
	for i := 0; i < 100; i++ {
		h.register("a"+strconv.Itoa(999-i), 1)
		if err := h.p.CheckInvariants(); err != nil {
			t.Fatalf("after registering %d IDs: %v", i+53, err)
		}
	}
	// Without a re-rank "a999" would sit 2^23 above "a" (half the step "aa"
	// took); a re-rank spreads the ~150 workers over the whole space.
	if r := h.p.c.workers["a"].rank; h.p.c.workers["a999"].rank-r <= rankStep {
		t.Fatalf("no re-rank spread the ranks again: a=%d a999=%d", r, h.p.c.workers["a999"].rank)
	}
	ranks := h.p.c.byID.Len()
	var prev *workerRec
	h.p.c.byID.Ascend(func(w *workerRec) bool {
		if prev != nil && (prev.rank >= w.rank || prev.id >= w.id) {
			t.Fatalf("rank order differs from ID order at %q (%d) after %q (%d)", w.id, w.rank, prev.id, prev.rank)
		}
		prev = w
		return true
	})
	if ranks != 152 {
		t.Fatalf("ID index holds %d workers, want 152", ranks)
	}
	// Every worker has one free slot: the tie-break must pick "a".
	if w, ok, _ := h.p.GetAvailableWorker(h.now); !ok || w.WorkerID() != "a" || bruteBest(h.p, h.now) != "a" {
		t.Fatalf("GetAvailableWorker = %q, %v; want \"a\"", w.WorkerID(), ok)
	}
	// A restored pool gets its ranks anew and chooses the same worker.
	r, err := RestoreWorkerPool(h.export())
	if err != nil {
		t.Fatal(err)
	}
	if w, _, _ := r.GetAvailableWorker(h.now); w.WorkerID() != "a" {
		t.Fatalf("restored GetAvailableWorker = %q, want \"a\"", w.WorkerID())
	}
}

// Goal: the audit catches ranks out of ID order (I9). Method: swap two
// workers' ranks.
func TestWorkerRanks_AuditCatchesDisorder(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w1", 1)
	h.register("w2", 1)
	a, b := h.p.c.workers["w1"], h.p.c.workers["w2"]
	a.rank, b.rank = b.rank, a.rank
	if err := h.p.CheckInvariants(); !errors.Is(err, ErrStateInvariant) {
		t.Fatalf("CheckInvariants with swapped ranks = %v, want StateInvariant", err)
	}
}

// The treap's fields fill the first cache line of a worker record, and the
// record's size is a size class whose objects start on a 64-byte boundary,
// so a pull reads one line per node (state.go).
func TestWorkerRec_TreapFieldsInOneLine(t *testing.T) {
	var w workerRec
	if size := unsafe.Sizeof(w); size != 192 {
		t.Fatalf("sizeof(workerRec) = %d, want 192 (a 64-byte aligned size class)", size)
	}
	end := unsafe.Offsetof(w.bestKey) + unsafe.Sizeof(w.bestKey)
	for name, off := range map[string]uintptr{"left": unsafe.Offsetof(w.left), "right": unsafe.Offsetof(w.right),
		"parent": unsafe.Offsetof(w.parent), "best": unsafe.Offsetof(w.best), "prio": unsafe.Offsetof(w.prio),
		"rank": unsafe.Offsetof(w.rank), "key": unsafe.Offsetof(w.key), "bestKey": unsafe.Offsetof(w.bestKey)} {
		if off >= 64 || end > 64 {
			t.Fatalf("treap field %s at offset %d (bestKey ends at %d), want all within the first 64 bytes", name, off, end)
		}
	}
	// Every field a heartbeat reads or returns (UpdateWorker and the
	// WorkerNode view) is in the second line, so a heartbeat touches two
	// lines of the record (the third holds the lease slice).
	for name, r := range map[string][2]uintptr{"id": {unsafe.Offsetof(w.id), unsafe.Sizeof(w.id)},
		"generation": {unsafe.Offsetof(w.generation), 8}, "status": {unsafe.Offsetof(w.status), unsafe.Sizeof(w.status)},
		"capacity": {unsafe.Offsetof(w.capacity), 4}, "current": {unsafe.Offsetof(w.current), 4},
		"completed": {unsafe.Offsetof(w.completed), 8}, "lastHeartbeat": {unsafe.Offsetof(w.lastHeartbeat), 8},
		"cpu": {unsafe.Offsetof(w.cpu), 2}, "mem": {unsafe.Offsetof(w.mem), 2}, "net": {unsafe.Offsetof(w.net), 2},
		"tagBits": {unsafe.Offsetof(w.tagBits), 1}} {
		if r[0] < 64 || r[0]+r[1] > 128 {
			t.Fatalf("heartbeat field %s at offsets %d–%d, want all within the second 64 bytes", name, r[0], r[0]+r[1])
		}
	}
	h := newHarness(t, DefaultLimits())
	for i := range 100 {
		h.register(fmt.Sprint("w", i), 1)
	}
	for id, w := range h.p.c.workers {
		if p := uintptr(unsafe.Pointer(w)); p%64 != 0 {
			t.Fatalf("worker %s's record at %#x is not 64-byte aligned", id, p)
		}
	}
}

// The task record stays 216 bytes (the 224-byte size class), and the fields an assignment reads or
// writes (grant, the lease value it returns) are its first 104 bytes
// (state.go), so an assignment at maximum state touches fewer lines of the
// oldest queued record.
func TestTaskRec_AssignmentFieldsFirst(t *testing.T) {
	var r taskRec
	if size := unsafe.Sizeof(r); size != 216 {
		t.Fatalf("sizeof(taskRec) = %d, want 216", size)
	}
	end := unsafe.Offsetof(r.lease) + unsafe.Sizeof(r.lease)
	for name, off := range map[string]uintptr{"id": unsafe.Offsetof(r.id), "status": unsafe.Offsetof(r.status),
		"hasLease": unsafe.Offsetof(r.hasLease), "leaseSlot": unsafe.Offsetof(r.leaseSlot), "attempt": unsafe.Offsetof(r.attempt),
		"generation": unsafe.Offsetof(r.generation), "version": unsafe.Offsetof(r.version),
		"xprev": unsafe.Offsetof(r.xprev), "xnext": unsafe.Offsetof(r.xnext)} {
		if off >= end || end > 104 {
			t.Fatalf("assignment field %s at offset %d (lease ends at %d), want all within the first 104 bytes", name, off, end)
		}
	}
}
