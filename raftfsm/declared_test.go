// Goal: a scan's declared total (EnqueueTasks.declared_total) is stored with
// an accepted batch, replaced by a later declaration, kept when a batch
// declares nothing, and refused with the batch when the batch spans two
// scans or is rejected. Method: apply commands to one FSM and read
// ScanDeclaredTotal; every refusal must leave the exported state unchanged.
package raftfsm

import (
	"errors"
	"testing"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func declaredCmd(total uint64, ids ...string) *pb.Command {
	c := enqueueCmd("kprod", ids...)
	c.GetEnqueue().DeclaredTotal = total
	return c
}

func TestFSM_EnqueueDeclaredTotal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tv, _ := b.f.Tenant("acme")
	if got := tv.ScanDeclaredTotal("s1"); got != 0 {
		t.Fatalf("ScanDeclaredTotal before any enqueue = %d, want 0", got)
	}
	b.must(t, declaredCmd(10, "a1", "a2"))
	if got := tv.ScanDeclaredTotal("s1"); got != 10 {
		t.Fatalf("ScanDeclaredTotal = %d, want 10", got)
	}
	b.must(t, declaredCmd(0, "a3"))
	if got := tv.ScanDeclaredTotal("s1"); got != 10 {
		t.Fatalf("ScanDeclaredTotal after a batch without declaration = %d, want 10", got)
	}
	b.must(t, declaredCmd(12, "a4"))
	if got := tv.ScanDeclaredTotal("s1"); got != 12 {
		t.Fatalf("ScanDeclaredTotal after a new declaration = %d, want 12", got)
	}

	mixed := declaredCmd(50, "b1")
	mixed.GetEnqueue().Tasks = append(mixed.GetEnqueue().Tasks, &pb.TaskSpec{TaskId: "b2", ScanId: "s2", TargetRef: []byte("x"), Priority: 1})
	b.mustReject(t, mixed, ErrInvalidCommand)
	// A rejected batch (existing ID) keeps the old declaration.
	b.mustReject(t, declaredCmd(99, "a1"), distributed.ErrTaskAlreadyExists)
	if got := tv.ScanDeclaredTotal("s1"); got != 12 {
		t.Fatalf("ScanDeclaredTotal after rejected batches = %d, want 12", got)
	}
}

func declaredScanCmd(scan string, total uint64, ids ...string) *pb.Command {
	c := enqueueScanCmd(scan, ids...)
	c.GetEnqueue().DeclaredTotal = total
	return c
}

// TestFSM_DeclaredScanFinishesWhenAdmitted: a scan with a declared total is
// not finished while part of it is not admitted, even with every admitted
// task terminal; it finishes when the last declared task ends. A partial
// purge keeps the declaration and the admitted count (ordinals are never
// renumbered); snapshots round-trip at every step; a snapshot claiming a
// finish time for a scan short of its declared total is refused; deleting
// the whole scan drops the declaration with the record.
func TestFSM_DeclaredScanFinishesWhenAdmitted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, b.at(100, declaredScanCmd("s1", 4, "t1", "t2")))
	if got, want := b.scan(t, "s1"), (ScanState{ScanID: "s1", CreatedAt: 100, Tasks: 2, NextOrdinal: 2, Declared: 4, Pending: 2}); got != want {
		t.Fatalf("after the first batch Scan = %+v, want %+v", got, want)
	}
	acq := b.must(t, b.at(110, acquireCmd("kw1", "w1", 2))).Value.([]Acquired)
	for _, a := range acq {
		b.must(t, b.at(120, completeCmd("kw1", a.Lease, []byte("r"))))
	}
	if got := b.scan(t, "s1"); got.Finished || got.Pending != 2 {
		t.Fatalf("every admitted task done, 2 not admitted: Scan = %+v, want running with 2 pending", got)
	}
	checkScanRoundTrip(t, b.f, "s1")
	// A snapshot that calls this scan finished contradicts its declaration.
	g := New(Options{})
	if err := g.RestoreState(editScans(t, b.f, func(sc []*pb.ScanIndex) { sc[0].FinishedAt = 120 })); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("finish time on a scan short of its declared total: RestoreState = %v, want ErrInvalidState", err)
	}
	// A partial purge of the done tasks leaves the admitted count.
	b.must(t, b.at(125, purgeCmd("kprod", &pb.PurgeTasks{TaskIds: []string{"t1"}})))
	if got := b.scan(t, "s1"); got.Finished || got.Tasks != 1 || got.Declared != 4 || got.Pending != 2 {
		t.Fatalf("after a partial purge Scan = %+v, want 1 task, declared 4, 2 pending", got)
	}
	b.must(t, b.at(130, declaredScanCmd("s1", 4, "t3", "t4")))
	acq = b.must(t, b.at(140, acquireCmd("kw1", "w1", 2))).Value.([]Acquired)
	b.must(t, b.at(150, completeCmd("kw1", acq[0].Lease, []byte("r"))))
	if got := b.scan(t, "s1"); got.Finished || got.Pending != 0 {
		t.Fatalf("all admitted, one task open: Scan = %+v, want running, 0 pending", got)
	}
	b.must(t, b.at(160, completeCmd("kw1", acq[1].Lease, []byte("r"))))
	if got := b.scan(t, "s1"); !got.Finished || got.FinishedAt != 160 {
		t.Fatalf("all admitted and done: Scan = %+v, want finished at 160", got)
	}
	checkScanRoundTrip(t, b.f, "s1")
	// Deleting the whole scan drops the record with its declaration; the
	// ID then starts a new scan without one.
	b.must(t, b.at(170, purgeCmd("kprod", &pb.PurgeTasks{ScanId: "s1", WholeScan: true})))
	tv, _ := b.f.Tenant("acme")
	if _, ok := tv.Scan("s1"); ok || tv.ScanDeclaredTotal("s1") != 0 {
		t.Fatalf("deleted scan: record %v, declared %d", ok, tv.ScanDeclaredTotal("s1"))
	}
	b.must(t, b.at(180, enqueueScanCmd("s1", "v1")))
	if got := b.scan(t, "s1"); got.Declared != 0 || got.Pending != 0 || got.CreatedAt != 180 {
		t.Fatalf("new scan under the deleted ID = %+v, want no declaration", got)
	}
	checkScanRoundTrip(t, b.f, "s1")
}

// TestFSM_DeclaredTotalNeedsVersion2: at cluster version 1 an enqueue that
// declares a total is refused with cluster_version and changes nothing (a
// version-1 binary would ignore the declaration); the same batch without
// it is accepted.
func TestFSM_DeclaredTotalNeedsVersion2(t *testing.T) {
	t.Parallel()
	b := setupV1(t)
	refusedUnchanged(t, b, declaredScanCmd("s1", 5, "t1"), ErrClusterVersion)
	b.must(t, enqueueScanCmd("s1", "t1"))
	if got := b.scan(t, "s1"); got.Declared != 0 || got.Tasks != 1 {
		t.Fatalf("Scan = %+v, want 1 task, no declaration", got)
	}
}

func declareOnlyCmd(scan string, total uint64) *pb.Command {
	return &pb.Command{Principal: "kprod", Op: &pb.Command_Enqueue{Enqueue: &pb.EnqueueTasks{DeclareScanId: scan, DeclaredTotal: total}}}
}

// TestFSM_DeclareOnly: an EnqueueTasks with declare_scan_id and no tasks
// replaces an existing scan's declared total: lowering it to what is
// admitted finishes a scan whose tasks are all terminal (at the command's
// time), raising it reopens it; an unknown scan, a zero total or tasks
// beside declare_scan_id are refused unchanged; it round-trips.
func TestFSM_DeclareOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, b.at(100, declaredScanCmd("s1", 3, "t1", "t2")))
	acq := b.must(t, b.at(110, acquireCmd("kw1", "w1", 2))).Value.([]Acquired)
	for _, a := range acq {
		b.must(t, b.at(120, completeCmd("kw1", a.Lease, []byte("r"))))
	}
	mustFailUnchanged(t, b, declareOnlyCmd("nope", 2), ErrScanNotFound)
	mustFailUnchanged(t, b, declareOnlyCmd("s1", 0), ErrInvalidCommand)
	withTasks := declaredScanCmd("s1", 2, "t3")
	withTasks.GetEnqueue().DeclareScanId = "s1"
	mustFailUnchanged(t, b, withTasks, ErrInvalidCommand)
	if got := b.scan(t, "s1"); got.Finished || got.Pending != 1 {
		t.Fatalf("before the declaration Scan = %+v, want running, 1 pending", got)
	}
	b.must(t, b.at(130, declareOnlyCmd("s1", 2)))
	if got := b.scan(t, "s1"); !got.Finished || got.FinishedAt != 130 || got.Declared != 2 || got.Pending != 0 {
		t.Fatalf("after lowering to 2 Scan = %+v, want finished at 130", got)
	}
	checkScanRoundTrip(t, b.f, "s1")
	b.must(t, b.at(140, declareOnlyCmd("s1", 4)))
	if got := b.scan(t, "s1"); got.Finished || got.FinishedAt != 0 || got.Pending != 2 {
		t.Fatalf("after raising to 4 Scan = %+v, want running, 2 pending", got)
	}
	checkScanRoundTrip(t, b.f, "s1")
}
