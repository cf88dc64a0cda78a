// Goal: find any command sequence on which the core (root package) and the
// reference model (distributedtest/model) disagree, or on which the core
// breaks an invariant. Method: a seeded, single-goroutine simulator generates
// long random command sequences with faults (stale and future revisions,
// regressing time, lost replies, duplicates, reordering, forged and altered
// proofs, capacity pressure, worker loss, expiry, restarts through
// ExportState/RestoreWorkerPool), compares every outcome and record, and at
// the end replays the accepted log on a fresh pool for byte-identical state.
// Every failure prints its seed, the shortest failing prefix and a shrunk
// sequence, and replays from the seed alone.
package sim

import (
	"flag"
	"os"
	"strconv"
	"testing"
	"time"
)

var (
	flagSeed     = flag.Uint64("sim.seed", 0, "run only this seed (TestSimSeed)")
	flagSteps    = flag.Int("sim.steps", 0, "commands per seed (0: the profile's default)")
	flagProbe    = flag.Bool("sim.probe", true, "also generate inputs of known, still open divergences (Config.SkipKnownDivergences when false)")
	flagSeeds    = flag.Int("sim.seeds", 0, "number of seeds for TestSimLong")
	flagCommands = flag.Int("sim.commands", 0, "TestSimLong: run consecutive seeds until this many commands ran")
)

// fixedSeeds at each profile's default length give the CI budget:
// 52 seeds per profile, 209 040 commands.
const fixedSeeds = 52 * 6

func TestMain(m *testing.M) {
	flag.Parse()
	// NB: rapid writes a fail file under testdata/ when a check fails; keep
	// the source tree clean unless asked (the failure output names the seed
	// that reproduces it: -rapid.seed).
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["rapid.failfile"] && !set["rapid.nofailfile"] {
		if err := flag.Set("rapid.nofailfile", "true"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

func runSeeds(t *testing.T, seeds []uint64, steps int) {
	t.Helper()
	total, start := 0, time.Now()
	var agg Stats
	for _, s := range seeds {
		rep := Run(Config{Seed: s, Steps: steps, SkipKnownDivergences: !*flagProbe})
		total += rep.Stats.Steps
		agg.Accepted += rep.Stats.Accepted
		agg.Rejected += rep.Stats.Rejected
		agg.Replays += rep.Stats.Replays
		agg.Restarts += rep.Stats.Restarts
		agg.Purges += rep.Stats.Purges
		agg.Purged += rep.Stats.Purged
		agg.Relived += rep.Stats.Relived
		for k, v := range rep.Stats.Kinds {
			if agg.Kinds == nil {
				agg.Kinds = map[string]int{}
			}
			agg.Kinds[k] += v
		}
		if rep.Failure != nil {
			t.Fatal(rep.Failure.Error())
		}
	}
	el := time.Since(start)
	t.Logf("%d seeds, %d commands (%d accepted, %d replays, %d rejected, %d restarts) in %v: %.0f commands/s",
		len(seeds), total, agg.Accepted, agg.Replays, agg.Rejected, agg.Restarts, el.Round(time.Millisecond), float64(total)/el.Seconds())
	t.Logf("purges: %d accepted, %d tasks purged, %d purged IDs enqueued again", agg.Purges, agg.Purged, agg.Relived)
	t.Logf("rejections by kind: %v", agg.Kinds)
}

func TestSimFixedSeeds(t *testing.T) {
	if *flagSeed != 0 {
		t.Skip("-sim.seed given")
	}
	seeds := make([]uint64, fixedSeeds)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	if testing.Short() {
		seeds = seeds[:len(AllProfiles())*2]
	}
	runSeeds(t, seeds, 0)
}

func TestSimTimeSeeded(t *testing.T) {
	if *flagSeed != 0 {
		t.Skip("-sim.seed given")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SIM_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("time seed: %d (reproduce: go test ./distributedtest/sim -run 'TestSimSeed$' -sim.seed=%d -v)", seed, seed)
	rep := Run(Config{Seed: seed, SkipKnownDivergences: !*flagProbe})
	if rep.Failure != nil {
		t.Fatal(rep.Failure.Error())
	}
}

// TestSimSeed replays one seed: go test -run 'TestSimSeed$' -sim.seed=N -sim.steps=K -v.
func TestSimSeed(t *testing.T) {
	if *flagSeed == 0 {
		t.Skip("no -sim.seed")
	}
	rep := Run(Config{Seed: *flagSeed, Steps: *flagSteps, SkipKnownDivergences: !*flagProbe})
	t.Logf("seed %d profile %s: %+v in %v", rep.Seed, rep.Profile, rep.Stats, rep.Duration)
	if rep.Failure != nil {
		t.Fatal(rep.Failure.Error())
	}
}

// TestSimLong runs many seeds from -sim.seed (default 1 000 000) on: either
// -sim.seeds of them or as many as -sim.commands needs (make sim):
//
//	go test ./distributedtest/sim -run TestSimLong -sim.commands 10000000 -timeout 0 -v
func TestSimLong(t *testing.T) {
	if *flagSeeds == 0 && *flagCommands == 0 {
		t.Skip("no -sim.seeds or -sim.commands")
	}
	seed := uint64(1_000_000)
	if *flagSeed != 0 {
		seed = *flagSeed
	}
	start, total, n := time.Now(), 0, 0
	var agg Stats
	for ; (*flagSeeds > 0 && n < *flagSeeds) || (*flagSeeds == 0 && total < *flagCommands); n++ {
		rep := Run(Config{Seed: seed + uint64(n), Steps: *flagSteps, SkipKnownDivergences: !*flagProbe})
		total += rep.Stats.Steps
		agg.Accepted += rep.Stats.Accepted
		agg.Replays += rep.Stats.Replays
		agg.Rejected += rep.Stats.Rejected
		agg.Purges += rep.Stats.Purges
		agg.Purged += rep.Stats.Purged
		agg.Relived += rep.Stats.Relived
		agg.Kinds = mergeKinds(agg.Kinds, rep.Stats.Kinds)
		if rep.Failure != nil {
			t.Fatal(rep.Failure.Error())
		}
		if n%1000 == 999 {
			t.Logf("%d seeds, %d commands, %.0f commands/s", n+1, total, float64(total)/time.Since(start).Seconds())
		}
	}
	el := time.Since(start)
	t.Logf("seeds %d..%d: %d commands (%d accepted, %d replays, %d rejected), 0 divergences, in %v: %.0f commands/s",
		seed, seed+uint64(n)-1, total, agg.Accepted, agg.Replays, agg.Rejected, el.Round(time.Second), float64(total)/el.Seconds())
	t.Logf("purges: %d accepted, %d tasks purged, %d purged IDs enqueued again; task_purged rejections: %d",
		agg.Purges, agg.Purged, agg.Relived, agg.Kinds["task_purged"])
}

func mergeKinds(into, from map[string]int) map[string]int {
	if into == nil {
		into = map[string]int{}
	}
	for k, v := range from {
		into[k] += v
	}
	return into
}
