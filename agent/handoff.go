package agent

import (
	"context"
	"errors"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// handoff is a finished task's completion handed to the acquire loop, to
// ride on its next Acquire (AcquireRequest.Complete): a worker whose every
// slot is busy then makes one call per task instead of a Complete and an
// Acquire. done receives the item's outcome, exactly once (settle);
// errNotCarried when the Acquire as a whole failed or did not answer for
// it, and the task completes on its own call.
type handoff struct {
	taskID string
	req    *pb.CompleteRequest
	done   chan error // buffered: the loop never waits for the task
}

// errNotCarried says the Acquire that carried a completion failed as a
// whole: the completion may or may not be applied, and a Complete of its
// own (AlreadyCompleted when it was) settles it.
var errNotCarried = errors.New("agent: completion not carried")

// completeCarried hands req, task taskID's completion, to the acquire
// loop when it is waiting for a free slot and returns the completion's
// outcome; ok is false when the loop is not waiting (it is making a call,
// long-polling or gone), or the Acquire that carried it failed as a whole
// or did not answer for it (a server that predates
// AcquireRequest.complete).
func (a *Agent) completeCarried(ctx context.Context, taskID string, req *pb.CompleteRequest) (err error, ok bool) {
	h := &handoff{taskID: taskID, req: req, done: make(chan error, 1)}
	a.mu.Lock()
	if !a.slotWaiting {
		a.mu.Unlock()
		return nil, false
	}
	a.carried = append(a.carried, h)
	a.mu.Unlock()
	select {
	case a.carryCh <- struct{}{}:
	default: // a signal is pending already
	}
	select {
	case err = <-h.done:
		return err, !errors.Is(err, errNotCarried)
	case <-ctx.Done():
		return ctx.Err(), true
	}
}

// waitSlot waits, every slot being busy, until a slot is free or a task
// hands over its completion, and returns the completions handed over with
// the slots free and the tasks running then. A stale signal (a task that
// ended before the loop began to wait, a capacity unchanged) does not end
// the wait: a completion handed over meanwhile still rides. When soft ends
// it hands every completion back (errNotCarried). NB: at most one per
// running task, so fewer than an Acquire's 1 024 items (a worker has at
// most 256 slots).
func (a *Agent) waitSlot(soft context.Context) (hs []*handoff, free, held int) {
	for {
		a.noteWait()
		select {
		case <-soft.Done():
			hs, _, _, _ = a.endSlotWait(true)
			for _, h := range hs {
				a.settle(h, errNotCarried)
			}
			return nil, 0, 0
		case <-a.slotFree:
		case <-a.carryCh:
		}
		if hs, free, held, ok := a.endSlotWait(false); ok {
			return hs, free, held
		}
	}
}

// endSlotWait ends the slot wait and takes the handed-over completions
// when there are some, a slot is free, or always; ok says it ended it.
func (a *Agent) endSlotWait(always bool) (hs []*handoff, free, held int, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	free, held = a.slots-len(a.running), len(a.running)
	if !always && len(a.carried) == 0 && free <= 0 {
		return nil, free, held, false
	}
	a.slotWaiting = false
	hs, a.carried = a.carried, nil
	return hs, free, held, true
}

// carry makes the Acquire that completes hs first (not long-polling: the
// completions' outcomes wait for its answer) and leases as many tasks as
// there are slots then (free when the wait ended, less than 1 while every
// slot is busy, plus the slots of hs), and hands each completion its
// outcome: errNotCarried when the server did not answer for it (the call
// failed, or the server predates AcquireRequest.complete), and its task
// completes with a Complete of its own. Without a slot even then (the
// capacity shrank), nothing is carried.
func (a *Agent) carry(soft context.Context, hs []*handoff, req *pb.AcquireRequest, free int) (*pb.AcquireResponse, error) {
	if free+len(hs) <= 0 {
		for _, h := range hs {
			a.settle(h, errNotCarried)
		}
		return &pb.AcquireResponse{}, nil
	}
	req.WaitSecs, req.MaxTasks = 0, uint32(free+len(hs))
	for _, h := range hs {
		req.Complete = append(req.Complete, h.req)
	}
	resp, err := a.c.Acquire(soft, req)
	for i, h := range hs {
		if err != nil || i >= len(resp.GetCompleted()) {
			a.settle(h, errNotCarried)
		} else {
			a.settle(h, client.ItemError(resp.GetCompleted()[i]))
		}
	}
	return resp, err
}

// settle hands h its outcome (each handoff gets exactly one).
func (a *Agent) settle(h *handoff, err error) {
	h.done <- err
	a.note(loopEvent{kind: evCarried, taskID: h.taskID, acked: !errors.Is(err, errNotCarried)})
}
