package distributed

// Benchmarks: one full lifecycle and each command on its own, at tiny state
// and at maximum state (MaximumLimits, 4 096 workers, 16 384 non-terminal
// tasks at the peak of each batch), plus the bare mutex + B-tree baseline the
// lifecycle is compared with. Setup work (making room, preparing leases) runs
// with the timer stopped, in batches, so each figure is one command.
// Figures and ratios: docs/benchmarks.md.

import (
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/google/btree"
)

const benchBatch = 1024

type benchState struct {
	name    string
	workers int // registered at setup
	base    int // non-terminal tasks at setup (half queued, half running)
}

var poolBenchStates = []benchState{
	{"tiny", 1, 0},
	{"max", MaxWorkers, MaxActiveTasks - 2*benchBatch},
}

// benchEnv is a pool plus the bookkeeping to run commands at its revision.
type benchEnv struct {
	b       *testing.B
	p       *WorkerPool
	r       *ResultAggregator
	now     uint64
	seq     int
	workers []string
}

// must returns the transition's value; a benchmark command never fails, so
// an error is a bug in the benchmark and panics.
func must[T any](tr Transition[T], err error) T {
	if err != nil {
		panic(err)
	}
	return tr.Value
}

func (e *benchEnv) rev() uint64 { return e.p.c.revision }

func newBenchEnv(b *testing.B, s benchState) *benchEnv {
	b.Helper()
	p, err := NewWorkerPoolWithLimits(MaximumLimits())
	if err != nil {
		b.Fatal(err)
	}
	r, _ := NewResultAggregatorWithLimits(MaximumResultLimits())
	e := &benchEnv{b: b, p: p, r: r, now: 1}
	for i := 0; i < s.workers; i++ {
		id := "worker-" + strconv.Itoa(i)
		must(p.RegisterWorker(e.rev(), e.now, WorkerSpec{WorkerID: id, Capacity: MaxWorkerCapacity}))
		e.workers = append(e.workers, id)
	}
	for i := 0; i < s.base; i++ {
		id := e.enqueue()
		if i%2 == 0 {
			l := must(p.AssignTask(e.rev(), e.now, id, e.workers[i%len(e.workers)], MaxLeaseTTLSecs))
			must(p.StartTask(e.rev(), e.now, l))
		}
	}
	return e
}

func (e *benchEnv) enqueue() string {
	e.seq++
	t := benchTask{id: "task-" + strconv.Itoa(e.seq), prio: TaskPriority(e.seq % 4)}
	e.enqueueTask(t)
	return t.id
}

func (e *benchEnv) enqueueTask(t benchTask) {
	must(e.p.Enqueue(e.rev(), e.now, TaskSpec{TaskID: t.id, ScanID: "scan", TargetRef: "10.0.0.1", Priority: t.prio}))
}

// benchTask is a task's ID and priority: the caller's input, which the
// lifecycle benchmarks make with the timer stopped (and so does the
// baseline), so that both measure the commands alone.
type benchTask struct {
	id   string
	prio TaskPriority
}

// benchTasks returns the next n tasks after seq.
func benchTasks(seq *int, n int) []benchTask {
	ts := make([]benchTask, n)
	for i := range ts {
		*seq++
		ts[i] = benchTask{id: "task-" + strconv.Itoa(*seq), prio: TaskPriority(*seq % 4)}
	}
	return ts
}

// roomFor makes sure n more records fit; when the terminal reservation is
// nearly used up it rebuilds the environment (timer stopped by the caller).
func (e *benchEnv) roomFor(s benchState, n int) {
	if len(e.p.c.tasks)+n+benchBatch > MaxTaskRecords {
		*e = *newBenchEnv(e.b, s)
		// Collect the old environment now, with the timer stopped, so that
		// its garbage is not marked during the timed commands.
		runtime.GC()
	}
}

// batched runs op b.N times; prepare(n) runs with the timer stopped before
// every batch of n ops and returns per-op inputs.
func batched[T any](b *testing.B, prepare func(n int) []T, op func(T)) {
	b.ReportAllocs()
	b.StopTimer()
	b.ResetTimer() // the environment was built with the timer running
	for done := 0; done < b.N; {
		n := min(benchBatch, b.N-done)
		inputs := prepare(n)
		b.StartTimer()
		for _, in := range inputs {
			op(in)
		}
		b.StopTimer()
		done += n
	}
}

// sizedOp is one benchmarked operation at one state: prepare(n) makes the
// inputs of the next n calls (run with the clock stopped), op makes the
// next call. BenchmarkSizeRatio alternates two of them batch by batch.
type sizedOp struct {
	prepare func(n int)
	op      func()
}

// run times o the way every benchmark here does: batches of benchBatch
// calls, each prepared with the timer stopped.
func (o sizedOp) run(b *testing.B) {
	batched(b, func(n int) []struct{} { o.prepare(n); return make([]struct{}, n) }, func(struct{}) { o.op() })
}

// lifecycleOp is the five commands of one task's life at state s.
func lifecycleOp(b *testing.B, s benchState) sizedOp {
	e := newBenchEnv(b, s)
	w := e.workers[0]
	result := []byte("ok")
	var tasks []benchTask
	return sizedOp{func(n int) {
		e.roomFor(s, n)
		w = e.workers[0]
		tasks = benchTasks(&e.seq, n)
	}, func() {
		t := tasks[0]
		tasks = tasks[1:]
		e.enqueueTask(t)
		l := must(e.p.AssignNext(e.rev(), e.now, w, 60))
		must(e.p.StartTask(e.rev(), e.now, l))
		done := must(e.p.CompleteTask(e.rev(), e.now, l))
		must(e.r.StoreResult(e.r.Revision(), done.Receipt, result))
	}}
}

func BenchmarkLifecycle(b *testing.B) {
	for _, s := range poolBenchStates {
		b.Run(s.name, func(b *testing.B) { lifecycleOp(b, s).run(b) })
	}
}

// BenchmarkBaselineMutexBTree runs the same five steps as BenchmarkLifecycle
// on the simplest possible structure: one mutex, a B-tree queue and two
// maps, no validation, no indexes, no fencing. At "max" it starts with the
// same number of records as the core's max state (half queued), so both
// structures work at the same size.
func BenchmarkBaselineMutexBTree(b *testing.B) {
	for _, s := range poolBenchStates {
		b.Run(s.name, func(b *testing.B) { baselineOp(s).run(b) })
	}
}

// baselineOp is BenchmarkBaselineMutexBTree's five steps at state s.
func baselineOp(s benchState) sizedOp {
	type item struct {
		prio    uint8
		ordinal uint64
		id      string
	}
	type rec struct {
		status TaskStatus
		worker string
		lease  uint64
		target string
	}
	var mu sync.Mutex
	queue := btree.NewG(32, func(a, b item) bool {
		if a.prio != b.prio {
			return a.prio > b.prio
		}
		return a.ordinal < b.ordinal
	})
	tasks := map[string]*rec{}
	results := map[string][]byte{}
	var ordinal, leaseID uint64
	seq := 0
	enqueue := func(t benchTask) {
		mu.Lock()
		ordinal++
		tasks[t.id] = &rec{target: "10.0.0.1"}
		queue.ReplaceOrInsert(item{prio: uint8(t.prio), ordinal: ordinal, id: t.id})
		mu.Unlock()
	}
	for i := 0; i < s.base; i++ {
		enqueue(benchTasks(&seq, 1)[0])
		if i%2 == 0 {
			it, _ := queue.DeleteMin()
			tasks[it.id].status = TaskRunning
		}
	}
	result := []byte("ok")
	var batch []benchTask
	return sizedOp{func(n int) { batch = benchTasks(&seq, n) }, func() {
		t := batch[0]
		batch = batch[1:]
		enqueue(t)
		mu.Lock()
		it, _ := queue.DeleteMin()
		r := tasks[it.id]
		leaseID++
		r.status, r.worker, r.lease = TaskLeased, "worker-0", leaseID
		mu.Unlock()
		mu.Lock()
		if r := tasks[it.id]; r.lease == leaseID {
			r.status = TaskRunning
		}
		mu.Unlock()
		mu.Lock()
		if r := tasks[it.id]; r.lease == leaseID {
			r.status = TaskCompleted
		}
		mu.Unlock()
		mu.Lock()
		results[it.id] = append([]byte(nil), result...)
		mu.Unlock()
	}}
}

// assignNextAvailableOp is AssignNextAvailable at state s: each batch
// cancels the previous batch's leases and enqueues one task per call.
func assignNextAvailableOp(b *testing.B, s benchState) sizedOp {
	e := newBenchEnv(b, s)
	var leases []TaskLease
	return sizedOp{func(n int) {
		for _, l := range leases {
			must(e.p.CancelTask(e.rev(), e.now, OwnershipFromLease(l)))
		}
		leases = leases[:0]
		e.roomFor(s, n)
		for i := 0; i < n; i++ {
			e.enqueue()
		}
	}, func() { leases = append(leases, must(e.p.AssignNextAvailable(e.rev(), e.now, 60))) }}
}

// updateWorkerOp heartbeats the workers of state s in turn; with
// newSecond every heartbeat carries a later second, so the worker moves to
// the newest end of the heartbeat-ordered index (unlink + relink).
func updateWorkerOp(b *testing.B, s benchState, newSecond bool) sizedOp {
	e := newBenchEnv(b, s)
	i := 0
	return sizedOp{func(int) {}, func() {
		i++
		if newSecond {
			e.now++
		}
		must(e.p.UpdateWorker(e.rev(), e.now, e.workers[i%len(e.workers)], 1, WorkerObservation{CPUBasisPoints: uint16(i % 5000)}))
	}}
}

func BenchmarkCommand(b *testing.B) {
	for _, s := range poolBenchStates {
		b.Run("Enqueue/"+s.name, func(b *testing.B) {
			e := newBenchEnv(b, s)
			var last []string
			batched(b, func(n int) []int {
				for _, id := range last { // make room: cancel the previous batch
					t, _, _ := e.p.GetTask(id)
					own, _ := t.Ownership()
					must(e.p.CancelTask(e.rev(), e.now, own))
				}
				last = last[:0]
				e.roomFor(s, n)
				return make([]int, n)
			}, func(int) { last = append(last, e.enqueue()) })
		})
		b.Run("AssignNextAvailable/"+s.name, func(b *testing.B) { assignNextAvailableOp(b, s).run(b) })
		leased := func(e *benchEnv, n int, start bool) []TaskLease {
			e.roomFor(s, n)
			out := make([]TaskLease, n)
			for i := range out {
				id := e.enqueue()
				out[i] = must(e.p.AssignTask(e.rev(), e.now, id, e.workers[i%len(e.workers)], 60))
				if start {
					must(e.p.StartTask(e.rev(), e.now, out[i]))
				}
			}
			return out
		}
		b.Run("StartTask/"+s.name, func(b *testing.B) {
			e := newBenchEnv(b, s)
			var prev []TaskLease
			batched(b, func(n int) []TaskLease {
				for _, l := range prev {
					must(e.p.CancelTask(e.rev(), e.now, OwnershipFromLease(l)))
				}
				prev = leased(e, n, false)
				return prev
			}, func(l TaskLease) { must(e.p.StartTask(e.rev(), e.now, l)) })
		})
		b.Run("CompleteTask/"+s.name, func(b *testing.B) {
			e := newBenchEnv(b, s)
			batched(b, func(n int) []TaskLease { return leased(e, n, true) },
				func(l TaskLease) { must(e.p.CompleteTask(e.rev(), e.now, l)) })
		})
		b.Run("FailTask/"+s.name, func(b *testing.B) {
			e := newBenchEnv(b, s)
			var prev []string
			batched(b, func(n int) []TaskLease {
				for _, id := range prev {
					t, _, _ := e.p.GetTask(id)
					own, _ := t.Ownership()
					must(e.p.CancelTask(e.rev(), e.now, own))
				}
				ls := leased(e, n, true)
				prev = prev[:0]
				for _, l := range ls {
					prev = append(prev, l.TaskID())
				}
				return ls
			}, func(l TaskLease) { must(e.p.FailTask(e.rev(), e.now, l)) })
		})
		b.Run("RenewLease/"+s.name, func(b *testing.B) {
			e := newBenchEnv(b, s)
			var cur []TaskLease
			batched(b, func(n int) []int {
				for _, l := range cur {
					must(e.p.CancelTask(e.rev(), e.now, OwnershipFromLease(l)))
				}
				cur = leased(e, n, true)
				idx := make([]int, n)
				for i := range idx {
					idx[i] = i
				}
				return idx
			}, func(i int) { cur[i] = must(e.p.RenewLease(e.rev(), e.now, cur[i], 120)) })
		})
		b.Run("CancelTask/"+s.name, func(b *testing.B) {
			e := newBenchEnv(b, s)
			batched(b, func(n int) []TaskOwnership {
				e.roomFor(s, n)
				out := make([]TaskOwnership, n)
				for i := range out {
					t, _, _ := e.p.GetTask(e.enqueue())
					out[i], _ = t.Ownership()
				}
				return out
			}, func(o TaskOwnership) { must(e.p.CancelTask(e.rev(), e.now, o)) })
		})
		b.Run("UpdateWorker/"+s.name, func(b *testing.B) { updateWorkerOp(b, s, false).run(b) })
		b.Run("UpdateWorkerNewSecond/"+s.name, func(b *testing.B) { updateWorkerOp(b, s, true).run(b) })
		b.Run("RegisterWorker/"+s.name, func(b *testing.B) {
			small := s
			if small.workers > benchBatch {
				small.workers -= benchBatch
			}
			var e *benchEnv
			k := 0
			batched(b, func(n int) []string {
				e = newBenchEnv(b, small)
				ids := make([]string, n)
				for i := range ids {
					k++
					ids[i] = "new-" + strconv.Itoa(k)
				}
				return ids
			}, func(id string) { must(e.p.RegisterWorker(e.rev(), e.now, WorkerSpec{WorkerID: id, Capacity: 8})) })
		})
		b.Run("RecoverExpiredLeases/"+s.name, func(b *testing.B) {
			e := newBenchEnv(b, s)
			b.ReportAllocs()
			for b.Loop() {
				must(e.p.RecoverExpiredLeases(e.rev(), e.now))
			}
		})
		b.Run("PruneDeadWorkers/"+s.name, func(b *testing.B) {
			e := newBenchEnv(b, s)
			b.ReportAllocs()
			for b.Loop() {
				must(e.p.PruneDeadWorkers(e.rev(), e.now))
			}
		})
		b.Run("ExpireOldTasks/"+s.name, func(b *testing.B) {
			e := newBenchEnv(b, s)
			b.ReportAllocs()
			for b.Loop() {
				must(e.p.ExpireOldTasks(e.rev(), e.now, 3600))
			}
		})
		b.Run("GetAvailableWorker/"+s.name, func(b *testing.B) {
			e := newBenchEnv(b, s)
			b.ReportAllocs()
			for b.Loop() {
				if _, ok, _ := e.p.GetAvailableWorker(e.now); !ok {
					b.Fatal("no worker")
				}
			}
		})
		b.Run("GetTask/"+s.name, func(b *testing.B) {
			e := newBenchEnv(b, s)
			id := e.enqueue()
			b.ReportAllocs()
			for b.Loop() {
				if _, ok, _ := e.p.GetTask(id); !ok {
					b.Fatal("missing")
				}
			}
		})
	}
}

func BenchmarkExportRestore(b *testing.B) {
	for _, s := range poolBenchStates {
		e := newBenchEnv(b, s)
		state, _ := e.p.ExportState()
		b.Run("Export/"+s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e.p.ExportState()
			}
			b.ReportMetric(float64(len(state)), "bytes")
		})
		b.Run("Restore/"+s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := RestoreWorkerPool(state); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
