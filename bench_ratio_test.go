package distributed

// BenchmarkSizeRatio: the ratios the core's targets are stated in
// (docs/benchmarks.md, issue 15) — a command at maximum state against the
// same command at tiny state, and the lifecycle against the bare mutex +
// B-tree baseline at the same size — measured pairwise: the two sides run
// alternately, one batch of benchBatch calls each (prepared with the clock
// stopped), inside one benchmark, so that both see the same machine load
// however it drifts. Separate benchmarks run seconds apart and, on a
// shared machine, their ratios swing by 2× or more from run to run.
// Each sub-benchmark reports both sides' wall ns/op and their ratio, and
// the same from the thread's CPU clock (cpu-ns/op: time the thread waited
// for a core is not counted; the goroutine is locked to its thread).

import (
	"runtime"
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
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			num, den := p.num(b), p.den(b)
			b.ReportAllocs()
			b.StopTimer()
			b.ResetTimer()
			var numT, denT batchTime
			for done := 0; done < b.N; {
				n := min(benchBatch, b.N-done)
				numT.add(timedBatch(b, num, n))
				denT.add(timedBatch(b, den, n))
				done += n
			}
			for _, m := range []struct {
				unit     string
				num, den time.Duration
			}{{"ns/op", numT.wall, denT.wall}, {"cpu-ns/op", numT.cpu, denT.cpu}} {
				b.ReportMetric(float64(m.num.Nanoseconds())/float64(b.N), p.numN+"-"+m.unit)
				b.ReportMetric(float64(m.den.Nanoseconds())/float64(b.N), p.denN+"-"+m.unit)
			}
			b.ReportMetric(float64(numT.wall)/float64(denT.wall), p.numN+"/"+p.denN)
			b.ReportMetric(float64(numT.cpu)/float64(denT.cpu), p.numN+"/"+p.denN+"-cpu")
		})
	}
}

// batchTime is the wall and thread CPU time of calls.
type batchTime struct{ wall, cpu time.Duration }

func (t *batchTime) add(u batchTime) { t.wall, t.cpu = t.wall+u.wall, t.cpu+u.cpu }

// timedBatch prepares n calls of o, then makes them with the benchmark's
// timer running (so its allocation count covers both sides) and returns
// their wall and thread CPU time.
func timedBatch(b *testing.B, o sizedOp, n int) batchTime {
	o.prepare(n)
	b.StartTimer()
	start, startCPU := time.Now(), threadCPU()
	for range n {
		o.op()
	}
	t := batchTime{time.Since(start), threadCPU() - startCPU}
	b.StopTimer()
	return t
}
