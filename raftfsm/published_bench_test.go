package raftfsm

import (
	"strconv"
	"sync"
	"testing"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// BenchmarkFSM_ReadsDuringApply measures what every API call reads first
// — its key, its tenant and the logical time — while another goroutine
// applies Batch entries of 64 single-task enqueues back to back (the
// proposer's coalescing under load; docs/benchmarks.md "Reads that do not
// wait for Apply"). ns/op is one Key + Tenant + LastTime from parallel
// readers; with reads under the FSM's RWMutex it included the wait for
// the entry being applied. It uses only exported reads, so the same file
// measures older FSMs.
func BenchmarkFSM_ReadsDuringApply(b *testing.B) {
	bb := setup(b)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { applyEnqueueEntries(bb, stop) })
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k, ok := bb.f.Key("kprod")
			_, tok := bb.f.Tenant(k.Tenant)
			if !ok || !tok || bb.f.LastTime() == 0 {
				b.Error("kprod or its tenant not found")
				return
			}
		}
	})
	b.StopTimer()
	close(stop)
	wg.Wait()
}

// applyEnqueueEntries applies Batch entries of 64 single-task enqueues
// until stop; enqueues refused at the tenant's limits still hold the lock
// for their checks.
func applyEnqueueEntries(bb *testBundle, stop <-chan struct{}) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		batch := &pb.Batch{}
		for i := range 64 {
			c := enqueueCmd("kprod", "r"+strconv.Itoa(n*64+i))
			c.Version, c.Tenant, c.NowSecs = CommandVersion, "acme", bb.now
			batch.Commands = append(batch.Commands, c)
		}
		bb.f.ApplyCommand(&pb.Command{Version: CommandVersion, NowSecs: bb.now, Op: &pb.Command_Batch{Batch: batch}})
	}
}
