package server

// Goal: the dashboard's failures list names exactly the tasks whose newest
// ended attempt failed (or that expired), with the worker's reason or the
// node's explanation. Method: a core WorkerPool (pure, no node) driven
// through each way an attempt can end; failureOf is checked for every task.

import (
	"testing"

	distributed "github.com/termivar/distributed"
)

type corePool struct {
	t   *testing.T
	p   *distributed.WorkerPool
	now uint64
}

func (c *corePool) rev() uint64 { return c.p.Snapshot().Revision }

func (c *corePool) must(err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
}

// lease enqueues task id and leases it to worker w (started).
func (c *corePool) lease(id, w string) distributed.TaskLease {
	c.t.Helper()
	_, err := c.p.TaskQueue().Enqueue(c.rev(), c.now, distributed.TaskSpec{TaskID: id, ScanID: "s", TargetRef: "x"})
	c.must(err)
	return c.relet(id, w)
}

// relet leases queued task id to worker w again (started).
func (c *corePool) relet(id, w string) distributed.TaskLease {
	c.t.Helper()
	tr, err := c.p.AssignTask(c.rev(), c.now, id, w, 10)
	c.must(err)
	_, err = c.p.StartTask(c.rev(), c.now, tr.Value)
	c.must(err)
	return tr.Value
}

func TestFailureOf_EachWayAnAttemptEnds(t *testing.T) {
	t.Parallel()
	c := &corePool{t: t, p: distributed.NewWorkerPool(), now: 100}
	for _, w := range []string{"w1", "w2"} {
		_, err := c.p.RegisterWorker(c.rev(), c.now, distributed.WorkerSpec{WorkerID: w, Capacity: 8})
		c.must(err)
	}
	// failed with a reason, requeued
	l := c.lease("reason", "w1")
	_, err := c.p.FailTaskWithReason(c.rev(), c.now, l, "exit status 2: no route to host")
	c.must(err)
	// failed, then completed on the next attempt: not a failure
	l = c.lease("recovered", "w1")
	_, err = c.p.FailTaskWithReason(c.rev(), c.now, l, "exit status 1")
	c.must(err)
	l = c.relet("recovered", "w1")
	_, err = c.p.CompleteTask(c.rev(), c.now, l)
	c.must(err)
	// cancelled while running: not a failure
	c.lease("cancelled", "w1")
	_, err = c.p.CancelTaskByID(c.rev(), c.now, "cancelled")
	c.must(err)
	// worker lost
	c.lease("lost", "w2")
	_, err = c.p.DeregisterWorker(c.rev(), c.now, "w2", 1)
	c.must(err)
	// lease expired
	c.lease("expiring", "w1")
	c.now += 20
	_, err = c.p.RecoverExpiredLeases(c.rev(), c.now)
	c.must(err)
	// never attempted, then expired by the task TTL (with every other
	// non-terminal task)
	_, err = c.p.TaskQueue().Enqueue(c.rev(), c.now, distributed.TaskSpec{TaskID: "queued", ScanID: "s", TargetRef: "x"})
	c.must(err)
	want := map[string]struct{ status, outcome, reason string }{
		"reason":   {"queued", "failed", "exit status 2: no route to host"},
		"lost":     {"queued", "worker_lost", "worker lost (deregistered or declared dead)"},
		"expiring": {"queued", "lease_expired", "lease expired (the worker stopped renewing it)"},
	}
	check(t, c, want)
	c.now += 1000
	_, err = c.p.ExpireOldTasks(c.rev(), c.now, 500)
	c.must(err)
	check(t, c, map[string]struct{ status, outcome, reason string }{
		"reason":   {"expired", "task_expired", "task TTL expired; last attempt: exit status 2: no route to host"},
		"lost":     {"expired", "task_expired", "task TTL expired; last attempt: worker lost (deregistered or declared dead)"},
		"expiring": {"expired", "task_expired", "task TTL expired; last attempt: lease expired (the worker stopped renewing it)"},
		"queued":   {"expired", "task_expired", "task TTL expired"},
	})
}

func check(t *testing.T, c *corePool, want map[string]struct{ status, outcome, reason string }) {
	t.Helper()
	for _, task := range c.p.TaskQueue().Tasks() {
		f, ok := failureOf(task)
		w, listed := want[task.TaskID()]
		if ok != listed {
			t.Fatalf("failureOf(%s, %s) listed = %v, want %v (%v)", task.TaskID(), task.Status(), ok, listed, f)
		}
		if ok && (f.GetStatus() != w.status || f.GetOutcome() != w.outcome || f.GetReason() != w.reason || f.GetFailedAt() == 0) {
			t.Fatalf("failureOf(%s) = %v, want %+v", task.TaskID(), f, w)
		}
	}
}
