package distributed

// Goal: the task indexes that replaced B-trees keep their orders exactly.
// The expiry index (expiry.go) answers RecoveryDue and RecoverExpiredLeases
// like a scan of every lease, across random grants, renewals, completions,
// cancellations and recoveries at many seconds (seeded, reproducible),
// including the empty bucket it keeps; the queue (queue.go) restores into
// lease order from Restore's task-ID-ordered build; the audit refuses an
// index that lost a lease or a list out of order.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// bruteExpired returns the IDs of the leased or running tasks whose lease
// expires at or before now, in lease-ID order (contract A.10).
func bruteExpired(p *WorkerPool, now uint64) []string {
	var ls []TaskLease
	for _, t := range p.TaskQueue().Tasks() {
		if l, ok := t.Lease(); ok && l.ExpiresAt() <= now {
			ls = append(ls, l)
		}
	}
	slices.SortFunc(ls, func(a, b TaskLease) int { return int(a.LeaseID()) - int(b.LeaseID()) })
	ids := make([]string, len(ls))
	for i, l := range ls {
		ids[i] = l.TaskID()
	}
	return ids
}

func TestExpiryIndex_MatchesBruteForce(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			l := DefaultLimits()
			l.MaxRetries = 32
			h := newHarness(t, l)
			h.register("w", 1024)
			var leases []TaskLease
			for step := 0; step < 400; step++ {
				if rng.IntN(4) == 0 {
					h.now += uint64(rng.IntN(5))
					h.ok("heartbeat", func(rev, now uint64) error {
						_, err := h.p.UpdateWorker(rev, now, "w", 1, WorkerObservation{})
						return err
					})
				}
				switch op := rng.IntN(8); {
				case op <= 2 || len(leases) == 0:
					id := fmt.Sprint("t", step)
					h.enqueue(id, PriorityNormal)
					leases = append(leases, h.assign(id, "w", uint64(1+rng.IntN(6))))
				case op == 3:
					i := rng.IntN(len(leases))
					if tr, err := h.p.RenewLease(h.rev(), h.now, leases[i], uint64(1+rng.IntN(6))); err == nil {
						leases[i] = tr.Value
					}
				case op == 4:
					i := rng.IntN(len(leases))
					h.p.CancelTask(h.rev(), h.now, OwnershipFromLease(leases[i]))
				case op == 5:
					i := rng.IntN(len(leases))
					h.p.StartTask(h.rev(), h.now, leases[i]) // fails when expired or started: then so does completing
					h.p.CompleteTask(h.rev(), h.now, leases[i])
				default:
					checkRecovery(t, h)
					leases = leases[:0]
					for _, task := range h.p.TaskQueue().Tasks() {
						if l, ok := task.Lease(); ok {
							leases = append(leases, l)
						}
					}
				}
				if err := h.p.CheckInvariants(); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			}
		})
	}
}

// checkRecovery compares RecoveryDue with the brute-force scan, then
// recovers and checks that the tasks were requeued in lease-ID order.
func checkRecovery(t *testing.T, h *harness) {
	t.Helper()
	want := bruteExpired(h.p, h.now)
	if due, _, _ := h.p.RecoveryDue(h.now, 0); due != (len(want) > 0) {
		t.Fatalf("RecoveryDue(%d) = %v, want %v", h.now, due, len(want) > 0)
	}
	queuedBefore := len(h.p.TaskQueue().QueuedTasks())
	h.ok("recover", func(rev, now uint64) error {
		tr, err := h.p.RecoverExpiredLeases(rev, now)
		if err == nil && tr.Value.TasksRequeued+tr.Value.TasksFailed != len(want) {
			t.Fatalf("recovered %+v, want %d tasks", tr.Value, len(want))
		}
		return err
	})
	var got []string
	for _, task := range h.p.TaskQueue().QueuedTasks()[queuedBefore:] {
		got = append(got, task.TaskID())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("requeued %v, want %v (lease-ID order)", got, want)
	}
}

// The bucket of the latest grant stays when its last lease ends; an empty
// bucket must not count as an expired lease, nor hide a later one.
func TestExpiryIndex_EmptyLatestBucket(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 4)
	h.running("a", "w", 30)       // expires 1030
	lb := h.running("b", "w", 10) // expires 1010: the latest bucket
	h.ok("complete", func(rev, now uint64) error { _, err := h.p.CompleteTask(rev, now, lb); return err })
	if due, _, _ := h.p.RecoveryDue(1020, 0); due {
		t.Fatal("RecoveryDue(1020) reports the emptied 1010 bucket")
	}
	if due, _, _ := h.p.RecoveryDue(1030, 0); !due {
		t.Fatal("RecoveryDue(1030) misses the lease behind the empty bucket")
	}
	// A grant in another second drops the empty bucket.
	h.enqueue("c", 0)
	h.assign("c", "w", 50)
	if n := h.p.c.byExpiry.order.Len(); n != 2 {
		t.Fatalf("buckets = %d, want 2 (1030 and 1050)", n)
	}
}

func TestExpiryIndex_AuditCatchesLostLease(t *testing.T) {
	for name, corrupt := range map[string]func(c *coordinator){
		"unlinked": func(c *coordinator) {
			for _, t := range c.tasks {
				c.byExpiry.Delete(t)
				c.byExpiry.n++ // the count still matches the tally
			}
		},
		"wrong second": func(c *coordinator) {
			for _, t := range c.tasks {
				t.lease.expiresAt++
			}
		},
	} {
		h := newHarness(t, DefaultLimits())
		h.register("w", 1)
		h.enqueue("a", 0)
		h.assign("a", "w", 30)
		corrupt(h.p.c)
		if err := h.p.CheckInvariants(); !errors.Is(err, ErrStateInvariant) {
			t.Fatalf("%s: CheckInvariants = %v, want StateInvariant", name, err)
		}
	}
}

// The queue (queue.go) after Restore: the bulk build inserts in task-ID
// order, which here is not lease order (IDs against enqueue order, mixed
// priorities, requeued retries), and the restored queue must list and
// lease in exactly the original order.
func TestQueueIndex_RestoreKeepsLeaseOrder(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.register("w", 64)
	for i := 40; i > 0; i-- {
		h.enqueue(fmt.Sprintf("t%02d", i), TaskPriority(i%4))
	}
	for _, id := range []string{"t40", "t12", "t33"} { // retried: requeued at the back of their priority
		l := h.running(id+"-r", "w", 60)
		h.ok("fail", func(rev, now uint64) error { _, err := h.p.FailTask(rev, now, l); return err })
	}
	want := queuedIDs(h.p)
	restored, err := RestoreWorkerPool(h.export())
	if err != nil {
		t.Fatal(err)
	}
	if got := queuedIDs(restored); !slices.Equal(got, want) {
		t.Fatalf("restored queue %v, want %v", got, want)
	}
	for i, id := range want {
		tr, err := restored.AssignNext(restored.Snapshot().Revision, h.now, "w", 60)
		if err != nil || tr.Value.TaskID() != id {
			t.Fatalf("lease %d after restore: %v %v, want %s", i, tr.Value.TaskID(), err, id)
		}
		if err := restored.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
}

func queuedIDs(p *WorkerPool) []string {
	var ids []string
	for _, t := range p.TaskQueue().QueuedTasks() {
		ids = append(ids, t.TaskID())
	}
	return ids
}

func TestQueueIndex_AuditCatchesDisorder(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.enqueue("a", PriorityNormal)
	h.enqueue("b", PriorityNormal)
	a, b := h.p.c.tasks["a"], h.p.c.tasks["b"]
	a.ordinal, b.ordinal = b.ordinal, a.ordinal // the list order is now against the ordinals
	if err := h.p.CheckInvariants(); !errors.Is(err, ErrStateInvariant) {
		t.Fatalf("CheckInvariants with a list out of order = %v, want StateInvariant", err)
	}
}
