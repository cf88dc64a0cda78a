// Tests of the FSM's scan records (scans.go). Goal: a scan's creation and
// finish times come from the stamped time of the commands that caused
// them, its completion order is the order of the completions, a finished
// scan reopens on an enqueue, every command that can make a task terminal
// moves the tracking and wakes ProgressFunc, and all of it survives
// ExportState/RestoreState byte for byte; a snapshot that contradicts the
// pool is refused, and one written before the records existed is rebuilt
// the same way on every member. Method: drive ApplyCommand with hand-built
// commands and compare TenantView.Scan with the expected record.
package raftfsm

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func enqueueScanCmd(scan string, ids ...string) *pb.Command {
	e := &pb.EnqueueTasks{}
	for _, id := range ids {
		e.Tasks = append(e.Tasks, &pb.TaskSpec{TaskId: id, ScanId: scan, TargetRef: []byte("target-" + id), Priority: 1})
	}
	return &pb.Command{Principal: "kprod", Op: &pb.Command_Enqueue{Enqueue: e}}
}

func (b *testBundle) at(now uint64, cmd *pb.Command) *pb.Command {
	cmd.NowSecs = now
	return cmd
}

func (b *testBundle) scan(t *testing.T, id string) ScanState {
	t.Helper()
	tv, _ := b.f.Tenant("acme")
	st, ok := tv.Scan(id)
	if !ok {
		t.Fatalf("Scan(%s) not found", id)
	}
	return st
}

func completedOrder(t *testing.T, f *FSM, scan string) []string {
	t.Helper()
	tv, _ := f.Tenant("acme")
	return EntryIDs(tv.ScanCompletedWindow(scan, 0, 1000))
}

func TestFSM_ScanRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	progress := 0
	b.f.opts.ProgressFunc = func(tenant string) {
		if tenant != "acme" {
			t.Errorf("ProgressFunc(%q), want acme", tenant)
		}
		progress++
	}
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, b.at(100, enqueueScanCmd("s1", "t1", "t2", "t3")))
	if got, want := b.scan(t, "s1"), (ScanState{ScanID: "s1", CreatedAt: 100, Tasks: 3, NextOrdinal: 3}); got != want {
		t.Fatalf("after enqueue Scan = %+v, want %+v", got, want)
	}
	acq := valueOf[[]Acquired](t, b.must(t, b.at(110, acquireCmd("kw1", "w1", 3))))
	if progress != 0 {
		t.Fatalf("ProgressFunc called %d times before any task could end", progress)
	}
	b.must(t, b.at(120, completeCmd("kw1", acq[1].Lease, []byte("two"))))
	b.must(t, b.at(130, completeCmd("kw1", acq[0].Lease, []byte("one!"))))
	// A replayed completion changes nothing in the record.
	b.must(t, b.at(131, completeCmd("kw1", acq[0].Lease, []byte("one!"))))
	if got := completedOrder(t, b.f, "s1"); fmt.Sprint(got) != "[t2 t1]" {
		t.Fatalf("completion order = %v, want [t2 t1]", got)
	}
	b.must(t, b.at(140, enqueueScanCmd("s1", "t4")))
	b.must(t, b.at(150, cancelByIDCmd("kprod", "t3")))
	if got, want := b.scan(t, "s1"), (ScanState{ScanID: "s1", CreatedAt: 100, Tasks: 4, Completed: 2, ResultBytes: 7, NextOrdinal: 4, NextCompletion: 2}); got != want {
		t.Fatalf("before the last task ends Scan = %+v, want %+v", got, want)
	}
	b.must(t, b.at(160, cancelByIDCmd("kprod", "t4")))
	want := ScanState{ScanID: "s1", CreatedAt: 100, Finished: true, FinishedAt: 160, Tasks: 4, Completed: 2, ResultBytes: 7,
		NextOrdinal: 4, NextCompletion: 2}
	if got := b.scan(t, "s1"); got != want {
		t.Fatalf("after the last task ended Scan = %+v, want %+v", got, want)
	}
	if progress != 5 {
		t.Fatalf("ProgressFunc called %d times, want 5 (3 completions, 2 cancels)", progress)
	}
	checkScanRoundTrip(t, b.f, "s1")

	// An enqueue reopens a finished scan.
	b.must(t, b.at(170, enqueueScanCmd("s1", "t5")))
	if got := b.scan(t, "s1"); got.Finished || got.FinishedAt != 0 || got.CreatedAt != 100 || got.Tasks != 5 {
		t.Fatalf("after a new enqueue Scan = %+v, want running again, created at 100", got)
	}
}

// TestFSM_ScanFinishedByRecovery: commands that end tasks of any scan
// (here ExpireOldTasks) finish every scan whose last task they ended.
func TestFSM_ScanFinishedByRecovery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, b.at(100, enqueueScanCmd("a", "a1", "a2")))
	b.must(t, b.at(105, enqueueScanCmd("b", "b1")))
	b.must(t, b.at(120, &pb.Command{Op: &pb.Command_ExpireOldTasks{ExpireOldTasks: &pb.ExpireOldTasks{MaxAgeSecs: 20}}}))
	if got := b.scan(t, "a"); !got.Finished || got.FinishedAt != 120 {
		t.Fatalf("scan a = %+v, want finished at 120", got)
	}
	if got := b.scan(t, "b"); got.Finished {
		t.Fatalf("scan b = %+v, want running (its task is 15 s old)", got)
	}
	b.must(t, b.at(130, &pb.Command{Op: &pb.Command_ExpireOldTasks{ExpireOldTasks: &pb.ExpireOldTasks{MaxAgeSecs: 20}}}))
	if got := b.scan(t, "b"); !got.Finished || got.FinishedAt != 130 {
		t.Fatalf("scan b = %+v, want finished at 130", got)
	}
	checkScanRoundTrip(t, b.f, "a")
}

// checkScanRoundTrip restores f's export into a new FSM: equal bytes, equal
// scan record and completion order.
func checkScanRoundTrip(t *testing.T, f *FSM, scan string) {
	t.Helper()
	st, err := f.ExportState()
	if err != nil {
		t.Fatal(err)
	}
	g := New(Options{})
	if err := g.RestoreState(st); err != nil {
		t.Fatalf("RestoreState: %v", err)
	}
	again, _ := g.ExportState()
	if string(again) != string(st) {
		t.Fatal("restored state exports different bytes")
	}
	tvf, _ := f.Tenant("acme")
	tvg, _ := g.Tenant("acme")
	a, _ := tvf.Scan(scan)
	b, _ := tvg.Scan(scan)
	if a != b || !slices.Equal(completedOrder(t, f, scan), completedOrder(t, g, scan)) {
		t.Fatalf("restored scan = %+v %v, want %+v %v", b, completedOrder(t, g, scan), a, completedOrder(t, f, scan))
	}
	if x, y := tvf.ScanTaskWindow(scan, 0, 1<<20), tvg.ScanTaskWindow(scan, 0, 1<<20); !slices.Equal(x, y) {
		t.Fatalf("restored enqueue ordinals = %v, want %v", y, x)
	}
	if x, y := tvf.ScanCompletedWindow(scan, 0, 1<<20), tvg.ScanCompletedWindow(scan, 0, 1<<20); !slices.Equal(x, y) {
		t.Fatalf("restored completion ordinals = %v, want %v", y, x)
	}
}

// mustRefuseScanEdits checks that f's state with each edit of its scan
// records is refused with ErrInvalidState by an FSM holding f's state,
// which the refusal leaves unchanged.
func mustRefuseScanEdits(t *testing.T, f *FSM, bad map[string]func(sc []*pb.ScanIndex)) {
	t.Helper()
	good, _ := f.ExportState()
	for name, edit := range bad {
		g := New(Options{})
		if err := g.RestoreState(good); err != nil {
			t.Fatal(err)
		}
		if err := g.RestoreState(editScans(t, f, edit)); !errors.Is(err, ErrInvalidState) {
			t.Errorf("%s: RestoreState = %v, want ErrInvalidState", name, err)
		}
		if again, _ := g.ExportState(); string(again) != string(good) {
			t.Errorf("%s: a refused restore changed the state", name)
		}
	}
}

// editScans exports f, lets edit change the acme tenant's scan indexes and
// returns the bytes.
func editScans(t *testing.T, f *FSM, edit func(sc []*pb.ScanIndex)) []byte {
	t.Helper()
	b, _ := f.ExportState()
	var st pb.FSMState
	if err := proto.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	for _, ts := range st.GetTenants() {
		if ts.GetName() == "acme" {
			edit(ts.GetScans())
		}
	}
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(&st)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFSM_ScanRecordRestore refuses scan records that contradict the pool
// (the FSM keeps its state), and rebuilds a record written before scan
// records existed: completion order by completion time then enqueue
// position, finished with an unknown time.
func TestFSM_ScanRecordRestore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, b.at(100, enqueueScanCmd("s1", "t1", "t2", "t3")))
	b.must(t, b.at(100, enqueueScanCmd("x", "x1")))
	acq := valueOf[[]Acquired](t, b.must(t, b.at(110, acquireCmd("kw1", "w1", 4))))
	b.must(t, b.at(115, completeCmd("kw1", acq[3].Lease, []byte("x"))))
	b.must(t, b.at(120, completeCmd("kw1", acq[2].Lease, []byte("3"))))
	b.must(t, b.at(130, completeCmd("kw1", acq[0].Lease, []byte("1"))))
	b.must(t, b.at(130, completeCmd("kw1", acq[1].Lease, []byte("2"))))
	bad := map[string]func(sc []*pb.ScanIndex){
		"completion of a task that is not completed": func(sc []*pb.ScanIndex) { sc[0].CompletedIds = append(sc[0].CompletedIds, "nope") },
		"completion listed twice":                    func(sc []*pb.ScanIndex) { sc[0].CompletedIds = append(sc[0].CompletedIds, "t1") },
		"completion of another scan's task":          func(sc []*pb.ScanIndex) { sc[0].CompletedIds = []string{"t1", "t2", "t3", "x1"} },
		"a task of another scan":                     func(sc []*pb.ScanIndex) { sc[0].TaskIds = append(sc[0].TaskIds, "x1") },
		"a task that does not exist":                 func(sc []*pb.ScanIndex) { sc[0].TaskIds = append(sc[0].TaskIds, "nope") },
		"a task ID that is not an identifier":        func(sc []*pb.ScanIndex) { sc[0].TaskIds = append(sc[0].TaskIds, "bad id") },
		"a completion ID that is not an identifier":  func(sc []*pb.ScanIndex) { sc[0].CompletedIds = append(sc[0].CompletedIds, "bad id") },
	}
	mustRefuseScanEdits(t, b.f, bad)
	// The scan is finished at 130; a record claiming a finish time for a
	// scan with an open task is refused.
	b.must(t, b.at(140, enqueueScanCmd("s2", "u1")))
	g := New(Options{})
	err := g.RestoreState(editScans(t, b.f, func(sc []*pb.ScanIndex) { sc[1].FinishedAt = 135 }))
	if !errors.Is(err, ErrInvalidState) {
		t.Fatalf("open scan with a finish time: RestoreState = %v, want ErrInvalidState", err)
	}
	// A state without records: rebuilt.
	legacy := editScans(t, b.f, func(sc []*pb.ScanIndex) {
		for _, s := range sc {
			s.CreatedAt, s.FinishedAt, s.CompletedIds = 0, 0, nil
		}
	})
	if err := g.RestoreState(legacy); err != nil {
		t.Fatalf("legacy RestoreState: %v", err)
	}
	tv, _ := g.Tenant("acme")
	st, _ := tv.Scan("s1")
	if want := (ScanState{ScanID: "s1", Finished: true, Tasks: 3, Completed: 3, ResultBytes: 3, NextOrdinal: 3, NextCompletion: 3}); st != want {
		t.Fatalf("legacy scan = %+v, want %+v", st, want)
	}
	if got := completedOrder(t, g, "s1"); fmt.Sprint(got) != "[t3 t1 t2]" {
		t.Fatalf("legacy completion order = %v, want [t3 t1 t2]", got)
	}
}

// TestFSM_ScanRecordPurge: a partial purge drops the purged tasks from the
// record (task count, completion order, result bytes) and keeps the
// others' ordinals; the state round-trips through a snapshot, and a
// snapshot whose ordinals contradict themselves is refused with the state
// kept; a purge that empties the scan drops its record.
func TestFSM_ScanRecordPurge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, b.at(100, enqueueScanCmd("s1", "t1", "t2", "t3", "t4")))
	acq := valueOf[[]Acquired](t, b.must(t, b.at(110, acquireCmd("kw1", "w1", 4))))
	for i, r := range []string{"a", "bb", "ccc"} {
		b.must(t, b.at(120, completeCmd("kw1", acq[i].Lease, []byte(r))))
	}
	b.must(t, b.at(130, &pb.Command{Principal: "kprod", Op: &pb.Command_PurgeTasks{PurgeTasks: &pb.PurgeTasks{TaskIds: []string{"t1", "t2"}}}}))
	want := ScanState{ScanID: "s1", CreatedAt: 100, Tasks: 2, Completed: 1, ResultBytes: 3, NextOrdinal: 4, NextCompletion: 3}
	if got := b.scan(t, "s1"); got != want {
		t.Fatalf("after the purge Scan = %+v, want %+v", got, want)
	}
	tv, _ := b.f.Tenant("acme")
	if got := fmt.Sprint(tv.ScanTaskWindow("s1", 0, 10), tv.ScanCompletedWindow("s1", 0, 10)); got != "[{t3 2} {t4 3}] [{t3 2}]" {
		t.Fatalf("windows after the purge = %s", got)
	}
	if got := fmt.Sprint(tv.ScanTaskWindow("s1", 3, 10)); got != "[{t4 3}]" {
		t.Fatalf("window from ordinal 3 = %s", got)
	}
	checkScanRoundTrip(t, b.f, "s1")
	bad := map[string]func(sc []*pb.ScanIndex){
		"ordinals not increasing": func(sc []*pb.ScanIndex) { sc[0].TaskOrdinals = []uint64{3, 2} },
		"ordinal count differs":   func(sc []*pb.ScanIndex) { sc[0].TaskOrdinals = []uint64{2} },
		"ordinal not below next":  func(sc []*pb.ScanIndex) { sc[0].NextOrdinal = 3 },
		"next below the list": func(sc []*pb.ScanIndex) {
			sc[0].CompletedOrdinals, sc[0].NextCompletion = nil, 0
			sc[0].NextOrdinal = 1
		},
		"completion ordinals count": func(sc []*pb.ScanIndex) { sc[0].CompletedOrdinals = []uint64{0, 2} },
	}
	mustRefuseScanEdits(t, b.f, bad)
	b.must(t, b.at(140, cancelByIDCmd("kprod", "t4")))
	b.must(t, b.at(150, &pb.Command{Principal: "kprod", Op: &pb.Command_PurgeTasks{PurgeTasks: &pb.PurgeTasks{ScanId: "s1", FinishedBefore: 200}}}))
	if _, ok := tv.Scan("s1"); ok || len(tv.ScanIDs()) != 0 {
		t.Fatalf("a scan emptied by a purge still has a record: %v", tv.ScanIDs())
	}
}

// TestFSM_ScanRecordMixedEnqueue: one enqueue whose tasks alternate
// between scans records each task in its own scan, in enqueue order, with
// that scan's next ordinals.
func TestFSM_ScanRecordMixedEnqueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, enqueueScanCmd("a", "a1"))
	mixed := enqueueScanCmd("a", "a2", "a3")
	b2 := enqueueScanCmd("b", "b1", "b2").GetEnqueue().GetTasks()
	e := mixed.GetEnqueue()
	e.Tasks = []*pb.TaskSpec{e.Tasks[0], b2[0], e.Tasks[1], b2[1]}
	b.must(t, mixed)
	tv, _ := b.f.Tenant("acme")
	for scan, want := range map[string][]ScanEntry{
		"a": {{"a1", 0}, {"a2", 1}, {"a3", 2}},
		"b": {{"b1", 0}, {"b2", 1}},
	} {
		if got := tv.ScanTaskWindow(scan, 0, 10); !slices.Equal(got, want) {
			t.Fatalf("ScanTaskWindow(%s) = %v, want %v", scan, got, want)
		}
		if st := b.scan(t, scan); st.Tasks != len(want) || st.NextOrdinal != uint64(len(want)) {
			t.Fatalf("Scan(%s) = %+v, want %d tasks", scan, st, len(want))
		}
	}
}
