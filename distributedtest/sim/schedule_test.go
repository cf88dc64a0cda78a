// Goal: the scheduling commands of contract Part F agree between the core
// and the reference model on an explicit scenario that uses all of them
// (options with backoff and fairness, a tagged and a delayed task, a
// paused and a limited scan, AdvanceTime), including a restart from the
// exported state. Method: the harness steps of regress_test.go.
package sim

import (
	"testing"

	distributed "github.com/termivar/distributed"
)

func TestSchedulingScenarioAgrees(t *testing.T) {
	spec := func(id, scan string, s distributed.TaskScheduling) distributed.TaskSpec {
		return distributed.TaskSpec{TaskID: id, ScanID: scan, TargetRef: "x", Scheduling: s}
	}
	at := func(c Command, rev, now uint64) Command {
		c.AbsRev, c.AbsNow, c.Rev, c.Now = true, true, rev, now
		return c
	}
	h := steps(t, distributed.DefaultLimits(),
		at(Command{Op: OpSetOptions, Options: distributed.SchedulingOptions{BackoffBaseSecs: 4, FairScans: true}}, 0, 1),
		at(Command{Op: OpRegister, WorkerSpec: distributed.WorkerSpec{WorkerID: "w1", Capacity: 4, Tags: []distributed.WorkerTag{distributed.TagGPU}}}, 1, 1),
		at(Command{Op: OpUpdateScan, ScanUpdate: distributed.ScanUpdate{ScanID: "a", SetMaxInFlight: true, MaxInFlight: 1}}, 2, 1),
		at(Command{Op: OpEnqueueBatch, TaskSpecs: []distributed.TaskSpec{
			spec("a1", "a", distributed.TaskScheduling{}), spec("a2", "a", distributed.TaskScheduling{}),
			spec("b1", "b", distributed.TaskScheduling{RequiredTags: []distributed.WorkerTag{distributed.TagGPU}}),
			spec("c1", "c", distributed.TaskScheduling{NotBeforeSecs: 10}),
		}}, 3, 2),
		at(Command{Op: OpAssignNext, WorkerID: "w1", TTL: 30}, 4, 2),
		at(Command{Op: OpAssignNextAvailable, TTL: 30}, 5, 3),
		at(Command{Op: OpAssignTask, TaskID: "a2", WorkerID: "w1", TTL: 30}, 6, 3),
		at(Command{Op: OpUpdateScan, ScanUpdate: distributed.ScanUpdate{ScanID: "b", SetPaused: true, Paused: true}}, 6, 3),
		at(Command{Op: OpScanState, ScanUpdate: distributed.ScanUpdate{ScanID: "a"}}, 7, 3),
		at(Command{Op: OpRestart}, 7, 3),
		at(Command{Op: OpAdvance}, 7, 10),
		at(Command{Op: OpPeek}, 8, 10),
		at(Command{Op: OpAssignNext, WorkerID: "w1", TTL: 30}, 8, 10),
	)
	if st, _ := h.Core.ScanState("a"); st.InFlight != 1 || st.Settings.MaxInFlight != 1 {
		t.Fatalf("scan a: %+v", st)
	}
	if task, _, _ := h.Core.GetTask("c1"); task.Status() != distributed.TaskLeased {
		t.Fatalf("c1 is %v after its time, want leased", task.Status())
	}
}
