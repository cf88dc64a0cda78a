// The per-call path (issue 15): one task per Enqueue, one Acquire and one
// Complete per task, through the server's whole HTTP handler (pre-auth
// gate, Connect, authentication, audit, metrics) called in-process with
// an in-memory backend (internal/membackend: the FSM, no raft, no disk),
// so what is measured is the server's own cost per call. Benchmarks report it
// with allocations; TestServer_PerCallAllocBudget fails when a call
// allocates past its budget (allocation counts are deterministic, so the
// test is not timing-based).
package server

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
	"github.com/termivar/distributed/internal/apikey"
	"github.com/termivar/distributed/internal/audit"
	"github.com/termivar/distributed/internal/membackend"
	"github.com/termivar/distributed/raftfsm"
)

// newMemBackend returns internal/membackend's Backend (client/clienttest's
// too): the FSM, no raft, no disk; the system tenant at the maximum
// limits.
func newMemBackend(tb testing.TB) *membackend.Backend {
	tb.Helper()
	b, err := membackend.New("mem", distributed.MaximumLimits(), distributed.MaximumResultLimits())
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

var _ Backend = (*membackend.Backend)(nil)

// perCall is the server's handler over a membackend.Backend with a producer and a
// registered worker key, and the audit log discarding its lines (the
// formatting is still paid).
type perCall struct {
	h              http.Handler
	producer, work string
}

func newPerCall(tb testing.TB) *perCall {
	tb.Helper()
	be := newMemBackend(tb)
	keys := roleKeys(tb, be)
	s := New(Config{Backend: be, Audit: audit.New(nil)})
	pc := &perCall{h: s.Handler(), producer: keys[apikey.RoleProducer], work: keys[apikey.RoleWorker]}
	var reg pb.RegisterWorkerResponse
	pc.do(tb, termivarv1connect.WorkerRegisterWorkerProcedure, pc.work, &pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: distributed.MaxWorkerCapacity}, &reg)
	return pc
}

// roleKeys creates a producer and a worker key of the system tenant on
// be.
func roleKeys(tb testing.TB, be *membackend.Backend) map[apikey.Role]string {
	tb.Helper()
	keys := map[apikey.Role]string{}
	for _, role := range []apikey.Role{apikey.RoleProducer, apikey.RoleWorker} {
		g, err := CreateKey(context.Background(), be, raftfsm.SystemTenant, role)
		if err != nil {
			tb.Fatal(err)
		}
		keys[role] = g.Key
	}
	return keys
}

// do calls procedure with the key through the whole handler and decodes
// the answer into out; anything but 200 fails tb.
func (pc *perCall) do(tb testing.TB, procedure, key string, in, out proto.Message) {
	body, err := proto.Marshal(in)
	if err != nil {
		tb.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, procedure, bytes.NewReader(body))
	req.RemoteAddr = "127.0.0.1:40000"
	req.Header.Set("Content-Type", "application/proto")
	req.Header.Set("Authorization", "Bearer "+key)
	rec := httptest.NewRecorder()
	pc.h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		tb.Fatalf("%s = %d: %s", procedure, rec.Code, rec.Body.String())
	}
	if err := proto.Unmarshal(rec.Body.Bytes(), out); err != nil {
		tb.Fatal(err)
	}
}

// enqueueOne enqueues the single task i.
func (pc *perCall) enqueueOne(tb testing.TB, i int) {
	var out pb.EnqueueResponse
	id := "t" + strconv.Itoa(i)
	pc.do(tb, termivarv1connect.ProducerEnqueueProcedure, pc.producer, &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: id, ScanId: "s", TargetRef: "target-" + id}}}, &out)
}

// acquireComplete leases one task (started) and completes it with a
// 32-byte result.
func (pc *perCall) acquireComplete(tb testing.TB, result []byte) {
	var acq pb.AcquireResponse
	pc.do(tb, termivarv1connect.WorkerAcquireProcedure, pc.work, &pb.AcquireRequest{WorkerId: "w1", MaxTasks: 1, Start: true}, &acq)
	if len(acq.GetTasks()) != 1 {
		tb.Fatalf("Acquire leased %d tasks, want 1", len(acq.GetTasks()))
	}
	var done pb.CompleteResponse
	pc.do(tb, termivarv1connect.WorkerCompleteProcedure, pc.work, &pb.CompleteRequest{LeaseToken: acq.GetTasks()[0].GetLeaseToken(), Result: result}, &done)
}

// perCallBatch is how many tasks a benchmark or test round enqueues
// before it leases and completes them, so the records stay well below
// the tenant's limits whatever b.N is.
const perCallBatch = 1000

func BenchmarkServer_EnqueueOne(b *testing.B) {
	pc := newPerCall(b)
	result := make([]byte, 32)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		pc.enqueueOne(b, i)
		i++
		if i%perCallBatch == 0 {
			b.StopTimer()
			for range perCallBatch {
				pc.acquireComplete(b, result)
			}
			pc.purge(b, i-perCallBatch, i)
			b.StartTimer()
		}
	}
}

func BenchmarkServer_AcquireComplete(b *testing.B) {
	pc := newPerCall(b)
	result := make([]byte, 32)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%perCallBatch == 0 {
			b.StopTimer()
			if i > 0 {
				pc.purge(b, i-perCallBatch, i)
			}
			for j := range perCallBatch {
				pc.enqueueOne(b, i+j)
			}
			b.StartTimer()
		}
		pc.acquireComplete(b, result)
		i++
	}
}

// purge deletes the completed tasks lo..hi-1, so a long benchmark never
// reaches the record limits.
func (pc *perCall) purge(tb testing.TB, lo, hi int) {
	ids := make([]string, 0, hi-lo)
	for i := lo; i < hi; i++ {
		ids = append(ids, "t"+strconv.Itoa(i))
	}
	var out pb.PurgeTasksResponse
	pc.do(tb, termivarv1connect.ProducerPurgeTasksProcedure, pc.producer, &pb.PurgeTasksRequest{TaskIds: ids}, &out)
	if int(out.GetPurged()) != hi-lo {
		tb.Fatalf("purged %d of %d tasks", out.GetPurged(), hi-lo)
	}
}

// Allocation budgets of one call through the whole handler, each with
// the measured value (go1.26.8, connect v1, identical on every run:
// TestServer_PerCallAllocBudget logs it). The counts include the
// harness's own request, recorder and decoding of the answer, and
// net/http's, Connect's and protobuf's allocations, which are most of
// them (docs/benchmarks.md, issue 15). NB: a budget is the measured count
// plus about 12 %, so that a dependency upgrade does not trip it while a
// new allocation per call on our side does (issue 15 removed 3 and 6:
// audit lines formatted without slog, no error-type probe on accepted
// calls).
const (
	enqueueOneAllocBudget      = 120 // measured: 105 (110 before issue 15)
	acquireCompleteAllocBudget = 217 // measured: 194 for the two calls (204 before issue 15, 197 before an Acquire without wait stopped waiting)
	// One EnqueueMany of enqueueManyRequests single-task requests, and one
	// Acquire carrying the previous lease's completion (issue 15: fewer
	// calls per task).
	enqueueManyAllocBudget     = 916 // measured: 818 (51 per request)
	acquireCarryingAllocBudget = 153 // measured: 137 (one call per task)
	// The same Acquire (no wait) finding the queue empty: the call after
	// each batch at low rates (docs/benchmarks.md, "2 000 tasks/s, session
	// 7"); it looks without waiting on a timer of 0.
	acquireCarryingEmptyAllocBudget = 132 // measured: 118 (122 with the wait on a timer of 0)
)

func TestServer_PerCallAllocBudget(t *testing.T) {
	if raceEnabled {
		// NB: under the race detector sync.Pool drops items at random and
		// the counts are neither deterministic nor ours (517 instead of 198
		// measured once); .ci/run runs this test again without -race.
		t.Skip("allocation counts are only meaningful without -race; .ci/run runs this test without it")
	}
	pc := newPerCall(t)
	result := make([]byte, 32)
	i := 0
	enq := testing.AllocsPerRun(200, func() { pc.enqueueOne(t, i); i++ })
	ac := testing.AllocsPerRun(200, func() { pc.acquireComplete(t, result) })
	em := testing.AllocsPerRun(20, func() { pc.enqueueMany(t, i, enqueueManyRequests); i += enqueueManyRequests })
	var held []byte
	carry := testing.AllocsPerRun(200, func() { held = pc.acquireCarrying(t, held, result) })
	empty := newPerCall(t).carryingEmptyAllocs(t, 0, 200, result) // NB: a queue of its own, to empty

	t.Logf("allocations per call: EnqueueOne %.0f, Acquire+Complete %.0f, EnqueueMany(%d) %.0f, Acquire carrying a completion %.0f, the same finding the queue empty %.0f",
		enq, ac, enqueueManyRequests, em, carry, empty)
	for _, c := range []struct {
		name   string
		got    float64
		budget int
	}{{"EnqueueOne", enq, enqueueOneAllocBudget}, {"Acquire+Complete", ac, acquireCompleteAllocBudget},
		{"EnqueueMany", em, enqueueManyAllocBudget}, {"Acquire carrying", carry, acquireCarryingAllocBudget},
		{"Acquire carrying, queue empty", empty, acquireCarryingEmptyAllocBudget}} {
		if c.got > float64(c.budget) {
			t.Errorf("%s allocates %.0f times per call, budget %d", c.name, c.got, c.budget)
		}
	}
}

// enqueueMany enqueues the single tasks lo..lo+n-1 as n requests of one
// EnqueueMany call.
func (pc *perCall) enqueueMany(tb testing.TB, lo, n int) {
	in := &pb.EnqueueManyRequest{Requests: make([]*pb.EnqueueRequest, n)}
	for j := range n {
		id := "t" + strconv.Itoa(lo+j)
		in.Requests[j] = &pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: id, ScanId: "s", TargetRef: "target-" + id}}}
	}
	var out pb.EnqueueManyResponse
	pc.do(tb, termivarv1connect.ProducerEnqueueManyProcedure, pc.producer, in, &out)
	for _, r := range out.GetResults() {
		if r.GetError() != nil {
			tb.Fatalf("EnqueueMany request failed: %v", r.GetError())
		}
	}
}

// acquireCarrying leases one task (started), completing held (the lease
// token of the task leased before, if any) in the same call, and returns
// the new lease token.
func (pc *perCall) acquireCarrying(tb testing.TB, held []byte, result []byte) []byte {
	in := &pb.AcquireRequest{WorkerId: "w1", MaxTasks: 1, Start: true}
	if held != nil {
		in.Complete = []*pb.CompleteRequest{{LeaseToken: held, Result: result}}
	}
	var acq pb.AcquireResponse
	pc.do(tb, termivarv1connect.WorkerAcquireProcedure, pc.work, in, &acq)
	if len(acq.GetTasks()) != 1 || len(acq.GetCompleted()) != len(in.Complete) {
		tb.Fatalf("Acquire leased %d tasks, completed %d, want 1 and %d", len(acq.GetTasks()), len(acq.GetCompleted()), len(in.Complete))
	}
	return acq.GetTasks()[0].GetLeaseToken()
}

// enqueueManyRequests is the requests of one EnqueueMany in
// BenchmarkServer_EnqueueMany: the 16 concurrent producers of the bench.
const enqueueManyRequests = 16

// BenchmarkServer_EnqueueMany reports the cost per task of single-task
// requests coalesced 16 to a call; BenchmarkServer_EnqueueOne is the same
// task in a call of its own. Each 1 008 tasks are deleted (DeleteScan
// with force, untimed) to stay below the record limits.
func BenchmarkServer_EnqueueMany(b *testing.B) {
	pc := newPerCall(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		pc.enqueueMany(b, i, enqueueManyRequests)
		i += enqueueManyRequests
		if i%(63*enqueueManyRequests) == 0 {
			b.StopTimer()
			var out pb.DeleteScanResponse
			pc.do(b, termivarv1connect.ProducerDeleteScanProcedure, pc.producer, &pb.DeleteScanRequest{ScanId: "s", Force: true}, &out)
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i), "ns/task")
}

func BenchmarkServer_AcquireCarryingComplete(b *testing.B) {
	pc := newPerCall(b)
	result := make([]byte, 32)
	b.ReportAllocs()
	i := 0
	var held []byte
	for b.Loop() {
		if i%perCallBatch == 0 {
			b.StopTimer()
			for j := range perCallBatch {
				pc.enqueueOne(b, i+j)
			}
			b.StartTimer()
		}
		held = pc.acquireCarrying(b, held, result)
		i++
	}
}

// acquireCarryingEmpty completes held with an Acquire that does not wait
// and finds the queue empty (the bench's workers at low rates: the call
// after each batch), and returns nothing leased.
func (pc *perCall) acquireCarryingEmpty(tb testing.TB, held []byte, result []byte) {
	in := &pb.AcquireRequest{WorkerId: "w1", MaxTasks: 1, Start: true, Complete: []*pb.CompleteRequest{{LeaseToken: held, Result: result}}}
	var acq pb.AcquireResponse
	pc.do(tb, termivarv1connect.WorkerAcquireProcedure, pc.work, in, &acq)
	if len(acq.GetTasks()) != 0 || len(acq.GetCompleted()) != 1 {
		tb.Fatalf("Acquire leased %d tasks, completed %d, want 0 and 1", len(acq.GetTasks()), len(acq.GetCompleted()))
	}
}

// carryingEmptyAllocs is the allocations of one acquireCarryingEmpty
// on pc with an empty queue: runs+1 tasks (from task lo) are enqueued and
// leased first, so that each measured call completes one and finds the
// queue empty.
func (pc *perCall) carryingEmptyAllocs(tb testing.TB, lo, runs int, result []byte) float64 {
	held := make([][]byte, 0, runs+1) // NB: AllocsPerRun calls once more to warm up
	for j := range runs + 1 {
		pc.enqueueOne(tb, lo+j)
		held = append(held, pc.acquireCarrying(tb, nil, result))
	}
	k := 0
	return testing.AllocsPerRun(runs, func() { pc.acquireCarryingEmpty(tb, held[k], result); k++ })
}
