package raftfsm

// Goal: the scheduling commands (contract Part F) go through the tenant
// command table deterministically: a delay is resolved against the stamped
// time, tenant options come from CreateTenant, pause and limits apply, the
// ticker's RecoveryCommands proposes AdvanceTime exactly when a scheduled
// task is due, and snapshots keep it all. Method: commands applied to a
// fresh FSM as in fsm_test.go.

import (
	"bytes"
	"errors"
	"testing"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"google.golang.org/protobuf/proto"
)

func TestFSM_SchedulingCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "sched",
		Scheduling: &pb.SchedulingOptions{BackoffBaseSecs: 4, BackoffCapSecs: 60, FairScans: true}}}})
	tv, _ := b.f.Tenant("sched")
	if got := tv.SchedulingOptions(); got != (distributed.SchedulingOptions{BackoffBaseSecs: 4, BackoffCapSecs: 60, FairScans: true}) {
		t.Fatalf("tenant options %+v", got)
	}
	b.must(t, registerCmd("kw1", "w1"))
	e := enqueueCmd("kprod", "t1", "t2")
	e.GetEnqueue().Tasks[0].DelaySecs = 30
	e.GetEnqueue().Tasks[1].RequiredTags = []uint32{uint32(distributed.TagGPU)}
	b.must(t, e)
	acme, _ := b.f.Tenant("acme")
	t1, _, _ := acme.GetTask("t1")
	if nb := t1.Scheduling().NotBeforeSecs; nb != b.now+30 || !t1.Scheduled(acme.LogicalTime()) {
		t.Fatalf("t1 not-before %d (scheduled %v), want %d", nb, t1.Scheduled(acme.LogicalTime()), b.now+30)
	}
	// w1 has no GPU tag and t1 is not due: nothing to acquire.
	b.mustReject(t, acquireCmd("kw1", "w1", 1), distributed.ErrNoQueuedTask)
	if ops := acme.RecoveryCommands(b.now+29, 0); len(ops) != 0 {
		t.Fatalf("RecoveryCommands before the time: %v", ops)
	}
	ops := acme.RecoveryCommands(b.now+30, 0)
	if len(ops) != 1 || ops[0].GetAdvanceTime() == nil {
		t.Fatalf("RecoveryCommands at the time = %v, want one AdvanceTime", ops)
	}
	b.now += 30
	b.must(t, ops[0])
	b.must(t, &pb.Command{Principal: "kprod", Op: &pb.Command_UpdateScan{UpdateScan: &pb.UpdateScan{ScanId: "s1", Paused: proto.Bool(true)}}})
	b.mustReject(t, acquireCmd("kw1", "w1", 1), distributed.ErrNoQueuedTask)
	b.must(t, &pb.Command{Principal: "kprod", Op: &pb.Command_UpdateScan{UpdateScan: &pb.UpdateScan{ScanId: "s1", Paused: proto.Bool(false), MaxInFlight: proto.Uint32(1)}}})
	acq := b.must(t, acquireCmd("kw1", "w1", 2)).Value.([]Acquired)
	if len(acq) != 1 || acq[0].Lease.TaskID() != "t1" {
		t.Fatalf("acquired %v, want t1 only", acq)
	}
	b.mustReject(t, &pb.Command{Principal: "kadmin", Op: &pb.Command_SetSchedulingOptions{SetSchedulingOptions: &pb.SetSchedulingOptions{
		Options: &pb.SchedulingOptions{BackoffCapSecs: 5}}}}, distributed.ErrInvalidLimitRelationship)
	bad := enqueueCmd("kprod", "t3")
	bad.GetEnqueue().Tasks[0].RequiredTags = []uint32{300}
	b.mustReject(t, bad, distributed.ErrInvalidTask)
	st, err := b.f.ExportState()
	if err != nil {
		t.Fatal(err)
	}
	g := New(Options{})
	if err := g.RestoreState(st); err != nil {
		t.Fatal(err)
	}
	if st2, _ := g.ExportState(); !bytes.Equal(st, st2) {
		t.Fatal("restored state exports differently")
	}
	if s, err := acme.ScanState("s1"); err != nil || s.InFlight != 1 || s.Settings.MaxInFlight != 1 {
		t.Fatalf("ScanState = %+v, %v", s, err)
	}
	if r := b.apply(&pb.Command{Principal: "kw1", Op: &pb.Command_UpdateScan{UpdateScan: &pb.UpdateScan{ScanId: "s1", Paused: proto.Bool(true)}}}); !errors.Is(r.Err, ErrPermissionDenied) {
		t.Fatalf("worker key pausing a scan: %v", r.Err)
	}
}
