package sim

import (
	"cmp"
	"fmt"
	"strings"
	"time"
)

// Config is one simulator run.
type Config struct {
	Seed    uint64
	Steps   int      // 0: the profile's Steps
	Profile *Profile // nil: AllProfiles()[Seed % len(AllProfiles())]
	// SkipKnownDivergences: do not generate inputs of known divergences.
	SkipKnownDivergences bool
	// Shrink bounds the work spent shrinking a failure (replays); 0 = 400.
	Shrink int
}

// Report is what a run did and, if it failed, how to reproduce it.
type Report struct {
	Seed     uint64
	Profile  string
	Stats    Stats
	Duration time.Duration
	Failure  *Failure
}

// Failure is a divergence or a violated check with its reproduction.
type Failure struct {
	Seed    uint64
	Profile string
	Step    int       // index of the failing command (0-based): the shortest failing prefix has Step+1 commands
	Cmd     Command   // the failing command, resolved
	Err     error     // what went wrong
	Prefix  []Command // the generated commands up to and including the failing one
	Shrunk  []Command // a shorter sequence that still fails (resolved), if found
	Skipped bool
}

func (f *Failure) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sim: seed %d (profile %s) fails at step %d (shortest failing prefix: %d commands)\n", f.Seed, f.Profile, f.Step, f.Step+1)
	fmt.Fprintf(&b, "  command: %s\n  %v\n", f.Cmd, f.Err)
	tail := f.Prefix
	if len(tail) > 12 {
		tail = tail[len(tail)-12:]
	}
	fmt.Fprintf(&b, "  last %d commands of the prefix (deltas unresolved):\n", len(tail))
	for _, c := range tail {
		fmt.Fprintf(&b, "    %s (rev%+d now%+d)\n", c, c.RevDelta, c.NowDelta)
	}
	if len(f.Shrunk) > 0 {
		fmt.Fprintf(&b, "  shrunk to %d commands:\n", len(f.Shrunk))
		for _, c := range f.Shrunk {
			fmt.Fprintf(&b, "    %s\n", c)
		}
	}
	fmt.Fprintf(&b, "  reproduce: go test ./distributedtest/sim -run 'TestSimSeed$' -sim.seed=%d -sim.steps=%d -v\n", f.Seed, f.Step+1)
	return b.String()
}

// ProfileFor returns the profile a seed uses by default.
func ProfileFor(seed uint64) Profile {
	ps := AllProfiles()
	return ps[seed%uint64(len(ps))]
}

// Run generates and applies cfg.Steps commands from cfg.Seed, checking after
// every step; at the end it replays the accepted log on a fresh pool.
func Run(cfg Config) Report {
	p := ProfileFor(cfg.Seed)
	if cfg.Profile != nil {
		p = *cfg.Profile
	}
	cfg.Steps = cmp.Or(cfg.Steps, p.Steps)
	start := time.Now()
	rep := Report{Seed: cfg.Seed, Profile: p.Name}
	h, err := NewHarnessFor(p)
	if err != nil {
		rep.Failure = &Failure{Seed: cfg.Seed, Profile: p.Name, Err: err}
		return rep
	}
	g := NewGenerator(NewRandSource(cfg.Seed), p, h.Model)
	if cfg.SkipKnownDivergences {
		g.SkipKnownDivergences()
	}
	var cmds []Command
	for i := 0; i < cfg.Steps; i++ {
		c := g.Next()
		cmds = append(cmds, c)
		resolved, out, err := h.Step(c)
		if err != nil {
			f := &Failure{Seed: cfg.Seed, Profile: p.Name, Step: i, Cmd: resolved, Err: err, Prefix: cmds}
			f.Shrunk = shrink(p, cmds, cfg.Shrink)
			rep.Failure, rep.Stats, rep.Duration = f, h.Stats, time.Since(start)
			return rep
		}
		g.Observe(c, out)
	}
	if err := h.ReplayLog(); err != nil {
		rep.Failure = &Failure{Seed: cfg.Seed, Profile: p.Name, Step: cfg.Steps - 1, Err: fmt.Errorf("determinism: %v", err), Prefix: cmds}
	}
	rep.Stats, rep.Duration = h.Stats, time.Since(start)
	return rep
}

// Replay applies commands (deltas resolved at apply time) to fresh instances
// and returns the index of the first failing step and its error, or -1.
func Replay(p Profile, cmds []Command) (int, []Command, error) {
	h, err := NewHarnessFor(p)
	if err != nil {
		return 0, nil, err
	}
	var resolved []Command
	for i, c := range cmds {
		r, _, err := h.Step(c)
		resolved = append(resolved, r)
		if err != nil {
			return i, resolved, err
		}
	}
	if err := h.ReplayLog(); err != nil {
		return len(cmds) - 1, resolved, err
	}
	return -1, resolved, nil
}

// shrink removes chunks of commands while the sequence still fails, within a
// budget of replays, and returns the resolved shrunk sequence.
func shrink(p Profile, cmds []Command, budget int) []Command {
	budget = cmp.Or(budget, 400)
	cur := append([]Command(nil), cmds...)
	for chunk := len(cur) / 2; chunk >= 1 && budget > 0; chunk /= 2 {
		for i := 0; i+chunk <= len(cur) && budget > 0; {
			try := append(append([]Command(nil), cur[:i]...), cur[i+chunk:]...)
			budget--
			if at, _, err := Replay(p, try); err != nil && at >= 0 {
				cur = try[:at+1]
				continue
			}
			i += chunk
		}
	}
	_, resolved, _ := Replay(p, cur)
	return resolved
}
