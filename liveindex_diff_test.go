package distributed

// Goal: the live-worker index (liveindex.go) answers every question exactly
// as the treap it replaced did (a86f3f1 treap.go), through the public
// commands, with up to several hundred workers so that the tree above the
// slots has one to three levels, the ring wraps and is packed, and
// registrations force re-ranks. Method: a reference rebuilt from the
// worker records at every step in the treap's order — the non-offline
// workers sorted by (LastHeartbeat, ID); the best alive worker is the
// maximum of (available slots, then the smallest ID) over the healthy
// workers with a free slot in the suffix whose heartbeat is above
// now − HeartbeatTimeoutSecs (all of them when now < the timeout); the
// dead workers are the prefix at or below it, in ID order; the oldest is
// the first. Every step compares GetAvailableWorker and RecoveryDue at
// several probe times, the index's own dead prefix, oldest and walk, the
// worker AssignNextAvailable picks, the workers PruneDeadWorkers takes
// offline, and after an export and restore the restored pool's answers;
// the audit runs after every step.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// diffRef is the treap's order over the non-offline workers.
type diffRef struct {
	live    []WorkerNode // (LastHeartbeat, ID) order, as treapWalk gave them
	timeout uint64
}

func newDiffRef(p *WorkerPool) diffRef {
	var live []WorkerNode
	for _, w := range p.Workers() {
		if w.Status() != WorkerOffline {
			live = append(live, w)
		}
	}
	slices.SortFunc(live, func(a, b WorkerNode) int {
		if a.LastHeartbeat() != b.LastHeartbeat() {
			if a.LastHeartbeat() < b.LastHeartbeat() {
				return -1
			}
			return 1
		}
		return strings.Compare(a.WorkerID(), b.WorkerID())
	})
	return diffRef{live: live, timeout: p.Limits().HeartbeatTimeoutSecs}
}

// best is treapBestAlive at now: "" when no worker is eligible.
func (r diffRef) best(now uint64) string {
	allAlive, cutoff := now < r.timeout, uint64(0)
	if !allAlive {
		cutoff = now - r.timeout
	}
	best, slots := "", uint32(0)
	for _, w := range r.live {
		if !allAlive && w.LastHeartbeat() <= cutoff {
			continue
		}
		if w.Status() != WorkerHealthy || w.AvailableSlots() == 0 {
			continue
		}
		if s := w.AvailableSlots(); s > slots || (s == slots && w.WorkerID() < best) {
			best, slots = w.WorkerID(), s
		}
	}
	return best
}

// dead is treapDead(now − timeout) sorted by ID (PruneDeadWorkers).
func (r diffRef) dead(now uint64) []string {
	var out []string
	if now < r.timeout {
		return nil
	}
	for _, w := range r.live {
		if w.LastHeartbeat() > now-r.timeout {
			break // the prefix ends: the treap's walk stopped here
		}
		out = append(out, w.WorkerID())
	}
	slices.Sort(out)
	return out
}

// recoveryDead is RecoveryDue's dead-worker answer from treapFirst.
func (r diffRef) recoveryDead(now uint64) bool {
	if len(r.live) == 0 {
		return false
	}
	hb := r.live[0].LastHeartbeat()
	return now >= hb && now-hb >= r.timeout
}

func diffSeeds(t *testing.T) (first, n, steps int) {
	first, n, steps = 1, 6, 1500 // the review ran 300 seeds of 3 000 steps (docs/testing.md)
	if testing.Short() {
		n = 3
	}
	for _, kv := range []struct {
		env string
		v   *int
	}{{"LIVEDIFF_FIRST", &first}, {"LIVEDIFF_SEEDS", &n}, {"LIVEDIFF_STEPS", &steps}} {
		if s := os.Getenv(kv.env); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("%s: %v", kv.env, err)
			}
			*kv.v = v
		}
	}
	return first, n, steps
}

func TestLiveIndex_DifferentialAgainstTreapOrder(t *testing.T) {
	first, n, steps := diffSeeds(t)
	for seed := first; seed < first+n; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			runLiveDiff(t, uint64(seed), steps)
		})
	}
}

type liveDiff struct {
	t      *testing.T
	rng    *rand.Rand
	p      *WorkerPool
	now    uint64
	step   int
	leases []TaskLease
	task   int
	down   int // the next descending ID: forces re-ranks
	maxW   int
	// coverage: the most linked workers and tree levels seen, steps with
	// the run wrapped round the ring, packs and re-sizes seen, assignments
	ring **workerRec // the ring's first slot: a new one is a pack
	cov  struct{ linked, levels, wrapped, rings, assigned, pruned, restarts int }
}

func (d *liveDiff) rev() uint64 { return d.p.Snapshot().Revision }

func (d *liveDiff) fatalf(format string, args ...any) {
	d.t.Helper()
	d.t.Fatalf("step %d now %d: %s", d.step, d.now, fmt.Sprintf(format, args...))
}

func runLiveDiff(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0x11fe))
	l := DefaultLimits()
	l.MaxWorkers = 700
	l.HeartbeatTimeoutSecs = uint64(5 + rng.IntN(60))
	p, err := NewWorkerPoolWithLimits(l)
	if err != nil {
		t.Fatal(err)
	}
	// maxW varies the size class: 16 slots (no levels), up to 2 048.
	d := &liveDiff{t: t, rng: rng, p: p, now: 1 + uint64(rng.IntN(100)), down: 999999,
		maxW: []int{6, 8, 9, 20, 70, 150, 300, 600}[rng.IntN(8)]}
	for d.step = 0; d.step < steps; d.step++ {
		d.tick()
		d.op()
		if err := d.p.CheckInvariants(); err != nil {
			d.fatalf("audit: %v", err)
		}
		d.compare(d.p)
		d.cover()
	}
	t.Logf("maxW %d timeout %d: %+v", d.maxW, l.HeartbeatTimeoutSecs, d.cov)
}

func (d *liveDiff) cover() {
	x := &d.p.c.alive
	d.cov.linked = max(d.cov.linked, x.n)
	d.cov.levels = max(d.cov.levels, len(x.off))
	if x.tail > x.head && x.slotOf(x.tail-1) < x.slotOf(x.head) {
		d.cov.wrapped++
	}
	if len(x.slots) > 0 && (d.ring == nil || &x.slots[0] != d.ring) {
		d.ring = &x.slots[0]
		d.cov.rings++
	}
}

func (d *liveDiff) tick() {
	switch r := d.rng.IntN(100); {
	case r < 70:
	case r < 97:
		d.now++
	case r < 99:
		d.now += uint64(d.rng.IntN(int(d.p.Limits().HeartbeatTimeoutSecs)))
	default:
		d.now += d.p.Limits().HeartbeatTimeoutSecs + uint64(d.rng.IntN(5))
	}
}

func (d *liveDiff) spec(id string) WorkerSpec {
	return WorkerSpec{WorkerID: id, Capacity: uint32(1 + d.rng.IntN(6))}
}

func (d *liveDiff) newID() string {
	if d.rng.IntN(4) == 0 {
		d.down--
		return fmt.Sprintf("m%06d", d.down) // just below the last: halves a gap
	}
	return fmt.Sprintf("w%04d", d.rng.IntN(2*d.maxW))
}

func (d *liveDiff) pickWorker() (WorkerNode, bool) {
	ws := d.p.Workers()
	if len(ws) == 0 {
		return WorkerNode{}, false
	}
	return ws[d.rng.IntN(len(ws))], true
}

func (d *liveDiff) op() {
	p := d.p
	switch r := d.rng.IntN(100); {
	case r < 12: // register (bulk sometimes)
		for range 1 + d.rng.IntN(1+d.maxW/10) {
			if len(p.Workers()) < d.maxW {
				_, _ = p.RegisterWorker(d.rev(), d.now, d.spec(d.newID()))
			}
		}
	case r < 55: // heartbeat
		if w, ok := d.pickWorker(); ok && w.Status() != WorkerOffline {
			st := WorkerHealthy
			if d.rng.IntN(6) == 0 {
				st = WorkerStatus(d.rng.IntN(3)) // healthy, busy or degraded
			}
			_, _ = p.UpdateWorker(d.rev(), d.now, w.WorkerID(), w.Generation(), WorkerObservation{Status: st, CPUBasisPoints: uint16(d.rng.IntN(10001))})
		}
	case r < 57:
		if w, ok := d.pickWorker(); ok && w.Status() != WorkerOffline {
			if _, err := p.DeregisterWorker(d.rev(), d.now, w.WorkerID(), w.Generation()); err != nil {
				d.fatalf("deregister %s: %v", w.WorkerID(), err)
			}
		}
	case r < 62:
		if w, ok := d.pickWorker(); ok && w.Status() == WorkerOffline {
			if _, err := p.ReactivateWorker(d.rev(), d.now, w.Generation(), d.spec(w.WorkerID())); err != nil {
				d.fatalf("reactivate %s: %v", w.WorkerID(), err)
			}
		}
	case r < 82:
		d.assign()
	case r < 96:
		d.finish()
	case r < 99:
		d.prune()
	default:
		d.restart()
	}
}

func (d *liveDiff) assign() {
	p := d.p
	if p.Snapshot().QueuedTasks == 0 {
		d.task++
		if _, err := p.Enqueue(d.rev(), d.now, TaskSpec{TaskID: fmt.Sprint("t", d.task), ScanID: "s", TargetRef: "x"}); err != nil {
			return // the records are full
		}
	}
	want := newDiffRef(p).best(d.now)
	tr, err := p.AssignNextAvailable(d.rev(), d.now, uint64(1+d.rng.IntN(200)))
	switch {
	case want == "" && errors.Is(err, ErrNoAvailableWorker):
	case err != nil:
		d.fatalf("AssignNextAvailable: %v, want worker %q", err, want)
	case tr.Value.WorkerID() != want:
		d.fatalf("AssignNextAvailable picked %s, the treap order %q", tr.Value.WorkerID(), want)
	default:
		d.cov.assigned++
		d.leases = append(d.leases, tr.Value)
	}
}

func (d *liveDiff) finish() {
	if len(d.leases) == 0 {
		return
	}
	i := d.rng.IntN(len(d.leases))
	ls := d.leases[i]
	d.leases = slices.Delete(d.leases, i, i+1)
	if d.rng.IntN(2) == 0 {
		_, _ = d.p.CompleteTask(d.rev(), d.now, ls)
	} else {
		_, _ = d.p.CancelTask(d.rev(), d.now, OwnershipFromLease(ls))
	}
}

func (d *liveDiff) prune() {
	p := d.p
	want := newDiffRef(p).dead(d.now)
	before := map[string]WorkerNode{}
	for _, w := range p.Workers() {
		before[w.WorkerID()] = w
	}
	tr, err := p.PruneDeadWorkers(d.rev(), d.now)
	if err != nil {
		return // e.g. the queue has no room for the requeues: nothing changed
	}
	if tr.Value.WorkersAffected != len(want) {
		d.fatalf("prune took %d workers offline, the treap's prefix has %v", tr.Value.WorkersAffected, want)
	}
	d.cov.pruned += len(want)
	var got []string
	for _, w := range p.Workers() {
		if w.Status() == WorkerOffline && before[w.WorkerID()].Status() != WorkerOffline {
			got = append(got, w.WorkerID())
		}
	}
	if !slices.Equal(got, want) {
		d.fatalf("prune took %v offline, the treap's prefix is %v", got, want)
	}
}

// restart exports and restores, compares the two pools' answers, and
// continues on the restored one.
func (d *liveDiff) restart() {
	b, err := d.p.ExportState()
	if err != nil {
		d.fatalf("export: %v", err)
	}
	q, err := RestoreWorkerPool(b)
	if err != nil {
		d.fatalf("restore: %v", err)
	}
	for _, probe := range d.probes() {
		w1, ok1, _ := d.p.GetAvailableWorker(probe)
		w2, ok2, _ := q.GetAvailableWorker(probe)
		if ok1 != ok2 || w1.WorkerID() != w2.WorkerID() {
			d.fatalf("at %d the restored pool picks %q (%v), the exported one %q (%v)", probe, w2.WorkerID(), ok2, w1.WorkerID(), ok1)
		}
		_, e1, _ := d.p.RecoveryDue(probe, 0)
		_, e2, _ := q.RecoveryDue(probe, 0)
		if e1 != e2 {
			d.fatalf("at %d RecoveryDue's dead workers: restored %v, exported %v", probe, e2, e1)
		}
	}
	d.p = q
	d.cov.restarts++
}

func (d *liveDiff) probes() []uint64 {
	t := d.p.Limits().HeartbeatTimeoutSecs
	return []uint64{d.now, d.now + 1, d.now + t - 1, d.now + t, d.now + t + 1, d.now + 2*t, d.now + uint64(d.rng.IntN(int(3*t)))}
}

// compare checks p against the treap's order at several probe times.
func (d *liveDiff) compare(p *WorkerPool) {
	ref := newDiffRef(p)
	x := &p.c.alive
	for _, probe := range d.probes() {
		got, ok, err := p.GetAvailableWorker(probe)
		if err != nil {
			d.fatalf("GetAvailableWorker(%d): %v", probe, err)
		}
		if want := ref.best(probe); (want != "") != ok || got.WorkerID() != want {
			d.fatalf("GetAvailableWorker(%d) = %q (%v), the treap order %q; %d linked, ring %d [%d, %d), %d levels",
				probe, got.WorkerID(), ok, want, x.n, len(x.slots), x.head, x.tail, len(x.off))
		}
		if _, gotDead, _ := p.RecoveryDue(probe, 0); gotDead != ref.recoveryDead(probe) {
			d.fatalf("RecoveryDue(%d) dead = %v, the treap's first says %v", probe, gotDead, !gotDead)
		}
		if probe >= ref.timeout {
			var dead []string
			for _, w := range x.dead(probe - ref.timeout) {
				dead = append(dead, w.id)
			}
			slices.Sort(dead)
			if want := ref.dead(probe); !slices.Equal(dead, want) {
				d.fatalf("dead(%d) = %v, the treap's prefix %v", probe-ref.timeout, dead, want)
			}
		}
	}
	f := x.first()
	if (f == nil) != (len(ref.live) == 0) || (f != nil && f.lastHeartbeat != ref.live[0].LastHeartbeat()) {
		d.fatalf("first = %v, the treap's first %v", f, ref.live)
	}
	var walked []string
	x.walk(func(w *workerRec) bool { walked = append(walked, w.id); return true })
	var want []string
	for _, w := range ref.live {
		want = append(want, w.WorkerID())
	}
	slices.Sort(walked)
	slices.Sort(want)
	if !slices.Equal(walked, want) {
		d.fatalf("walk visits %v, the treap %v", walked, want)
	}
}
