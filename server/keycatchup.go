package server

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/termivar/distributed/node"
)

// Catching up before refusing an unknown key. A node authenticates against
// its own applied key table, which may lag behind what the cluster has
// acknowledged: a new leader applies the entries its predecessor committed
// only after its per-term barrier, so a key whose creation was acknowledged
// a moment ago can be missing from it. A node therefore never answers
// "unknown API key" from a table that may lag:
//
//   - a follower does not decide a key it does not know: it forwards the
//     request, and the leader decides (forward.go); when it cannot (no
//     leader known, the leader unreachable, a worker session, a request
//     already forwarded) it answers Unavailable / not_leader, which
//     clients retry — never Unauthenticated;
//   - the leader, before it refuses a key it does not know, passes a
//     linearizable barrier (Backend.LinearizableRead: every entry committed
//     before the barrier began is applied, and a quorum still follows it)
//     and looks again. A key still unknown then is refused (and charged to
//     its source, preauth.go); a barrier that fails or takes longer than
//     KeyCatchUpTimeout is answered Unavailable (not_leader when this node
//     lost leadership), never Unauthenticated, and charged to nobody.
//
// Unknown keys are what an attacker sends, so the barrier is shared: at
// most one runs at a time, and every request that arrives while one runs
// waits for the next one, which then serves all of them (a request cannot
// ride on a barrier that began before it arrived: that barrier may predate
// the key's acknowledgement). Requests wait holding a pre-authentication
// slot (in preauth, or in localGate for a request preauth let on as a
// follower's), so at most Limits.MaxPreAuthRequests of them wait at once,
// each for at most two barriers (the one running when it arrived, then
// its own), 2 × KeyCatchUpTimeout. One source may hold at most
// KeyCatchUpsPerSource of those waits at once, and all sources together
// half of Limits.MaxPreAuthRequests (more are answered busy at once,
// without a barrier), so neither a flood of unknown keys from one source
// nor one from many sources can hold every slot for seconds while
// requests with good keys are refused busy: those always find the other
// half. Nothing reaches a handler before the key is known.

// KeyCatchUpTimeout bounds one shared catch-up barrier: a quorum round
// trip on a healthy cluster; a leader that cannot complete one within the
// cluster election timeout is about to step down.
const KeyCatchUpTimeout = time.Second

// KeyCatchUpsPerSource bounds the catch-up waits one source holds at once:
// 1/16 of the default Limits.MaxPreAuthRequests.
const KeyCatchUpsPerSource = 64

// Outcomes of a catch-up, the label of termivar_api_key_catchups_total.
const (
	catchUpFound   = "found"   // the key was known after the barrier
	catchUpUnknown = "unknown" // still unknown: refused Unauthenticated
	catchUpFailed  = "failed"  // no barrier within the bound: Unavailable
)

// keyCatchUp runs the shared barriers. Safe for concurrent use.
type keyCatchUp struct {
	barrierFunc func(ctx context.Context) error
	timeout     time.Duration
	life        context.Context // the server's: Close ends a running barrier
	onBarrier   func()          // counts a barrier (metrics)

	mu      sync.Mutex
	running bool          // a barrier runs
	next    *catchUpRound // the round requests join; nil: none yet
	// Invariant: next != nil only while running (the runner starts it).

	perSource int            // waits one source may hold at once
	bySource  map[string]int // waits held per source. Invariant: every value in 1..perSource
	total     int            // waits all sources may hold at once
	held      int            // waits held. Invariant: held = the sum of bySource ≤ total

	barriers atomic.Uint64 // barriers started (tests)
	waiting  atomic.Int64  // requests waiting for a round (tests)
}

// catchUpRound is one barrier and the requests that wait for it.
type catchUpRound struct {
	done chan struct{} // closed when err is set
	err  error
}

// errCatchUpTimeout ends a wait whose barriers overran their bound.
var errCatchUpTimeout = errors.New("key catch-up: no barrier within its bound")

// admit takes one of src's catch-up waits, or returns false when src
// holds perSource already or all sources hold total; the caller gives a
// taken wait back with release(src).
func (k *keyCatchUp) admit(src string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.bySource[src] >= k.perSource || k.held >= k.total {
		return false
	}
	if k.bySource == nil {
		k.bySource = make(map[string]int)
	}
	k.bySource[src]++
	k.held++
	return true
}

// release gives back a wait admit took for src.
func (k *keyCatchUp) release(src string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.held--
	if k.bySource[src]--; k.bySource[src] == 0 {
		delete(k.bySource, src)
	}
}

// wait returns once a barrier that began after the call has ended: nil
// when it passed, its error otherwise, or ctx's error. It waits at most
// two barriers' bound (the running one, then its own) even when a barrier
// overruns its context: node.LinearizableRead honours ctx only once raft
// took the request (the per-term Barrier may wait up to the node's apply
// timeout to be enqueued, VerifyLeader without a bound).
func (k *keyCatchUp) wait(ctx context.Context) error {
	k.mu.Lock()
	r := k.next
	if r == nil {
		r = &catchUpRound{done: make(chan struct{})}
		k.next = r
	}
	start := !k.running
	if start {
		k.running, k.next = true, nil
	}
	k.mu.Unlock()
	if start {
		go k.run(r)
	}
	k.waiting.Add(1)
	defer k.waiting.Add(-1)
	bound := time.NewTimer(2 * k.timeout)
	defer bound.Stop()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	case <-bound.C:
		return errCatchUpTimeout
	}
}

// run runs r's barrier, then the round that gathered meanwhile, until no
// request waits.
func (k *keyCatchUp) run(r *catchUpRound) {
	for r != nil {
		k.barriers.Add(1)
		if k.onBarrier != nil {
			k.onBarrier()
		}
		ctx, cancel := context.WithTimeout(k.life, k.timeout)
		r.err = k.barrierFunc(ctx)
		cancel()
		close(r.done)
		k.mu.Lock()
		r, k.next = k.next, nil
		k.running = r != nil
		k.mu.Unlock()
	}
}

// settleUnknownKey decides a request whose key preauth found unknown (res
// is that failure): a key this node knows (a wrong secret, a malformed or
// missing key) fails as it is; on the leader the key is looked up again
// after a shared barrier. It returns the new authResult, or the error to
// answer instead (Unavailable: this node cannot decide now).
func (s *Server) settleUnknownKey(r *http.Request, res authResult) (authResult, error) {
	service, method := splitProcedure(r.URL.Path)
	if s.keyKnownLocally(r.Header) {
		// NB: decided again: the key may have been applied since res was
		// (a member catching up); a wrong secret, a malformed or missing
		// key fails the same.
		res.p, res.err = s.authenticate(r.Header, service, method)
		return res, nil
	}
	if !s.node.IsLeader() {
		return res, &apiError{KindNotLeader, "this node does not know the API key yet and cannot ask the leader; retry"}
	}
	if !s.catchUp.admit(res.src) {
		s.cfg.Metrics.AuthRejected("busy")
		return res, &apiError{KindBusy, "too many unknown API keys await a catch-up; retry later"}
	}
	err := s.catchUp.wait(r.Context())
	s.catchUp.release(res.src)
	if err != nil {
		s.cfg.Metrics.KeyCatchUp(catchUpFailed)
		if errors.Is(err, node.ErrNotLeader) {
			return res, &apiError{KindNotLeader, "leadership changed while the API key was looked up; retry"}
		}
		return res, &apiError{KindUnavailable, "could not catch up with the cluster to look up the API key; retry"}
	}
	res.p, res.err = s.authenticate(r.Header, service, method)
	if isUnauthenticated(res.err) {
		s.cfg.Metrics.KeyCatchUp(catchUpUnknown)
	} else {
		s.cfg.Metrics.KeyCatchUp(catchUpFound)
	}
	return res, nil
}

// keyStillLive re-checks, after a read's linearizable barrier, that the
// caller's key was not revoked by an entry the barrier applied (a new
// leader authenticates before its per-term barrier): a revocation
// acknowledged before a read began refuses that read (readBarrier).
// Locally answered procedures have no barrier and are not re-checked
// (docs/node.md, "Keys on a lagging member").
func (s *Server) keyStillLive(p principal) error {
	if p.KeyID == "" {
		return nil
	}
	if _, ok := s.node.Reads().Key(p.KeyID); !ok {
		s.cfg.Metrics.AuthRejected("unauthenticated")
		return errUnauthenticated("unknown API key")
	}
	return nil
}
