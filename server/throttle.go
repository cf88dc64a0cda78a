package server

import (
	"sync"
	"time"
)

// failureThrottle slows down sources that fail authentication: each source
// has a bucket of burst failure tokens, refilled one per refill interval; a
// failure takes a token, and while a source's bucket is empty its requests
// are refused before their key is looked at. So a source learns the outcome
// of at most burst + t/refill key checks in time t, and a flood of bad keys
// costs one map lookup per request.
//
// The table is bounded: a source whose bucket is full again carries no
// state and is dropped; when the table is full of sources that are still
// owed tokens, a new source is not tracked (it is not throttled; its
// failures are still audited). NB: failing open there keeps a flood from
// many addresses from throttling every newcomer. It is safe for concurrent
// use.
type failureThrottle struct {
	burst  float64
	refill time.Duration
	max    int

	mu sync.Mutex
	// Invariant: len(buckets) <= max; every bucket has tokens < burst as of
	// its last update or is about to be pruned.
	buckets   map[string]*bucket
	lastPrune time.Time
}

type bucket struct {
	tokens float64
	at     time.Time // time tokens was computed
}

func newFailureThrottle(burst int, refill time.Duration, maxSources int) *failureThrottle {
	return &failureThrottle{burst: float64(burst), refill: refill, max: maxSources, buckets: map[string]*bucket{}}
}

// level returns b's tokens at now.
func (t *failureThrottle) level(b *bucket, now time.Time) float64 {
	d := now.Sub(b.at)
	if d <= 0 {
		return b.tokens
	}
	return min(t.burst, b.tokens+float64(d)/float64(t.refill))
}

// retryAfter returns how long src must wait before its next attempt is
// looked at, or 0 when it may try now.
func (t *failureThrottle) retryAfter(src string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.buckets[src]
	if !ok {
		return 0
	}
	tok := t.level(b, now)
	if tok >= 1 {
		return 0
	}
	return time.Duration((1 - tok) * float64(t.refill))
}

// fail takes one token from src's bucket.
func (t *failureThrottle) fail(src string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.buckets[src]
	if !ok {
		if len(t.buckets) >= t.max {
			t.pruneLocked(now)
		}
		if len(t.buckets) >= t.max {
			return
		}
		b = &bucket{tokens: t.burst, at: now}
		t.buckets[src] = b
	}
	b.tokens = max(0, t.level(b, now)-1)
	b.at = now
}

// pruneLocked drops the sources whose bucket is full again, at most once
// per refill interval (an O(n) walk).
func (t *failureThrottle) pruneLocked(now time.Time) {
	if now.Sub(t.lastPrune) < t.refill {
		return
	}
	t.lastPrune = now
	for src, b := range t.buckets {
		if t.level(b, now) >= t.burst {
			delete(t.buckets, src)
		}
	}
}

// sources returns the number of tracked sources.
func (t *failureThrottle) sources() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.buckets)
}
