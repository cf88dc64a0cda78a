package distributed

// Goal: TaskBriefs is GetTask's ID, scan, status and completion time for
// every ID, in order, with unknown IDs as absent briefs, and an invalid ID
// is refused with ErrInvalidTask, dst unchanged and the pool unchanged.

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

func TestTaskQueue_TaskBriefsAgreesWithGetTask(t *testing.T) {
	h := busyPool(t)
	ids := append(h.p.TaskQueue().TaskIDs(), "no-such-task")
	slices.Reverse(ids) // not the map's or the ID order
	prefix := []TaskBrief{{taskID: "kept"}}
	got, err := h.p.TaskBriefs(ids, prefix)
	if err != nil {
		t.Fatalf("TaskBriefs: %v", err)
	}
	if len(got) != 1+len(ids) || got[0].TaskID() != "kept" {
		t.Fatalf("TaskBriefs appended %d briefs after %q, want %d after the prefix", len(got)-1, got[0].TaskID(), len(ids))
	}
	statuses := map[TaskStatus]bool{}
	for i, id := range ids {
		b := got[1+i]
		task, ok, err := h.p.GetTask(id)
		if err != nil || b.Exists() != ok {
			t.Fatalf("brief of %q: exists %v, GetTask = %v, %v", id, b.Exists(), ok, err)
		}
		if !ok {
			if b != (TaskBrief{}) {
				t.Fatalf("brief of unknown %q = %+v, want the zero brief", id, b)
			}
			continue
		}
		wantAt, wantDone := task.CompletedAt()
		at, done := b.CompletedAt()
		if b.TaskID() != task.TaskID() || b.ScanID() != task.ScanID() || b.Status() != task.Status() || at != wantAt || done != wantDone {
			t.Fatalf("brief of %q = %+v, GetTask says %s/%s/%v/%d", id, b, task.TaskID(), task.ScanID(), task.Status(), wantAt)
		}
		statuses[b.Status()] = true
	}
	if len(statuses) < 5 {
		t.Fatalf("busyPool gave briefs of %d statuses, want every one", len(statuses))
	}
}

func TestTaskQueue_TaskBriefsRefusesInvalidIDs(t *testing.T) {
	h := busyPool(t)
	before := h.export()
	for _, bad := range []string{"", "bad id", string([]byte{0xff, 'a'})} {
		dst := make([]TaskBrief, 1, 8)
		dst[0] = TaskBrief{taskID: "kept"}
		got, err := h.p.TaskBriefs([]string{"queued", bad, "done"}, dst)
		var e *Error
		if !errors.Is(err, ErrInvalidTask) || !errors.As(err, &e) || e.Kind != KindInvalidTask {
			t.Fatalf("TaskBriefs(%q) error = %v, want ErrInvalidTask", bad, err)
		}
		if len(got) != 1 || got[0].TaskID() != "kept" {
			t.Fatalf("TaskBriefs(%q) returned %d briefs, want dst unchanged", bad, len(got))
		}
	}
	if !bytes.Equal(h.export(), before) {
		t.Fatal("a refused TaskBriefs changed the pool")
	}
}
