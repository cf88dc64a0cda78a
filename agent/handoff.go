package agent

import (
	"context"
	"errors"
	"log/slog"
	"time"

	distributed "github.com/termivar/distributed"
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
	if !a.slotWaiting || time.Now().Before(a.carryOffUntil) {
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
	a.carryOutcome(len(hs), resp, err)
	return resp, err
}

// Completions stop riding on Acquires after carryStrikeLimit carrying
// Acquires in a row that the server did not answer for, for carryPause:
// a server that predates AcquireRequest.complete ignores the completions,
// so it refuses the Acquire at capacity (it still counts those tasks) or
// answers without Completed, and each such completion cost a refused call
// before its own Complete. A server that knows the field answers for every
// completion it got, even when it then refuses the lease at capacity (its
// view of our load ahead of ours, atCapacity) — twice in a row is rare,
// and a pause only costs the calls completions took before they rode.
const (
	carryStrikeLimit = 2
	carryPause       = 5 * time.Minute
)

// carryOutcome counts a carrying Acquire of n completions that answered
// resp, err: a strike when the server did not answer for them (refused at
// capacity, or no Completed), a reset when it did; other failures (an
// unreachable server) say nothing of the field and count neither way.
func (a *Agent) carryOutcome(n int, resp *pb.AcquireResponse, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case err == nil && len(resp.GetCompleted()) >= n:
		a.carryStrikes = 0
		return
	case err == nil, errors.Is(err, distributed.ErrWorkerAtCapacity):
		a.carryStrikes++
	default:
		return
	}
	if a.carryStrikes >= carryStrikeLimit {
		a.carryStrikes, a.carryOffUntil = 0, time.Now().Add(carryPause)
		a.log.Info("the server does not answer for completions carried on Acquire; completing each with its own call for a while",
			slog.Duration("for", carryPause))
	}
}

// settle hands h its outcome (each handoff gets exactly one).
func (a *Agent) settle(h *handoff, err error) {
	h.done <- err
	a.note(loopEvent{kind: evCarried, taskID: h.taskID, acked: !errors.Is(err, errNotCarried)})
}
