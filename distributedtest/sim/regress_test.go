// Goal: pin every divergence the simulator, the rapid test or the fuzzer
// found between the core and the contract or ADR (or the model), as a plain test that
// names the rule. Method: a short explicit command sequence applied to both
// through the harness; the test fails while the core diverges.
package sim

import (
	"testing"

	distributed "github.com/termivar/distributed"
)

// steps applies commands with explicit (delta 0) revisions and times and
// fails on the first divergence.
func steps(t *testing.T, l distributed.Limits, cmds ...Command) *Harness {
	t.Helper()
	h, err := NewHarness(l)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cmds {
		if r, _, err := h.Step(c); err != nil {
			t.Fatalf("step %d (%s): %v", i, r, err)
		}
	}
	return h
}

// D1 (fixed in the core). contract A.4: a WorkerSpec has "≤ 5 distinct tags
// (stored sorted)": duplicates are fine. ADR 0001: more than five distinct
// values is "too many tags", then an undeclared value is "tag is invalid".
// Six tags that are two distinct tags are valid; six entries with an
// undeclared one fail with "tag is invalid". (Found by seed 1, profile
// small, step 62.)
func TestRegressionD1DuplicateTagsAreNotTooMany(t *testing.T) {
	six := []distributed.WorkerTag{distributed.TagLinux, distributed.TagLinux, distributed.TagLinux,
		distributed.TagLinux, distributed.TagLinux, distributed.TagGPU}
	h := steps(t, distributed.DefaultLimits(),
		Command{Op: OpRegister, WorkerSpec: distributed.WorkerSpec{WorkerID: "w1", Capacity: 1, Tags: six}},
		Command{Op: OpRegister, WorkerSpec: distributed.WorkerSpec{WorkerID: "w2", Capacity: 1, Tags: append(six[:5:5], 9)}},
	)
	w, _, _ := h.Core.GetWorker("w1")
	if got := w.Tags(); len(got) != 2 || got[0] != distributed.TagLinux || got[1] != distributed.TagGPU {
		t.Fatalf("tags = %v, want [linux gpu]", got)
	}
}
