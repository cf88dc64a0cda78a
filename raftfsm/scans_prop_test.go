// Property test of the FSM's scan records. Goal: under random sequences of
// every command that creates, ends or removes tasks (enqueue into a few
// scans, re-enqueue of purged IDs, acquire, complete, fail, cancel, expire,
// recover expired leases, and purges: a whole scan with or without
// cancel_first, task IDs, every terminal task finished before a time in
// one scan or all, with time moving), each scan's record always agrees with
// a naive model kept by the test: created at its first enqueue, finished
// exactly when its last task became terminal (at that command's time;
// reopened by an enqueue), the completion order that of the successful
// fresh completions minus purged tasks, the result bytes their sum, the
// enqueue and completion ordinals never renumbered by a purge, a scan
// emptied by a purge gone; and the state survives ExportState/RestoreState
// byte for byte. Method: seeded math/rand/v2, the model recomputed from
// the pool's task records after each step (which tasks a time-bounded
// purge selects is the core's, tested by its own model).
package raftfsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wire"
)

// scanModel is the test's naive record of one scan.
type scanModel struct {
	ids                   []string
	ords                  []uint64
	createdAt, finishedAt uint64
	finished              bool
	completed             []string
	compOrds              []uint64
	nextOrd, nextComp     uint64
	resultBytes           uint64
}

type scanProp struct {
	t      *testing.T
	b      *testBundle
	rng    *rand.Rand
	model  map[string]*scanModel
	leases []distributed.TaskLease
	next   int
	sizes  map[string]int  // task ID → size of its stored result
	purged []string        // purged task IDs (re-enqueued sometimes)
	seen   map[string]bool // every scan ever enqueued into
}

func (p *scanProp) apply(cmd *pb.Command) Response {
	cmd.NowSecs = p.b.now
	return p.b.apply(cmd)
}

// step applies one random command and updates the model.
func (p *scanProp) step() {
	p.b.now += uint64(p.rng.IntN(15))
	switch p.rng.IntN(10) {
	case 8, 9:
		p.purge()
	case 0, 1:
		p.enqueue()
	case 2:
		if r := p.apply(acquireCmd("kw1", "w1", uint32(1+p.rng.IntN(3)))); r.Err == nil {
			for _, a := range valueOf[[]Acquired](p.t, r) {
				p.leases = append(p.leases, a.Lease)
			}
		}
	case 3, 4:
		p.complete()
	case 5:
		if l, ok := p.takeLease(); ok {
			lb, _ := l.MarshalBinary()
			p.apply(&pb.Command{Principal: "kw1", Op: &pb.Command_FailTask{FailTask: &pb.FailTask{Lease: lb}}})
		}
	case 6:
		if p.next > 0 {
			p.apply(cancelByIDCmd("kprod", fmt.Sprintf("p%d", p.rng.IntN(p.next))))
		}
	case 7:
		if p.rng.IntN(2) == 0 {
			p.apply(&pb.Command{Op: &pb.Command_ExpireOldTasks{ExpireOldTasks: &pb.ExpireOldTasks{MaxAgeSecs: 120}}})
		} else {
			p.apply(&pb.Command{Op: &pb.Command_RecoverExpiredLeases{RecoverExpiredLeases: &pb.RecoverExpiredLeases{}}})
		}
	}
	p.settle()
}

func (p *scanProp) enqueue() {
	scan := string(rune('a' + p.rng.IntN(3)))
	var ids []string
	for range 1 + p.rng.IntN(3) {
		ids = append(ids, fmt.Sprintf("p%d", p.next))
		p.next++
	}
	reused := len(p.purged) > 0 && p.rng.IntN(3) == 0
	if reused { // a purged ID starts a new life, in any scan
		ids = append(ids, p.purged[0])
	}
	if r := p.apply(enqueueScanCmd(scan, ids...)); r.Err != nil {
		p.t.Fatalf("enqueue %v into %s: %v", ids, scan, r.Err)
	}
	if reused {
		p.purged = p.purged[1:]
	}
	p.seen[scan] = true
	m, ok := p.model[scan]
	if !ok {
		m = &scanModel{createdAt: p.b.now}
		p.model[scan] = m
	}
	for _, id := range ids {
		m.ids, m.ords = append(m.ids, id), append(m.ords, m.nextOrd)
		m.nextOrd++
	}
	m.finished, m.finishedAt = false, 0
}

func (p *scanProp) takeLease() (distributed.TaskLease, bool) {
	if len(p.leases) == 0 {
		return distributed.TaskLease{}, false
	}
	i := p.rng.IntN(len(p.leases))
	l := p.leases[i]
	p.leases = slices.Delete(p.leases, i, i+1)
	return l, true
}

func (p *scanProp) complete() {
	l, ok := p.takeLease()
	if !ok {
		return
	}
	result := make([]byte, p.rng.IntN(5))
	r := p.apply(completeCmd("kw1", l, result))
	if r.Err != nil || valueOf[CompleteValue](p.t, r).Completion.Kind != distributed.Completed {
		return
	}
	task := p.task(l.TaskID())
	m := p.model[task.ScanID()]
	m.completed, m.compOrds = append(m.completed, l.TaskID()), append(m.compOrds, m.nextComp)
	m.nextComp++
	m.resultBytes += uint64(len(result))
	p.sizes[l.TaskID()] = len(result)
}

func (p *scanProp) task(id string) distributed.ScanTask {
	tv, _ := p.b.f.Tenant("acme")
	task, ok, err := tv.GetTask(id)
	if err != nil || !ok {
		p.t.Fatalf("GetTask(%s) = %v, %v", id, ok, err)
	}
	return task
}

// settle marks the model's scans whose tasks are all terminal as finished
// at the current time (only the command just applied can have ended them).
func (p *scanProp) settle() {
	for _, m := range p.model {
		all := true
		for _, id := range m.ids {
			all = all && p.task(id).Status().Terminal()
		}
		if all && !m.finished {
			m.finished, m.finishedAt = true, p.b.now
		}
	}
}

// check compares every scan record with the model.
func (p *scanProp) check(step int) {
	tv, _ := p.b.f.Tenant("acme")
	for id, m := range p.model {
		got, ok := tv.Scan(id)
		want := ScanState{ScanID: id, CreatedAt: m.createdAt, Finished: m.finished, FinishedAt: m.finishedAt,
			Tasks: len(m.ids), Completed: len(m.completed), ResultBytes: m.resultBytes,
			NextOrdinal: m.nextOrd, NextCompletion: m.nextComp}
		if !ok || got != want {
			p.t.Fatalf("step %d: Scan(%s) = %+v, want %+v", step, id, got, want)
		}
		if w := tv.ScanCompletedWindow(id, 0, len(m.ids)); !entriesEqual(w, m.completed, m.compOrds) {
			p.t.Fatalf("step %d: completion order of %s = %v, want %v %v", step, id, w, m.completed, m.compOrds)
		}
		if w := tv.ScanTaskWindow(id, 0, len(m.ids)); !entriesEqual(w, m.ids, m.ords) {
			p.t.Fatalf("step %d: enqueue order of %s = %v, want %v %v", step, id, w, m.ids, m.ords)
		}
	}
	for id := range p.seen {
		if _, ok := tv.Scan(id); ok != (p.model[id] != nil) {
			p.t.Fatalf("step %d: Scan(%s) found = %v, model has it = %v", step, id, ok, p.model[id] != nil)
		}
	}
}

func entriesEqual(got []ScanEntry, ids []string, ords []uint64) bool {
	if len(got) != len(ids) {
		return false
	}
	for i, e := range got {
		if e.ID != ids[i] || e.Ord != ords[i] {
			return false
		}
	}
	return true
}

// setupRetries is setup with tenant acme allowing maxRetries retries, so
// that failures and lease expiries end tasks often.
func setupRetries(t *testing.T, maxRetries uint32) *testBundle {
	t.Helper()
	b := &testBundle{f: New(Options{}), now: 100}
	lim := distributed.DefaultLimits()
	lim.MaxRetries = maxRetries
	b.must(t, &pb.Command{Op: &pb.Command_InitCluster{InitCluster: &pb.InitCluster{EpochId: bytes.Repeat([]byte{1}, 16)}}})
	b.must(t, &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "acme", Limits: wire.LimitsToProto(lim)}}})
	for _, k := range []struct{ id, role string }{{"kadmin", RoleAdmin}, {"kprod", RoleProducer}, {"kw1", RoleWorker}} {
		b.must(t, &pb.Command{Op: &pb.Command_CreateKey{CreateKey: &pb.CreateKey{KeyId: k.id, SecretHash: make([]byte, 32), KeyTenant: "acme", Role: k.role}}})
	}
	b.must(t, &pb.Command{Op: &pb.Command_SetClusterVersion{SetClusterVersion: &pb.SetClusterVersion{Version: SupportedVersion}}})
	return b
}

func TestFSM_ScanRecordProperty(t *testing.T) {
	t.Parallel()
	for seed := range uint64(96) {
		b := setupRetries(t, uint32(seed%2))
		b.must(t, registerCmd("kw1", "w1"))
		p := &scanProp{t: t, b: b, rng: rand.New(rand.NewPCG(seed, 11)), model: map[string]*scanModel{},
			sizes: map[string]int{}, seen: map[string]bool{}}
		for step := range 250 {
			p.step()
			p.check(step)
			if step%50 == 49 {
				for id := range p.model {
					checkScanRoundTrip(t, b.f, id)
				}
			}
		}
	}
}
