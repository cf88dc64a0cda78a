package notify

import (
	"container/list"
	"sync"
)

// All is the n of Queue.Notify that wakes every waiter.
const All = -1

// Queue is a per-tenant queue of Acquire long-polls (server/worker.go):
// Notify(tenant, n) wakes the longest-waiting waiters until their wants
// (the tasks each asks for) cover n, instead of all of them, so k new
// tasks wake about k / want Acquires and the rest stay asleep (no wake-up
// herd, issue 15). It never loses a wake-up the broadcast would have
// delivered, given its callers' part:
//   - a woken waiter that leaves without acting on its wake-up passes it
//     on (Leave);
//   - a woken waiter that finds work it cannot take (tags, capacity) wakes
//     every waiter that the broadcast would have woken (WakeBefore);
//   - a waiter that takes less than its want and leaves work behind wakes
//     waiters for the difference (Notify).
//
// A waiter that registers later looks at the queue before it waits.
//
// A waiter that offers its work (Offer, while it blocks) may instead be
// claimed by the caller that brings the work (Claim): that caller does the
// waiter's work for it in its own log entry and hands it the result
// (Grant), so the waiter does not propose after its wake-up (issue 15:
// one entry less per enqueue at low rates). A claimed waiter always gets
// its grant: Withdraw tells it to wait for it instead of leaving.
//
// Notify runs on the FSM's apply goroutine and never blocks. The zero
// value is ready to use; its methods are safe for concurrent use.
type Queue struct {
	mu  sync.Mutex
	seq uint64                // the last waiter's registration number
	ws  map[string]*list.List // tenant → its waiters (*Waiter), oldest first
	n   uint64                // wake-ups delivered (Woken)
}

// Waiter is one registration in a Queue. Invariant: it is in its
// tenant's list exactly while it is neither woken nor gone.
type Waiter struct {
	q      *Queue
	tenant string
	c      chan struct{}
	seq    uint64        // registration number: waiters registered earlier have lower ones
	want   int           // tasks it asks for (≥ 1): how much of a Notify it covers
	elem   *list.Element // nil once woken or gone
	gen    uint64        // the wake-up's bound (see WakeBefore); 0 until woken
	gone   bool
	// offer is what Claim hands a claimer (nil: not claimable). Invariant:
	// non-nil only while w is queued, or claimed and not yet granted.
	offer any
	// claimed: Claim took w and a Grant will wake it. Invariant: once
	// claimed, w is out of its list and woken only by Grant.
	claimed bool
	granted any // the value Grant handed w (nil: none)
}

// Wait registers a waiter for up to want tasks (less than 1 counts as 1)
// at the back of tenant's queue.
func (q *Queue) Wait(tenant string, want int) *Waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ws == nil {
		q.ws = map[string]*list.List{}
	}
	l := q.ws[tenant]
	if l == nil {
		l = list.New()
		q.ws[tenant] = l
	}
	q.seq++
	w := &Waiter{q: q, tenant: tenant, c: make(chan struct{}), seq: q.seq, want: max(want, 1)}
	w.elem = l.PushBack(w)
	return w
}

// C is closed when the waiter is woken.
func (w *Waiter) C() <-chan struct{} { return w.c }

// Offer makes w claimable (Claim) with offer while it is queued; the
// waiter must be blocked on C from then on, doing nothing Claim's grant
// could duplicate. A nil offer, or a waiter already woken, is a no-op.
func (w *Waiter) Offer(offer any) {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	if w.elem != nil {
		w.offer = offer
	}
}

// Withdraw ends w's offer when its wait ends without a wake-up (deadline,
// caller gone). true: a Claim took w first, and its Grant is on the way —
// the waiter must wait on C for it (a claimer grants promptly), and its
// offer stays for the claimer (Offered); false: w is as before Offer
// (Leave it).
func (w *Waiter) Withdraw() bool {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	if !w.claimed {
		w.offer = nil
	}
	return w.claimed
}

// Claim takes the longest-waiting waiters of tenant that offer their work
// and want at most maxWant tasks out of the queue, until their wants
// cover n tasks, and returns them; the others (looking, not blocked, or
// wanting more) are passed over. The caller must Grant each exactly
// once, promptly.
func (q *Queue) Claim(tenant string, n, maxWant int) []*Waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.ws[tenant]
	if l == nil || n <= 0 {
		return nil
	}
	var out []*Waiter
	for e := l.Front(); e != nil && n > 0; {
		next := e.Next()
		if w := e.Value.(*Waiter); w.offer != nil && w.want <= maxWant {
			l.Remove(e)
			w.elem, w.claimed = nil, true
			out = append(out, w)
			n -= w.want
		}
		e = next
	}
	q.dropEmpty(tenant, l)
	return out
}

// Offered is the offer Claim took w with.
func (w *Waiter) Offered() any {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	return w.offer
}

// Grant hands a claimed waiter v and wakes it (counted in Woken).
// Panics when w was not claimed or was granted before: a lost or double
// grant would lose or duplicate the waiter's work.
func (w *Waiter) Grant(v any) {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	if !w.claimed || w.gen != 0 {
		panic("notify: Grant of a waiter not claimed, or granted twice")
	}
	w.q.n++
	w.granted, w.offer, w.gen = v, nil, w.q.seq+1
	close(w.c)
}

// Granted is the value a Grant handed w (nil: woken otherwise, or not
// yet).
func (w *Waiter) Granted() any {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	return w.granted
}

// Gen is the bound of the wake-up that woke w (0: not woken): WakeBefore
// with it wakes the waiters that registered before that wake-up.
func (w *Waiter) Gen() uint64 {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	return w.gen
}

// Notify wakes the longest-waiting waiters of tenant until their wants
// cover n tasks (All: every waiter; 0: none).
func (q *Queue) Notify(tenant string, n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.ws[tenant]
	if l == nil {
		return
	}
	gen := q.seq + 1
	for e := l.Front(); e != nil && n != 0; e = l.Front() {
		want := e.Value.(*Waiter).want
		q.wake(l, e, gen)
		if n > 0 { // NB: All stays negative: every waiter
			n = max(n-want, 0)
		}
	}
	q.dropEmpty(tenant, l)
}

// WakeBefore wakes every waiter of tenant that registered before the
// wake-up with bound gen: what a broadcast at that moment would have woken.
func (q *Queue) WakeBefore(tenant string, gen uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.ws[tenant]
	if l == nil {
		return
	}
	for e := l.Front(); e != nil && e.Value.(*Waiter).seq < gen; e = l.Front() {
		q.wake(l, e, gen)
	}
	q.dropEmpty(tenant, l)
}

// Leave ends w's wait. A wake-up w received and did not act on goes to
// the next waiter; a waiter still queued just leaves. Leave is idempotent.
func (w *Waiter) Leave() {
	w.q.mu.Lock()
	pass := w.elem == nil && w.gen != 0 && !w.gone
	w.leaveLocked()
	w.q.mu.Unlock()
	if pass {
		w.q.Notify(w.tenant, w.want)
	}
}

// Cancel ends w's wait, keeping a wake-up it received (the caller acted on
// it). Cancel is idempotent.
func (w *Waiter) Cancel() {
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	w.leaveLocked()
}

func (w *Waiter) leaveLocked() {
	w.offer = nil
	if w.elem != nil {
		l := w.q.ws[w.tenant]
		l.Remove(w.elem)
		w.elem = nil
		w.q.dropEmpty(w.tenant, l)
	}
	w.gone = true
}

// Waiting reports how many waiters tenant has queued (tests, metrics).
func (q *Queue) Waiting(tenant string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if l := q.ws[tenant]; l != nil {
		return l.Len()
	}
	return 0
}

// Woken is the number of wake-ups delivered so far, every tenant's
// (tests and benchmarks count the herd with it).
func (q *Queue) Woken() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

func (q *Queue) wake(l *list.List, e *list.Element, gen uint64) {
	q.n++
	w := l.Remove(e).(*Waiter)
	w.elem, w.gen, w.offer = nil, gen, nil
	close(w.c)
}

func (q *Queue) dropEmpty(tenant string, l *list.List) {
	if l.Len() == 0 {
		delete(q.ws, tenant)
	}
}
