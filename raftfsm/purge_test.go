// Tests for PurgeTasks, UpdateTenant and the retention policy in the FSM
// (contract Part F, docs/adr/0002-purge.md). Goal: a purge removes the
// task records, their results and their scan-index entries in one command;
// DeleteScan refuses live tasks unless cancel_first; a failed purge changes
// nothing; the policy survives a snapshot and RecoveryCommands proposes a
// purge only when one is due; a small tenant runs ten times its record
// limit through with retention on. Method: ApplyCommand with hand-built
// commands, as fsm_test.go.
package raftfsm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func purgeCmd(principal string, p *pb.PurgeTasks) *pb.Command {
	return &pb.Command{Principal: principal, Op: &pb.Command_PurgeTasks{PurgeTasks: p}}
}

// finishAll acquires and completes every queued task of acme for w1.
func finishAll(t *testing.T, b *testBundle, n uint32) {
	t.Helper()
	acq := valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", n)))
	for _, a := range acq {
		b.must(t, completeCmd("kw1", a.Lease, []byte("r-"+a.Task.TaskID())))
	}
}

// mustFailUnchanged applies cmd, requires an error matching want and an
// unchanged FSM state.
func mustFailUnchanged(t *testing.T, b *testBundle, cmd *pb.Command, want error) {
	t.Helper()
	before, _ := b.f.ExportState()
	r := b.apply(cmd)
	if !errors.Is(r.Err, want) {
		t.Fatalf("apply %T = %v, want %v", cmd.GetOp(), r.Err, want)
	}
	if after, _ := b.f.ExportState(); !bytes.Equal(before, after) {
		t.Fatalf("failed %T changed the state", cmd.GetOp())
	}
}

func TestFSM_PurgeTasks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, enqueueCmd("kprod", "t1", "t2", "t3"))
	finishAll(t, b, 2) // t1, t2 completed; t3 queued
	tv, _ := b.f.Tenant("acme")

	mustFailUnchanged(t, b, purgeCmd("kprod", &pb.PurgeTasks{TaskIds: []string{"t1", "t3"}}), distributed.ErrInvalidTransition)
	mustFailUnchanged(t, b, purgeCmd("kprod", &pb.PurgeTasks{ScanId: "s1", WholeScan: true}), distributed.ErrInvalidTransition)
	mustFailUnchanged(t, b, purgeCmd("kprod", &pb.PurgeTasks{ScanId: "nope", WholeScan: true}), ErrScanNotFound)
	mustFailUnchanged(t, b, purgeCmd("kprod", &pb.PurgeTasks{FinishedBefore: 5, OlderThanSecs: 5}), ErrInvalidCommand)
	mustFailUnchanged(t, b, purgeCmd("kprod", &pb.PurgeTasks{CancelFirst: true, ScanId: "s1"}), ErrInvalidCommand)
	mustFailUnchanged(t, b, purgeCmd("kw1", &pb.PurgeTasks{TaskIds: []string{"t1"}}), ErrPermissionDenied)
	mustFailUnchanged(t, b, purgeCmd("kother", &pb.PurgeTasks{TaskIds: []string{"t1"}}), ErrPermissionDenied)
	rev := tv.Counters().Revision
	stale := purgeCmd("kprod", &pb.PurgeTasks{TaskIds: []string{"t1"}})
	stale.ExpectedRevision = &[]uint64{rev - 1}[0]
	mustFailUnchanged(t, b, stale, distributed.ErrRevisionConflict)

	r := b.must(t, purgeCmd("kprod", &pb.PurgeTasks{ScanId: "s1"}))
	v := valueOf[PurgeValue](t, r)
	if !slices.Equal(v.TaskIDs, []string{"t1", "t2"}) || v.Results != 2 || r.Revision != rev+1 {
		t.Fatalf("purge value %+v at revision %d (was %d)", v, r.Revision, rev)
	}
	if tv.ResultCount() != 0 || tv.HasResult("t1") {
		t.Fatal("results survived the purge")
	}
	// The snapshot after a purge restores (its scan index lists only
	// tasks of the pool) and re-exports byte for byte.
	st, _ := b.f.ExportState()
	g := New(Options{})
	if err := g.RestoreState(st); err != nil {
		t.Fatalf("restore after purge: %v", err)
	}
	if st2, _ := g.ExportState(); !bytes.Equal(st, st2) {
		t.Fatal("snapshot after purge does not round-trip")
	}
	if got := tv.ScanTaskIDs("s1"); !slices.Equal(got, []string{"t3"}) {
		t.Fatalf("scan index after purge = %v", got)
	}
	// A replayed completion of a purged task is refused, typed.
	acq := valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", 1)))
	b.must(t, completeCmd("kw1", acq[0].Lease, []byte("r3")))
	b.must(t, purgeCmd("kprod", &pb.PurgeTasks{ScanId: "s1", WholeScan: true}))
	mustFailUnchanged(t, b, completeCmd("kw1", acq[0].Lease, []byte("r3")), distributed.ErrTaskPurged)
	if got := tv.ScanTaskIDs("s1"); len(got) != 0 {
		t.Fatalf("scan index after deleting the scan = %v", got)
	}
	mustFailUnchanged(t, b, purgeCmd("kprod", &pb.PurgeTasks{ScanId: "s1", WholeScan: true}), ErrScanNotFound)
	// The same IDs start new lives.
	b.must(t, enqueueCmd("kprod", "t1", "t3"))
	if task, _, _ := tv.GetTask("t3"); task.TaskGeneration() == 0 {
		t.Fatal("re-enqueued t3 starts at generation 0")
	}
}

func TestFSM_DeleteScanForce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, enqueueCmd("kprod", "t1", "t2", "t3", "t4"))
	b.must(t, enqueueCmd("kprod", "u1")) // scan s1 as well (enqueueCmd's scan)
	acq := valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", 2)))
	b.must(t, completeCmd("kw1", acq[0].Lease, []byte("r1")))
	r := b.must(t, purgeCmd("kprod", &pb.PurgeTasks{ScanId: "s1", WholeScan: true, CancelFirst: true}))
	v := valueOf[PurgeValue](t, r)
	if len(v.TaskIDs) != 5 || v.Cancelled != 4 || v.Results != 1 {
		t.Fatalf("delete --force value %+v", v)
	}
	tv, _ := b.f.Tenant("acme")
	if c := tv.Counters(); c.TaskRecords != 0 {
		t.Fatalf("records left: %+v", c)
	}
	if w, _, _ := tv.GetWorker("w1"); w.CurrentTasks() != 0 {
		t.Fatalf("worker still holds %d leases", w.CurrentTasks())
	}
	// The cancelled lease of the running task is now a purged task's.
	lb, _ := acq[1].Lease.MarshalBinary()
	mustFailUnchanged(t, b, &pb.Command{Principal: "kw1", Op: &pb.Command_FailTask{FailTask: &pb.FailTask{Lease: lb}}}, distributed.ErrTaskPurged)
}

func TestFSM_RetentionPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "ret", ResultRetentionSecs: 60}}})
	mustFailUnchanged(t, b, &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "bad", ResultRetentionSecs: MaxResultRetentionSecs + 1}}}, ErrInvalidCommand)
	mustFailUnchanged(t, b, &pb.Command{Op: &pb.Command_UpdateTenant{UpdateTenant: &pb.UpdateTenant{Name: "nope", ResultRetentionSecs: 5}}}, ErrUnknownTenant)
	mustFailUnchanged(t, b, &pb.Command{Op: &pb.Command_UpdateTenant{UpdateTenant: &pb.UpdateTenant{Name: "ret", ResultRetentionSecs: MaxResultRetentionSecs + 1}}}, ErrInvalidCommand)
	tv, _ := b.f.Tenant("ret")
	if tv.ResultRetentionSecs() != 60 {
		t.Fatalf("retention %d", tv.ResultRetentionSecs())
	}
	b.must(t, &pb.Command{Tenant: "ret", Op: &pb.Command_RegisterWorker{RegisterWorker: &pb.RegisterWorker{Spec: &pb.WorkerSpec{WorkerId: "w", Capacity: 8}}}})
	b.must(t, &pb.Command{Tenant: "ret", Op: &pb.Command_Enqueue{Enqueue: &pb.EnqueueTasks{Tasks: []*pb.TaskSpec{{TaskId: "a", ScanId: "s", TargetRef: []byte("x")}}}}})
	acq := valueOf[[]Acquired](t, b.must(t, &pb.Command{Tenant: "ret", Op: &pb.Command_AcquireTasks{AcquireTasks: &pb.AcquireTasks{WorkerId: "w", LeaseTtlSecs: 30, Start: true}}}))
	lb, _ := acq[0].Lease.MarshalBinary()
	b.must(t, &pb.Command{Tenant: "ret", Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: lb, Result: []byte("r")}}})
	// Finished at 100: due once now − 60 > 100.
	for now, due := range map[uint64]bool{100: false, 160: false, 161: true} {
		if got := purgeOps(tv.RecoveryCommands(now, 0)); (got == 1) != due {
			t.Fatalf("RecoveryCommands(%d) proposes %d purges, want due=%v", now, got, due)
		}
	}
	// The policy survives a snapshot.
	st, _ := b.f.ExportState()
	g := New(Options{})
	if err := g.RestoreState(st); err != nil {
		t.Fatal(err)
	}
	gv, _ := g.Tenant("ret")
	if gv.ResultRetentionSecs() != 60 {
		t.Fatalf("restored retention %d", gv.ResultRetentionSecs())
	}
	// A snapshot with a retention above the bound is refused whole.
	var bad pb.FSMState
	if err := proto.Unmarshal(st, &bad); err != nil {
		t.Fatal(err)
	}
	for _, ts := range bad.GetTenants() {
		ts.ResultRetentionSecs = MaxResultRetentionSecs + 1
	}
	badBytes, _ := proto.Marshal(&bad)
	if err := New(Options{}).RestoreState(badBytes); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("restore with retention above the bound = %v", err)
	}
	// Applying the proposed command (no principal: the node) purges.
	cmd := onlyPurge(t, tv.RecoveryCommands(161, 0))
	cmd.NowSecs = 161
	r := b.must(t, cmd)
	if v := valueOf[PurgeValue](t, r); !slices.Equal(v.TaskIDs, []string{"a"}) || v.Results != 1 {
		t.Fatalf("retention purge %+v", v)
	}
	b.must(t, &pb.Command{Op: &pb.Command_UpdateTenant{UpdateTenant: &pb.UpdateTenant{Name: "ret"}}})
	if tv.ResultRetentionSecs() != 0 || purgeOps(tv.RecoveryCommands(1<<30, 0)) != 0 {
		t.Fatal("retention still on after it was set to 0")
	}
}

func onlyPurge(t *testing.T, cmds []*pb.Command) *pb.Command {
	t.Helper()
	for _, c := range cmds {
		if c.GetPurgeTasks() != nil {
			return c
		}
	}
	t.Fatal("no purge among the recovery commands")
	return nil
}

func purgeOps(cmds []*pb.Command) int {
	n := 0
	for _, c := range cmds {
		if c.GetPurgeTasks() != nil {
			n++
		}
	}
	return n
}

// TestFSM_RetentionKeepsSmallTenantRunning pushes ten times a tenant's
// record limit through it; retention (proposed as the ticker would) keeps
// room, and without it the tenant stops at its limit.
func TestFSM_RetentionKeepsSmallTenantRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	lim := &pb.CoreLimits{MaxTaskRecords: 16, MaxActiveTasks: 8, MaxQueuedTasks: 8, MaxTerminalTasks: 16, MaxWorkers: 4,
		MaxRetries: 1, MaxLeaseTtlSecs: 60, MaxTaskTtlSecs: 3600, HeartbeatTimeoutSecs: 60}
	rl := &pb.ResultLimits{MaxResults: 16, MaxResultBytes: 64, MaxTotalBytes: 1024, MaxAggregateItems: 16, MaxAggregateBytes: 1024}
	b.must(t, &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "small", Limits: lim, ResultLimits: rl, ResultRetentionSecs: 5}}})
	b.must(t, &pb.Command{Tenant: "small", Op: &pb.Command_RegisterWorker{RegisterWorker: &pb.RegisterWorker{Spec: &pb.WorkerSpec{WorkerId: "w", Capacity: 8}}}})
	tv, _ := b.f.Tenant("small")
	done := 0
	var sizes []int         // snapshot size after each round
	for round := range 20 { // 20 rounds × 8 tasks = 10 × the record limit
		e := &pb.EnqueueTasks{}
		for i := range 8 {
			e.Tasks = append(e.Tasks, &pb.TaskSpec{TaskId: fmt.Sprintf("t%d", (round*8+i)%40), ScanId: fmt.Sprintf("s%d", round), TargetRef: []byte("x")})
		}
		b.must(t, &pb.Command{Tenant: "small", Op: &pb.Command_Enqueue{Enqueue: e}})
		acq := valueOf[[]Acquired](t, b.must(t, &pb.Command{Tenant: "small", Op: &pb.Command_AcquireTasks{AcquireTasks: &pb.AcquireTasks{WorkerId: "w", LeaseTtlSecs: 30, MaxTasks: 8, Start: true}}}))
		for _, a := range acq {
			lb, _ := a.Lease.MarshalBinary()
			b.must(t, &pb.Command{Tenant: "small", Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: lb, Result: []byte("r")}}})
			done++
		}
		b.now += 6
		b.must(t, &pb.Command{Tenant: "small", Op: &pb.Command_UpdateWorker{UpdateWorker: &pb.UpdateWorker{WorkerId: "w", Generation: 1}}})
		b.must(t, onlyPurge(t, tv.RecoveryCommands(b.now, 0)))
		st, _ := b.f.ExportState()
		sizes = append(sizes, len(st))
	}
	// Nothing accumulates: the snapshot after 20 rounds is no larger than
	// after 5 but for a few varint bytes (counters, times).
	if sizes[19] > sizes[4]+16 {
		t.Fatalf("snapshot grows with retention on: %v", sizes)
	}
	if done != 160 || tv.Counters().TaskRecords > 16 || tv.ResultCount() > 16 {
		t.Fatalf("done %d, counters %+v, results %d", done, tv.Counters(), tv.ResultCount())
	}
	// Without retention the same load stops at the record limit.
	b.must(t, &pb.Command{Op: &pb.Command_UpdateTenant{UpdateTenant: &pb.UpdateTenant{Name: "small"}}})
	var err error
	for round := 0; round < 4 && err == nil; round++ {
		e := &pb.EnqueueTasks{}
		for i := range 8 {
			e.Tasks = append(e.Tasks, &pb.TaskSpec{TaskId: fmt.Sprintf("x%d-%d", round, i), ScanId: "x", TargetRef: []byte("x")})
		}
		err = b.apply(&pb.Command{Tenant: "small", Op: &pb.Command_Enqueue{Enqueue: e}}).Err
		if err == nil {
			acq := valueOf[[]Acquired](t, b.must(t, &pb.Command{Tenant: "small", Op: &pb.Command_AcquireTasks{AcquireTasks: &pb.AcquireTasks{WorkerId: "w", LeaseTtlSecs: 30, MaxTasks: 8, Start: true}}}))
			for _, a := range acq {
				lb, _ := a.Lease.MarshalBinary()
				b.must(t, &pb.Command{Tenant: "small", Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: lb, Result: []byte("r")}}})
			}
		}
	}
	if !errors.Is(err, distributed.ErrTaskRecordCapacityReached) && !errors.Is(err, distributed.ErrTerminalCapacityReserved) {
		t.Fatalf("without retention the tenant went on: %v", err)
	}
}
