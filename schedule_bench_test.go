package distributed

// Benchmarks of the scheduling index (contract Part F): AssignNextAvailable
// with no scheduling feature used (contract A order, no index), with the
// index built but no fairness, and with FairScans over 16 scans, at tiny
// and maximum state as in bench_test.go. Figures: docs/benchmarks.md.

import (
	"strconv"
	"testing"
)

func BenchmarkScheduling(b *testing.B) {
	variants := []struct {
		name  string
		opts  SchedulingOptions
		scans int
	}{
		{"none", SchedulingOptions{}, 1},
		{"index", SchedulingOptions{BackoffBaseSecs: 5}, 1},
		{"fair16", SchedulingOptions{FairScans: true}, 16},
	}
	for _, s := range poolBenchStates {
		for _, v := range variants {
			b.Run("AssignNextAvailable/"+v.name+"/"+s.name, func(b *testing.B) {
				e := newBenchEnv(b, s)
				withOptions := func() {
					if v.opts != (SchedulingOptions{}) && e.p.c.sched == nil {
						must(e.p.SetSchedulingOptions(e.rev(), e.now, v.opts))
					}
				}
				withOptions()
				var leases []TaskLease
				batched(b, func(n int) []int {
					for _, l := range leases {
						must(e.p.CancelTask(e.rev(), e.now, OwnershipFromLease(l)))
					}
					leases = leases[:0]
					e.roomFor(s, n)
					withOptions()
					for i := 0; i < n; i++ {
						e.seq++
						must(e.p.Enqueue(e.rev(), e.now, TaskSpec{TaskID: "task-" + strconv.Itoa(e.seq),
							ScanID: "scan-" + strconv.Itoa(e.seq%v.scans), TargetRef: "10.0.0.1", Priority: TaskPriority(e.seq % 4)}))
					}
					return make([]int, n)
				}, func(int) { leases = append(leases, must(e.p.AssignNextAvailable(e.rev(), e.now, 60))) })
			})
		}
	}
}
