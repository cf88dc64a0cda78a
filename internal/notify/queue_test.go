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

// Claim takes only waiters that offer, oldest first, until their wants
// cover n; Grant wakes each with its value, counted in Woken, and a
// waiter passed over stays queued for Notify.
func TestQueue_ClaimTakesOfferingWaitersOldestFirst(t *testing.T) {
	var q Queue
	looking := q.Wait("t", 1) // registered, not offering: it is looking at the state
	a, b, c := q.Wait("t", 2), q.Wait("t", 2), q.Wait("t", 2)
	for i, w := range []*Waiter{a, b, c} {
		w.Offer(i)
	}
	if got := q.Claim("other", 4, 2); len(got) != 0 {
		t.Fatalf("Claim of another tenant = %d waiters, want 0", len(got))
	}
	got := q.Claim("t", 3, 2) // 3 tasks: a (2) and b (2) cover them
	if len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("Claim(3) = %v, want [a b]", got)
	}
	if q.Waiting("t") != 2 {
		t.Fatalf("Waiting = %d after the claim, want 2 (looking and c)", q.Waiting("t"))
	}
	if woken(a) || woken(b) {
		t.Fatal("a claimed waiter woke before its grant")
	}
	if big := q.Claim("t", 1, 1); len(big) != 0 { // c wants 2
		t.Fatalf("Claim(1, maxWant 1) = %v, want none: c wants more", big)
	}
	before := q.Woken()
	for i, w := range got {
		if o := w.Offered(); o != i {
			t.Fatalf("Offered = %v, want %d", o, i)
		}
		w.Grant("lease")
	}
	if !woken(a) || !woken(b) || a.Granted() != "lease" || q.Woken()-before != 2 || a.Gen() == 0 {
		t.Fatalf("after Grant: woken %v %v, granted %v, Woken +%d, gen %d", woken(a), woken(b), a.Granted(), q.Woken()-before, a.Gen())
	}
	q.Notify("t", 1) // the looking waiter is still first in line for a plain wake-up
	if !woken(looking) || woken(c) || looking.Granted() != nil {
		t.Fatalf("Notify(1) after the claim: looking %v, c %v, want the looking waiter woken without a grant", woken(looking), woken(c))
	}
}

// Withdraw after a claim tells the waiter that its grant is coming;
// without one it leaves the waiter queued and unclaimable; a waiter woken
// by Notify keeps no offer.
func TestQueue_WithdrawAfterClaimWaitsForGrant(t *testing.T) {
	var q Queue
	a, b := q.Wait("t", 1), q.Wait("t", 1)
	a.Offer("a")
	b.Offer("b")
	claimed := q.Claim("t", 1, 1)
	if len(claimed) != 1 || claimed[0] != a {
		t.Fatalf("Claim(1) = %v, want [a]", claimed)
	}
	if !a.Withdraw() {
		t.Fatal("Withdraw of a claimed waiter = false, want true (its grant is coming)")
	}
	// NB: the claimer reads the offer after Claim, maybe after the
	// waiter's wait ended (server grantLeases: a nil offer panicked the
	// enqueue and left the waiter without its grant).
	if o := a.Offered(); o != "a" {
		t.Fatalf("Offered after Withdraw = %v, want the offer Claim took", o)
	}
	if b.Withdraw() {
		t.Fatal("Withdraw of an unclaimed waiter = true")
	}
	if got := q.Claim("t", 1, 1); len(got) != 0 {
		t.Fatalf("Claim after b withdrew = %v, want none", got)
	}
	a.Grant(nil)
	if !woken(a) {
		t.Fatal("a not woken by its grant")
	}
	c := q.Wait("t", 1)
	c.Offer("c")
	q.Notify("t", 2) // wakes b and c the plain way
	if !woken(b) || !woken(c) || c.Offered() != nil || c.Granted() != nil {
		t.Fatalf("Notify: b %v, c %v, c's offer %v", woken(b), woken(c), c.Offered())
	}
	if got := q.Claim("t", 1, 1); len(got) != 0 {
		t.Fatalf("Claim after every waiter woke = %v", got)
	}
}

// A grant to a waiter that was not claimed, or a second grant, panics:
// either would lose or duplicate the waiter's work.
func TestQueue_GrantOnlyOncePerClaim(t *testing.T) {
	var q Queue
	w := q.Wait("t", 1)
	mustPanic(t, "Grant of an unclaimed waiter", func() { w.Grant(1) })
	w.Offer(1)
	q.Claim("t", 1, 1)[0].Grant(1)
	mustPanic(t, "a second Grant", func() { w.Grant(2) })
	if w.Granted() != 1 {
		t.Fatalf("Granted = %v after a refused second grant, want 1", w.Granted())
	}
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatalf("%s did not panic", what)
		}
	}()
	f()
}
