package agent

import "slices"

// loopEvent is what the test hook (Agent.hook) is told: the handoff's
// states that tests wait on instead of polling the agent. With no hook
// set none is built.
type loopEvent struct {
	kind   loopEventKind
	taskID string // evFinished, evCarried
	// evSlotWait: the state when the loop (re)began to wait, read under
	// the agent's mutex: the running tasks' IDs (sorted), whether the
	// loop takes hand-overs, and how many are handed over already.
	running []string
	waiting bool
	carried int
	// evCarried: the server answered for the completion (false: it was
	// handed back, errNotCarried).
	acked bool
}

type loopEventKind int

const (
	// evSlotWait: the acquire loop (re)began to wait for a slot.
	evSlotWait loopEventKind = iota + 1
	// evFinished: a task ended and freed its slot.
	evFinished
	// evCarried: the loop handed a carried completion its outcome.
	evCarried
)

// note tells the hook, if any, of ev.
func (a *Agent) note(ev loopEvent) {
	if a.hook != nil {
		a.hook(ev)
	}
}

// noteWait tells the hook, if any, that the loop (re)begins to wait for a
// slot, with the state it waits in.
func (a *Agent) noteWait() {
	if a.hook == nil {
		return
	}
	a.mu.Lock()
	ev := loopEvent{kind: evSlotWait, waiting: a.slotWaiting, carried: len(a.carried)}
	for id := range a.running {
		ev.running = append(ev.running, id)
	}
	a.mu.Unlock()
	slices.Sort(ev.running)
	a.hook(ev)
}
