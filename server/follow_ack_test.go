// Tests of FollowResults with delete_after_read (docs/adr/0002-purge.md,
// "Delete after read"). Goal: a page's tasks are purged only once a later
// call's cursor acknowledges them, never by the call that returns them; a
// follower that stops before acknowledging and starts again from its last
// cursor gets exactly the unacknowledged results; acknowledged tasks
// that did not complete stay (only completed tasks go); the acknowledgement is audited and needs
// the producer role; the final acknowledgement of a done scan answers done
// even though it purged the scan's last task. Method: a real node over
// HTTP, tasks driven through the worker API.
package server

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// taskExists reports whether the producer still sees the task.
func (f *scanFixture) taskExists(t *testing.T, id string) bool {
	t.Helper()
	_, err := f.p.producer.GetTask(ctx, req(&pb.GetTaskRequest{TaskId: id}))
	if err != nil && connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("GetTask(%s): %v", id, err)
	}
	return err == nil
}

// present lists which of ids still exist.
func (f *scanFixture) present(t *testing.T, ids ...string) string {
	t.Helper()
	var out []string
	for _, id := range ids {
		if f.taskExists(t, id) {
			out = append(out, id)
		}
	}
	return strings.Join(out, " ")
}

func TestServer_FollowResultsDeleteAfterRead(t *testing.T) {
	t.Parallel()
	f := newScanFixture(t)
	all := []string{"t1", "t2", "t3", "t4", "t5"}
	f.enqueue(t, "s", all...)
	leases := f.acquire(t, 5)
	for _, id := range []string{"t1", "t2", "t3"} {
		f.complete(t, leases[id], "r"+id[1:])
	}
	r := &pb.FollowResultsRequest{ScanId: "s", MaxResults: 2, DeleteAfterRead: true}
	m := f.follow(t, r)
	if got := followLine(m); got != "[t1=r1@e:1 t2=r2@e:2] next=e:2 done=false" || m.GetPurged() != 0 {
		t.Fatalf("first page = %s purged %d", got, m.GetPurged())
	}
	// Returning a page purges nothing: the follower has not acknowledged it.
	if got := f.present(t, all...); got != "t1 t2 t3 t4 t5" {
		t.Fatalf("after the first page the tasks are %q, want all", got)
	}
	// The follower "crashes" and starts again from the start: it gets the
	// same page (nothing was lost); then it acknowledges with e:2.
	if got := followLine(f.follow(t, r)); got != "[t1=r1@e:1 t2=r2@e:2] next=e:2 done=false" {
		t.Fatalf("restarted first page = %s", got)
	}
	r.Cursor = "e:2"
	m = f.follow(t, r)
	if got := followLine(m); got != "[t3=r3@e:3] next=e:3 done=false" || m.GetPurged() != 2 {
		t.Fatalf("acknowledging page = %s purged %d, want t3 and 2 purged", got, m.GetPurged())
	}
	if got := f.present(t, all...); got != "t3 t4 t5" {
		t.Fatalf("after acknowledging e:2 the tasks are %q, want t3 t4 t5", got)
	}
	// A restart from the last acknowledged cursor gets exactly the
	// unacknowledged result again, and purges nothing more.
	m = f.follow(t, r)
	if got := followLine(m); got != "[t3=r3@e:3] next=e:3 done=false" || m.GetPurged() != 0 {
		t.Fatalf("restart from e:2 = %s purged %d", got, m.GetPurged())
	}
	// t4 is cancelled (acknowledged but not completed: it stays), t5
	// completes.
	f.cancel(t, "t4")
	f.complete(t, leases["t5"], "r5")
	r.Cursor = "e:3"
	m = f.follow(t, r)
	if got := followLine(m); got != "[t5=r5@e:5] next=e:5 done=true" || m.GetPurged() != 1 {
		t.Fatalf("last page = %s purged %d", got, m.GetPurged())
	}
	if got := f.present(t, all...); got != "t4 t5" {
		t.Fatalf("after acknowledging e:3 the tasks are %q, want t4 t5", got)
	}
	// The final acknowledgement purges t5; the cancelled task stays and the scan
	// is done.
	r.Cursor = "e:5"
	m = f.follow(t, r)
	if got := followLine(m); got != "[] next=e:5 done=true" || m.GetPurged() != 1 {
		t.Fatalf("final acknowledgement = %s purged %d", got, m.GetPurged())
	}
	if got := f.present(t, all...); got != "t4" {
		t.Fatalf("after the final acknowledgement the tasks are %q, want t4 (cancelled)", got)
	}
	counts := auditCounts(t, f.b.auditLog)
	if counts["Producer.FollowResults"] != 3 {
		t.Fatalf("audit lines for FollowResults = %d, want 3 (one per purging acknowledgement)", counts["Producer.FollowResults"])
	}
}

// TestServer_FollowResultsDeleteAfterReadLastTask: acknowledging the last
// task of a scan whose every task completed removes the scan and still
// answers done; in completion order the acknowledged tasks are those
// completed before the cursor.
func TestServer_FollowResultsDeleteAfterReadLastTask(t *testing.T) {
	t.Parallel()
	f := newScanFixture(t)
	f.enqueue(t, "s", "t1", "t2", "t3")
	leases := f.acquire(t, 3)
	f.complete(t, leases["t3"], "r3")
	f.complete(t, leases["t1"], "r1")
	r := &pb.FollowResultsRequest{ScanId: "s", CompletionOrder: true, DeleteAfterRead: true}
	if got := followLine(f.follow(t, r)); got != "[t3=r3@c:1 t1=r1@c:2] next=c:2 done=false" {
		t.Fatalf("first page = %s", got)
	}
	r.Cursor = "c:1"
	if m := f.follow(t, r); m.GetPurged() != 1 || f.present(t, "t1", "t2", "t3") != "t1 t2" {
		t.Fatalf("acknowledging c:1 purged %d, tasks %q, want t3 purged", m.GetPurged(), f.present(t, "t1", "t2", "t3"))
	}
	f.complete(t, leases["t2"], "r2")
	r.Cursor = "c:2"
	if m := f.follow(t, r); followLine(m) != "[t2=r2@c:3] next=c:3 done=true" || m.GetPurged() != 1 {
		t.Fatalf("page after c:2 = %s purged %d, want t2 and t1 purged", followLine(m), m.GetPurged())
	}
	r.Cursor = "c:3"
	m := f.follow(t, r)
	if got := followLine(m); got != "[] next=c:3 done=true" || m.GetPurged() != 1 {
		t.Fatalf("final acknowledgement = %s purged %d, want done and t2 purged", got, m.GetPurged())
	}
	if got := f.present(t, "t1", "t2", "t3"); got != "" {
		t.Fatalf("tasks left %q, want none", got)
	}
	// The scan is gone: a later follow of it is scan_not_found.
	_, err := f.p.producer.FollowResults(ctx, req(r))
	mustCode(t, err, connect.CodeNotFound, KindScanNotFound)
}

// TestServer_FollowResultsDeleteAfterReadWithoutIt: without the flag a
// cursor purges nothing (the default read stays a read).
func TestServer_FollowResultsDeleteAfterReadWithoutIt(t *testing.T) {
	t.Parallel()
	f := newScanFixture(t)
	f.enqueue(t, "s", "t1", "t2")
	leases := f.acquire(t, 2)
	f.complete(t, leases["t1"], "r1")
	f.complete(t, leases["t2"], "r2")
	m := f.follow(t, &pb.FollowResultsRequest{ScanId: "s", Cursor: "e:2"})
	if m.GetPurged() != 0 || f.present(t, "t1", "t2") != "t1 t2" {
		t.Fatalf("a plain follow from e:2 purged %d, tasks %q", m.GetPurged(), f.present(t, "t1", "t2"))
	}
	if n := auditCounts(t, f.b.auditLog)["Producer.FollowResults"]; n != 0 {
		t.Fatalf("audit lines for a plain FollowResults = %d, want 0", n)
	}
}

// TestServer_FollowResultsDeleteAfterReadKeepsPendingScan: a scan with a
// declared total not yet admitted is not finished; an acknowledgement
// that would purge every task of it keeps the last one, so the scan's
// record (and the ordinals the cursor counts on) survives until the rest
// is admitted; once finished, the final acknowledgement purges it all.
func TestServer_FollowResultsDeleteAfterReadKeepsPendingScan(t *testing.T) {
	t.Parallel()
	f := newScanFixture(t)
	first := enqueueReq("s", "t1", "t2")
	first.DeclaredTotal = 3
	if _, err := f.p.producer.Enqueue(ctx, req(first)); err != nil {
		t.Fatal(err)
	}
	leases := f.acquire(t, 2)
	f.complete(t, leases["t1"], "r1")
	f.complete(t, leases["t2"], "r2")
	r := &pb.FollowResultsRequest{ScanId: "s", DeleteAfterRead: true}
	if got := followLine(f.follow(t, r)); got != "[t1=r1@e:1 t2=r2@e:2] next=e:2 done=false" {
		t.Fatalf("first page = %s", got)
	}
	r.Cursor = "e:2"
	if m := f.follow(t, r); m.GetPurged() != 1 || m.GetDone() || f.present(t, "t1", "t2") != "t2" {
		t.Fatalf("acknowledging a pending scan's every task purged %d (done %v), tasks %q, want t1 purged and t2 kept",
			m.GetPurged(), m.GetDone(), f.present(t, "t1", "t2"))
	}
	second := enqueueReq("s", "t3")
	second.DeclaredTotal = 3
	if _, err := f.p.producer.Enqueue(ctx, req(second)); err != nil {
		t.Fatal(err)
	}
	f.complete(t, f.acquire(t, 1)["t3"], "r3")
	// The scan is finished now: e:2 acknowledges t2 too.
	if m := f.follow(t, r); followLine(m) != "[t3=r3@e:3] next=e:3 done=true" || m.GetPurged() != 1 {
		t.Fatalf("page after e:2 = %s purged %d, want t3 at ordinal 3 (the record kept its ordinals) and t2 purged", followLine(m), m.GetPurged())
	}
	r.Cursor = "e:3"
	if m := f.follow(t, r); followLine(m) != "[] next=e:3 done=true" || m.GetPurged() != 1 || f.present(t, "t2", "t3") != "" {
		t.Fatalf("final acknowledgement = %s purged %d, tasks %q, want t3 purged and none left", followLine(m), m.GetPurged(), f.present(t, "t2", "t3"))
	}
}
