// Tests of the scan reads under purges (docs/adr/0002-purge.md). Goal: a
// follower mid-scan whose already-read results are purged continues and
// gets every remaining result exactly once, in both orders (cursors are
// ordinals a purge does not renumber); a follower whose unread tail was
// purged is done; a deleted scan is scan_not_found; ListScans shows the
// record after a partial purge (counts, result bytes) and the retention
// deadline (finish + tenant retention, absent while running or with
// retention off); an AggregateResults stream during which a task is
// purged leaves it out instead of ending with missing_result. Method: a
// real node over HTTP, tasks driven through the worker API.
package server

import (
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// followAll follows from cursor until done or an empty answer, returning
// task=result items and the last cursor.
func (f *scanFixture) followAll(t *testing.T, r *pb.FollowResultsRequest) ([]string, string) {
	t.Helper()
	var got []string
	for range 20 {
		m := f.follow(t, r)
		for _, x := range m.GetResults() {
			got = append(got, x.GetTaskId()+"="+string(x.GetResult()))
		}
		r.Cursor = m.GetNextCursor()
		if m.GetDone() || len(m.GetResults()) == 0 {
			break
		}
	}
	return got, r.Cursor
}

func (f *scanFixture) purge(t *testing.T, ids ...string) {
	t.Helper()
	if _, err := f.p.producer.PurgeTasks(ctx, req(&pb.PurgeTasksRequest{TaskIds: ids})); err != nil {
		t.Fatalf("PurgeTasks(%v): %v", ids, err)
	}
}

func TestServer_FollowResultsAcrossPurges(t *testing.T) {
	t.Parallel()
	f := newScanFixture(t)
	f.enqueue(t, "s", "t1", "t2", "t3", "t4", "t5", "t6")
	leases := f.acquire(t, 6)
	for _, id := range []string{"t1", "t2", "t3"} {
		f.complete(t, leases[id], "r"+id[1:])
	}
	enq := &pb.FollowResultsRequest{ScanId: "s", MaxResults: 2}
	comp := &pb.FollowResultsRequest{ScanId: "s", MaxResults: 2, CompletionOrder: true}
	if got := followLine(f.follow(t, enq)); got != "[t1=r1@e:1 t2=r2@e:2] next=e:2 done=false" {
		t.Fatalf("first enqueue-order page = %s", got)
	}
	if got := followLine(f.follow(t, comp)); got != "[t1=r1@c:1 t2=r2@c:2] next=c:2 done=false" {
		t.Fatalf("first completion-order page = %s", got)
	}
	enq.Cursor, comp.Cursor = "e:2", "c:2"
	// The results already read are purged; the cursors still mean "after t2".
	f.purge(t, "t1", "t2")
	if si := f.scanInfo(t, "s"); scanLine(si) != "s running admitted=4 q=0 l=0 r=3 c=1 f=0 x=0 e=0 results=1 bytes=2 finished=false" {
		t.Fatalf("after the purge ListScans = %s", scanLine(si))
	}
	f.complete(t, leases["t5"], "r5")
	f.complete(t, leases["t4"], "r4")
	f.cancel(t, "t6")
	enq.MaxResults, comp.MaxResults = 1, 1
	got, last := f.followAll(t, enq)
	if strings.Join(got, " ") != "t3=r3 t4=r4 t5=r5" || last != "e:6" {
		t.Fatalf("enqueue order after the purge = %v (cursor %s), want t3 t4 t5 once each, cursor e:6", got, last)
	}
	got, last = f.followAll(t, comp)
	if strings.Join(got, " ") != "t3=r3 t5=r5 t4=r4" || last != "c:5" {
		t.Fatalf("completion order after the purge = %v (cursor %s), want t3 t5 t4 once each, cursor c:5", got, last)
	}
	// Re-reading from the start gives what is left, once.
	if got, _ := f.followAll(t, &pb.FollowResultsRequest{ScanId: "s"}); strings.Join(got, " ") != "t3=r3 t4=r4 t5=r5" {
		t.Fatalf("follow from the start = %v", got)
	}
	// The unread tail purged: a follower before it is done at once.
	f.purge(t, "t4", "t5", "t6")
	if got := followLine(f.follow(t, &pb.FollowResultsRequest{ScanId: "s", Cursor: "e:3"})); got != "[] next=e:6 done=true" {
		t.Fatalf("follow over a purged tail = %s", got)
	}
	if got := followLine(f.follow(t, &pb.FollowResultsRequest{ScanId: "s", Cursor: "c:3", CompletionOrder: true})); got != "[] next=c:5 done=true" {
		t.Fatalf("completion-order follow over a purged tail = %s", got)
	}
	// The whole scan deleted: its record is gone.
	if _, err := f.p.producer.DeleteScan(ctx, req(&pb.DeleteScanRequest{ScanId: "s"})); err != nil {
		t.Fatal(err)
	}
	_, err := f.p.producer.FollowResults(ctx, req(&pb.FollowResultsRequest{ScanId: "s", Cursor: "e:3"}))
	mustCode(t, err, connect.CodeNotFound, KindScanNotFound)
	if ls, err := f.p.producer.ListScans(ctx, req(&pb.ListScansRequest{})); err != nil || len(ls.Msg.GetScans()) != 0 {
		t.Fatalf("ListScans after delete = %v, %v", ls, err)
	}
}

// scanInfo returns the ListScans entry of scan.
func (f *scanFixture) scanInfo(t *testing.T, scan string) *pb.ScanInfo {
	t.Helper()
	ls, err := f.p.producer.ListScans(ctx, req(&pb.ListScansRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ls.Msg.GetScans() {
		if s.GetScanId() == scan {
			return s
		}
	}
	t.Fatalf("ListScans has no %s", scan)
	return nil
}

func TestServer_ListScansRetentionDeadline(t *testing.T) {
	t.Parallel()
	f := newScanFixture(t)
	admin := f.b.clients(f.b.adminKey)
	setRetention := func(secs uint64) {
		t.Helper()
		if _, err := admin.admin.UpdateTenant(ctx, req(&pb.UpdateTenantRequest{Name: "default", ResultRetentionSecs: secs})); err != nil {
			t.Fatal(err)
		}
	}
	f.enqueue(t, "done", "d1")
	f.enqueue(t, "run", "r1")
	f.complete(t, f.acquire(t, 1)["d1"], "x")
	if d := f.scanInfo(t, "done"); d.RetentionDeadline != nil {
		t.Fatalf("retention off: deadline %d", d.GetRetentionDeadline())
	}
	setRetention(3600)
	d, r := f.scanInfo(t, "done"), f.scanInfo(t, "run")
	if d.RetentionDeadline == nil || d.GetFinishedAt() == 0 || d.GetRetentionDeadline() != d.GetFinishedAt()+3600 {
		t.Fatalf("finished scan: finished_at %d, deadline %v, want finished_at+3600", d.GetFinishedAt(), d.RetentionDeadline)
	}
	if r.RetentionDeadline != nil {
		t.Fatalf("running scan has a deadline %d", r.GetRetentionDeadline())
	}
	setRetention(0)
	if d := f.scanInfo(t, "done"); d.RetentionDeadline != nil {
		t.Fatalf("retention turned off: deadline %d", d.GetRetentionDeadline())
	}
}

func TestServer_AggregateResultsDuringPurge(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.createTenant(t, "agg", nil, &pb.ResultLimits{MaxResults: 16, MaxResultBytes: 64, MaxTotalBytes: 1024, MaxAggregateItems: 1, MaxAggregateBytes: 64})
	f := &scanFixture{b: b, w: b.clients(b.createKey(t, "agg", "worker")), p: b.clients(b.createKey(t, "agg", "producer"))}
	if _, err := f.w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 4})); err != nil {
		t.Fatal(err)
	}
	f.enqueue(t, "s", "t1", "t2", "t3")
	leases := f.acquire(t, 3)
	for _, id := range []string{"t1", "t2", "t3"} {
		f.complete(t, leases[id], "r"+id[1:])
	}
	tv, _ := b.node.Reads().Tenant("agg")
	var got []string
	// One result per chunk; t2 is purged after the first was sent, when
	// the stream has already read the scan's IDs.
	err := streamResults(ctx, tv, []string{"t1", "t2", "t3"}, func(r distributed.AggregatedResult) error {
		got = append(got, r.TaskID)
		if r.TaskID == "t1" {
			f.purge(t, "t2")
		}
		return nil
	})
	if err != nil || strings.Join(got, " ") != "t1 t3" {
		t.Fatalf("stream during a purge = %v, %v; want t1 t3 and no error", got, err)
	}
	// Without the check the core would refuse the purged ID.
	if _, err := tv.AggregateResults([]string{"t2"}); !errors.Is(err, distributed.ErrMissingResult) {
		t.Fatalf("AggregateResults of a purged task = %v, want missing_result", err)
	}
}
