package distributed

import "github.com/google/btree"

// Worker ranks: the live-worker index breaks ties on the worker ID
// (contract A.9: most available slots, then the smallest ID). Comparing ID
// strings at every level of the index made assignment and heartbeats cost
// more with more workers, so each worker carries a rank instead: an
// integer below rankLimit (2^48, so that it packs with the score into one
// selection key, liveindex.go) given when it
// is registered, between the ranks of its neighbours in ID order, and
// compared in place of the ID.
//
// Invariant (I9): byID holds every worker record in ID order, and the
// ranks are strictly increasing along it and in [1, rankLimit), so rank
// order is ID order.
// Ranks are derived state: they are not exported, Restore gives them anew,
// and they never decide anything the ID order would decide differently.

// rankStep is the most a new rank moves away from its lower neighbour:
// registrations in increasing ID order, the common case (worker-1,
// worker-2, …), use up a gap 2^24 at a time instead of halving it, and
// the rest of the gap stays for IDs registered in between later.
const rankStep = 1 << 24

// rankBetween returns a rank strictly between lo and hi (hi − lo ≥ 2):
// before the first ID, half of hi (so the gap above stays wide);
// otherwise rankStep above lo, or the midpoint when the gap is narrower
// than two steps.
func rankBetween(lo, hi uint64) uint64 {
	if lo == 0 {
		return hi / 2
	}
	return lo + min((hi-lo)/2, rankStep)
}

func workerIDLess(a, b *workerRec) bool { return a.id < b.id }

func newWorkerIndex() *btree.BTreeG[*workerRec] { return btree.NewG(btreeDegree, workerIDLess) }

// addRanked inserts w (not yet indexed) into byID and gives it a rank
// between its neighbours'. When the neighbours leave no room, every worker
// is re-ranked evenly in ID order (O(workers), rare: each re-rank leaves a
// gap of at least 2^36 between neighbours at MaxWorkers, room for 2^12
// registrations in increasing ID order or 24 halvings after the first
// step). Re-ranking keeps the order; the live-worker index rebuilds its
// tree from the new keys.
func (c *coordinator) addRanked(w *workerRec) {
	lo, hi := uint64(0), uint64(rankLimit)
	c.byID.DescendLessOrEqual(w, func(p *workerRec) bool { lo = p.rank; return false })
	c.byID.AscendGreaterOrEqual(w, func(s *workerRec) bool { hi = s.rank; return false })
	c.byID.ReplaceOrInsert(w)
	if hi-lo < 2 {
		c.rerank()
		return
	}
	w.rank = rankBetween(lo, hi)
}

// rerank gives every worker an evenly spaced rank in ID order, and with
// it a new selection key.
func (c *coordinator) rerank() {
	step := (rankLimit - 1) / uint64(c.byID.Len()+1)
	r := uint64(0)
	c.byID.Ascend(func(w *workerRec) bool {
		r += step
		w.rank = r
		w.rescore()
		return true
	})
	// The tree's copies of the keys follow (liveindex.go).
	c.alive.rebuild()
}

// auditRanks checks I9's rank part: byID holds exactly the worker
// records, in ID order, with strictly increasing ranks.
func (c *coordinator) auditRanks() *Error {
	if c.byID.Len() != len(c.workers) {
		return auditError("I9: the worker ID index differs from the worker records")
	}
	ok := true
	var prev *workerRec
	c.byID.Ascend(func(w *workerRec) bool {
		ok = c.workers[w.id] == w && w.rank != 0 && w.rank < rankLimit && (prev == nil || (prev.id < w.id && prev.rank < w.rank))
		prev = w
		return ok
	})
	if !ok {
		return auditError("I9: worker ranks are not in worker-ID order")
	}
	return nil
}
