package distributed

// Goal: concurrent callers racing on one revision see exactly one winner; the
// others get RevisionConflict (or a replay/stale error) and the state stays
// consistent. Run with -race.

import (
	"errors"
	"sync"
	"testing"
)

// race runs fs concurrently, all released at once, and returns their errors.
func race(fs ...func() error) []error {
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, len(fs))
	for i, f := range fs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = f()
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

func countWinners(t *testing.T, errs []error) int {
	t.Helper()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case errors.Is(err, ErrRevisionConflict):
		default:
			t.Fatalf("unexpected error %v", err)
		}
	}
	return wins
}

func TestRace_TwoAssignersOneRevision(t *testing.T) {
	for i := 0; i < 200; i++ {
		h := newHarness(t, DefaultLimits())
		h.register("w1", 4)
		h.register("w2", 4)
		h.enqueue("t1", 0)
		h.enqueue("t2", 0)
		rev := h.rev()
		errs := race(
			func() error { _, err := h.p.AssignNextAvailable(rev, h.now, 60); return err },
			func() error { _, err := h.p.AssignNext(rev, h.now, "w2", 60); return err },
			func() error { _, err := h.p.AssignTask(rev, h.now, "t2", "w1", 60); return err },
		)
		if w := countWinners(t, errs); w != 1 {
			t.Fatalf("%d winners", w)
		}
		if h.rev() != rev+1 || h.p.Snapshot().QueuedTasks != 1 {
			t.Fatalf("snapshot %+v", h.p.Snapshot())
		}
		if err := h.p.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRace_CompleteVersusCancel(t *testing.T) {
	for i := 0; i < 200; i++ {
		h := newHarness(t, DefaultLimits())
		h.register("w", 4)
		l := h.running("t", "w", 60)
		rev := h.rev()
		errs := race(
			func() error { _, err := h.p.CompleteTask(rev, h.now, l); return err },
			func() error { _, err := h.p.CancelTask(rev, h.now, OwnershipFromLease(l)); return err },
		)
		if w := countWinners(t, errs); w != 1 {
			t.Fatalf("%d winners", w)
		}
		status := h.task("t").Status()
		if (errs[0] == nil) != (status == TaskCompleted) || (errs[1] == nil) != (status == TaskCancelled) {
			t.Fatalf("errors %v but status %v", errs, status)
		}
		// The loser retried at the new revision sees the winner's outcome.
		if errs[0] != nil {
			if _, err := h.p.CompleteTask(h.rev(), h.now, l); !errors.Is(err, ErrStaleOwnership) {
				t.Fatalf("complete after cancel: %v", err)
			}
		} else if _, err := h.p.CancelTask(h.rev(), h.now, OwnershipFromLease(l)); !errors.Is(err, ErrStaleOwnership) {
			t.Fatalf("cancel after complete: %v", err)
		}
	}
}

func TestRace_CompleteVersusRecovery(t *testing.T) {
	for i := 0; i < 200; i++ {
		h := newHarness(t, DefaultLimits())
		h.register("w", 4)
		l := h.running("t", "w", 60)
		rev := h.rev()
		late := l.ExpiresAt() - 1 // complete is still valid; recovery at expiry recovers
		errs := race(
			func() error { _, err := h.p.CompleteTask(rev, late, l); return err },
			func() error { _, err := h.p.RecoverExpiredLeases(rev, l.ExpiresAt()); return err },
		)
		if w := countWinners(t, errs); w != 1 {
			t.Fatalf("%d winners", w)
		}
		want := TaskCompleted
		if errs[0] != nil {
			want = TaskQueued
		}
		if got := h.task("t").Status(); got != want {
			t.Fatalf("status %v, want %v", got, want)
		}
		if err := h.p.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRace_ManyClientsKeepInvariants(t *testing.T) {
	p, _ := NewWorkerPoolWithLimits(MaximumLimits())
	const workers, tasksPer = 8, 50
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := string(rune('a' + w))
			retry := func(f func(rev uint64) error) {
				for {
					err := f(p.Snapshot().Revision)
					if !errors.Is(err, ErrRevisionConflict) {
						if err != nil {
							t.Errorf("worker %s: %v", id, err)
						}
						return
					}
				}
			}
			retry(func(rev uint64) error {
				_, err := p.RegisterWorker(rev, 1, WorkerSpec{WorkerID: id, Capacity: 1})
				return err
			})
			for i := 0; i < tasksPer; i++ {
				tid := id + "-" + string(rune('A'+i%26)) + string(rune('A'+i/26))
				retry(func(rev uint64) error {
					_, err := p.Enqueue(rev, 1, TaskSpec{TaskID: tid, ScanID: "s", TargetRef: "x"})
					return err
				})
				var lease TaskLease
				retry(func(rev uint64) error {
					tr, err := p.AssignTask(rev, 1, tid, id, 60)
					lease = tr.Value
					return err
				})
				retry(func(rev uint64) error { _, err := p.StartTask(rev, 1, lease); return err })
				retry(func(rev uint64) error { _, err := p.CompleteTask(rev, 1, lease); return err })
			}
		}()
	}
	wg.Wait()
	s := p.Snapshot()
	if s.TerminalTasks != workers*tasksPer || s.Revision != uint64(workers*(1+4*tasksPer)) {
		t.Fatalf("snapshot %+v", s)
	}
	if err := p.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
