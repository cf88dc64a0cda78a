// Benchmarks of the FSM's snapshot and restore on a large state (issue 15).
// Goal: a snapshot does not double the memory of the state it writes, and
// Restore reads a snapshot without extra copies. Method: one tenant at its
// record ceilings — 16 384 queued tasks and 16 384 completed tasks with a
// 4 KiB result each (≈ 64 MiB of results) — built once through
// ApplyCommand; each iteration captures a snapshot and persists it to a
// discarding sink (or restores one). Reported besides time and
// allocations: held-B, the heap the captured snapshot holds between
// Snapshot and Persist (HeapAlloc after a GC, minus before), and state-B,
// the size of the encoding, so held-B/state-B is the capture's cost in
// multiples of the state.
package raftfsm

import (
	"bytes"
	"crypto/rand"
	"io"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/hashicorp/raft"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wire"
)

// largeFSM builds the benchmarks' state once per process.
var largeFSM = sync.OnceValues(func() (*FSM, error) {
	lim := distributed.DefaultLimits()
	lim.MaxTaskRecords, lim.MaxTerminalTasks, lim.MaxActiveTasks, lim.MaxQueuedTasks = 65536, 65536, 16384, 16384
	rl := distributed.DefaultResultLimits()
	rl.MaxResults, rl.MaxTotalBytes = 65536, 256<<20
	f := New(Options{})
	now := uint64(100)
	apply := func(cmd *pb.Command) Response {
		cmd.Version, cmd.NowSecs = CommandVersion, now
		if cmd.Tenant == "" {
			cmd.Tenant = "acme"
		}
		return f.ApplyCommand(cmd).(Response)
	}
	for _, c := range []*pb.Command{
		{Op: &pb.Command_InitCluster{InitCluster: &pb.InitCluster{EpochId: make([]byte, 16)}}},
		{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "acme", Limits: wire.LimitsToProto(lim), ResultLimits: wire.ResultLimitsToProto(rl)}}},
		{Op: &pb.Command_RegisterWorker{RegisterWorker: &pb.RegisterWorker{Spec: &pb.WorkerSpec{WorkerId: "w1", Capacity: 4096}}}},
	} {
		if r := apply(c); r.Err != nil {
			return nil, r.Err
		}
	}
	result := make([]byte, 4<<10)
	if _, err := rand.Read(result); err != nil {
		return nil, err
	}
	enq := func(scan string, n int) error {
		for start := 0; start < n; start += MaxEnqueueTasks {
			e := &pb.EnqueueTasks{}
			for i := start; i < min(n, start+MaxEnqueueTasks); i++ {
				e.Tasks = append(e.Tasks, &pb.TaskSpec{TaskId: scan + "-" + strconv.Itoa(i), ScanId: scan, TargetRef: []byte("target-" + strconv.Itoa(i)), Priority: 1})
			}
			if r := apply(&pb.Command{Op: &pb.Command_Enqueue{Enqueue: e}}); r.Err != nil {
				return r.Err
			}
		}
		return nil
	}
	for s := range 4 { // 4 scans of 4096 completed tasks
		scan := "done" + strconv.Itoa(s)
		if err := enq(scan, 4096); err != nil {
			return nil, err
		}
		for range 4096 / 256 {
			r := apply(&pb.Command{Op: &pb.Command_AcquireTasks{AcquireTasks: &pb.AcquireTasks{WorkerId: "w1", LeaseTtlSecs: 600, MaxTasks: 256, Start: true}}})
			if r.Err != nil {
				return nil, r.Err
			}
			for _, a := range r.Value.([]Acquired) {
				lb, _ := a.Lease.MarshalBinary()
				if r := apply(&pb.Command{Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: lb, Result: result}}}); r.Err != nil {
					return nil, r.Err
				}
			}
		}
	}
	return f, enq("queued", 16384)
})

func mustLargeFSM(b *testing.B) *FSM {
	f, err := largeFSM()
	if err != nil {
		b.Fatal(err)
	}
	return f
}

// discardSink is a raft.SnapshotSink that counts and drops the bytes.
type discardSink struct{ n int64 }

func (s *discardSink) Write(p []byte) (int, error) { s.n += int64(len(p)); return len(p), nil }
func (s *discardSink) Close() error                { return nil }
func (s *discardSink) ID() string                  { return "bench" }
func (s *discardSink) Cancel() error               { return nil }

var _ raft.SnapshotSink = (*discardSink)(nil)

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func BenchmarkFSM_Snapshot(b *testing.B) {
	f := mustLargeFSM(b)
	b.ReportAllocs()
	var held, state uint64
	for b.Loop() {
		b.StopTimer()
		before := heapAlloc()
		b.StartTimer()
		s, err := f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		held = max(held, heapAlloc()-min(before, heapAlloc()))
		b.StartTimer()
		sink := &discardSink{}
		if err := s.Persist(sink); err != nil {
			b.Fatal(err)
		}
		s.Release()
		state = uint64(sink.n)
	}
	b.ReportMetric(float64(held), "held-B")
	b.ReportMetric(float64(state), "state-B")
}

func BenchmarkFSM_Restore(b *testing.B) {
	f := mustLargeFSM(b)
	st, err := f.ExportState()
	if err != nil {
		b.Fatal(err)
	}
	for _, sized := range []bool{false, true} {
		b.Run("sized="+strconv.FormatBool(sized), func(b *testing.B) {
			b.ReportAllocs()
			b.ReportMetric(float64(len(st)), "state-B")
			for b.Loop() {
				size := int64(0)
				if sized {
					size = int64(len(st)) // what the node's snapshot store knows
				}
				g := New(Options{})
				if err := g.RestoreSized(io.NopCloser(bytes.NewReader(st)), size); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
