// Tests for StateHash. Goal: two replicas that apply the same entries
// report equal hashes at equal indexes; one differing command, or a
// rejected command that changes nothing, moves (or keeps) the hash as it
// should; after a snapshot restore the index is reported unknown until the
// next entry. Method: feed the same raft.Log entries to two FSMs through
// Apply, as raft does.
package raftfsm

import (
	"bytes"
	"io"
	"testing"

	"github.com/hashicorp/raft"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// logOf encodes cmd as the raft entry at index.
func logOf(t *testing.T, index uint64, cmd *pb.Command) *raft.Log {
	t.Helper()
	cmd.Version = CommandVersion
	if cmd.NowSecs == 0 {
		cmd.NowSecs = 100
	}
	if cmd.Tenant == "" {
		cmd.Tenant = "acme"
	}
	data, err := MarshalEntry(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}
}

func mustHash(t *testing.T, f *FSM) StateHash {
	t.Helper()
	h, err := f.StateHash()
	if err != nil {
		t.Fatalf("StateHash: %v", err)
	}
	return h
}

func TestFSM_StateHash(t *testing.T) {
	t.Parallel()
	entries := []*pb.Command{
		{Op: &pb.Command_InitCluster{InitCluster: &pb.InitCluster{EpochId: bytes.Repeat([]byte{1}, 16)}}},
		{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "acme"}}},
		{Op: &pb.Command_CreateKey{CreateKey: &pb.CreateKey{KeyId: "kprod", SecretHash: make([]byte, 32), KeyTenant: "acme", Role: RoleProducer}}},
		enqueueCmd("kprod", "t1", "t2"),
	}
	a, b := New(Options{}), New(Options{})
	for i, cmd := range entries {
		l := logOf(t, uint64(i)+1, cmd)
		a.Apply(l)
		b.Apply(l)
	}
	ha, hb := mustHash(t, a), mustHash(t, b)
	if ha != hb || ha.Index != 4 || !ha.IndexKnown {
		t.Fatalf("replicas: %x@%d(%v) vs %x@%d(%v), want equal at index 4", ha.Sum, ha.Index, ha.IndexKnown, hb.Sum, hb.Index, hb.IndexKnown)
	}

	// A rejected command (duplicate task) changes nothing but the index.
	if r := a.Apply(logOf(t, 5, enqueueCmd("kprod", "t1"))).(Response); r.Err == nil {
		t.Fatal("duplicate enqueue accepted")
	}
	if h := mustHash(t, a); h.Sum != ha.Sum || h.Index != 5 {
		t.Fatalf("after a rejected command: %x@%d, want %x@5", h.Sum, h.Index, ha.Sum)
	}
	// Diverging replicas: the same index, different commands.
	a.Apply(logOf(t, 6, enqueueCmd("kprod", "t3")))
	b.Apply(logOf(t, 5, enqueueCmd("kprod", "t1")))
	b.Apply(logOf(t, 6, enqueueCmd("kprod", "t4")))
	if ha, hb := mustHash(t, a), mustHash(t, b); ha.Index != hb.Index || ha.Sum == hb.Sum {
		t.Fatalf("diverged replicas: %x@%d vs %x@%d, want different sums at one index", ha.Sum, ha.Index, hb.Sum, hb.Index)
	}

	// A restored replica has a's state but does not know its index.
	st, err := a.ExportState()
	if err != nil {
		t.Fatal(err)
	}
	c := New(Options{})
	if err := c.Restore(io.NopCloser(bytes.NewReader(st))); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if h := mustHash(t, c); h.Sum != mustHash(t, a).Sum || h.IndexKnown {
		t.Fatalf("restored: %x known %v, want a's sum with an unknown index", h.Sum, h.IndexKnown)
	}
	next := logOf(t, 7, enqueueCmd("kprod", "t5"))
	a.Apply(next)
	c.Apply(next)
	if ha, hc := mustHash(t, a), mustHash(t, c); ha != hc || !hc.IndexKnown || hc.Index != 7 {
		t.Fatalf("after the next entry: %x@%d vs %x@%d(%v)", ha.Sum, ha.Index, hc.Sum, hc.Index, hc.IndexKnown)
	}
}
