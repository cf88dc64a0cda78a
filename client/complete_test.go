// Tests of CompleteMany's split into calls (issue 15: a large request is
// sent as several calls of at most Config.CompleteManyCallBytes). Goal:
// splitting changes nothing a caller sees — the answer has one result per
// item in the request's order, items fail alone exactly as in one call,
// every acknowledged result is stored once and equal to what was sent — and
// a call that fails leaves the earlier calls' items completed and the rest
// untouched, so sending the whole request again finishes it. Method: the
// same tasks, leases and results on two in-process nodes, one client that
// splits (the default bound) and one that never does; a RoundTripper
// counts the CompleteMany calls and can fail one.
package client_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/termivar/distributed/client"
	"github.com/termivar/distributed/client/clienttest"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/server"
)

// completeCalls counts CompleteMany calls and fails the failAt-th (0:
// none) without sending it.
type completeCalls struct {
	next     http.RoundTripper
	n        atomic.Int32
	acquires atomic.Int32 // Acquire calls
	failAt   int32
}

var errInjected = errors.New("injected transport failure")

func (c *completeCalls) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/Acquire") {
		c.acquires.Add(1)
	}
	if strings.HasSuffix(r.URL.Path, "/CompleteMany") && c.n.Add(1) == c.failAt {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, errInjected
	}
	return c.next.RoundTrip(r)
}

func (c *completeCalls) CloseIdleConnections() {
	if ci, ok := c.next.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// completeNode is one in-process node with running tasks t00..t(n-1) of
// scan "s" leased to worker w1 and a client whose calls are counted.
type completeNode struct {
	c      *client.Client
	calls  *completeCalls
	leases []*pb.LeasedTask
}

func newCompleteNode(t *testing.T, n, callBytes int, failAt int32) *completeNode {
	t.Helper()
	srv, err := clienttest.New(clienttest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	calls := &completeCalls{next: client.NewTransport(nil, 4), failAt: failAt}
	c, err := client.New(client.Config{ServerURL: srv.URL, Key: srv.Key, MaxAttempts: 1,
		HTTPClient: &http.Client{Transport: calls}, CompleteManyCallBytes: callBytes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		srv.Close()
	})
	ctx := context.Background()
	if _, err := c.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: uint32(n)}); err != nil {
		t.Fatal(err)
	}
	req := &pb.EnqueueRequest{}
	for i := range n {
		req.Tasks = append(req.Tasks, &pb.NewTask{TaskId: fmt.Sprintf("t%02d", i), ScanId: "s", TargetRef: "x"})
	}
	if _, err := c.Enqueue(ctx, req); err != nil {
		t.Fatal(err)
	}
	acq, err := c.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w1", MaxTasks: uint32(n), Start: true})
	if err != nil || len(acq.GetTasks()) != n {
		t.Fatalf("Acquire = %d tasks, %v; want %d", len(acq.GetTasks()), err, n)
	}
	return &completeNode{c: c, calls: calls, leases: acq.GetTasks()}
}

// request completes every lease with results[task ID], except the items
// at forged, whose lease tokens are not the node's.
func (cn *completeNode) request(results map[string][]byte, forged ...int) *pb.CompleteManyRequest {
	req := &pb.CompleteManyRequest{}
	for _, l := range cn.leases {
		req.Items = append(req.Items, &pb.CompleteRequest{LeaseToken: l.GetLeaseToken(), Result: results[l.GetTaskId()]})
	}
	for _, i := range forged {
		req.Items[i].LeaseToken = []byte("not-a-lease-token")
	}
	return req
}

// stored returns the scan's stored results by task ID.
func (cn *completeNode) stored(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := cn.c.Results(context.Background(), "s", func(id string, r []byte) error {
		if _, dup := out[id]; dup {
			return fmt.Errorf("result of %s streamed twice", id)
		}
		out[id] = r
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func randomResults(t *testing.T, n, size int) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for i := range n {
		b := make([]byte, size)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprintf("t%02d", i)] = b
	}
	return out
}

func TestClient_CompleteManySplitAnswersAsOneCall(t *testing.T) {
	t.Parallel()
	const n = 40
	results := randomResults(t, n, 64<<10) // 2.6 MB: three calls at the default bound
	forged := []int{5, 25}
	ctx := context.Background()
	split, whole := newCompleteNode(t, n, 0, 0), newCompleteNode(t, n, -1, 0)
	if got := split.c.CompleteManyCalls(split.request(results)); got != 3 {
		t.Fatalf("CompleteManyCalls = %d, want 3", got)
	}
	var answers [2]*pb.CompleteManyResponse
	for i, cn := range []*completeNode{split, whole} {
		res, err := cn.c.CompleteMany(ctx, cn.request(results, forged...))
		if err != nil {
			t.Fatal(err)
		}
		answers[i] = res
	}
	if a, b := split.calls.n.Load(), whole.calls.n.Load(); a != 3 || b != 1 {
		t.Fatalf("CompleteMany calls: split %d, whole %d; want 3 and 1", a, b)
	}
	if len(answers[0].GetResults()) != n || len(answers[1].GetResults()) != n {
		t.Fatalf("results: split %d, whole %d; want %d each", len(answers[0].GetResults()), len(answers[1].GetResults()), n)
	}
	for i := range n {
		a, b := answers[0].GetResults()[i], answers[1].GetResults()[i]
		if a.GetError().GetKind() != b.GetError().GetKind() || (a.GetResponse() == nil) != (b.GetResponse() == nil) {
			t.Fatalf("item %d: split answered %v, whole %v", i, a, b)
		}
		failed := i == forged[0] || i == forged[1]
		if failed != (a.GetError() != nil) || !failed && (a.GetResponse().GetAlreadyCompleted() || len(a.GetResponse().GetReceiptToken()) == 0) {
			t.Fatalf("item %d: answered %v; want failed = %v", i, a, failed)
		}
	}
	for _, cn := range []*completeNode{split, whole} {
		checkStored(t, cn.stored(t), results, forged)
	}
	// The whole request again: every item that was completed answers
	// already_completed and already_stored; nothing is stored twice.
	again, err := split.c.CompleteMany(ctx, split.request(results))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range again.GetResults() {
		failed := i == forged[0] || i == forged[1]
		if !failed && (!r.GetResponse().GetAlreadyCompleted() || !r.GetResponse().GetAlreadyStored()) {
			t.Fatalf("replayed item %d: %v; want already completed and stored", i, r)
		}
	}
}

// checkStored fails unless stored holds exactly the results of every task
// but those at the indexes skipped.
func checkStored(t *testing.T, stored, results map[string][]byte, skipped []int) {
	t.Helper()
	if len(stored) != len(results)-len(skipped) {
		t.Fatalf("%d results stored, want %d", len(stored), len(results)-len(skipped))
	}
	for _, i := range skipped {
		delete(stored, fmt.Sprintf("t%02d", i))
	}
	for id, r := range stored {
		if string(r) != string(results[id]) {
			t.Fatalf("the stored result of %s differs from the one sent", id)
		}
	}
}

// A call that fails fails CompleteMany: the calls before it were applied,
// the ones from it on were not sent; sending the whole request again
// completes the rest and answers the first calls' items already_completed.
func TestClient_CompleteManySplitPartialFailure(t *testing.T) {
	t.Parallel()
	const n = 40
	results := randomResults(t, n, 64<<10)
	ctx := context.Background()
	cn := newCompleteNode(t, n, 0, 2)
	res, err := cn.c.CompleteMany(ctx, cn.request(results))
	if res != nil || !errors.Is(err, errInjected) {
		t.Fatalf("CompleteMany with its second call failing = %v, %v; want no response and the failure", res, err)
	}
	done := 0
	for done < n && taskStatus(t, cn.c, cn.leases[done].GetTaskId()) == "completed" {
		done++
	}
	for _, l := range cn.leases[done:] {
		if st := taskStatus(t, cn.c, l.GetTaskId()); st != "running" {
			t.Fatalf("task %s after the failed call: %s; want running (its call was not sent)", l.GetTaskId(), st)
		}
	}
	if done == 0 || done == n {
		t.Fatalf("%d of %d tasks completed by the first call; want a proper part", done, n)
	}
	again, err := cn.c.CompleteMany(ctx, cn.request(results))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range again.GetResults() {
		if r.GetError() != nil || r.GetResponse().GetAlreadyCompleted() != (i < done) {
			t.Fatalf("item %d sent again: %v; want already_completed = %v", i, r, i < done)
		}
	}
	checkStored(t, cn.stored(t), results, nil)
}

func taskStatus(t *testing.T, c *client.Client, id string) string {
	t.Helper()
	r, err := c.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetTask().GetStatus()
}

func TestMaxCompleteManyItems_IsTheServers(t *testing.T) {
	t.Parallel()
	if client.MaxCompleteManyItems != server.MaxCompleteMany {
		t.Fatalf("client.MaxCompleteManyItems = %d, server.MaxCompleteMany = %d", client.MaxCompleteManyItems, server.MaxCompleteMany)
	}
}

// Completions carried by an Acquire above the call bound go ahead in
// CompleteMany calls, the last part with the Acquire: every item is
// answered in order and stored once.
func TestClient_AcquireSplitsLargeCompletions(t *testing.T) {
	t.Parallel()
	const n = 40
	results := randomResults(t, n, 64<<10)
	cn := newCompleteNode(t, n, 0, 0)
	before := cn.calls.acquires.Load()
	res, err := cn.c.Acquire(context.Background(), &pb.AcquireRequest{WorkerId: "w1", MaxTasks: 1, Complete: cn.request(results, 7).GetItems()})
	if err != nil {
		t.Fatal(err)
	}
	if many, acq := cn.calls.n.Load(), cn.calls.acquires.Load()-before; many != 2 || acq != 1 {
		t.Fatalf("calls: %d CompleteMany and %d Acquire; want 2 and 1", many, acq)
	}
	if len(res.GetCompleted()) != n || len(res.GetTasks()) != 0 {
		t.Fatalf("Acquire answered %d completions and %d tasks; want %d and 0", len(res.GetCompleted()), len(res.GetTasks()), n)
	}
	for i, r := range res.GetCompleted() {
		if (i == 7) != (r.GetError() != nil) || i != 7 && r.GetResponse().GetAlreadyCompleted() {
			t.Fatalf("completion %d: %v; want failed only for the forged token", i, r)
		}
	}
	checkStored(t, cn.stored(t), results, []int{7})
}
