// Benchmarks of the FSM's apply path for the per-call load of issue 15:
// one framed log entry decoded and applied through FSM.Apply, as raft
// hands it over, holding one single-task enqueue, a Batch of 16 of them
// (what the node's proposer makes of 16 concurrent single calls), one
// enqueue of 16 tasks, one single-task acquire (with start) and one
// single-task complete (with its 32-byte result). ns/op and allocs/op are
// per entry. Entries are framed ahead, 400 at a time with the timer
// stopped, so only Apply is timed.
package raftfsm

import (
	"strconv"
	"testing"

	"github.com/hashicorp/raft"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// applyBenchRound is how many entries one round frames ahead; a round
// starts on a fresh FSM, so the default tenant's limits (1 024 active
// tasks, 1 024 results) are never reached.
const applyBenchRound = 400

type applyBench struct {
	tb      *testBundle
	index   uint64
	next    int // the next task number
	entries []*raft.Log
}

func newApplyBench(b *testing.B) *applyBench {
	ab := &applyBench{tb: setup(b), index: 1 << 20}
	ab.tb.must(b, &pb.Command{Principal: "kw1", Op: &pb.Command_RegisterWorker{RegisterWorker: &pb.RegisterWorker{Spec: &pb.WorkerSpec{WorkerId: "w1", Capacity: 1024}}}})
	return ab
}

// entry frames cmd as the next log entry.
func (ab *applyBench) entry(b *testing.B, cmd *pb.Command) *raft.Log {
	cmd.Version, cmd.NowSecs, cmd.Tenant = CommandVersion, ab.tb.now, "acme"
	data, err := MarshalEntry(cmd)
	if err != nil {
		b.Fatal(err)
	}
	ab.index++
	return &raft.Log{Index: ab.index, Term: 1, Type: raft.LogCommand, Data: data}
}

func (ab *applyBench) ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "t" + strconv.Itoa(ab.next)
		ab.next++
	}
	return out
}

// run times one Apply per iteration of the entries that round frames
// (on a fresh FSM, timer stopped) whenever the last round's are used up;
// check sees every answer.
func runApplyBench(b *testing.B, round func(*testing.B, *applyBench), check func(*testing.B, any)) {
	var ab *applyBench
	b.ReportAllocs()
	for b.Loop() {
		if ab == nil || len(ab.entries) == 0 {
			b.StopTimer()
			ab = newApplyBench(b)
			round(b, ab)
			b.StartTimer()
		}
		l := ab.entries[0]
		ab.entries = ab.entries[1:]
		check(b, ab.tb.f.Apply(l))
	}
}

func okResponse(b *testing.B, out any) {
	if r, ok := out.(Response); !ok || r.Err != nil {
		b.Fatalf("apply = %v", out)
	}
}

func BenchmarkFSM_ApplyEntry(b *testing.B) {
	b.Run("enqueue-1", func(b *testing.B) {
		runApplyBench(b, func(b *testing.B, ab *applyBench) {
			for range applyBenchRound {
				ab.entries = append(ab.entries, ab.entry(b, enqueueCmd("kprod", ab.ids(1)...)))
			}
		}, okResponse)
	})
	b.Run("batch-of-16-enqueue-1", func(b *testing.B) {
		runApplyBench(b, func(b *testing.B, ab *applyBench) {
			for range applyBenchRound / 16 {
				batch := &pb.Batch{}
				for range 16 {
					c := enqueueCmd("kprod", ab.ids(1)...)
					c.Version, c.NowSecs, c.Tenant = CommandVersion, ab.tb.now, "acme"
					batch.Commands = append(batch.Commands, c)
				}
				ab.entries = append(ab.entries, ab.entry(b, &pb.Command{Op: &pb.Command_Batch{Batch: batch}}))
			}
		}, func(b *testing.B, out any) {
			if rs, ok := out.([]Response); !ok || len(rs) != 16 || rs[0].Err != nil || rs[15].Err != nil {
				b.Fatalf("batch apply = %v", out)
			}
		})
	})
	b.Run("enqueue-16", func(b *testing.B) {
		runApplyBench(b, func(b *testing.B, ab *applyBench) {
			for range applyBenchRound / 16 {
				ab.entries = append(ab.entries, ab.entry(b, enqueueCmd("kprod", ab.ids(16)...)))
			}
		}, okResponse)
	})
	b.Run("acquire-1", func(b *testing.B) {
		runApplyBench(b, func(b *testing.B, ab *applyBench) {
			ab.tb.must(b, enqueueCmd("kprod", ab.ids(applyBenchRound)...))
			for range applyBenchRound {
				ab.entries = append(ab.entries, ab.entry(b, acquireCmd("kw1", "w1", 1)))
			}
		}, okResponse)
	})
	b.Run("complete-1", func(b *testing.B) {
		result := make([]byte, 32)
		runApplyBench(b, func(b *testing.B, ab *applyBench) {
			ab.tb.must(b, enqueueCmd("kprod", ab.ids(applyBenchRound)...))
			acq := valueOf[[]Acquired](b, ab.tb.must(b, acquireCmd("kw1", "w1", applyBenchRound/2)))
			acq = append(acq, valueOf[[]Acquired](b, ab.tb.must(b, acquireCmd("kw1", "w1", applyBenchRound/2)))...)
			for _, a := range acq {
				ab.entries = append(ab.entries, ab.entry(b, completeCmd("kw1", a.Lease, result)))
			}
		}, okResponse)
	})
}
