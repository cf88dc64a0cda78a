// Queue: Notify(n) wakes the n longest-waiting waiters and no others; a
// woken waiter that leaves passes its wake-up on; WakeBefore wakes exactly
// the waiters a broadcast at that wake-up would have woken; tenants are
// independent. Every check reads channel state without blocking.
package notify

import "testing"

func woken(w *Waiter) bool {
	select {
	case <-w.C():
		return true
	default:
		return false
	}
}

func wokenOf(ws []*Waiter) []bool {
	out := make([]bool, len(ws))
	for i, w := range ws {
		out[i] = woken(w)
	}
	return out
}

func waiters(q *Queue, tenant string, n int) []*Waiter {
	ws := make([]*Waiter, n)
	for i := range ws {
		ws[i] = q.Wait(tenant, 1)
	}
	return ws
}

func checkWoken(t *testing.T, ws []*Waiter, want ...bool) {
	t.Helper()
	got := wokenOf(ws)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("woken = %v, want %v", got, want)
		}
	}
}

func TestQueue_NotifyWakesOldestN(t *testing.T) {
	var q Queue
	ws := waiters(&q, "t", 4)
	q.Notify("t", 1)
	checkWoken(t, ws, true, false, false, false)
	q.Notify("t", 2)
	checkWoken(t, ws, true, true, true, false)
	if n := q.Waiting("t"); n != 1 {
		t.Fatalf("Waiting = %d, want 1", n)
	}
	q.Notify("t", 5) // more than are waiting: wakes the rest, no panic
	checkWoken(t, ws, true, true, true, true)
	if n := q.Woken(); n != 4 {
		t.Fatalf("Woken = %d, want 4", n)
	}
	if n := q.Waiting("t"); n != 0 {
		t.Fatalf("Waiting = %d, want 0", n)
	}
}

func TestQueue_NotifyAll(t *testing.T) {
	var q Queue
	ws := waiters(&q, "t", 3)
	q.Notify("t", All)
	checkWoken(t, ws, true, true, true)
}

func TestQueue_NotifyZeroWakesNone(t *testing.T) {
	var q Queue
	ws := waiters(&q, "t", 2)
	q.Notify("t", 0)
	checkWoken(t, ws, false, false)
}

func TestQueue_TenantsAreIndependent(t *testing.T) {
	var q Queue
	a, b := q.Wait("a", 1), q.Wait("b", 1)
	q.Notify("a", All)
	if !woken(a) || woken(b) {
		t.Fatalf("a woken %v, b woken %v; want true, false", woken(a), woken(b))
	}
}

func TestWaiter_LeavePassesUnusedWakeUp(t *testing.T) {
	var q Queue
	ws := waiters(&q, "t", 3)
	q.Notify("t", 1)
	ws[0].Leave() // woken, did not act on it
	checkWoken(t, ws, true, true, false)
	ws[0].Leave() // idempotent: nothing more passed on
	checkWoken(t, ws, true, true, false)
}

func TestWaiter_LeaveQueuedPassesNothing(t *testing.T) {
	var q Queue
	ws := waiters(&q, "t", 2)
	ws[0].Leave()
	checkWoken(t, ws, false, false)
	if n := q.Waiting("t"); n != 1 {
		t.Fatalf("Waiting = %d, want 1", n)
	}
	q.Notify("t", 1) // goes to the one still waiting
	checkWoken(t, ws, false, true)
}

func TestWaiter_CancelKeepsWakeUp(t *testing.T) {
	var q Queue
	ws := waiters(&q, "t", 2)
	q.Notify("t", 1)
	ws[0].Cancel()
	ws[0].Leave() // after Cancel: gone, nothing passed on
	checkWoken(t, ws, true, false)
}

func TestQueue_WakeBeforeWakesWhatABroadcastWould(t *testing.T) {
	var q Queue
	before := waiters(&q, "t", 3)
	q.Notify("t", 1)
	gen := before[0].Gen()
	if gen == 0 {
		t.Fatal("woken waiter has Gen 0")
	}
	after := waiters(&q, "t", 2) // registered after the wake-up
	q.WakeBefore("t", gen)
	checkWoken(t, before, true, true, true)
	checkWoken(t, after, false, false)
	if before[1].Gen() != gen {
		t.Fatalf("Gen of a waiter woken by WakeBefore = %d, want %d", before[1].Gen(), gen)
	}
	q.WakeBefore("t", gen) // again: those registered later stay asleep
	checkWoken(t, after, false, false)
}

func TestWaiter_GenZeroUntilWoken(t *testing.T) {
	var q Queue
	w := q.Wait("t", 0) // counts as 1
	if w.Gen() != 0 {
		t.Fatalf("Gen = %d before any wake-up", w.Gen())
	}
	q.Notify("t", 1)
	if w.Gen() == 0 {
		t.Fatal("Gen = 0 after the wake-up")
	}
}

func TestQueue_NotifyCoversWants(t *testing.T) {
	var q Queue
	ws := []*Waiter{q.Wait("t", 128), q.Wait("t", 128), q.Wait("t", 1), q.Wait("t", 4)}
	q.Notify("t", 200) // 128 + 128 cover 200
	checkWoken(t, ws, true, true, false, false)
	q.Notify("t", 1)
	checkWoken(t, ws, true, true, true, false)
	ws[3].Leave() // still queued: nothing passed on
	v := q.Wait("t", 2)
	w := q.Wait("t", 2)
	q.Notify("t", 2)
	if !woken(v) || woken(w) {
		t.Fatalf("want 2 woke %v %v, want only the first", woken(v), woken(w))
	}
	v.Leave() // passes its want (2) on: wakes w
	if !woken(w) {
		t.Fatal("Leave did not pass the wake-up on")
	}
}
