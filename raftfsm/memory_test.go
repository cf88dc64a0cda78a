// Goal: the heap one retained task costs at the tenant level — the core's
// record and result (package distributed pins those alone,
// TestMemory_PerRecordBudget) plus the FSM's own per-task tables (the
// scan's task IDs and ordinals, its completion list). Method: apply
// commands that went through proto encoding, as raft log entries do (so
// every string is freshly decoded), and divide the HeapAlloc delta after
// runtime.GC by the number of tasks.
package raftfsm

import (
	"bytes"
	"runtime"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/wire"
)

// Budgets in heap bytes per task at the tenant level. Measured
// (go1.26.8, amd64): 368 B per queued task, 550 B per completed task with
// an empty result; before issue 15's compact records 747 B and 1 044 B
// (docs/benchmarks.md). Issue 15's targets are 500 B per queued and 600 B
// per completed task of the node's resident memory; the margin here
// (about 10 %) covers map and slice growth that varies with N.
const (
	memTenantQueuedBudget    = 430
	memTenantCompletedBudget = 620
	memTenantTasks           = 16000
)

func memHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// decoded returns cmd after a proto round trip, as Apply sees it.
func decoded(t testing.TB, cmd *pb.Command) *pb.Command {
	t.Helper()
	b, err := proto.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	var out pb.Command
	if err := proto.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func memTenant(t testing.TB) *testBundle {
	t.Helper()
	b := &testBundle{f: New(Options{}), now: 100}
	b.must(t, &pb.Command{Op: &pb.Command_InitCluster{InitCluster: &pb.InitCluster{EpochId: bytes.Repeat([]byte{1}, 16)}}})
	b.must(t, &pb.Command{Op: &pb.Command_CreateTenant{CreateTenant: &pb.CreateTenant{Name: "acme",
		Limits: wire.LimitsToProto(distributed.MaximumLimits()), ResultLimits: wire.ResultLimitsToProto(distributed.MaximumResultLimits())}}})
	for _, k := range []struct{ id, role string }{{"kprod", RoleProducer}, {"kw1", RoleWorker}} {
		b.must(t, &pb.Command{Op: &pb.Command_CreateKey{CreateKey: &pb.CreateKey{KeyId: k.id, SecretHash: make([]byte, 32), KeyTenant: "acme", Role: k.role}}})
	}
	b.must(t, &pb.Command{Op: &pb.Command_SetClusterVersion{SetClusterVersion: &pb.SetClusterVersion{Version: SupportedVersion}}})
	b.must(t, &pb.Command{Principal: "kw1", Op: &pb.Command_RegisterWorker{RegisterWorker: &pb.RegisterWorker{Spec: &pb.WorkerSpec{WorkerId: "w1", Capacity: distributed.MaxWorkerCapacity}}}})
	return b
}

// memEnqueue enqueues n tasks of scan in batches of 500 (18-byte targets,
// task IDs as a producer derives them).
func memEnqueue(t testing.TB, b *testBundle, scan string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i += 500 {
		e := &pb.EnqueueTasks{}
		for j := i; j < min(i+500, from+n); j++ {
			e.Tasks = append(e.Tasks, &pb.TaskSpec{TaskId: scan + "-" + strconv.Itoa(1000000+j),
				ScanId: scan, TargetRef: []byte("10.0.0." + strconv.Itoa(100+j%100) + ":4430" + strconv.Itoa(j%10)), Priority: 1})
		}
		b.must(t, decoded(t, &pb.Command{Principal: "kprod", Op: &pb.Command_Enqueue{Enqueue: e}}))
	}
}

func TestMemory_TenantPerTask(t *testing.T) {
	b := memTenant(t)
	before := memHeap()
	memEnqueue(t, b, "scan-q", 0, memTenantTasks)
	queued := float64(int64(memHeap())-int64(before)) / memTenantTasks

	c := memTenant(t)
	before = memHeap()
	for done := 0; done < memTenantTasks; done += 4096 {
		memEnqueue(t, c, "scan-c"+strconv.Itoa(done/4096%4), done, 4096)
		for range 4096 / 128 {
			acq := valueOf[[]Acquired](t, c.must(t, decoded(t, acquireCmd("kw1", "w1", 128))))
			for _, a := range acq {
				c.must(t, decoded(t, completeCmd("kw1", a.Lease, nil)))
			}
		}
	}
	completed := float64(int64(memHeap())-int64(before)) / memTenantTasks
	runtime.KeepAlive(b)
	runtime.KeepAlive(c)
	t.Logf("tenant heap per queued task %.0f B (budget %d), per completed task %.0f B (budget %d)",
		queued, memTenantQueuedBudget, completed, memTenantCompletedBudget)
	if queued > memTenantQueuedBudget {
		t.Errorf("tenant heap per queued task = %.0f B, want ≤ %d", queued, memTenantQueuedBudget)
	}
	if completed > memTenantCompletedBudget {
		t.Errorf("tenant heap per completed task = %.0f B, want ≤ %d", completed, memTenantCompletedBudget)
	}
}
