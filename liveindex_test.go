package distributed

// Goal: the live-worker index answers "best eligible alive worker" and "dead
// workers" exactly like a brute-force scan, across random heartbeats, status
// changes, leases, deregistrations and reactivations (seeded, reproducible),
// and so does the index on its own against a plain list (rapid).

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"
	"unsafe"

	"pgregory.net/rapid"
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

func TestLiveIndex_MatchesBruteForce(t *testing.T) {
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
						t.Fatalf("step %d now %d: index picked %q (%v), brute force %q", step, probe, got.WorkerID(), ok, want)
					}
				}
				var dead, wantDead []string
				if h.now >= l.HeartbeatTimeoutSecs {
					for _, w := range h.p.c.alive.dead(h.now - l.HeartbeatTimeoutSecs) {
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
// checks the index's copies of the selection keys) and check the chosen
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

// The worker record is 128 bytes, a size class whose objects start on a
// 64-byte boundary, and every field a heartbeat or a refresh of the index
// reads or returns — all but the lease slice — is in its first 80 bytes
// (state.go): at most two lines per heartbeat.
func TestWorkerRec_HotFieldsFirst(t *testing.T) {
	var w workerRec
	if size := unsafe.Sizeof(w); size != 128 {
		t.Fatalf("sizeof(workerRec) = %d, want 128 (a 64-byte aligned size class)", size)
	}
	for name, r := range map[string][2]uintptr{"key": {unsafe.Offsetof(w.key), 8}, "rank": {unsafe.Offsetof(w.rank), 8},
		"slot": {unsafe.Offsetof(w.slot), 4}, "id": {unsafe.Offsetof(w.id), unsafe.Sizeof(w.id)},
		"generation": {unsafe.Offsetof(w.generation), 8}, "status": {unsafe.Offsetof(w.status), unsafe.Sizeof(w.status)},
		"capacity": {unsafe.Offsetof(w.capacity), 4}, "current": {unsafe.Offsetof(w.current), 4},
		"completed": {unsafe.Offsetof(w.completed), 8}, "lastHeartbeat": {unsafe.Offsetof(w.lastHeartbeat), 8},
		"cpu": {unsafe.Offsetof(w.cpu), 2}, "mem": {unsafe.Offsetof(w.mem), 2}, "net": {unsafe.Offsetof(w.net), 2},
		"tagBits": {unsafe.Offsetof(w.tagBits), 1}} {
		if r[0]+r[1] > 80 {
			t.Fatalf("hot field %s at offsets %d–%d, want all within the first 80 bytes", name, r[0], r[0]+r[1])
		}
	}
	// The key, rank and slot (the index's fields) and the heartbeat check's
	// fields share the first line.
	for name, r := range map[string][2]uintptr{"key": {unsafe.Offsetof(w.key), 8}, "slot": {unsafe.Offsetof(w.slot), 4},
		"status": {unsafe.Offsetof(w.status), 1}, "generation": {unsafe.Offsetof(w.generation), 8},
		"lastHeartbeat": {unsafe.Offsetof(w.lastHeartbeat), 8}} {
		if r[0]+r[1] > 64 {
			t.Fatalf("field %s at offsets %d–%d, want it within the first 64 bytes", name, r[0], r[0]+r[1])
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

// Goal: the live-worker index on its own answers like a plain list of
// (worker, heartbeat) pairs — best eligible worker above any cutoff, the
// dead prefix, the oldest, the walk — and passes its audit, across random
// links at a non-decreasing now, unlinks, relinks, key changes and
// re-ranks (rapid; the packs and growths happen along the way, and bulk
// links reach rings of up to 2 048 slots, three levels above the slots).
func TestLiveIndex_AgainstList(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var x liveIndex
		all := map[string]*workerRec{}
		var linked []*workerRec
		now, nextRank := uint64(1), uint64(1)
		newKey := func(w *workerRec) {
			w.capacity = uint32(rapid.IntRange(1, 8).Draw(rt, "capacity"))
			w.current = uint32(rapid.IntRange(0, int(w.capacity)).Draw(rt, "current"))
			w.status = []WorkerStatus{WorkerHealthy, WorkerDegraded}[rapid.IntRange(0, 1).Draw(rt, "status")]
		}
		pick := func() int { return rapid.IntRange(0, len(linked)-1).Draw(rt, "pick") }
		for step := rapid.IntRange(1, 150).Draw(rt, "steps"); step > 0; step-- {
			now += uint64(rapid.IntRange(0, 2).Draw(rt, "tick"))
			link := func() {
				w := &workerRec{id: fmt.Sprint("w", len(all)), rank: nextRank, lastHeartbeat: now}
				nextRank += uint64(rapid.IntRange(1, 3).Draw(rt, "gap"))
				newKey(w)
				all[w.id] = w
				x.insert(w)
				linked = append(linked, w)
			}
			switch op := rapid.IntRange(0, 6).Draw(rt, "op"); {
			case op == 0 || len(linked) == 0:
				link()
			case op == 5 && len(linked) < 600:
				for range rapid.IntRange(1, 300).Draw(rt, "bulk") {
					link()
				}
			case op == 1:
				i := pick()
				x.remove(linked[i])
				linked = append(linked[:i], linked[i+1:]...)
			case op == 2: // a heartbeat in a later (or the same) second
				w := linked[pick()]
				x.remove(w)
				w.lastHeartbeat = now
				newKey(w)
				x.insert(w)
			case op == 3:
				w := linked[pick()]
				newKey(w)
				x.refresh(w)
			case op == 4: // re-rank: new ranks in reverse order, then a rebuild
				for i, w := range linked {
					w.rank = uint64(len(linked) - i)
					w.rescore()
				}
				x.rebuild()
			}
			checkLiveIndex(rt, &x, all, linked, now)
		}
	})
}

// checkLiveIndex compares x with the linked list by brute force.
func checkLiveIndex(rt *rapid.T, x *liveIndex, all map[string]*workerRec, linked []*workerRec, now uint64) {
	if !x.shapeOK() || !x.slotsOK(all) || !x.treeOK() || x.n != len(linked) {
		rt.Fatalf("audit fails: shape %v slots %v tree %v, n %d linked %d", x.shapeOK(), x.slotsOK(all), x.treeOK(), x.n, len(linked))
	}
	cutoffs := []uint64{0, now / 2, now - 1, now, now + 1}
	for _, cutoff := range cutoffs {
		var want *workerRec
		var dead []string
		for _, w := range linked {
			if w.lastHeartbeat > cutoff && w.key > 0 && (want == nil || w.key > want.key) {
				want = w
			}
			if w.lastHeartbeat <= cutoff {
				dead = append(dead, w.id)
			}
		}
		if got := x.bestAlive(cutoff, false); got != want {
			rt.Fatalf("bestAlive(%d) = %v, want %v", cutoff, got, want)
		}
		var gotDead []string
		for _, w := range x.dead(cutoff) {
			gotDead = append(gotDead, w.id)
		}
		sort.Strings(dead)
		sort.Strings(gotDead)
		if fmt.Sprint(gotDead) != fmt.Sprint(dead) {
			rt.Fatalf("dead(%d) = %v, want %v", cutoff, gotDead, dead)
		}
	}
	// Every range query: the best from each (sampled) position of the run
	// to its end, against the slots themselves.
	step := max(1, (x.tail-x.head)/32)
	for p := x.head; p <= x.tail; p += step {
		var want *workerRec
		for q := p; q < x.tail; q++ {
			if w := x.slots[x.slotOf(q)]; w != nil && w.key > 0 && (want == nil || w.key > want.key) {
				want = w
			}
		}
		if got := x.bestFrom(p); got != want {
			rt.Fatalf("bestFrom(%d) in run [%d, %d) of %d slots = %v, want %v", p, x.head, x.tail, len(x.slots), got, want)
		}
	}
	var walked []*workerRec
	x.walk(func(w *workerRec) bool { walked = append(walked, w); return true })
	if len(walked) != len(linked) || !sort.SliceIsSorted(walked, func(i, j int) bool { return walked[i].lastHeartbeat < walked[j].lastHeartbeat }) {
		rt.Fatalf("walk visited %d workers, want %d in heartbeat order", len(walked), len(linked))
	}
	if f := x.first(); (f == nil) != (len(linked) == 0) || (f != nil && f != walked[0]) {
		rt.Fatalf("first = %v, want the walk's first", f)
	}
}

// Goal: the audit refuses slots out of heartbeat order (I9), although
// every slot names its worker and copies its heartbeat and key. Method:
// two workers linked a second apart swap slots.
func TestLiveIndex_AuditCatchesHeartbeatDisorder(t *testing.T) {
	var x liveIndex
	a := &workerRec{id: "a", rank: 1, capacity: 1, status: WorkerHealthy, lastHeartbeat: 1}
	b := &workerRec{id: "b", rank: 2, capacity: 1, status: WorkerHealthy, lastHeartbeat: 2}
	x.insert(a)
	x.insert(b)
	all := map[string]*workerRec{"a": a, "b": b}
	if !x.slotsOK(all) || !x.treeOK() {
		t.Fatal("clean index fails its audit")
	}
	x.slots[a.slot], x.slots[b.slot] = b, a
	x.hb[a.slot], x.hb[b.slot] = b.lastHeartbeat, a.lastHeartbeat
	a.slot, b.slot = b.slot, a.slot
	x.rebuild()
	if x.slotsOK(all) {
		t.Fatal("the audit accepts slots out of heartbeat order")
	}
}

// Goal: the audit refuses a stale node of the tree above the slots (I9)
// at every level, although every slot is right. Method: 600 workers
// (a ring of 2 048 slots, three levels above them); on each level, lower
// the best node's key, then raise the key of the last node (over vacant
// slots only, or padding).
func TestLiveIndex_AuditCatchesStaleNode(t *testing.T) {
	var x liveIndex
	all := map[string]*workerRec{}
	for i := range 600 {
		w := &workerRec{id: fmt.Sprint("w", i), rank: uint64(i + 1), capacity: uint32(1 + i%7), status: WorkerHealthy, lastHeartbeat: 1}
		all[w.id] = w
		x.insert(w)
	}
	if len(x.off) != 4 || !x.shapeOK() || !x.slotsOK(all) || !x.treeOK() {
		t.Fatalf("clean index: %d levels, audit %v %v %v", len(x.off), x.shapeOK(), x.slotsOK(all), x.treeOK())
	}
	for l := 1; l < len(x.off); l++ {
		level := x.key[x.off[l]:x.levelEnd(l)]
		i := slices.Index(level, slices.Max(level))
		level[i]--
		if !x.slotsOK(all) || x.treeOK() {
			t.Fatalf("level %d: the audit accepts a lowered best", l)
		}
		level[i]++
		level[len(level)-1]++ // over vacant slots only, or padding: its key is 0
		if x.treeOK() {
			t.Fatalf("level %d: the audit accepts a key in a padding node", l)
		}
		level[len(level)-1]--
	}
}
