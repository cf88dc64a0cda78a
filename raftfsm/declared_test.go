// Goal: a scan's declared total (EnqueueTasks.declared_total) is stored with
// an accepted batch, replaced by a later declaration, kept when a batch
// declares nothing, and refused with the batch when the batch spans two
// scans or is rejected. Method: apply commands to one FSM and read
// ScanDeclaredTotal; every refusal must leave the exported state unchanged.
package raftfsm

import (
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
