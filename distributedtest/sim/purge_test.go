// Goal: purge (contract Part F, docs/adr/0002-purge.md) driven through the
// harness, so that the core and the model must agree at every step and the
// checker's purge rules run: purge under every task state, purge then
// re-enqueue of the same ID, stale proofs of purged tasks, and export/
// restore after purge. The random runs cover the same ground by chance; this
// test pins it.
package sim

import (
	"testing"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/distributedtest/model"
)

func TestPurge_EveryStateThroughHarness(t *testing.T) {
	l := distributed.DefaultLimits()
	l.MaxRetries = 0
	h, err := NewHarness(l)
	if err != nil {
		t.Fatal(err)
	}
	step := func(c Command, want distributed.ErrorKind) Outcome {
		t.Helper()
		r, out, err := h.Step(c)
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		if (out.Err == nil) != (want == 0) || (out.Err != nil && out.Err.Kind != want) {
			t.Fatalf("%s: outcome %s, want kind %v", r, out, want)
		}
		return out
	}
	spec := func(id string) distributed.TaskSpec {
		return distributed.TaskSpec{TaskID: id, ScanID: "scan-0", TargetRef: "t-" + id}
	}
	lease := func(id string) model.Lease {
		t.Helper()
		task, ok, _ := h.Model.GetTask(id)
		if !ok || !task.HasLease {
			t.Fatalf("%s has no lease", id)
		}
		return task.Lease
	}
	step(Command{Op: OpEnqueue, TaskSpec: spec("e")}, 0)
	step(Command{Op: OpRegister, NowDelta: 100, WorkerSpec: distributed.WorkerSpec{WorkerID: "w0", Capacity: 8}}, 0)
	for _, id := range []string{"q", "l", "r", "c", "f", "x"} {
		step(Command{Op: OpEnqueue, TaskSpec: spec(id)}, 0)
	}
	for _, id := range []string{"l", "r", "c", "f"} {
		step(Command{Op: OpAssignTask, TaskID: id, WorkerID: "w0", TTL: 600}, 0)
	}
	for _, id := range []string{"r", "c", "f"} {
		step(Command{Op: OpStart, Lease: lease(id)}, 0)
	}
	cLease, fLease := lease("c"), lease("f")
	step(Command{Op: OpComplete, Lease: cLease}, 0)
	step(Command{Op: OpFail, Lease: fLease}, 0)
	xTask, _, _ := h.Model.GetTask("x")
	xFence, _ := xTask.Ownership()
	step(Command{Op: OpCancel, Own: xFence}, 0)
	step(Command{Op: OpExpire, MaxAge: 50}, 0)

	for _, id := range []string{"q", "l", "r"} {
		step(Command{Op: OpPurge, Purge: distributed.PurgeFilter{TaskIDs: []string{"c", id}}}, distributed.KindInvalidTransition)
	}
	out := step(Command{Op: OpPurge, NowDelta: 1, Purge: distributed.PurgeFilter{ScanID: "scan-0"}}, 0)
	if ids, _ := out.Value.([]string); len(ids) != 4 {
		t.Fatalf("purged %v, want c, e, f and x", out.Value)
	}
	step(Command{Op: OpRestart}, 0)
	stale := func() {
		t.Helper()
		step(Command{Op: OpComplete, Lease: cLease}, distributed.KindTaskPurged)
		step(Command{Op: OpFail, Lease: fLease}, distributed.KindTaskPurged)
		step(Command{Op: OpRenew, Lease: cLease, TTL: 60}, distributed.KindTaskPurged)
		step(Command{Op: OpCancel, Own: xFence}, distributed.KindTaskPurged)
	}
	stale()
	for _, id := range []string{"c", "x"} {
		step(Command{Op: OpEnqueue, TaskSpec: spec(id)}, 0)
	}
	stale()
	if task, _, _ := h.Model.GetTask("x"); task.Status != distributed.TaskQueued || task.TaskGeneration != 1 {
		t.Fatalf("re-enqueued x: %+v", task)
	}
	step(Command{Op: OpAssignTask, TaskID: "c", WorkerID: "w0", TTL: 600}, 0)
	if l := lease("c"); l.LeaseID <= fLease.LeaseID || l.TaskGeneration != 1 {
		t.Fatalf("new life lease %+v", l)
	}
	step(Command{Op: OpRestart}, 0)
	if err := h.ReplayLog(); err != nil {
		t.Fatal(err)
	}
	if h.Stats.Purged != 4 || h.Stats.Relived != 2 {
		t.Fatalf("stats %+v", h.Stats)
	}
}
