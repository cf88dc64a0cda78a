package distributed

// BenchmarkSizeRatio: the ratios the core's targets are stated in
// (docs/benchmarks.md, issue 15) — a command at maximum state against the
// same command at tiny state, and the lifecycle against the bare mutex +
// B-tree baseline at the same size — measured pairwise: the two sides run
// alternately, one batch of benchBatch calls each (prepared with the clock
// stopped), inside one benchmark, so that both see the same machine load
// however it drifts. Separate benchmarks run seconds apart and, on a
// shared machine, their ratios swing by 2× or more from run to run.
// Each sub-benchmark reports both sides' ns/op and their ratio.

import (
	"testing"
	"time"
)

func BenchmarkSizeRatio(b *testing.B) {
	tiny, max := poolBenchStates[0], poolBenchStates[1]
	pairs := []struct {
		name       string
		num, den   func(b *testing.B) sizedOp
		numN, denN string
	}{
		{"AssignNextAvailable", func(b *testing.B) sizedOp { return assignNextAvailableOp(b, max) },
			func(b *testing.B) sizedOp { return assignNextAvailableOp(b, tiny) }, "max", "tiny"},
		{"UpdateWorkerNewSecond", func(b *testing.B) sizedOp { return updateWorkerOp(b, max, true) },
			func(b *testing.B) sizedOp { return updateWorkerOp(b, tiny, true) }, "max", "tiny"},
		{"UpdateWorker", func(b *testing.B) sizedOp { return updateWorkerOp(b, max, false) },
			func(b *testing.B) sizedOp { return updateWorkerOp(b, tiny, false) }, "max", "tiny"},
		{"LifecycleVsBaseline/max", func(b *testing.B) sizedOp { return lifecycleOp(b, max) },
			func(*testing.B) sizedOp { return baselineOp(max) }, "lifecycle", "baseline"},
	}
	for _, p := range pairs {
		b.Run(p.name, func(b *testing.B) {
			num, den := p.num(b), p.den(b)
			b.ReportAllocs()
			b.StopTimer()
			b.ResetTimer()
			var numT, denT time.Duration
			for done := 0; done < b.N; {
				n := min(benchBatch, b.N-done)
				numT += timedBatch(b, num, n)
				denT += timedBatch(b, den, n)
				done += n
			}
			b.ReportMetric(float64(numT.Nanoseconds())/float64(b.N), p.numN+"-ns/op")
			b.ReportMetric(float64(denT.Nanoseconds())/float64(b.N), p.denN+"-ns/op")
			b.ReportMetric(float64(numT)/float64(denT), p.numN+"/"+p.denN)
		})
	}
}

// timedBatch prepares n calls of o, then makes them with the benchmark's
// timer running (so its allocation count covers both sides) and returns
// their wall time.
func timedBatch(b *testing.B, o sizedOp, n int) time.Duration {
	o.prepare(n)
	b.StartTimer()
	start := time.Now()
	for range n {
		o.op()
	}
	d := time.Since(start)
	b.StopTimer()
	return d
}
