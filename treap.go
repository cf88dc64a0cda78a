package distributed

// The live-worker index: a treap over every non-offline worker, keyed by
// (LastHeartbeat, WorkerID) and augmented with the best eligible worker of
// each subtree. Because a worker is alive at now exactly when
// LastHeartbeat > now − HeartbeatTimeoutSecs, the alive workers are a suffix
// of the key order, so "best alive, healthy worker with a free slot" is one
// root-to-leaf walk (O(log n) expected), and the dead workers that
// PruneDeadWorkers must visit are a prefix.
//
// Priorities come from a fixed hash of the worker ID, so the shape is a
// deterministic function of the set of keys.
//
// Invariant (I9): a worker is in the treap iff it is not offline; its key
// fields (lastHeartbeat, id) and its eligibility inputs are never changed
// while it is linked. Callers unlink, change, then relink (see
// coordinator.touchWorker).
//
// Ties on the ID are broken by the worker's rank instead of comparing the
// ID strings: an integer given at registration (ranks.go) whose order is
// the ID order (I9), so every comparison here is on integers. The
// preference (most available slots, then the smallest ID: contract A.9) is
// one integer per worker, its selection key, so that choosing between two
// workers or two subtree bests is one comparison.

// rankBits is the width of a rank (ranks are in [1, rankLimit)); the
// selection key keeps the bits above it for the score.
const (
	rankBits  = 48
	rankLimit = 1 << rankBits
)

// The score (available slots, at most MaxWorkerCapacity) must fit in the
// 16 bits above the rank: this constant does not compile otherwise.
const _ = uint16(MaxWorkerCapacity)

// selectionKey packs a worker's score (available slots when eligible
// ignoring time, else 0) and its rank so that a higher key is the
// preferred worker: more slots, then the lower rank (the smaller ID, I9).
// Not eligible is 0, below every eligible key, which is at least
// 1<<rankBits.
func selectionKey(score uint32, rank uint64) uint64 {
	if score == 0 {
		return 0
	}
	return uint64(score)<<rankBits | (rankLimit - 1 - rank)
}

func treapPriority(id string) uint64 {
	// FNV-1a followed by the splitmix64 finalizer.
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

func workerKeyLess(a, b *workerRec) bool {
	if a.lastHeartbeat != b.lastHeartbeat {
		return a.lastHeartbeat < b.lastHeartbeat
	}
	return a.rank < b.rank // the ID order (I9)
}

// eligibleIgnoringTime reports the parts of eligibility that do not depend on
// now: healthy and at least one available slot.
func (w *workerRec) eligibleIgnoringTime() bool {
	return w.status == WorkerHealthy && w.availableSlots() > 0
}

// betterWorker returns the preferred of a and b, both eligible and
// rescored: most available slots, then the smallest worker ID (one
// comparison of their selection keys, I9). Either may be nil.
func betterWorker(a, b *workerRec) *workerRec {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.key > b.key:
		return a
	}
	return b
}

// wantKey is w's selection key computed from the record: its available
// slots, or 0 when it is not eligible ignoring time, and its rank.
func (w *workerRec) wantKey() uint64 {
	if !w.eligibleIgnoringTime() {
		return 0
	}
	return selectionKey(w.availableSlots(), w.rank)
}

// rescore recomputes w's cached selection key. Call it whenever w itself
// or its rank changed.
func (w *workerRec) rescore() { w.key = w.wantKey() }

// pull recomputes w's subtree best from its own key and its children's
// cached bests (their bestKey copies: no reads of other records).
//
// A subtree has a best iff its bestKey is above 0 (only eligible workers,
// key ≥ 1<<rankBits, are bests), so "no best yet" is key 0 and needs no
// test of its own: a child's best wins when its key is higher. The two
// children are unrolled: this is the inner step of every refresh
// (docs/benchmarks.md, issue 15).
func (w *workerRec) pull() {
	best, key := (*workerRec)(nil), uint64(0)
	if w.key > 0 {
		best, key = w, w.key
	}
	if c := w.left; c != nil && c.bestKey > key {
		best, key = c.best, c.bestKey
	}
	if c := w.right; c != nil && c.bestKey > key {
		best, key = c.best, c.bestKey
	}
	w.best, w.bestKey = best, key
}

// setBest records b (nil for none) as w's subtree best.
func (w *workerRec) setBest(b *workerRec) {
	w.best, w.bestKey = b, bestKeyOf(b)
}

// bestKeyOf is the cached copy a subtree best implies (0 for none).
func bestKeyOf(b *workerRec) uint64 {
	if b == nil {
		return 0
	}
	return b.key
}

// subtreeBest computes the best eligible worker among w (by its cached key)
// and its children's recorded bests, from the workers themselves (the
// audit's reference for pull).
func (w *workerRec) subtreeBest() *workerRec {
	var best *workerRec
	if w.key > 0 {
		best = w
	}
	if w.left != nil {
		best = betterWorker(best, w.left.best)
	}
	if w.right != nil {
		best = betterWorker(best, w.right.best)
	}
	return best
}

func (w *workerRec) setLeft(c *workerRec) {
	w.left = c
	if c != nil {
		c.parent = w
	}
}

func (w *workerRec) setRight(c *workerRec) {
	w.right = c
	if c != nil {
		c.parent = w
	}
}

// asRoot clears t's parent link and returns t (nil stays nil).
func asRoot(t *workerRec) *workerRec {
	if t != nil {
		t.parent = nil
	}
	return t
}

// treapSplit splits t into keys < k and keys >= k. The returned roots'
// parent links are left for the caller to set.
func treapSplit(t, k *workerRec) (*workerRec, *workerRec) {
	if t == nil {
		return nil, nil
	}
	if workerKeyLess(t, k) {
		l, r := treapSplit(t.right, k)
		t.setRight(l)
		t.pull()
		return t, r
	}
	l, r := treapSplit(t.left, k)
	t.setLeft(r)
	t.pull()
	return l, t
}

// treapMerge joins l and r where every key of l is below every key of r.
func treapMerge(l, r *workerRec) *workerRec {
	switch {
	case l == nil:
		return r
	case r == nil:
		return l
	}
	if l.prio >= r.prio {
		l.setRight(treapMerge(l.right, r))
		l.pull()
		return l
	}
	r.setLeft(treapMerge(l, r.left))
	r.pull()
	return r
}

func treapInsert(root, w *workerRec) *workerRec {
	if last := treapLast(root); last != nil && workerKeyLess(last, w) {
		return treapInsertNewest(root, w)
	}
	w.left, w.right, w.parent = nil, nil, nil
	w.rescore()
	w.pull()
	l, r := treapSplit(root, w)
	return asRoot(treapMerge(treapMerge(l, w), r))
}

// treapInsertNewest links w, whose key the caller knows to be above every
// linked key, without looking for the newest linked worker first.
func treapInsertNewest(root, w *workerRec) *workerRec {
	w.left, w.right, w.parent = nil, nil, nil
	w.rescore()
	w.pull()
	return treapAppend(root, w)
}

// treapLast returns the linked worker with the newest key, or nil.
func treapLast(root *workerRec) *workerRec {
	for root != nil && root.right != nil {
		root = root.right
	}
	return root
}

// treapAppend links w, whose key is above every linked key (a heartbeat
// with a new second: the common case), without split and merge: w takes
// the place on the right spine where its priority belongs, the spine below
// becomes its left subtree, and only the bests w beats change on the way
// up. The shape is the one split and merge would give (same priority
// rule as treapMerge).
func treapAppend(root, w *workerRec) *workerRec {
	var parent *workerRec
	n := root
	for n != nil && n.prio >= w.prio {
		parent, n = n, n.right
	}
	w.setLeft(n)
	w.pull()
	if parent == nil {
		return asRoot(w)
	}
	parent.setRight(w)
	if w.key == 0 {
		return root // the ancestors' subtrees gained no eligible worker
	}
	// w beats a's best iff its key is higher (keys of eligible workers
	// differ, I9); the copy bestKey answers without reading the best's
	// record. Where w does not beat a's best it beats no ancestor's either
	// (each ancestor's best is at least a's).
	for a := parent; a != nil && a.bestKey < w.key; a = a.parent {
		a.best, a.bestKey = w, w.key
	}
	return root
}

// treapRemove unlinks w (which must be linked) and returns the new root:
// w's children are merged into its place, then the bests on the way up are
// recomputed. No key comparisons: the parent links lead up.
func treapRemove(root, w *workerRec) *workerRec {
	m := treapMerge(w.left, w.right)
	p := w.parent
	w.left, w.right, w.parent = nil, nil, nil
	w.setBest(nil)
	switch {
	case p == nil:
		return asRoot(m)
	case p.left == w:
		p.setLeft(m)
	default:
		p.setRight(m)
	}
	for n := p; n != nil; n = n.parent {
		before := n.best
		n.pull()
		if n.best == before && before != w {
			break // the ancestors' inputs are unchanged (see treapRefresh)
		}
	}
	return root
}

// treapRefresh recomputes w's cached key and the bests on its way up to
// the root after a change that kept w's key (LastHeartbeat, ID): O(depth),
// no restructuring and no key comparisons. w must be linked.
func treapRefresh(w *workerRec) {
	oldKey := w.key
	w.rescore()
	switch {
	case w.key == oldKey:
		return // nothing any subtree best depends on has changed
	case w.key < oldKey:
		refreshWorse(w)
		return
	}
	for n := w; n != nil; n = n.parent {
		before := n.best
		n.pull()
		// Above a node whose best is the same other worker as before,
		// nothing changes: every input of the ancestors' bests is as it was.
		if n.best == before && before != w && n != w {
			break
		}
	}
}

// refreshWorse is treapRefresh for a worker whose score fell (an
// assignment): only the subtrees whose best was w can change — w's own and
// the run of ancestors above it whose best is w — so the walk stops at the
// first ancestor with another best. On the way up, the subtree just
// recomputed is carried in registers and only the ancestor and its other
// child are read: this is the hot path of AssignNextAvailable at many
// workers (docs/benchmarks.md, issue 15). The result is pull's: the best
// of one total order (the selection key) whatever the order of comparison.
func refreshWorse(w *workerRec) {
	if w.best != w {
		return // w was not even its own subtree's best: no best changes
	}
	w.pull()
	best, key := w.best, w.bestKey
	for child, n := w, w.parent; n != nil && n.best == w; child, n = n, n.parent {
		if n.key > key {
			best, key = n, n.key
		}
		sib := n.left
		if sib == child {
			sib = n.right
		}
		if sib != nil && sib.bestKey > key {
			best, key = sib.best, sib.bestKey
		}
		n.best, n.bestKey = best, key
	}
}

// treapBestAlive returns the best eligible worker whose LastHeartbeat is
// above cutoff (all workers when allAlive).
func treapBestAlive(root *workerRec, cutoff uint64, allAlive bool) *workerRec {
	if root == nil {
		return nil
	}
	// Fast path: the best eligible worker overall is alive, so it is also the
	// best alive one. Only when it is dead does the walk below run.
	if b := root.best; b != nil && (allAlive || b.lastHeartbeat > cutoff) {
		return b
	}
	var best *workerRec
	for n := root; n != nil; {
		if allAlive || n.lastHeartbeat > cutoff {
			if n.key > 0 {
				best = betterWorker(best, n)
			}
			if n.right != nil {
				best = betterWorker(best, n.right.best)
			}
			n = n.left
		} else {
			n = n.right
		}
	}
	return best
}

// treapFirst returns the linked worker with the oldest heartbeat, or nil.
func treapFirst(root *workerRec) *workerRec {
	for root != nil && root.left != nil {
		root = root.left
	}
	return root
}

// treapDead returns, in key order, every linked worker whose LastHeartbeat is
// at most cutoff: a prefix of the in-order walk, so O(k + depth).
func treapDead(root *workerRec, cutoff uint64) []*workerRec {
	var out []*workerRec
	treapWalk(root, func(w *workerRec) bool {
		if w.lastHeartbeat > cutoff {
			return false
		}
		out = append(out, w)
		return true
	})
	return out
}

// treapWalk visits the linked workers in key order until visit returns false
// and reports whether it visited all of them.
func treapWalk(root *workerRec, visit func(*workerRec) bool) bool {
	var stack []*workerRec
	n := root
	for n != nil || len(stack) > 0 {
		for n != nil {
			stack = append(stack, n)
			n = n.left
		}
		n = stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if !visit(n) {
			return false
		}
		n = n.right
	}
	return true
}
