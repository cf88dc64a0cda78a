package sim

// Goal: the simulator really drives the commands and fields beyond contract
// Part A that attempts.go and rerun.go add, and purges of re-run tasks (a
// generator that never produced them would let a core/model divergence in
// them go unseen). Method: run
// fixed seeds through the harness and count what the core answered.

import (
	"testing"

	distributed "github.com/termivar/distributed"
)

func TestSim_CoversAttemptsAndReruns(t *testing.T) {
	var reruns, rerunRejected, timedOut, longReason, reasons, rerunPurged int
	outcomes := map[distributed.AttemptOutcome]int{}
	for seed := uint64(1); seed <= uint64(3*len(AllProfiles())); seed++ {
		p := ProfileFor(seed)
		h, err := NewHarnessFor(p)
		if err != nil {
			t.Fatal(err)
		}
		g := NewGenerator(NewRandSource(seed), p, h.Model)
		for range p.Steps {
			c := g.Next()
			rerun := map[string]bool{} // tasks that were re-run, before a purge
			if c.Op == OpPurge {
				for _, task := range h.Core.Tasks() {
					rerun[task.TaskID()] = task.Reruns() > 0
				}
			}
			rc, out, err := h.Step(c)
			if err != nil {
				t.Fatalf("seed %d: %s: %v", seed, rc, err)
			}
			g.Observe(c, out)
			if ids, ok := out.Value.([]string); ok && rc.Op == OpPurge && out.Err == nil {
				for _, id := range ids {
					if rerun[id] {
						rerunPurged++
					}
				}
			}
			switch {
			case rc.Op == OpRerun && out.Err == nil && len(out.Value.(distributed.RerunOutcome).Requeued) > 0:
				reruns++
			case rc.Op == OpRerun && out.Err != nil:
				rerunRejected++
			case out.Err != nil && out.Err.Kind == distributed.KindAttemptTimedOut:
				timedOut++
			case out.Err != nil && out.Err.Kind == distributed.KindFailureReasonTooLong:
				longReason++
			}
		}
		for _, task := range h.Core.Tasks() {
			for _, a := range task.Attempts() {
				outcomes[a.Outcome()]++
				if a.Reason() != "" {
					reasons++
				}
			}
		}
	}
	t.Logf("re-runs %d (rejected %d), re-run tasks purged %d, renewals past the deadline %d, oversize reasons %d, retained reasons %d, outcomes %v",
		reruns, rerunRejected, rerunPurged, timedOut, longReason, reasons, outcomes)
	if reruns == 0 || rerunRejected == 0 || rerunPurged == 0 || timedOut == 0 || longReason == 0 || reasons == 0 {
		t.Fatal("the generator does not reach every new command path")
	}
	for _, o := range distributed.AllAttemptOutcomes() {
		if outcomes[o] == 0 {
			t.Fatalf("no attempt ended with outcome %v", o)
		}
	}
}
