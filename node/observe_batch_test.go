package node

// Goal: raft's batching path (observedFSM.ApplyBatch, decoding ahead)
// applies a batch exactly as Apply applies its entries one by one: the
// same responses (nil for a configuration entry), the same state, the same
// fatal error from a damaged entry on, the same bytes counted for
// snapshots by size. Method: one batch of real framed entries — setup,
// enqueues, a configuration entry, a damaged entry and one after it —
// into two fresh FSMs, one through Apply per command entry, one through
// ApplyBatch.

import (
	"bytes"
	"crypto/rand"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/notify"
	"github.com/termivar/distributed/internal/wire"
	"github.com/termivar/distributed/raftfsm"
)

func batchLogs(t *testing.T) []*raft.Log {
	t.Helper()
	epoch := make([]byte, raftfsm.EpochBytes)
	if _, err := rand.Read(epoch); err != nil {
		t.Fatal(err)
	}
	cmds := []*pb.Command{
		{Op: &pb.Command_InitCluster{InitCluster: &pb.InitCluster{EpochId: epoch}}},
		{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "acme", Limits: wire.LimitsToProto(distributed.DefaultLimits())}}},
		enqueue("acme", "a", "b"),
		enqueue("acme", "a"), // refused: the task exists
		enqueue("acme", "c"),
		enqueue("acme", "d"),
	}
	var logs []*raft.Log
	for i, cmd := range cmds {
		cmd.Version = raftfsm.CommandVersion // as the proposer stamps it
		data, err := raftfsm.MarshalEntry(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if i == 4 {
			data[len(data)-1] ^= 0x01 // damaged: fatal from here on
		}
		logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Type: raft.LogCommand, Data: data})
		if i == 2 {
			logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Type: raft.LogConfiguration, Data: []byte{1}})
		}
	}
	return logs
}

func testObservedFSM() observedFSM {
	return observedFSM{FSM: raftfsm.New(raftfsm.Options{}), changed: new(notify.Notifier), snapshots: new(notify.Notifier),
		trig: newSnapTrigger(1<<40, 0), opened: &indexedSnapshots{}}
}

func TestObservedFSM_ApplyBatchAgreesWithApply(t *testing.T) {
	logs := batchLogs(t)
	one, batch := testObservedFSM(), testObservedFSM()
	want := make([]any, len(logs))
	for i, l := range logs {
		if l.Type == raft.LogCommand {
			want[i] = one.Apply(l)
		}
	}
	got := batch.ApplyBatch(logs)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ApplyBatch responses:\n%+v\nApply's:\n%+v", got, want)
	}
	if one.FSM.Fatal() == nil || !reflect.DeepEqual(batch.FSM.Fatal(), one.FSM.Fatal()) {
		t.Fatalf("fatal error: batch %v, one by one %v; want the same, set", batch.FSM.Fatal(), one.FSM.Fatal())
	}
	a, errA := one.FSM.ExportState()
	b, errB := batch.FSM.ExportState()
	if (errA == nil) != (errB == nil) || !bytes.Equal(a, b) {
		t.Fatalf("states differ (export errors %v, %v)", errA, errB)
	}
	ta, okA := one.FSM.Tenant("acme")
	tb, okB := batch.FSM.Tenant("acme")
	if !okA || !okB {
		t.Fatalf("tenant acme: one by one %v, batch %v; want it in both", okA, okB)
	}
	if !reflect.DeepEqual(tb.TaskIDs(), ta.TaskIDs()) || tb.Counters() != ta.Counters() {
		t.Fatalf("tenant acme: batch %v %+v, one by one %v %+v", tb.TaskIDs(), tb.Counters(), ta.TaskIDs(), ta.Counters())
	}
	if ids := tb.TaskIDs(); !reflect.DeepEqual(ids, []string{"a", "b"}) {
		t.Fatalf("tasks %v, want a and b: nothing from the damaged entry on", ids)
	}
	if x, y := one.trig.applied.Load(), batch.trig.applied.Load(); x != y || x == 0 {
		t.Fatalf("bytes counted for snapshots: batch %d, one by one %d", y, x)
	}
	if x, y := one.trig.commands.Load(), batch.trig.commands.Load(); x != y || x == 0 {
		t.Fatalf("command bytes counted for snapshots: batch %d, one by one %d", y, x)
	}
}
