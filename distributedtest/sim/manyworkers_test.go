package sim

// Goal: the core and the reference model agree with many workers, where
// the live-worker index (liveindex.go) has levels above its slots and its
// ring wraps and is packed: the CI profiles hold at most 8 workers, a ring
// of at most 16 slots, which the index scans without any tree level.
// Method: the simulator's run (every check and the final replay) on
// profiles like "medium" with 40 to 300 worker IDs, -sim.seeds seeds each
// (default 1), from -sim.seed (default 1).

import (
	"fmt"
	"testing"

	distributed "github.com/termivar/distributed"
)

func manyWorkerProfiles() []Profile {
	var out []Profile
	for _, n := range []int{40, 120, 300} {
		out = append(out, Profile{
			Name:    fmt.Sprint("many-workers-", n),
			Limits:  lim(400, 64, 48, 300, n*2/3, 3, 120, 2400, 150),
			Tasks:   500,
			Workers: n,
			Steps:   3000,
		})
	}
	return out
}

func TestSimManyWorkers(t *testing.T) {
	seeds := 1 // more with -sim.seeds (the reviewer ran 16 per profile)
	if *flagSeeds > 0 {
		seeds = *flagSeeds
	}
	first := uint64(1)
	if *flagSeed != 0 {
		first = *flagSeed
	}
	if testing.Short() {
		seeds = 1
	}
	for _, p := range manyWorkerProfiles() {
		total := 0
		for s := first; s < first+uint64(seeds); s++ {
			rep := Run(Config{Seed: s, Steps: *flagSteps, Profile: &p, SkipKnownDivergences: !*flagProbe})
			total += rep.Stats.Steps
			if rep.Failure != nil {
				t.Fatalf("profile %s: %v", p.Name, rep.Failure.Error())
			}
		}
		t.Logf("profile %s: %d seeds, %d commands", p.Name, seeds, total)
	}
}

// TestSimManyWorkers_Reach checks that the profiles above do reach many
// non-offline workers at once (else they would test nothing new): one
// seed each, the most live workers seen must exceed 8 (a ring of more
// than 16 slots: at least one level above the slots).
func TestSimManyWorkers_Reach(t *testing.T) {
	for _, p := range manyWorkerProfiles() {
		h, err := NewHarnessFor(p)
		if err != nil {
			t.Fatal(err)
		}
		g := NewGenerator(NewRandSource(1), p, h.Model)
		most := 0
		for range p.Steps {
			c := g.Next()
			_, out, err := h.Step(c)
			if err != nil {
				t.Fatal(err)
			}
			g.Observe(c, out)
			live := 0
			for _, w := range h.Core.Workers() {
				if w.Status() != distributed.WorkerOffline {
					live++
				}
			}
			most = max(most, live)
		}
		t.Logf("profile %s: at most %d live workers", p.Name, most)
		if most <= 8 {
			t.Errorf("profile %s: at most %d live workers, want more than 8", p.Name, most)
		}
	}
}
