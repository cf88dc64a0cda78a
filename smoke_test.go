package distributed

import "testing"

func TestSmoke(t *testing.T) {
	p := NewWorkerPool()
	r, err := p.RegisterWorker(0, 1, WorkerSpec{WorkerID: "w1", Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	e, err := p.Enqueue(r.Revision, 1, TaskSpec{TaskID: "t1", ScanID: "s", TargetRef: "x"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := p.AssignNextAvailable(e.Revision, 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	s, err := p.StartTask(l.Revision, 3, l.Value)
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.FailTask(s.Revision, 4, l.Value)
	if err != nil || f.Value.Kind != Requeued {
		t.Fatal(err, f)
	}
	if err := p.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	b, _ := p.ExportState()
	q, err := RestoreWorkerPool(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := q.ExportState()
	if string(b) != string(b2) {
		t.Fatal("export differs")
	}
}
