// Goal: the same core-versus-model comparison as the simulator, driven by
// pgregory.net/rapid so that a failure is shrunk to a minimal action list.
// Method: a rapid state machine whose actions are the simulator's ops (each
// action builds its arguments with the simulator's generator, drawing every
// choice from rapid), checked by the harness after every action; at the end
// the accepted log is replayed on a fresh pool. Every shrunk counterexample
// found is committed to regress_test.go.
package sim

import (
	"testing"

	"pgregory.net/rapid"
)

type rapidSource struct{ t *rapid.T }

func (s rapidSource) Intn(n int) int {
	if n <= 1 {
		return 0
	}
	return rapid.IntRange(0, n-1).Draw(s.t, "c")
}

func TestRapidStateMachine(t *testing.T) {
	steps, accepted := 0, 0
	defer func() { t.Logf("%d actions, %d accepted", steps, accepted) }()
	rapid.Check(t, func(rt *rapid.T) {
		p := AllProfiles()[rapid.IntRange(0, len(AllProfiles())-1).Draw(rt, "profile")]
		h, err := NewHarnessFor(p)
		if err != nil {
			rt.Fatal(err)
		}
		g := NewGenerator(rapidSource{rt}, p, h.Model)
		apply := func(rt *rapid.T, c Command) {
			r, out, err := h.Step(c)
			rt.Logf("step: %s", r)
			if err != nil {
				rt.Fatalf("%s: %v", r, err)
			}
			g.Observe(c, out)
		}
		actions := map[string]func(*rapid.T){}
		for op := Op(0); op < numOps; op++ {
			weight := opWeights[op]
			if weight == 0 {
				continue
			}
			actions[op.String()] = func(rt *rapid.T) {
				g.SetSource(rapidSource{rt})
				apply(rt, g.Build(op))
			}
		}
		actions["duplicate"] = func(rt *rapid.T) {
			g.SetSource(rapidSource{rt})
			c, ok := g.Duplicate()
			if !ok {
				rt.Skip("nothing to duplicate")
			}
			apply(rt, c)
		}
		rt.Repeat(actions)
		steps += h.Stats.Steps
		accepted += h.Stats.Accepted
		if err := h.ReplayLog(); err != nil {
			rt.Fatalf("determinism: %v", err)
		}
	})
}
