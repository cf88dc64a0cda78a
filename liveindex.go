package distributed

import "math/bits"

// The live-worker index (I9): every non-offline worker in one slot of a
// ring of slots, in the order the workers were linked, and over the slots
// a tournament tree (eight children per node) whose every node holds the
// highest selection key below it.
//
// A worker is linked when it registers or is reactivated and relinked when
// a heartbeat moves its LastHeartbeat, always with LastHeartbeat = now,
// which no linked worker's exceeds (I8): so it always takes the next free
// slot at the newest end (tail), and the slots from the oldest in use
// (head) to tail are in LastHeartbeat order (ties in no particular order).
// Its old slot is vacated; head moves past vacated slots, and the ring
// wraps around, so when every worker heartbeats in turn the slots in use
// stay one run that moves round the ring and nothing is ever moved. A
// worker is alive at now exactly when LastHeartbeat > now −
// HeartbeatTimeoutSecs, so the alive workers fill a suffix of the run and
// the dead ones, which PruneDeadWorkers visits, a prefix.
//
// Costs, n linked workers, a ring of at least 2n slots (a power of two):
// a change of a worker's selection key (an assignment, a finished lease, a
// heartbeat in the same second) updates its slot's ancestors, log₈ of the
// ring less one (3 levels at 4 096 workers, none at up to 8), and scans
// the eight keys of a node (one cache line) only where the worker was
// that node's best and its key fell; it stops at the first ancestor whose
// best is another worker. A heartbeat that moves the key vacates one slot
// and fills the next, two such updates. Only when the run from head to
// tail fills the ring (an old worker holds head while the others
// heartbeat past it round the ring) are the linked workers packed in
// order into a new ring and the tree rebuilt, O(ring) once per at least n
// links: O(1) amortised. The best eligible worker overall is the best of
// the top level's at most 16 nodes, then down the levels to its slot
// (the child whose key equals it), O(8 log₈ n); only when it is dead does
// a search start from the first alive slot (binary search on the slots'
// heartbeats) and take the best of the rest of the run, O(8 log₈ n).

// The tie-break between workers (contract A.9: most available slots, then
// the smallest ID) is one integer per worker, its selection key: its
// score and its rank packed (ranks.go), unique among eligible workers
// because ranks are (I9). Nothing depends on the order of ties within a
// second: the best is the maximum of a total order, and PruneDeadWorkers
// sorts what it finds by rank.

// rankBits is the width of a rank (ranks are in [1, rankLimit)); the
// selection key keeps the bits above it for the score.
const (
	rankBits  = 48
	rankLimit = 1 << rankBits
)

// The score (available slots, at most MaxWorkerCapacity) must fit in the
// 16 bits above the rank: this constant does not compile otherwise.
const _ = uint16(MaxWorkerCapacity)

// liveFan is the number of children of a tree node: eight 8-byte keys,
// one 64-byte cache line. The top level has at most liveTop nodes and no
// root above it: the best is found by scanning them (two lines), which
// saves the levels that would hold only one or two nodes (at 8 192
// slots, three levels above the slots instead of five).
const (
	liveFan = 8
	liveTop = 2 * liveFan
)

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

// liveIndex is the live-worker index. The zero value is empty.
//
// Positions head and tail count links from the last pack; position p is
// slot p mod len(slots). The tree is one flat array over all its levels,
// the slots' level first: level l starts at off[l]; node g of level l+1
// covers nodes liveFan·g … liveFan·g+7 of level l. Every level has a
// multiple of liveFan nodes, the last ones padding with no children; the
// top one has at most liveTop.
type liveIndex struct {
	slots []*workerRec // the linked worker in each slot, nil when vacant
	// hb is each slot's LastHeartbeat as it was linked, kept after the slot
	// is vacated: non-decreasing over positions [head, tail), so the first
	// alive slot is a binary search away.
	hb []uint64
	// key is the highest selection key under each node, 0 for none (for a
	// slot: its worker's key, 0 when vacant). Eligible keys are unique
	// (I9), so a key names one slot: no slot is stored with it.
	key []uint64
	off []int // where each level starts in key
	// head is the position of the oldest slot in use (tail when none is),
	// tail the next position to fill; tail − head ≤ len(slots).
	head, tail int
	n          int // linked workers
	// best caches root's answer, the slot of the best key (-1 for none),
	// while bestOK: a read such as GetAvailableWorker after a read costs
	// O(1). Every change to a key clears bestOK.
	best   int32
	bestOK bool
}

// slotOf is position p's slot.
func (x *liveIndex) slotOf(p int) int { return p & (len(x.slots) - 1) }

// insert links w (not linked) in the next free slot. Its LastHeartbeat
// must be at least every linked worker's (I8: it is now).
func (x *liveIndex) insert(w *workerRec) {
	if x.tail-x.head == len(x.slots) {
		x.pack(x.n + 1)
	}
	i := x.slotOf(x.tail)
	x.tail++
	x.slots[i], x.hb[i], w.slot = w, w.lastHeartbeat, int32(i)
	x.n++
	w.rescore()
	x.set(i, w.key)
}

// remove unlinks w (linked) and vacates its slot.
func (x *liveIndex) remove(w *workerRec) {
	i := int(w.slot)
	x.slots[i], w.slot = nil, -1
	x.n--
	x.set(i, 0)
	for x.head < x.tail && x.slots[x.slotOf(x.head)] == nil {
		x.head++ // amortised O(1): head only moves forward
	}
}

// refresh recomputes w's (linked) selection key after a change that kept
// its LastHeartbeat, and the tree above it when the key changed.
func (x *liveIndex) refresh(w *workerRec) {
	w.rescore()
	x.set(int(w.slot), w.key)
}

// set stores slot s's new key k and updates its ancestors. Only s
// changed, so at each ancestor: a k above the node's best makes it the
// best (no scan); a node whose best is not s's old key keeps it (s's key
// was and is below it), and so do all above it: stop; a node whose best
// was s's old key is recomputed from its children. O(levels); a scan of
// eight keys only where s was the best and its key fell.
func (x *liveIndex) set(s int, k uint64) {
	key := x.key
	old := key[s]
	if old == k {
		return
	}
	key[s] = k
	x.bestOK = false
	i := uint(s)
	for l := 1; l < len(x.off); l++ {
		c := uint(x.off[l-1]) + i&^(liveFan-1) // the node's first child
		i /= liveFan
		g := uint(x.off[l]) + i
		switch {
		case k > key[g]:
			key[g] = k
		case key[g] != old:
			return
		default:
			key[g] = max8((*[liveFan]uint64)(key[c : c+liveFan]))
		}
	}
}

// max8 is the highest of a node's liveFan child keys (0 when none has
// one), without branches.
func max8(ks *[liveFan]uint64) uint64 {
	return max(max(max(ks[0], ks[1]), max(ks[2], ks[3])), max(max(ks[4], ks[5]), max(ks[6], ks[7])))
}

// slotUnder returns the slot holding the best key under node g of level l
// (which has one): down the levels, the child whose key equals it.
func (x *liveIndex) slotUnder(l, g int) int {
	k := x.key[x.off[l]+g]
	for ; l > 0; l-- {
		c := x.off[l-1] + g*liveFan
		ks := (*[liveFan]uint64)(x.key[c : c+liveFan])
		j := 0
		for j < liveFan-1 && ks[j] != k {
			j++
		}
		g = g*liveFan + j
	}
	return g
}

// pack moves the linked workers, in order, to the first slots of a new
// ring of at least 2·need slots (a power of two) and rebuilds the tree; a
// ring of that size already (a worker that stopped heartbeating holds the
// oldest slot while the others go round) is compacted in place instead.
func (x *liveIndex) pack(need int) {
	size := ringSize(need)
	if size == len(x.slots) {
		x.compact()
		return
	}
	old := *x
	x.alloc(size)
	j := 0
	for p := old.head; p < old.tail; p++ {
		if w := old.slots[old.slotOf(p)]; w != nil {
			x.slots[j], x.hb[j], w.slot = w, old.hb[old.slotOf(p)], int32(j)
			j++
		}
	}
	x.head, x.tail = 0, j
	x.rebuild()
}

// ringSize is the size of a ring for need workers: at least 2·need
// slots, a power of two, at least liveFan.
func ringSize(need int) int {
	return max(liveFan, 1<<bits.Len(uint(2*need-1)))
}

// compact moves the linked workers, in order, to the positions from head
// on, in the same arrays (a position is written only after it was read:
// the j-th worker goes to position head+j, at or before its own), vacates
// the rest of the run and rebuilds the tree: a pack that keeps the ring's
// size allocates nothing.
func (x *liveIndex) compact() {
	j := x.head
	for p := x.head; p < x.tail; p++ {
		s := x.slotOf(p)
		w := x.slots[s]
		if w == nil {
			continue
		}
		d := x.slotOf(j)
		x.slots[s] = nil
		x.slots[d], x.hb[d], w.slot = w, x.hb[s], int32(d)
		j++
	}
	for p := j; p < x.tail; p++ {
		x.hb[x.slotOf(p)] = 0
	}
	x.tail = j
	x.rebuild()
}

// alloc gives the index new arrays for size slots (a power of two, at
// least liveFan) and the levels above them: each a liveFan-th of the one
// below, rounded up to a multiple of liveFan, until a level has at most
// liveTop nodes (the slots themselves at up to liveTop slots).
func (x *liveIndex) alloc(size int) {
	x.slots, x.hb = make([]*workerRec, size), make([]uint64, size)
	var total int
	x.off, total = liveLevels(size)
	x.key = make([]uint64, total)
}

// liveLevels returns where each level of a ring of size slots begins in
// key, and key's length.
func liveLevels(size int) (off []int, total int) {
	off, total = []int{0}, size
	for n := size; n > liveTop; {
		n = (n + liveFan*liveFan - 1) / (liveFan * liveFan) * liveFan
		off = append(off, total)
		total += n
	}
	return off, total
}

// rebuild recomputes every slot's key from its worker's cached selection
// key and every node above, O(slots).
func (x *liveIndex) rebuild() {
	x.bestOK = false
	for i, w := range x.slots {
		x.key[i] = 0
		if w != nil {
			x.key[i] = w.key
		}
	}
	for l := 1; l < len(x.off); l++ {
		below, end := x.off[l-1], x.off[l]
		for g := end; g < x.levelEnd(l); g++ {
			x.key[g] = 0 // padding: a node with no children
			if c := below + (g-end)*liveFan; c < end {
				x.key[g] = max8((*[liveFan]uint64)(x.key[c : c+liveFan]))
			}
		}
	}
}

// levelEnd is where level l ends in key.
func (x *liveIndex) levelEnd(l int) int {
	if l+1 < len(x.off) {
		return x.off[l+1]
	}
	return len(x.key)
}

// fill links ws, in LastHeartbeat order, into an empty index (Restore).
func (x *liveIndex) fill(ws []*workerRec) {
	if len(ws) == 0 {
		return
	}
	x.alloc(ringSize(len(ws)))
	for i, w := range ws {
		x.slots[i], x.hb[i], w.slot = w, w.lastHeartbeat, int32(i)
		w.rescore()
	}
	x.head, x.tail, x.n = 0, len(ws), len(ws)
	x.rebuild()
}

// root returns the best eligible linked worker, or nil: the cached
// answer, or the best node of the top level, then down to its slot.
func (x *liveIndex) root() *workerRec {
	if !x.bestOK {
		x.best, x.bestOK = x.findBest(), true
	}
	if x.best < 0 {
		return nil
	}
	return x.slots[x.best]
}

// findBest returns the slot of the best key, -1 when no slot has one.
func (x *liveIndex) findBest() int32 {
	if len(x.slots) == 0 {
		return -1
	}
	top := len(x.off) - 1
	g, best := 0, uint64(0)
	for j, k := range x.key[x.off[top]:] {
		if k > best {
			g, best = j, k
		}
	}
	if best == 0 {
		return -1
	}
	return int32(x.slotUnder(top, g))
}

// bestAlive returns the best eligible worker whose LastHeartbeat is above
// cutoff (all workers when allAlive).
func (x *liveIndex) bestAlive(cutoff uint64, allAlive bool) *workerRec {
	// Fast path: the best eligible worker overall is alive, so it is also the
	// best alive one. Only when it is dead does the search below run.
	b := x.root()
	if b == nil || allAlive || b.lastHeartbeat > cutoff {
		return b
	}
	return x.bestFrom(x.firstAbove(cutoff))
}

// firstAbove returns the first position in [head, tail) whose slot's
// heartbeat is above cutoff (tail when none is): a binary search, the
// heartbeats being sorted.
func (x *liveIndex) firstAbove(cutoff uint64) int {
	lo, hi := x.head, x.tail
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if x.hb[x.slotOf(m)] > cutoff {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// bestFrom returns the best eligible worker at positions [p, tail): one
// range of slots, or two where the run wraps round the ring.
func (x *liveIndex) bestFrom(p int) *workerRec {
	var b liveBest
	switch lo, hi := x.slotOf(p), x.slotOf(x.tail); {
	case p == x.tail:
	case lo < hi:
		x.rangeBest(&b, lo, hi)
	default:
		x.rangeBest(&b, lo, len(x.slots))
		x.rangeBest(&b, 0, hi)
	}
	if b.key == 0 {
		return nil
	}
	return x.slots[x.slotUnder(b.level, b.node)]
}

// liveBest is the best key a range query has found and the node that
// holds it.
type liveBest struct {
	key         uint64
	level, node int
}

// rangeBest raises b to the highest key in slots [lo, hi): on each level
// the partial groups at the two ends are scanned and the whole groups
// between them are left to the level above; on the top level what is left
// is scanned. O(8 log₈ n).
func (x *liveIndex) rangeBest(b *liveBest, lo, hi int) {
	scan := func(l, from, to int) {
		for j := from; j < to; j++ {
			if k := x.key[x.off[l]+j]; k > b.key {
				*b = liveBest{k, l, j}
			}
		}
	}
	for l := range x.off {
		if lo >= hi || lo/liveFan == (hi-1)/liveFan || l == len(x.off)-1 {
			scan(l, lo, hi)
			return
		}
		if r := lo % liveFan; r != 0 {
			scan(l, lo, lo-r+liveFan)
			lo += liveFan - r
		}
		if r := hi % liveFan; r != 0 {
			scan(l, hi-r, hi)
			hi -= r
		}
		lo, hi = lo/liveFan, hi/liveFan
	}
}

// first returns the linked worker in the oldest slot (the oldest
// heartbeat), or nil.
func (x *liveIndex) first() *workerRec {
	if x.n == 0 {
		return nil
	}
	return x.slots[x.slotOf(x.head)]
}

// dead returns every linked worker whose LastHeartbeat is at most cutoff:
// the slots before the first alive one, O(k + the vacated slots among
// them).
func (x *liveIndex) dead(cutoff uint64) []*workerRec {
	var out []*workerRec
	for p := x.head; p < x.tail && x.hb[x.slotOf(p)] <= cutoff; p++ {
		if w := x.slots[x.slotOf(p)]; w != nil {
			out = append(out, w)
		}
	}
	return out
}

// walk visits the linked workers in slot order from head until visit
// returns false and reports whether it visited all of them.
func (x *liveIndex) walk(visit func(*workerRec) bool) bool {
	for p := x.head; p < x.tail; p++ {
		if w := x.slots[x.slotOf(p)]; w != nil && !visit(w) {
			return false
		}
	}
	return true
}
