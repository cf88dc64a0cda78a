// Tests of the scan reads over HTTP against a real node. Goal: ListScans
// lists every scan of the caller's tenant a page at a time with its state,
// counts, times and result bytes; ScanProgress carries the facts a stall
// is explained with; FollowResults returns each result exactly once, in
// enqueue order (never passing a task that may still complete) or in
// completion order, resumes from any cursor, is woken by a completion
// while it long-polls, and says done only once the scan is terminal and
// everything was returned; bad input is a typed error that changes
// nothing. Method: httptest server, Connect clients, tasks driven through
// the worker API.
package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// scanFixture is a node with a producer and a registered worker.
type scanFixture struct {
	b    *testBundle
	p, w clients
}

func newScanFixture(t *testing.T) *scanFixture {
	t.Helper()
	b := setup(t, nil)
	f := &scanFixture{b: b, w: b.clients(b.createKey(t, "", "worker")), p: b.clients(b.createKey(t, "", "producer"))}
	if _, err := f.w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 16})); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *scanFixture) enqueue(t *testing.T, scan string, ids ...string) {
	t.Helper()
	if _, err := f.p.producer.Enqueue(ctx, req(enqueueReq(scan, ids...))); err != nil {
		t.Fatal(err)
	}
}

// acquire leases n tasks (started) and returns their lease tokens by task ID.
func (f *scanFixture) acquire(t *testing.T, n uint32) map[string][]byte {
	t.Helper()
	acq, err := f.w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", MaxTasks: n, Start: true, LeaseTtlSecs: 300}))
	if err != nil || len(acq.Msg.GetTasks()) != int(n) {
		t.Fatalf("acquire %d = %v, %v", n, acq, err)
	}
	out := map[string][]byte{}
	for _, lt := range acq.Msg.GetTasks() {
		out[lt.GetTaskId()] = lt.GetLeaseToken()
	}
	return out
}

func (f *scanFixture) complete(t *testing.T, lease []byte, result string) {
	t.Helper()
	if _, err := f.w.worker.Complete(ctx, req(&pb.CompleteRequest{LeaseToken: lease, Result: []byte(result)})); err != nil {
		t.Fatal(err)
	}
}

func (f *scanFixture) cancel(t *testing.T, id string) {
	t.Helper()
	if _, err := f.p.producer.Cancel(ctx, req(&pb.CancelRequest{TaskId: id})); err != nil {
		t.Fatal(err)
	}
}

func scanLine(s *pb.ScanInfo) string {
	return fmt.Sprintf("%s %s admitted=%d q=%d l=%d r=%d c=%d f=%d x=%d e=%d results=%d bytes=%d finished=%v",
		s.GetScanId(), s.GetState(), s.GetAdmitted(), s.GetQueued(), s.GetLeased(), s.GetRunning(), s.GetCompleted(),
		s.GetFailed(), s.GetCancelled(), s.GetExpired(), s.GetResults(), s.GetResultBytes(), s.GetFinishedAt() != 0)
}

func TestServer_ListScans(t *testing.T) {
	t.Parallel()
	f := newScanFixture(t)
	f.enqueue(t, "a", "a1", "a2", "a3")
	f.enqueue(t, "b", "b1", "b2")
	f.enqueue(t, "c", "c1")
	leases := f.acquire(t, 6)
	f.complete(t, leases["a1"], "one")
	f.complete(t, leases["b1"], "bee")
	f.cancel(t, "b2")
	f.complete(t, leases["c1"], "sea!")

	page, err := f.p.producer.ListScans(ctx, req(&pb.ListScansRequest{PageSize: 2}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range page.Msg.GetScans() {
		got = append(got, scanLine(s))
		if s.GetCreatedAt() == 0 || (s.GetFinishedAt() != 0 && s.GetFinishedAt() < s.GetCreatedAt()) {
			t.Errorf("scan %s created %d finished %d", s.GetScanId(), s.GetCreatedAt(), s.GetFinishedAt())
		}
	}
	if page.Msg.GetNextPageToken() != "b" {
		t.Fatalf("next_page_token = %q, want b", page.Msg.GetNextPageToken())
	}
	page2, err := f.p.producer.ListScans(ctx, req(&pb.ListScansRequest{PageSize: 2, PageToken: "b"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range page2.Msg.GetScans() {
		got = append(got, scanLine(s))
	}
	want := []string{
		"a running admitted=3 q=0 l=0 r=2 c=1 f=0 x=0 e=0 results=1 bytes=3 finished=false",
		"b cancelled admitted=2 q=0 l=0 r=0 c=1 f=0 x=1 e=0 results=1 bytes=3 finished=true",
		"c done admitted=1 q=0 l=0 r=0 c=1 f=0 x=0 e=0 results=1 bytes=4 finished=true",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || page2.Msg.GetNextPageToken() != "" {
		t.Fatalf("ListScans =\n%s\nnext %q, want\n%s", strings.Join(got, "\n"), page2.Msg.GetNextPageToken(), strings.Join(want, "\n"))
	}

	// Another tenant sees none of them.
	f.b.createTenant(t, "other", nil, nil)
	other := f.b.clients(f.b.createKey(t, "other", "producer"))
	if res, err := other.producer.ListScans(ctx, req(&pb.ListScansRequest{})); err != nil || len(res.Msg.GetScans()) != 0 {
		t.Fatalf("other tenant's ListScans = %v, %v", res, err)
	}
	// A worker key may not list scans; bad pages are invalid.
	_, err = f.w.producer.ListScans(ctx, req(&pb.ListScansRequest{}))
	mustCode(t, err, connect.CodePermissionDenied, "")
	_, err = f.p.producer.ListScans(ctx, req(&pb.ListScansRequest{PageSize: 1001}))
	mustCode(t, err, connect.CodeInvalidArgument, KindInvalidArgument)
	_, err = f.p.producer.ListScans(ctx, req(&pb.ListScansRequest{PageToken: "not a scan id"}))
	mustCode(t, err, connect.CodeInvalidArgument, KindInvalidArgument)
}

// TestServer_ScanProgressStallFacts: the lease expiry, result store and
// worker facts are those of the node's state.
func TestServer_ScanProgressStallFacts(t *testing.T) {
	t.Parallel()
	f := newScanFixture(t)
	f.enqueue(t, "s", "s1", "s2", "s3")
	leases := f.acquire(t, 2)
	f.complete(t, leases["s1"], "12345")
	p, err := f.p.producer.ScanProgress(ctx, req(&pb.ScanProgressRequest{ScanId: "s"}))
	if err != nil {
		t.Fatal(err)
	}
	m := p.Msg
	left := int64(m.GetNextLeaseExpiry()) - int64(m.GetNowSecs())
	if m.GetNextLeaseExpiry() == 0 || left < 290 || left > 300 {
		t.Errorf("next_lease_expiry %d - now_secs %d = %d, want the 300 s lease's remaining time", m.GetNextLeaseExpiry(), m.GetNowSecs(), left)
	}
	if m.GetLiveWorkers() != 1 || m.GetFreeSlots() != 15 {
		t.Errorf("live_workers %d free_slots %d, want 1 and 15 (capacity 16, one lease held)", m.GetLiveWorkers(), m.GetFreeSlots())
	}
	if m.GetTenantResults() != 1 || m.GetTenantResultBytes() != 5 || m.GetMaxResults() == 0 || m.GetMaxResultTotalBytes() == 0 {
		t.Errorf("result store %d/%d results, %d/%d bytes", m.GetTenantResults(), m.GetMaxResults(), m.GetTenantResultBytes(), m.GetMaxResultTotalBytes())
	}
	if m.GetFinishedAt() != 0 {
		t.Errorf("finished_at = %d for a running scan", m.GetFinishedAt())
	}
}

// follow calls FollowResults once.
func (f *scanFixture) follow(t *testing.T, r *pb.FollowResultsRequest) *pb.FollowResultsResponse {
	t.Helper()
	res, err := f.p.producer.FollowResults(ctx, req(r))
	if err != nil {
		t.Fatalf("FollowResults(%v): %v", r, err)
	}
	return res.Msg
}

// followLine renders results as id=result@cursor, then the next cursor and
// done.
func followLine(m *pb.FollowResultsResponse) string {
	var parts []string
	for _, r := range m.GetResults() {
		parts = append(parts, r.GetTaskId()+"="+string(r.GetResult())+"@"+r.GetCursor())
	}
	return fmt.Sprintf("[%s] next=%s done=%v", strings.Join(parts, " "), m.GetNextCursor(), m.GetDone())
}

func TestServer_FollowResults(t *testing.T) {
	t.Parallel()
	f := newScanFixture(t)
	f.enqueue(t, "s", "t1", "t2", "t3", "t4")
	leases := f.acquire(t, 4)
	check := func(r *pb.FollowResultsRequest, want string) {
		t.Helper()
		if got := followLine(f.follow(t, r)); got != want {
			t.Fatalf("FollowResults(cursor %q, completion %v) = %s, want %s", r.GetCursor(), r.GetCompletionOrder(), got, want)
		}
	}
	check(&pb.FollowResultsRequest{ScanId: "s"}, "[] next=e:0 done=false")
	f.complete(t, leases["t2"], "two")
	// Enqueue order waits for t1; completion order has t2.
	check(&pb.FollowResultsRequest{ScanId: "s"}, "[] next=e:0 done=false")
	check(&pb.FollowResultsRequest{ScanId: "s", CompletionOrder: true}, "[t2=two@c:1] next=c:1 done=false")

	// A long-poll is woken by the completion of t1 (without the wake-up it
	// would answer empty at its 30 s deadline).
	type answer struct {
		m   *pb.FollowResultsResponse
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := f.p.producer.FollowResults(ctx, req(&pb.FollowResultsRequest{ScanId: "s", WaitSecs: 30}))
		if err != nil {
			ch <- answer{err: err}
			return
		}
		ch <- answer{m: res.Msg}
	}()
	waitUntil(t, "the follower to wait", func() bool { return f.b.api.followsWaiting.Load() == 1 })
	start := time.Now()
	f.complete(t, leases["t1"], "one")
	a := <-ch
	if a.err != nil {
		t.Fatal(a.err)
	}
	if got := followLine(a.m); got != "[t1=one@e:1 t2=two@e:2] next=e:2 done=false" {
		t.Fatalf("woken follow = %s", got)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("woken follow answered after %v", d)
	}
	// A cancelled task is passed without a result; the scan is not done
	// while t4 runs.
	f.cancel(t, "t3")
	check(&pb.FollowResultsRequest{ScanId: "s", Cursor: "e:2"}, "[] next=e:3 done=false")
	f.complete(t, leases["t4"], "four")
	check(&pb.FollowResultsRequest{ScanId: "s", Cursor: "e:3"}, "[t4=four@e:4] next=e:4 done=true")
	// Resume from any cursor: the results after it, each once.
	check(&pb.FollowResultsRequest{ScanId: "s", Cursor: "e:1"}, "[t2=two@e:2 t4=four@e:4] next=e:4 done=true")
	check(&pb.FollowResultsRequest{ScanId: "s", Cursor: "e:4"}, "[] next=e:4 done=true")
	check(&pb.FollowResultsRequest{ScanId: "s", CompletionOrder: true, Cursor: "c:1"}, "[t1=one@c:2 t4=four@c:3] next=c:3 done=true")
	// Paging: one result per answer, every result once, in order.
	var seen []string
	r := &pb.FollowResultsRequest{ScanId: "s", MaxResults: 1}
	for range 10 {
		m := f.follow(t, r)
		for _, x := range m.GetResults() {
			seen = append(seen, x.GetTaskId()+"/"+x.GetTargetRef())
		}
		if m.GetDone() {
			break
		}
		r.Cursor = m.GetNextCursor()
	}
	if got := strings.Join(seen, ","); got != "t1/secret-target-t1,t2/secret-target-t2,t4/secret-target-t4" {
		t.Fatalf("paged follow = %s", got)
	}
	// AggregateResults carries the targets too.
	stream, err := f.p.producer.AggregateResults(ctx, req(&pb.AggregateResultsRequest{ScanId: "s"}))
	if err != nil {
		t.Fatal(err)
	}
	seen = nil
	for stream.Receive() {
		seen = append(seen, stream.Msg().GetTaskId()+"/"+stream.Msg().GetTargetRef())
	}
	if got := strings.Join(seen, ","); stream.Err() != nil || got != "t1/secret-target-t1,t2/secret-target-t2,t4/secret-target-t4" {
		t.Fatalf("AggregateResults = %s, %v", got, stream.Err())
	}
}

// TestServer_FollowResultsPassesWithoutWaiting: a long-poll whose page
// only passed terminal tasks without a result answers at once with the
// new cursor (it does not wait for the next completion).
func TestServer_FollowResultsPassesWithoutWaiting(t *testing.T) {
	t.Parallel()
	f := newScanFixture(t)
	f.enqueue(t, "s", "c1", "c2", "c3", "r4")
	for _, id := range []string{"c1", "c2", "c3"} {
		f.cancel(t, id)
	}
	start := time.Now()
	m := f.follow(t, &pb.FollowResultsRequest{ScanId: "s", WaitSecs: 30, MaxResults: 2})
	if got := followLine(m); got != "[] next=e:2 done=false" {
		t.Fatalf("FollowResults = %s, want the two cancelled tasks passed", got)
	}
	m = f.follow(t, &pb.FollowResultsRequest{ScanId: "s", WaitSecs: 30, MaxResults: 2, Cursor: m.GetNextCursor()})
	if got := followLine(m); got != "[] next=e:3 done=false" {
		t.Fatalf("FollowResults = %s, want the third cancelled task passed", got)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("two pages without results took %v: the long-poll waited", d)
	}
}

func TestServer_FollowResultsBadInput(t *testing.T) {
	t.Parallel()
	f := newScanFixture(t)
	f.enqueue(t, "s", "t1")
	before := f.b.state(t)
	for _, c := range []struct {
		name string
		r    *pb.FollowResultsRequest
		code connect.Code
		kind string
	}{
		{"unknown scan", &pb.FollowResultsRequest{ScanId: "nope"}, connect.CodeNotFound, KindScanNotFound},
		{"invalid scan ID", &pb.FollowResultsRequest{ScanId: "no spaces"}, connect.CodeInvalidArgument, ""},
		{"cursor of the other order", &pb.FollowResultsRequest{ScanId: "s", Cursor: "c:0"}, connect.CodeInvalidArgument, KindInvalidArgument},
		{"garbled cursor", &pb.FollowResultsRequest{ScanId: "s", Cursor: "e:-1"}, connect.CodeInvalidArgument, KindInvalidArgument},
		{"cursor past the end", &pb.FollowResultsRequest{ScanId: "s", Cursor: "e:2"}, connect.CodeInvalidArgument, KindInvalidArgument},
		{"wait above 60", &pb.FollowResultsRequest{ScanId: "s", WaitSecs: 61}, connect.CodeInvalidArgument, KindInvalidArgument},
		{"max_results above 4096", &pb.FollowResultsRequest{ScanId: "s", MaxResults: 4097}, connect.CodeInvalidArgument, KindInvalidArgument},
	} {
		_, err := f.p.producer.FollowResults(ctx, req(c.r))
		code, kind := errKind(err)
		if err == nil || code != c.code || (c.kind != "" && kind != c.kind) {
			t.Errorf("%s: err = %v (code %v, kind %q), want code %v kind %q", c.name, err, code, kind, c.code, c.kind)
		}
	}
	f.b.assertUnchanged(t, before, "rejected FollowResults")
}

// TestServer_DeclaredScanRunsUntilAdmitted: a scan whose producer declared
// more targets than it admitted is running in ListScans (declared_total,
// pending), has pending in ScanProgress and no finished_at, and a
// FollowResults follower is not done, although every admitted task is
// done; once the rest is admitted and done, all three say finished.
func TestServer_DeclaredScanRunsUntilAdmitted(t *testing.T) {
	t.Parallel()
	f := newScanFixture(t)
	declare := func(ids ...string) {
		t.Helper()
		m := enqueueReq("d", ids...)
		m.SkipExisting, m.DeclaredTotal = true, 3
		if _, err := f.p.producer.Enqueue(ctx, req(m)); err != nil {
			t.Fatal(err)
		}
	}
	check := func(wantState string, wantPending uint64, wantDone bool) {
		t.Helper()
		list, err := f.p.producer.ListScans(ctx, req(&pb.ListScansRequest{}))
		if err != nil || len(list.Msg.GetScans()) != 1 {
			t.Fatalf("ListScans = %v, %v", list, err)
		}
		s := list.Msg.GetScans()[0]
		if s.GetState() != wantState || s.GetDeclaredTotal() != 3 || s.GetPending() != wantPending || (s.GetFinishedAt() != 0) != wantDone {
			t.Fatalf("ListScans: %s declared %d pending %d finished_at %d; want %s, 3, %d", s.GetState(), s.GetDeclaredTotal(), s.GetPending(), s.GetFinishedAt(), wantState, wantPending)
		}
		p, err := f.p.producer.ScanProgress(ctx, req(&pb.ScanProgressRequest{ScanId: "d"}))
		if err != nil || p.Msg.GetDeclaredTotal() != 3 || p.Msg.GetPending() != wantPending || (p.Msg.GetFinishedAt() != 0) != wantDone {
			t.Fatalf("ScanProgress = %v, %v; want declared 3, pending %d", p.Msg, err, wantPending)
		}
		if m := f.follow(t, &pb.FollowResultsRequest{ScanId: "d"}); m.GetDone() != wantDone {
			t.Fatalf("FollowResults = %s; want done=%v", followLine(m), wantDone)
		}
	}
	declare("d1", "d2")
	leases := f.acquire(t, 2)
	f.complete(t, leases["d1"], "one")
	f.complete(t, leases["d2"], "two")
	check("running", 1, false)
	declare("d1", "d2", "d3")
	check("running", 0, false)
	f.complete(t, f.acquire(t, 1)["d3"], "three")
	check("done", 0, true)
}
