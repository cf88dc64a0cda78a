// Command scanhost is an explicit in-process host for the core coordinator:
// it registers workers, enqueues a small scan, and drives every task through
// assignment, start, completion and result storage — with one failure and
// retry and one lost worker along the way — printing each step. It is the
// library-level demo; the service lives in cmd/termivar-coord.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	distributed "github.com/termivar/distributed"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "scanhost:", err)
		os.Exit(1)
	}
}

// host owns one pool and one result store and the logical clock it feeds them.
type host struct {
	pool    *distributed.WorkerPool
	results *distributed.ResultAggregator
	now     uint64
	out     *strings.Builder
}

func (h *host) rev() uint64 { return h.pool.Snapshot().Revision }

func (h *host) say(format string, args ...any) {
	fmt.Fprintf(h.out, "[t=%3d rev=%3d] ", h.now, h.rev())
	fmt.Fprintf(h.out, format+"\n", args...)
}

func run(w interface{ Write([]byte) (int, error) }) error {
	h := &host{pool: distributed.NewWorkerPool(), results: distributed.NewResultAggregator(), now: 1, out: &strings.Builder{}}
	defer func() { _, _ = w.Write([]byte(h.out.String())) }()

	for _, spec := range []distributed.WorkerSpec{
		{WorkerID: "scanner-a", Capacity: 2, Tags: []distributed.WorkerTag{distributed.TagLinux}},
		{WorkerID: "scanner-b", Capacity: 2, CPUBasisPoints: 5000, Tags: []distributed.WorkerTag{distributed.TagLinux, distributed.TagExternal}},
		{WorkerID: "scanner-c", Capacity: 1},
	} {
		tr, err := h.pool.RegisterWorker(h.rev(), h.now, spec)
		if err != nil {
			return err
		}
		h.say("registered %s capacity=%d effective=%d", tr.Value.WorkerID(), tr.Value.Capacity(), tr.Value.EffectiveCapacity())
	}

	targets := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "db.internal", "api.example.com", "10.0.0.9"}
	var ids []string
	for i, target := range targets {
		prio := distributed.PriorityNormal
		if strings.HasSuffix(target, ".internal") {
			prio = distributed.PriorityCritical
		}
		tr, err := h.pool.Enqueue(h.rev(), h.now, distributed.TaskSpec{
			TaskID: fmt.Sprintf("scan-1:%02d", i), ScanID: "scan-1", TargetRef: target, Phases: []uint8{1, 2}, Priority: prio,
		})
		if err != nil {
			return err
		}
		ids = append(ids, tr.Value.TaskID())
		h.say("enqueued %s priority=%s", tr.Value.TaskID(), tr.Value.Priority())
	}

	failedOnce, lostWorker := false, false
	for wave := 1; ; wave++ {
		h.now++
		// Fill every free slot, then work through the wave's leases.
		var leases []distributed.TaskLease
		for {
			tr, err := h.pool.AssignNextAvailable(h.rev(), h.now, 30)
			if errors.Is(err, distributed.ErrNoQueuedTask) || errors.Is(err, distributed.ErrNoAvailableWorker) {
				break
			}
			if err != nil {
				return err
			}
			lease := tr.Value
			task, _, _ := h.pool.GetTask(lease.TaskID())
			h.say("wave %d: leased %s to %s (attempt %d, lease %d, target %s)", wave, lease.TaskID(), lease.WorkerID(), lease.Attempt(), lease.LeaseID(), task.TargetRef())
			leases = append(leases, lease)
		}
		if len(leases) == 0 {
			break
		}
		h.now++
		for _, lease := range leases {
			if _, err := h.pool.StartTask(h.rev(), h.now, lease); err != nil {
				return err
			}
		}
		h.say("wave %d: started %d tasks", wave, len(leases))
		h.now++
		for _, lease := range leases {
			switch {
			case !failedOnce:
				failedOnce = true
				f, err := h.pool.FailTask(h.rev(), h.now, lease)
				if err != nil {
					return err
				}
				h.say("%s failed: %s (retry %d, generation %d)", lease.TaskID(), f.Value.Kind, f.Value.RetryCount, f.Value.TaskGeneration)
				continue
			case !lostWorker && lease.WorkerID() == "scanner-c":
				lostWorker = true
				wk, _, _ := h.pool.GetWorker("scanner-c")
				sum, err := h.pool.DeregisterWorker(h.rev(), h.now, "scanner-c", wk.Generation())
				if err != nil {
					return err
				}
				h.say("lost scanner-c: %d task(s) requeued, %d failed", sum.Value.TasksRequeued, sum.Value.TasksFailed)
				if _, err := h.pool.CompleteTask(h.rev(), h.now, lease); errors.Is(err, distributed.ErrStaleOwnership) {
					h.say("scanner-c's late completion of %s is rejected: %v", lease.TaskID(), err)
				}
				continue
			}
			done, err := h.pool.CompleteTask(h.rev(), h.now, lease)
			if err != nil {
				return err
			}
			task, _, _ := h.pool.GetTask(lease.TaskID())
			result := fmt.Sprintf("%s: open 22,443 (by %s)", task.TargetRef(), lease.WorkerID())
			if _, err := h.results.StoreResult(h.results.Revision(), done.Value.Receipt, []byte(result)); err != nil {
				return err
			}
			h.say("completed %s, result stored (%d bytes)", lease.TaskID(), len(result))
		}
	}
	return h.finish(ids)
}

func (h *host) finish(ids []string) error {
	agg, err := h.results.AggregateResults(ids)
	if err != nil {
		return err
	}
	h.say("aggregated %d results in enqueue order:", len(agg))
	for _, r := range agg {
		fmt.Fprintf(h.out, "    %s  %s\n", r.TaskID, r.Result)
	}
	if err := h.pool.CheckInvariants(); err != nil {
		return err
	}
	s := h.pool.Snapshot()
	h.say("final: %d tasks, %d terminal, %d queued, %d workers; invariants hold", s.TaskRecords, s.TerminalTasks, s.QueuedTasks, s.Workers)
	return nil
}
