package raftfsm

// Goal: a schedule's ticks fire exactly once and in order whoever proposes
// them (a second leader's proposal of a fired tick changes nothing), not
// before they are due, with catch-up after missed ticks, and survive a
// snapshot. Method: commands applied to a fresh FSM (fsm_test.go); the
// ticker's proposals are RecoveryCommands.

import (
	"bytes"
	"slices"
	"testing"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func createScheduleCmd(name string, every uint64, targets ...string) *pb.Command {
	c := &pb.CreateSchedule{Name: name, EverySecs: every, ScanPrefix: name}
	for _, t := range targets {
		c.Targets = append(c.Targets, []byte(t))
	}
	return &pb.Command{Principal: "kprod", Op: &pb.Command_CreateSchedule{CreateSchedule: c}}
}

func fireCmd(name string, tick uint64) *pb.Command {
	return &pb.Command{Op: &pb.Command_FireSchedule{FireSchedule: &pb.FireSchedule{Name: name, Tick: tick}}}
}

func TestFSM_RecurringSchedule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, createScheduleCmd("nightly", 100, "a.example", "b.example"))
	acme, _ := b.f.Tenant("acme")
	ops := acme.RecoveryCommands(b.now, 0)
	if len(ops) != 1 || ops[0].GetFireSchedule().GetTick() != 1 {
		t.Fatalf("RecoveryCommands at creation = %v, want tick 1", ops)
	}
	v := b.must(t, ops[0]).Value.(FireValue)
	// The tick's task IDs are the ones a producer derives (scheduleTaskID).
	wantIDs := []string{client.DeriveTaskID("nightly-1", "a.example"), client.DeriveTaskID("nightly-1", "b.example")}
	if !v.Fired || v.ScanID != "nightly-1" || !slices.Equal(acme.ScanTaskIDs("nightly-1"), wantIDs) {
		t.Fatalf("fire tick 1 = %+v, scan tasks %v, want %v", v, acme.ScanTaskIDs("nightly-1"), wantIDs)
	}
	// A second leader proposing the same tick: answered, nothing changes.
	before, _ := b.f.ExportState()
	if v := b.must(t, fireCmd("nightly", 1)).Value.(FireValue); v.Fired {
		t.Fatal("tick 1 fired twice")
	}
	if after, _ := b.f.ExportState(); !bytes.Equal(before, after) {
		t.Fatal("a repeated tick changed the state")
	}
	b.mustReject(t, fireCmd("nightly", 2), ErrInvalidCommand) // not due
	b.mustReject(t, fireCmd("nightly", 3), ErrInvalidCommand) // out of order
	if ops := acme.RecoveryCommands(b.now+99, 0); len(ops) != 0 {
		t.Fatalf("RecoveryCommands before tick 2 = %v", ops)
	}
	// Three periods pass with no leader: the next one fires ticks 2-4 in order.
	b.now += 300
	ops = acme.RecoveryCommands(b.now, 0)
	if len(ops) != 3 {
		t.Fatalf("catch-up = %d commands, want 3", len(ops))
	}
	for _, op := range ops {
		b.must(t, op)
	}
	if got := acme.Schedules()[0].GetLastTick(); got != 4 || len(acme.ScanTaskIDs("nightly-4")) != 2 {
		t.Fatalf("last tick %d, want 4", got)
	}
	st, _ := b.f.ExportState()
	g := New(Options{})
	if err := g.RestoreState(st); err != nil {
		t.Fatal(err)
	}
	if st2, _ := g.ExportState(); !bytes.Equal(st, st2) {
		t.Fatal("restored schedules export differently")
	}
	b.mustReject(t, createScheduleCmd("nightly", 100, "x"), ErrInvalidCommand) // exists
	for _, bad := range []*pb.Command{
		createScheduleCmd("bad name", 100, "x"), createScheduleCmd("s2", 0, "x"), createScheduleCmd("s2", 100),
		createScheduleCmd("s2", 100, "x", "x"),
	} {
		if r := b.apply(bad); r.Err == nil {
			t.Fatalf("%v accepted", bad)
		}
	}
	b.mustReject(t, fireCmd("nightly", 5), ErrInvalidCommand) // tick 5 is not due yet
	b.must(t, &pb.Command{Principal: "kprod", Op: &pb.Command_DeleteSchedule{DeleteSchedule: &pb.DeleteSchedule{Name: "nightly"}}})
	if ops := acme.RecoveryCommands(b.now+1000, 0); len(ops) != 0 {
		t.Fatalf("a deleted schedule still fires: %v", ops)
	}
}
