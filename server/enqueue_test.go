// Goal: Enqueue with skip_existing stores only what the tenant lacks and
// names everything else: tasks already stored with the same scan and
// target (existing, by position), IDs held by another scan or by this scan
// with another target (collisions, by position, with the holding scan); a
// declared total, less the batch's collisions, is stored per scan and read
// back by ScanProgress. Without
// skip_existing an existing ID still rejects the whole batch. Method: a
// real node behind the API; every answer is checked against the stored
// tasks.
package server

import (
	"slices"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func TestProducer_EnqueueSkipExisting(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := b.clients(b.createKey(t, "", "producer"))
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("other", "x1"))); err != nil {
		t.Fatal(err)
	}
	first := enqueueReq("s", "a1", "a2")
	first.DeclaredTotal = 5
	if _, err := p.producer.Enqueue(ctx, req(first)); err != nil {
		t.Fatal(err)
	}
	// Without skip_existing: the batch is refused whole and nothing changes.
	before := b.state(t)
	_, err := p.producer.Enqueue(ctx, req(enqueueReq("s", "a3", "a1")))
	mustCode(t, err, connect.CodeAlreadyExists, "task_already_exists")
	b.assertUnchanged(t, before, "a batch with an existing ID")

	// a1 identical, a2 same scan other target, x1 other scan, a3 and a4 new.
	m := enqueueReq("s", "a1", "a2", "x1", "a3", "a4")
	m.Tasks[1].TargetRef = "another-target"
	m.SkipExisting, m.DeclaredTotal = true, 7
	res, err := p.producer.Enqueue(ctx, req(m))
	if err != nil {
		t.Fatal(err)
	}
	var added []string
	for _, tk := range res.Msg.GetTasks() {
		added = append(added, tk.GetTaskId())
	}
	if !slices.Equal(added, []string{"a3", "a4"}) || !slices.Equal(res.Msg.GetExisting(), []uint32{0}) {
		t.Fatalf("enqueued %v, existing %v; want [a3 a4], [0]", added, res.Msg.GetExisting())
	}
	col := res.Msg.GetCollisions()
	if len(col) != 2 || col[0].GetIndex() != 1 || col[0].GetScanId() != "s" || col[1].GetIndex() != 2 || col[1].GetTaskId() != "x1" || col[1].GetScanId() != "other" {
		t.Fatalf("collisions = %v", col)
	}
	prog, err := p.producer.ScanProgress(ctx, req(&pb.ScanProgressRequest{ScanId: "s"}))
	// The two collisions are taken off the declared 7: they are never
	// stored, so counting them would keep the scan open for ever.
	if err != nil || prog.Msg.GetTotal() != 4 || prog.Msg.GetDeclaredTotal() != 5 || prog.Msg.GetPending() != 1 {
		t.Fatalf("progress = %v, %v; want total 4, declared 5 (7 less 2 collisions), pending 1", prog.Msg, err)
	}
	gt, err := p.producer.GetTask(ctx, req(&pb.GetTaskRequest{TaskId: "a2"}))
	if err != nil || gt.Msg.GetTask().GetTargetRef() != "secret-target-a2" {
		t.Fatalf("a2 = %v, %v; its target must stay", gt.Msg, err)
	}

	// Everything already stored: nothing is proposed, the answer says so.
	before = b.state(t)
	again := enqueueReq("s", "a3", "a4")
	again.SkipExisting = true
	res, err = p.producer.Enqueue(ctx, req(again))
	if err != nil || len(res.Msg.GetTasks()) != 0 || !slices.Equal(res.Msg.GetExisting(), []uint32{0, 1}) {
		t.Fatalf("re-run = %v, %v", res.Msg, err)
	}
	b.assertUnchanged(t, before, "a re-run of stored tasks")

	// A last batch of only stored and colliding targets still takes its
	// collision off the declared total (a declaration without tasks).
	last := enqueueReq("s", "a3", "x1")
	last.SkipExisting, last.DeclaredTotal = true, 5
	res, err = p.producer.Enqueue(ctx, req(last))
	if err != nil || len(res.Msg.GetTasks()) != 0 || len(res.Msg.GetCollisions()) != 1 {
		t.Fatalf("stored + colliding batch = %v, %v", res.Msg, err)
	}
	prog, err = p.producer.ScanProgress(ctx, req(&pb.ScanProgressRequest{ScanId: "s"}))
	if err != nil || prog.Msg.GetDeclaredTotal() != 4 || prog.Msg.GetPending() != 0 {
		t.Fatalf("progress = %v, %v; want declared 4 (5 less 1 collision), pending 0", prog.Msg, err)
	}
	// Only colliding targets of a scan with no record: nothing to declare on.
	before = b.state(t)
	none := enqueueReq("fresh", "x1")
	none.SkipExisting, none.DeclaredTotal = true, 1
	if res, err = p.producer.Enqueue(ctx, req(none)); err != nil || len(res.Msg.GetCollisions()) != 1 {
		t.Fatalf("colliding batch of a new scan = %v, %v", res.Msg, err)
	}
	b.assertUnchanged(t, before, "a colliding batch of a scan without tasks")
	before = b.state(t)

	// A declared total over two scans is refused and changes nothing.
	mixed := enqueueReq("s", "b1")
	mixed.Tasks = append(mixed.Tasks, enqueueReq("s2", "b2").Tasks...)
	mixed.DeclaredTotal = 3
	_, err = p.producer.Enqueue(ctx, req(mixed))
	mustCode(t, err, connect.CodeInvalidArgument, "")
	b.assertUnchanged(t, before, "a declared total over two scans")
}
