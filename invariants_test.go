package distributed

// Goal: CheckInvariants detects each kind of corruption it claims to audit
// (so the audit the simulator and Restore rely on can actually fail).

import (
	"errors"
	"testing"
)

func TestCheckInvariants_DetectsCorruption(t *testing.T) {
	corruptions := map[string]func(c *coordinator){
		"active counter":        func(c *coordinator) { c.active++ },
		"terminal counter":      func(c *coordinator) { c.terminal-- },
		"worker current tasks":  func(c *coordinator) { c.workers["a"].current++ },
		"lease worker gen":      func(c *coordinator) { c.tasks["leased"].lease.workerGeneration++ },
		"lease and proof":       func(c *coordinator) { c.tasks["running"].hasProof = true },
		"implicit attempt":      func(c *coordinator) { c.tasks["failed"].lastAttemptImplicit = true },
		"fence with a lease":    func(c *coordinator) { c.tasks["done"].proofIsFence = true },
		"queued without queue":  func(c *coordinator) { c.queue.Delete(c.tasks["queued"]) },
		"not in the age list":   func(c *coordinator) { c.ages.remove(c.tasks["queued"]) },
		"not in finish list":    func(c *coordinator) { c.finished.remove(c.tasks["done"]) },
		"status without lease":  func(c *coordinator) { c.tasks["queued"].status = TaskRunning },
		"retry vs generation":   func(c *coordinator) { c.tasks["queued"].generation++ },
		"record version zero":   func(c *coordinator) { c.tasks["queued"].version = 0 },
		"receipt mismatch":      func(c *coordinator) { c.tasks["done"].lease.leaseID = c.lastLeaseID + 1 },
		"cancel proof":          func(c *coordinator) { c.tasks["cancel"].hasProof = false },
		"expired with proof":    func(c *coordinator) { c.tasks["old-queued"].hasProof = true },
		"queued with proof":     func(c *coordinator) { c.tasks["young"].hasProof = true },
		"failed with retries":   func(c *coordinator) { c.tasks["failed"].status = TaskCompleted },
		"lease id beyond issue": func(c *coordinator) { c.lastLeaseID = 0 },
		"future heartbeat":      func(c *coordinator) { c.workers["b"].lastHeartbeat = c.logicalTime + 1 },
		"offline worker linked": func(c *coordinator) { c.workers["gone"].status = WorkerHealthy },
		"stale key score":       func(c *coordinator) { c.workers["b"].key += 1 << rankBits },
		"stale key rank":        func(c *coordinator) { c.workers["b"].key++ },
		"vacant slot with key":  func(c *coordinator) { c.alive.key[c.alive.slotOf(c.alive.tail)] = 1 << rankBits },
		"stale slot key copy":   func(c *coordinator) { c.alive.key[c.workers["b"].slot]++ },
		"stale slot heartbeat":  func(c *coordinator) { c.alive.hb[c.workers["b"].slot]-- },
		"worker in other slot":  func(c *coordinator) { c.workers["b"].slot = c.workers["a"].slot },
		"head past a worker":    func(c *coordinator) { c.alive.head++ },
		"linked count":          func(c *coordinator) { c.alive.n++ },
		"stale cached best":     func(c *coordinator) { c.alive.best, c.alive.bestOK = -1, true },
		"bad utilization":       func(c *coordinator) { c.workers["b"].cpu = 10001 },
		"invalid tag bit":       func(c *coordinator) { c.workers["b"].tagBits = 1 << (TagExternal + 1) },
		"invalid target":        func(c *coordinator) { c.tasks["queued"].target = "" },
		"no scan pair":          func(c *coordinator) { c.tasks["queued"].meta = nil },
		"invalid scan in pair":  func(c *coordinator) { c.tasks["done"].meta = &taskMeta{scanID: "bad id"} },
	}
	for name, corrupt := range corruptions {
		t.Run(name, func(t *testing.T) {
			h := busyPool(t)
			if err := h.p.CheckInvariants(); err != nil {
				t.Fatalf("clean pool: %v", err)
			}
			corrupt(h.p.c)
			err := h.p.CheckInvariants()
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrStateInvariant) || e.Reason == "" {
				t.Fatalf("CheckInvariants after %s = %v, want ErrStateInvariant with a reason", name, err)
			}
			if h.p.TaskQueue().CheckInvariants() == nil {
				t.Fatal("the facade's audit disagrees")
			}
		})
	}
}

// The age list must stay in creation-time order (I3): a task moved behind
// a younger one is caught although every count still matches.
func TestCheckInvariants_AgeListOrder(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.enqueue("a", PriorityNormal)
	h.now++
	h.enqueue("b", PriorityNormal)
	c := h.p.c
	a := c.tasks["a"]
	c.ages.remove(a)
	c.ages.push(a)
	if err := h.p.CheckInvariants(); !errors.Is(err, ErrStateInvariant) {
		t.Fatalf("CheckInvariants with the age list out of order = %v, want StateInvariant", err)
	}
}
