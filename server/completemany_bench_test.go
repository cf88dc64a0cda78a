package server

// Large results through the server (issue 15): one CompleteMany of n
// 64 KiB results through the whole handler over the in-memory backend
// (the FSM, no raft, no disk), timed and counted from the request's bytes
// to the answer. B/op over the op's result bytes is what the server
// allocates per result byte: Connect's read buffer (reused from its pool
// for a body up to 8 MiB, grown by doubling and dropped above it), the
// request's decode and the FSM's copy (membackend applies commands whose
// bytes the caller may reuse, so the FSM copies each result; a node
// applies log entries and keeps them). items=15 is the client's call
// bound (client.DefaultCompleteManyCallBytes), items=128 the bench's
// --acquire default sent as one call.

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
)

func BenchmarkServer_CompleteMany64K(b *testing.B) {
	const resultBytes = 64 << 10
	result := make([]byte, resultBytes)
	if _, err := rand.Read(result); err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{15, 128} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			pc := newPerCall(b)
			b.ReportAllocs()
			b.SetBytes(int64(n * resultBytes))
			next := 0
			for b.Loop() {
				b.StopTimer()
				body := pc.leaseForCompleteMany(b, next, n, result)
				b.StartTimer()
				pc.serveCompleteMany(b, body, n)
				b.StopTimer()
				pc.purge(b, next, next+n)
				next += n
				b.StartTimer()
			}
		})
	}
}

// leaseForCompleteMany enqueues tasks t<first>..t<first+n-1>, leases them
// started and returns the CompleteMany body completing each with result.
func (pc *perCall) leaseForCompleteMany(tb testing.TB, first, n int, result []byte) []byte {
	enq := &pb.EnqueueRequest{}
	for i := first; i < first+n; i++ {
		id := "t" + strconv.Itoa(i)
		enq.Tasks = append(enq.Tasks, &pb.NewTask{TaskId: id, ScanId: "s", TargetRef: "target-" + id})
	}
	pc.do(tb, termivarv1connect.ProducerEnqueueProcedure, pc.producer, enq, &pb.EnqueueResponse{})
	var acq pb.AcquireResponse
	pc.do(tb, termivarv1connect.WorkerAcquireProcedure, pc.work, &pb.AcquireRequest{WorkerId: "w1", MaxTasks: uint32(n), Start: true}, &acq)
	if len(acq.GetTasks()) != n {
		tb.Fatalf("Acquire leased %d tasks, want %d", len(acq.GetTasks()), n)
	}
	req := &pb.CompleteManyRequest{}
	for _, t := range acq.GetTasks() {
		req.Items = append(req.Items, &pb.CompleteRequest{LeaseToken: t.GetLeaseToken(), Result: result})
	}
	body, err := proto.Marshal(req)
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// serveCompleteMany sends body to CompleteMany and fails tb unless all n
// items were completed.
func (pc *perCall) serveCompleteMany(tb testing.TB, body []byte, n int) {
	req := httptest.NewRequest(http.MethodPost, termivarv1connect.WorkerCompleteManyProcedure, bytes.NewReader(body))
	req.RemoteAddr = "127.0.0.1:40000"
	req.Header.Set("Content-Type", "application/proto")
	req.Header.Set("Authorization", "Bearer "+pc.work)
	rec := httptest.NewRecorder()
	pc.h.ServeHTTP(rec, req)
	var out pb.CompleteManyResponse
	if rec.Code != http.StatusOK || proto.Unmarshal(rec.Body.Bytes(), &out) != nil || len(out.GetResults()) != n {
		tb.Fatalf("CompleteMany = %d with %d results, want 200 with %d", rec.Code, len(out.GetResults()), n)
	}
	for i, r := range out.GetResults() {
		if r.GetError() != nil {
			tb.Fatalf("CompleteMany item %d failed: %s", i, r.GetError().GetKind())
		}
	}
}
