package raftfsm

// Goal: the FSM's RerunTasks command (rerun.go) resolves a scan to its
// tasks, refuses tasks of another scan and unknown scans without changing
// anything, re-runs atomically, and FailTask carries its reason and an
// enqueue its attempt timeout into the core and through a snapshot.
// Method: commands applied through ApplyCommand, state compared with
// ExportState.

import (
	"bytes"
	"testing"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func rerunCmd(principal, scan string, ids ...string) *pb.Command {
	return &pb.Command{Principal: principal, Op: &pb.Command_RerunTasks{RerunTasks: &pb.RerunTasks{ScanId: scan, TaskIds: ids}}}
}

func failCmd(principal string, l distributed.TaskLease, reason string) *pb.Command {
	lb, _ := l.MarshalBinary()
	return &pb.Command{Principal: principal, Op: &pb.Command_FailTask{FailTask: &pb.FailTask{Lease: lb, Reason: reason}}}
}

func TestFSM_RerunTasks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, enqueueCmd("kprod", "t1", "t2", "t3"))
	other := enqueueCmd("kprod", "x1")
	other.GetEnqueue().GetTasks()[0].ScanId = "s2"
	b.must(t, other)
	b.must(t, cancelByIDCmd("kprod", "t1"))
	b.must(t, cancelByIDCmd("kprod", "t3"))
	b.must(t, cancelByIDCmd("kprod", "x1"))

	b.mustReject(t, rerunCmd("kprod", "s1", "x1"), distributed.ErrInvalidTask)
	b.mustReject(t, rerunCmd("kprod", "nope"), distributed.ErrTaskNotFound)
	b.mustReject(t, rerunCmd("kprod", "bad scan"), distributed.ErrInvalidTask)
	b.mustReject(t, &pb.Command{Principal: "kprod", Op: &pb.Command_RerunTasks{RerunTasks: &pb.RerunTasks{ScanId: "s1", Statuses: []uint32{1 << 20}}}}, distributed.ErrInvalidTask)

	r := b.must(t, rerunCmd("kprod", "s1"))
	out := valueOf[distributed.RerunOutcome](t, r)
	if len(out.Requeued) != 2 || out.Requeued[0] != "t1" || out.Requeued[1] != "t3" || out.Unchanged != 1 {
		t.Fatalf("outcome = %+v", out)
	}
	if st := b.status(t, "acme", "x1").Status(); st != distributed.TaskCancelled {
		t.Fatalf("task of another scan re-run: %v", st)
	}
	// Named tasks of the scan only.
	b.must(t, cancelByIDCmd("kprod", "t2"))
	out = valueOf[distributed.RerunOutcome](t, b.must(t, rerunCmd("kprod", "s1", "t2")))
	if len(out.Requeued) != 1 || out.Requeued[0] != "t2" {
		t.Fatalf("named outcome = %+v", out)
	}
}

func TestFSM_FailReasonAndTimeoutSurviveSnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, registerCmd("kw1", "w1"))
	e := enqueueCmd("kprod", "t1")
	e.GetEnqueue().GetTasks()[0].AttemptTimeoutSecs = 40
	b.must(t, e)
	acq := valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", 1)))
	b.mustReject(t, failCmd("kw1", acq[0].Lease, string(bytes.Repeat([]byte("x"), distributed.MaxFailureReasonBytes+1))), distributed.ErrFailureReasonTooLong)
	b.must(t, failCmd("kw1", acq[0].Lease, "exit status 2"))
	task := b.status(t, "acme", "t1")
	if r, ok := task.LastFailureReason(); !ok || r != "exit status 2" || task.AttemptTimeoutSecs() != 40 {
		t.Fatalf("task = %v, reason %q", task, r)
	}
	st, _ := b.f.ExportState()
	g := New(Options{})
	if err := g.RestoreState(st); err != nil {
		t.Fatal(err)
	}
	tv, _ := g.Tenant("acme")
	got, _, _ := tv.GetTask("t1")
	if r, ok := got.LastFailureReason(); !ok || r != "exit status 2" || got.AttemptTimeoutSecs() != 40 {
		t.Fatalf("restored task = %v, reason %q", got, r)
	}
	// Renewal past the deadline is refused, typed.
	acq = valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", 1)))
	b.now += 20
	renewed := valueOf[distributed.TaskLease](t, b.must(t, renewCmd("kw1", acq[0].Lease)))
	b.now += 20
	b.mustReject(t, renewCmd("kw1", renewed), distributed.ErrAttemptTimedOut)
}

// TestFSM_RerunAfterPurge: a scan re-run skips the scan's purged tasks; a
// purged task named (with or without the scan) is TaskNotFound and changes
// nothing; re-run tasks that end again go with DeleteScan, after which the
// scan is unknown to a re-run; the snapshot round-trips in between.
func TestFSM_RerunAfterPurge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, enqueueCmd("kprod", "t1", "t2", "t3"))
	for _, id := range []string{"t1", "t2", "t3"} {
		b.must(t, cancelByIDCmd("kprod", id))
	}
	if v := valueOf[PurgeValue](t, b.must(t, purgeCmd("kprod", &pb.PurgeTasks{TaskIds: []string{"t1"}}))); len(v.TaskIDs) != 1 {
		t.Fatalf("purge value %+v", v)
	}
	mustFailUnchanged(t, b, rerunCmd("kprod", "s1", "t1"), distributed.ErrTaskNotFound)
	mustFailUnchanged(t, b, rerunCmd("kprod", "", "t1"), distributed.ErrTaskNotFound)
	mustFailUnchanged(t, b, rerunCmd("kprod", "s1", "t2", "t1"), distributed.ErrTaskNotFound)

	out := valueOf[distributed.RerunOutcome](t, b.must(t, rerunCmd("kprod", "s1")))
	if len(out.Requeued) != 2 || out.Requeued[0] != "t2" || out.Requeued[1] != "t3" || out.Unchanged != 0 {
		t.Fatalf("scan re-run after purge = %+v, want [t2 t3]", out)
	}
	st, _ := b.f.ExportState()
	g := New(Options{})
	if err := g.RestoreState(st); err != nil {
		t.Fatalf("snapshot after purge and re-run: %v", err)
	}
	if re, _ := g.ExportState(); !bytes.Equal(re, st) {
		t.Fatal("snapshot after purge and re-run re-exports differently")
	}
	// Queued again, the re-run tasks block DeleteScan until they end.
	mustFailUnchanged(t, b, purgeCmd("kprod", &pb.PurgeTasks{ScanId: "s1", WholeScan: true}), distributed.ErrInvalidTransition)
	b.must(t, cancelByIDCmd("kprod", "t2"))
	b.must(t, cancelByIDCmd("kprod", "t3"))
	v := valueOf[PurgeValue](t, b.must(t, purgeCmd("kprod", &pb.PurgeTasks{ScanId: "s1", WholeScan: true})))
	if len(v.TaskIDs) != 2 {
		t.Fatalf("DeleteScan value %+v", v)
	}
	mustFailUnchanged(t, b, rerunCmd("kprod", "s1"), distributed.ErrTaskNotFound)
}
