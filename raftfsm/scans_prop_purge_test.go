package raftfsm

import (
	"slices"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// This file holds the purge steps of the scan record property test
// (scans_prop_test.go).

// purge applies one random purge: a whole scan (sometimes with
// cancel_first), a few task IDs, or the terminal tasks finished before a
// time in one scan or every scan; the model drops what it expects purged
// and the FSM's answer must name exactly that.
func (p *scanProp) purge() {
	switch p.rng.IntN(3) {
	case 0:
		p.purgeScan()
	case 1:
		p.purgeIDs()
	case 2:
		p.purgeBefore()
	}
}

func (p *scanProp) purgeScan() {
	scan := string(rune('a' + p.rng.IntN(3)))
	force := p.rng.IntN(2) == 0
	m := p.model[scan]
	want := m != nil && (force || p.allTerminal(m.ids))
	r := p.apply(&pb.Command{Principal: "kprod", Op: &pb.Command_PurgeTasks{PurgeTasks: &pb.PurgeTasks{ScanId: scan, WholeScan: true, CancelFirst: force}}})
	if (r.Err == nil) != want {
		p.t.Fatalf("purge of scan %s (force %v): %v, model expects success %v", scan, force, r.Err, want)
	}
	if want {
		p.expectPurged(r, slices.Clone(m.ids))
	}
}

func (p *scanProp) purgeIDs() {
	var ids []string
	for range 1 + p.rng.IntN(3) {
		if id := p.anyID(); id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	want := p.allTerminal(ids)
	r := p.apply(&pb.Command{Principal: "kprod", Op: &pb.Command_PurgeTasks{PurgeTasks: &pb.PurgeTasks{TaskIds: ids}}})
	if (r.Err == nil) != want {
		p.t.Fatalf("purge of %v: %v, model expects success %v", ids, r.Err, want)
	}
	if want {
		p.expectPurged(r, ids)
	}
}

func (p *scanProp) purgeBefore() {
	before := p.b.now - uint64(p.rng.IntN(40))
	scan := ""
	if p.rng.IntN(2) == 0 {
		scan = string(rune('a' + p.rng.IntN(3)))
	}
	var want []string
	for s, m := range p.model {
		for _, id := range m.ids {
			at, done := p.task(id).FinishedAt()
			if done && at < before && (scan == "" || scan == s) {
				want = append(want, id)
			}
		}
	}
	r := p.apply(&pb.Command{Principal: "kprod", Op: &pb.Command_PurgeTasks{PurgeTasks: &pb.PurgeTasks{ScanId: scan, FinishedBefore: before}}})
	if r.Err != nil {
		p.t.Fatalf("purge before %d in %q: %v", before, scan, r.Err)
	}
	p.expectPurged(r, want)
}

// expectPurged checks that the purge purged exactly ids and removes them
// from the model: scans emptied are gone, the rest keep their ordinals.
func (p *scanProp) expectPurged(r Response, ids []string) {
	got := valueOf[PurgeValue](p.t, r).TaskIDs
	slices.Sort(ids)
	if !slices.Equal(got, ids) {
		p.t.Fatalf("purged %v, model expects %v", got, ids)
	}
	for _, id := range ids {
		p.forget(id)
		p.purged = append(p.purged, id)
	}
	p.leases = slices.DeleteFunc(p.leases, func(l distributed.TaskLease) bool { return slices.Contains(ids, l.TaskID()) })
}

// forget removes a purged task from the model.
func (p *scanProp) forget(id string) {
	for s, m := range p.model {
		if i := slices.Index(m.ids, id); i >= 0 {
			m.ids, m.ords = slices.Delete(m.ids, i, i+1), slices.Delete(m.ords, i, i+1)
			if j := slices.Index(m.completed, id); j >= 0 {
				m.completed, m.compOrds = slices.Delete(m.completed, j, j+1), slices.Delete(m.compOrds, j, j+1)
			}
			m.resultBytes -= uint64(p.sizes[id])
			delete(p.sizes, id)
			if len(m.ids) == 0 {
				delete(p.model, s)
			}
			return
		}
	}
}

// anyID returns a random task ID of the model ("" when there is none).
func (p *scanProp) anyID() string {
	var all []string
	for _, s := range []string{"a", "b", "c"} {
		if m := p.model[s]; m != nil {
			all = append(all, m.ids...)
		}
	}
	if len(all) == 0 {
		return ""
	}
	return all[p.rng.IntN(len(all))]
}

func (p *scanProp) allTerminal(ids []string) bool {
	for _, id := range ids {
		if !p.task(id).Status().Terminal() {
			return false
		}
	}
	return true
}
