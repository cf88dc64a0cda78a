package distributed

// Goal: every worker rule of contract A.8: registration errors, heartbeats,
// deregistration, pruning at the exact heartbeat-timeout edge, reactivation,
// effective capacity in integer basis points, eligibility and selection.

import (
	"fmt"
	"testing"
)

func TestWorkerPool_RegisterWorkerErrors(t *testing.T) {
	tests := []struct {
		name   string
		spec   WorkerSpec
		reason string
	}{
		{"empty id", WorkerSpec{Capacity: 1}, "worker_id is invalid"},
		{"unsafe id", WorkerSpec{WorkerID: "w 1", Capacity: 1}, "worker_id is invalid"},
		{"zero capacity", WorkerSpec{WorkerID: "w", Capacity: 0}, "capacity is zero"},
		{"capacity above max", WorkerSpec{WorkerID: "w", Capacity: MaxWorkerCapacity + 1}, "capacity exceeds absolute maximum"},
		{"cpu above 10000", WorkerSpec{WorkerID: "w", Capacity: 1, CPUBasisPoints: 10001}, "utilization exceeds 10000 basis points"},
		{"memory above 10000", WorkerSpec{WorkerID: "w", Capacity: 1, MemoryBasisPoints: 10001}, "utilization exceeds 10000 basis points"},
		{"network above 10000", WorkerSpec{WorkerID: "w", Capacity: 1, NetworkBasisPoints: 10001}, "utilization exceeds 10000 basis points"},
		{"six distinct tags", WorkerSpec{WorkerID: "w", Capacity: 1, Tags: []WorkerTag{0, 1, 2, 3, 4, 7}}, "too many tags"},
		{"six distinct before invalid", WorkerSpec{WorkerID: "w", Capacity: 1, Tags: []WorkerTag{9, 1, 2, 3, 4, 7, 9}}, "too many tags"},
		{"invalid tag", WorkerSpec{WorkerID: "w", Capacity: 1, Tags: []WorkerTag{7}}, "tag is invalid"},
		{"invalid among duplicates", WorkerSpec{WorkerID: "w", Capacity: 1, Tags: []WorkerTag{0, 0, 0, 0, 0, 0, 200}}, "tag is invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, DefaultLimits())
			e := h.fail(KindInvalidWorker, func(rev, now uint64) error {
				_, err := h.p.RegisterWorker(rev, now, tt.spec)
				return err
			})
			if e.Reason != tt.reason {
				t.Fatalf("reason = %q, want %q", e.Reason, tt.reason)
			}
		})
	}
}

func TestWorkerPool_RegisterWorker(t *testing.T) {
	l := smallLimits()
	l.MaxWorkers = 3
	h := newHarness(t, l)
	var w WorkerNode
	h.ok("register", func(rev, now uint64) error {
		tr, err := h.p.RegisterWorker(rev, now, WorkerSpec{WorkerID: "w1", Capacity: MaxWorkerCapacity, CPUBasisPoints: 10000,
			Tags: []WorkerTag{TagGPU, TagLinux, TagGPU}})
		w = tr.Value
		return err
	})
	if w.Generation() != 1 || w.Status() != WorkerHealthy || w.LastHeartbeat() != h.now || w.CurrentTasks() != 0 || w.Capacity() != MaxWorkerCapacity {
		t.Fatalf("new worker = %+v", w)
	}
	if tags := w.Tags(); len(tags) != 2 || tags[0] != TagLinux || tags[1] != TagGPU {
		t.Fatalf("tags = %v, want [linux gpu]", tags)
	}
	h.ok("many duplicate tags are five distinct at most", func(rev, now uint64) error {
		tr, err := h.p.RegisterWorker(rev, now, WorkerSpec{WorkerID: "dups", Capacity: 1,
			Tags: []WorkerTag{TagExternal, TagLinux, TagExternal, TagLinux, TagGPU, TagWindows, TagInternal, TagGPU}})
		if err == nil && len(tr.Value.Tags()) != 5 {
			t.Fatalf("tags = %v", tr.Value.Tags())
		}
		return err
	})
	h.ok("deregister dups", func(rev, now uint64) error { _, err := h.p.DeregisterWorker(rev, now, "dups", 1); return err })
	e := h.fail(KindWorkerAlreadyExists, func(rev, now uint64) error {
		_, err := h.p.RegisterWorker(rev, now, WorkerSpec{WorkerID: "w1", Capacity: 1})
		return err
	})
	if e.WorkerID != "w1" {
		t.Fatalf("details = %+v", e)
	}
	h.register("w2", 1)
	e = h.fail(KindWorkerCapacityReached, func(rev, now uint64) error {
		_, err := h.p.RegisterWorker(rev, now, WorkerSpec{WorkerID: "w3", Capacity: 1})
		return err
	})
	if e.Limit != 3 {
		t.Fatalf("limit = %d", e.Limit)
	}
	// Offline workers still count against MaxWorkers.
	h.ok("deregister", func(rev, now uint64) error { _, err := h.p.DeregisterWorker(rev, now, "w2", 1); return err })
	h.fail(KindWorkerCapacityReached, func(rev, now uint64) error {
		_, err := h.p.RegisterWorker(rev, now, WorkerSpec{WorkerID: "w3", Capacity: 1})
		return err
	})
}

func TestWorkerNode_EffectiveCapacity(t *testing.T) {
	tests := []struct {
		capacity      uint32
		cpu, mem, net uint16
		want          uint32
	}{
		{10, 0, 0, 0, 10},
		{10, 5000, 0, 0, 5},
		{10, 0, 5001, 0, 5},     // ceil(10 × 4999 / 10000) = ceil(4.999) = 5
		{10, 0, 0, 9999, 1},     // ceil(0.001) = 1
		{10, 10000, 0, 0, 0},    // fully utilized
		{3, 3334, 0, 0, 2},      // ceil(3 × 6666 / 10000) = ceil(1.9998) = 2
		{3, 6667, 1, 2, 1},      // ceil(0.9999) = 1
		{4096, 1, 0, 0, 4096},   // ceil(4095.59) = 4096
		{1, 2000, 8000, 100, 1}, // max utilization wins
	}
	for _, tt := range tests {
		w := WorkerNode{capacity: tt.capacity, cpuBasisPoints: tt.cpu, memoryBasisPoints: tt.mem, networkBasisPoints: tt.net}
		if got := w.EffectiveCapacity(); got != tt.want {
			t.Errorf("EffectiveCapacity(%d, %d/%d/%d) = %d, want %d", tt.capacity, tt.cpu, tt.mem, tt.net, got, tt.want)
		}
	}
	w := WorkerNode{capacity: 2, currentTasks: 3}
	if w.AvailableSlots() != 0 {
		t.Fatal("available slots went negative")
	}
}

func TestWorkerPool_UpdateWorker(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 4)
	obs := WorkerObservation{Status: WorkerBusy, CPUBasisPoints: 2500}
	h.fail(KindInvalidWorker, func(rev, now uint64) error { _, err := h.p.UpdateWorker(rev, now, "w/", 1, obs); return err })
	e := h.fail(KindInvalidWorker, func(rev, now uint64) error {
		_, err := h.p.UpdateWorker(rev, now, "w", 1, WorkerObservation{Status: WorkerOffline})
		return err
	})
	if e.Reason != "offline transition requires deregister or prune" {
		t.Fatalf("reason = %q", e.Reason)
	}
	h.fail(KindInvalidWorker, func(rev, now uint64) error {
		_, err := h.p.UpdateWorker(rev, now, "w", 1, WorkerObservation{Status: 9})
		return err
	})
	h.fail(KindInvalidWorker, func(rev, now uint64) error {
		_, err := h.p.UpdateWorker(rev, now, "w", 1, WorkerObservation{MemoryBasisPoints: 10001})
		return err
	})
	h.fail(KindWorkerNotFound, func(rev, now uint64) error { _, err := h.p.UpdateWorker(rev, now, "x", 1, obs); return err })
	e = h.fail(KindWorkerGenerationConflict, func(rev, now uint64) error { _, err := h.p.UpdateWorker(rev, now, "w", 2, obs); return err })
	if e.Expected != 2 || e.Actual != 1 || e.WorkerID != "w" {
		t.Fatalf("details = %+v", e)
	}
	h.now = 1010
	var got WorkerNode
	h.ok("heartbeat", func(rev, now uint64) error {
		tr, err := h.p.UpdateWorker(rev, now, "w", 1, obs)
		got = tr.Value
		return err
	})
	if got.Status() != WorkerBusy || got.CPUBasisPoints() != 2500 || got.LastHeartbeat() != 1010 || got.EffectiveCapacity() != 3 {
		t.Fatalf("after heartbeat = %+v", got)
	}
	h.ok("deregister", func(rev, now uint64) error { _, err := h.p.DeregisterWorker(rev, now, "w", 1); return err })
	h.fail(KindWorkerGenerationConflict, func(rev, now uint64) error { _, err := h.p.UpdateWorker(rev, now, "w", 1, obs); return err })
	h.fail(KindWorkerUnavailable, func(rev, now uint64) error { _, err := h.p.UpdateWorker(rev, now, "w", 2, obs); return err })
}

func TestWorkerPool_DeregisterWorker(t *testing.T) {
	l := DefaultLimits()
	l.MaxRetries = 1
	h := newHarness(t, l)
	h.register("w", 4)
	h.register("v", 4)
	a := h.running("a", "w", 60)
	b := h.running("b", "w", 60)
	h.ok("fail b once", func(rev, now uint64) error { _, err := h.p.FailTask(rev, now, b); return err })
	b = h.assign("b", "w", 60) // b now has RetryCount 1 = MaxRetries
	h.running("c", "v", 60)

	h.fail(KindWorkerNotFound, func(rev, now uint64) error { _, err := h.p.DeregisterWorker(rev, now, "zz", 1); return err })
	h.fail(KindWorkerGenerationConflict, func(rev, now uint64) error { _, err := h.p.DeregisterWorker(rev, now, "w", 2); return err })
	h.fail(KindInvalidWorker, func(rev, now uint64) error { _, err := h.p.DeregisterWorker(rev, now, "", 1); return err })
	var sum RecoverySummary
	h.ok("deregister", func(rev, now uint64) error {
		tr, err := h.p.DeregisterWorker(rev, now, "w", 1)
		sum = tr.Value
		return err
	})
	if sum != (RecoverySummary{WorkersAffected: 1, TasksRequeued: 1, TasksFailed: 1}) {
		t.Fatalf("summary = %+v", sum)
	}
	if w := h.worker("w"); w.Status() != WorkerOffline || w.Generation() != 2 || w.CurrentTasks() != 0 {
		t.Fatalf("worker = %+v", w)
	}
	if ta := h.task("a"); ta.Status() != TaskQueued || ta.TaskGeneration() != 1 || ta.RetryCount() != 1 {
		t.Fatalf("a = %v", ta)
	}
	if tb := h.task("b"); tb.Status() != TaskFailed {
		t.Fatalf("b = %v", tb)
	}
	if h.task("c").Status() != TaskRunning {
		t.Fatal("another worker's task was touched")
	}
	h.fail(KindWorkerUnavailable, func(rev, now uint64) error { _, err := h.p.DeregisterWorker(rev, now, "w", 2); return err })
	// The old leases are stale now; the exhausting lease replays as RetryExhausted.
	h.fail(KindStaleOwnership, func(rev, now uint64) error { _, err := h.p.CompleteTask(rev, now, a); return err })
	h.replay(func(rev, now uint64) (uint64, error) {
		tr, err := h.p.FailTask(rev, now, b)
		if err == nil && tr.Value != (FailureOutcome{Kind: RetryExhausted, TaskGeneration: 1, RetryCount: 1}) {
			t.Fatalf("replay = %+v", tr.Value)
		}
		return tr.Revision, err
	})
}

func TestWorkerPool_DeregisterRequeueNeedsQueueRoom(t *testing.T) {
	l := smallLimits() // queued 4
	l.MaxQueuedTasks = 2
	h := newHarness(t, l)
	h.register("w", 4)
	h.running("a", "w", 60)
	h.running("b", "w", 60)
	h.enqueue("c", 0)
	// Two requeues into a queue with one free slot: the whole command fails.
	e := h.fail(KindQueuedTaskCapacityReached, func(rev, now uint64) error {
		_, err := h.p.DeregisterWorker(rev, now, "w", 1)
		return err
	})
	if e.Limit != 2 {
		t.Fatalf("limit = %d", e.Limit)
	}
}

func TestWorkerPool_PruneDeadWorkersEdge(t *testing.T) {
	l := DefaultLimits() // heartbeat timeout 60
	for _, tc := range []struct {
		delta uint64
		dead  bool
	}{{59, false}, {60, true}, {61, true}} {
		t.Run(fmt.Sprint("now-heartbeat=", tc.delta), func(t *testing.T) {
			h := newHarness(t, l)
			h.register("w", 2)
			lease := h.running("t", "w", 3600)
			h.now = 1000 + tc.delta
			// GetAvailableWorker and AssignNext agree with pruning at the edge.
			_, ok, err := h.p.GetAvailableWorker(h.now)
			if err != nil || ok == tc.dead {
				t.Fatalf("GetAvailableWorker = %v, %v; dead=%v", ok, err, tc.dead)
			}
			var sum RecoverySummary
			h.ok("prune", func(rev, now uint64) error {
				tr, err := h.p.PruneDeadWorkers(rev, now)
				sum = tr.Value
				return err
			})
			want := RecoverySummary{}
			if tc.dead {
				want = RecoverySummary{WorkersAffected: 1, TasksRequeued: 1}
			}
			if sum != want {
				t.Fatalf("summary = %+v, want %+v", sum, want)
			}
			if got := h.worker("w").Status() == WorkerOffline; got != tc.dead {
				t.Fatalf("offline = %v", got)
			}
			if _, stillLeased := h.task("t").Lease(); stillLeased == tc.dead {
				t.Fatalf("lease kept = %v", stillLeased)
			}
			_ = lease
		})
	}
}

func TestWorkerPool_PruneRevivedWorkerSurvives(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("a", 1)
	h.register("b", 1)
	h.now = 1059
	h.ok("heartbeat b", func(rev, now uint64) error {
		_, err := h.p.UpdateWorker(rev, now, "b", 1, WorkerObservation{Status: WorkerDegraded})
		return err
	})
	h.now = 1060
	var sum RecoverySummary
	h.ok("prune", func(rev, now uint64) error {
		tr, err := h.p.PruneDeadWorkers(rev, now)
		sum = tr.Value
		return err
	})
	if sum.WorkersAffected != 1 || h.worker("a").Status() != WorkerOffline || h.worker("b").Status() != WorkerDegraded {
		t.Fatalf("summary %+v, a %v, b %v", sum, h.worker("a").Status(), h.worker("b").Status())
	}
}

func TestWorkerPool_ReactivateWorker(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 1)
	spec := WorkerSpec{WorkerID: "w", Capacity: 3, Tags: []WorkerTag{TagWindows}}
	e := h.fail(KindWorkerAlreadyExists, func(rev, now uint64) error { _, err := h.p.ReactivateWorker(rev, now, 1, spec); return err })
	if e.WorkerID != "w" {
		t.Fatalf("details = %+v", e)
	}
	h.ok("deregister", func(rev, now uint64) error { _, err := h.p.DeregisterWorker(rev, now, "w", 1); return err })
	h.fail(KindWorkerNotFound, func(rev, now uint64) error {
		_, err := h.p.ReactivateWorker(rev, now, 2, WorkerSpec{WorkerID: "x", Capacity: 1})
		return err
	})
	h.fail(KindWorkerGenerationConflict, func(rev, now uint64) error { _, err := h.p.ReactivateWorker(rev, now, 1, spec); return err })
	h.fail(KindInvalidWorker, func(rev, now uint64) error {
		_, err := h.p.ReactivateWorker(rev, now, 2, WorkerSpec{WorkerID: "w"})
		return err
	})
	h.now = 2000
	var w WorkerNode
	h.ok("reactivate", func(rev, now uint64) error {
		tr, err := h.p.ReactivateWorker(rev, now, 2, spec)
		w = tr.Value
		return err
	})
	if w.Generation() != 3 || w.Status() != WorkerHealthy || w.Capacity() != 3 || w.LastHeartbeat() != 2000 || len(w.Tags()) != 1 {
		t.Fatalf("reactivated = %+v", w)
	}
	if got, ok, _ := h.p.GetAvailableWorker(h.now); !ok || got.WorkerID() != "w" {
		t.Fatal("reactivated worker is not eligible")
	}
}

func TestWorkerPool_Selection(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	if _, ok, err := h.p.GetAvailableWorker(h.now); ok || err != nil {
		t.Fatalf("empty pool: %v %v", ok, err)
	}
	h.register("b", 3)
	h.register("a", 3)
	h.register("c", 4)
	h.ok("c half utilized", func(rev, now uint64) error {
		_, err := h.p.UpdateWorker(rev, now, "c", 1, WorkerObservation{Status: WorkerHealthy, NetworkBasisPoints: 5000})
		return err
	})
	// a and b have 3 slots, c has 2: the tie goes to the smallest ID.
	pick := func() string {
		w, ok, err := h.p.GetAvailableWorker(h.now)
		if err != nil || !ok {
			t.Fatalf("GetAvailableWorker: %v %v", ok, err)
		}
		return w.WorkerID()
	}
	if got := pick(); got != "a" {
		t.Fatalf("picked %s, want a", got)
	}
	before := h.export()
	if _, _, err := h.p.GetAvailableWorker(h.now + 5); err != nil {
		t.Fatal(err)
	}
	if string(before) != string(h.export()) {
		t.Fatal("GetAvailableWorker changed the state")
	}
	if _, _, err := h.p.GetAvailableWorker(h.now - 1); err == nil {
		t.Fatal("GetAvailableWorker accepted regressing time")
	}
	var leasedTo []string
	for i := 0; i < 8; i++ {
		id := fmt.Sprint("t", i)
		h.enqueue(id, 0)
		h.ok("assign", func(rev, now uint64) error {
			tr, err := h.p.AssignNextAvailable(rev, now, 60)
			leasedTo = append(leasedTo, tr.Value.WorkerID())
			return err
		})
	}
	// Slots: a3 b3 c2 → a(2) b(2)… ties by ID each time.
	want := "a b a b c a b c"
	if got := fmt.Sprint(leasedTo); got != "["+want+"]" {
		t.Fatalf("assignment order = %v, want [%s]", leasedTo, want)
	}
	h.enqueue("t8", 0)
	h.fail(KindNoAvailableWorker, func(rev, now uint64) error { _, err := h.p.AssignNextAvailable(rev, now, 60); return err })
	// Busy and degraded workers are not eligible even with free slots.
	h2 := newHarness(t, DefaultLimits())
	h2.register("x", 2)
	h2.enqueue("t", 0)
	h2.ok("busy", func(rev, now uint64) error {
		_, err := h2.p.UpdateWorker(rev, now, "x", 1, WorkerObservation{Status: WorkerBusy})
		return err
	})
	h2.fail(KindNoAvailableWorker, func(rev, now uint64) error { _, err := h2.p.AssignNextAvailable(rev, now, 60); return err })
	h2.fail(KindWorkerUnavailable, func(rev, now uint64) error { _, err := h2.p.AssignNext(rev, now, "x", 60); return err })
}

func TestWorkerPool_SelectionSkipsDeadWorkers(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("big", 100) // registered first: its heartbeat goes stale first
	h.now = 1030
	h.register("small", 1)
	h.enqueue("t", 0)
	h.now = 1059
	if w, _, _ := h.p.GetAvailableWorker(h.now); w.WorkerID() != "big" {
		t.Fatalf("picked %s before the timeout", w.WorkerID())
	}
	h.now = 1060 // big is dead (60 s), small is not (30 s)
	if w, _, _ := h.p.GetAvailableWorker(h.now); w.WorkerID() != "small" {
		t.Fatalf("picked %s after big died", w.WorkerID())
	}
	h.fail(KindWorkerUnavailable, func(rev, now uint64) error { _, err := h.p.AssignTask(rev, now, "t", "big", 10); return err })
	var l TaskLease
	h.ok("assign", func(rev, now uint64) error {
		tr, err := h.p.AssignNextAvailable(rev, now, 10)
		l = tr.Value
		return err
	})
	if l.WorkerID() != "small" {
		t.Fatalf("leased to %s", l.WorkerID())
	}
}
