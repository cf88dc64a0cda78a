package distributed

import "math/bits"

// The live-worker index (I9): every non-offline worker in one slot of a
// ring of slots, in the order the workers were linked, and over the slots
// a tournament tree (eight children per node) whose every node holds the
// highest selection key below it and the slot that has it.
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
// ring (5 levels at 4 096 workers, 1 at a handful), and scans the eight
// keys of a node (one cache line) only where the worker was that node's
// best and its key fell; it stops at the first ancestor whose best is
// another worker. A heartbeat that moves the key vacates one slot and
// fills the next, two such updates. Only when the run from head to tail
// fills the ring (an old worker holds head while the others heartbeat
// past it round the ring) are the linked workers packed in order into a
// new ring and the tree rebuilt, O(ring) once per at least n links:
// O(1) amortised. The best eligible worker overall is the root's, O(1);
// only when it is dead does a search start from the first alive slot
// (binary search on the slots' heartbeats) and take the best of the
// rest of the run, O(8 log₈ n).
//
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
// one 64-byte cache line.
const liveFan = 8

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

// treapPriority is a fixed hash of an ID (the scheduler's tie-break,
// schedule.go; the name is from the index this file held before).
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
// slot p mod len(slots). The tree is two flat arrays over all its levels,
// the slots' level first: level l starts at off[l]; node g of level l+1
// covers nodes liveFan·g … liveFan·g+7 of level l. Every level but the
// root's (one node) has a multiple of liveFan nodes, the last ones
// padding with no children.
type liveIndex struct {
	slots []*workerRec // the linked worker in each slot, nil when vacant
	// hb is each slot's LastHeartbeat as it was linked, kept after the slot
	// is vacated: non-decreasing over positions [head, tail), so the first
	// alive slot is a binary search away.
	hb []uint64
	// key is the highest selection key under each node, 0 for none (for a
	// slot: its worker's key, 0 when vacant); at is the slot holding it,
	// -1 for none (for a slot: itself).
	key []uint64
	at  []int32
	off []int // where each level starts in key and at
	// head is the position of the oldest slot in use (tail when none is),
	// tail the next position to fill; tail − head ≤ len(slots).
	head, tail int
	n          int // linked workers
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
	old := w.key
	w.rescore()
	if w.key != old {
		x.set(int(w.slot), w.key)
	}
}

// set stores slot s's new key k and updates its ancestors. Only s
// changed, so at each ancestor: a k above the node's best makes s the
// best (no scan); a node whose best is another slot keeps it (s's key was
// and is below it), and so do all above it: stop; a node whose best was s
// is recomputed from its children. O(levels); a scan of eight keys only
// where s was the best and its key fell.
func (x *liveIndex) set(s int, k uint64) {
	key, at, off := x.key, x.at, x.off
	key[s] = k
	i := uint(s)
	for l := 1; l < len(off); l++ {
		c := uint(off[l-1]) + i&^(liveFan-1) // the node's first child
		i /= liveFan
		g := uint(off[l]) + i
		switch {
		case k > key[g]:
			key[g], at[g] = k, int32(s)
		case at[g] != int32(s):
			return
		default:
			key[g], at[g] = x.nodeBest(c)
		}
	}
}

// best8 returns the position of the highest of a node's liveFan child
// keys (any position when all are 0). Eligible keys are unique (I9), so
// the maximum is one child. A tournament of pairs, unrolled, so that the
// compiler makes most steps a comparison and conditional moves
// (docs/benchmarks.md, issue 15, fifth pass).
func best8(ks *[liveFan]uint64) uint {
	a, ia := max2(ks[0], ks[1], 0)
	b, ib := max2(ks[2], ks[3], 2)
	c, ic := max2(ks[4], ks[5], 4)
	d, id := max2(ks[6], ks[7], 6)
	if b > a {
		a, ia = b, ib
	}
	if d > c {
		c, ic = d, id
	}
	if c > a {
		ia = ic
	}
	return ia
}

// max2 returns the higher of x and y and its position: i for x, i+1 for y.
func max2(x, y uint64, i uint) (uint64, uint) {
	if y > x {
		return y, i + 1
	}
	return x, i
}

// nodeBest is the best of the liveFan nodes (or slots) from c: its key
// and slot, 0 and -1 when none has one.
func (x *liveIndex) nodeBest(c uint) (uint64, int32) {
	ks := (*[liveFan]uint64)(x.key[c : c+liveFan])
	j := best8(ks)
	if ks[j] == 0 {
		return 0, -1
	}
	return ks[j], x.at[c+j]
}

// pack moves the linked workers, in order, to the first slots of a new
// ring of at least 2·need slots (a power of two) and rebuilds the tree.
func (x *liveIndex) pack(need int) {
	old := *x
	x.alloc(max(liveFan, 1<<bits.Len(uint(2*need-1))))
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

// alloc gives the index new arrays for size slots (a power of two, at
// least liveFan) and the levels above them: each a liveFan-th of the one
// below, rounded up to a multiple of liveFan, until one node is left.
func (x *liveIndex) alloc(size int) {
	x.slots, x.hb = make([]*workerRec, size), make([]uint64, size)
	x.off = []int{0}
	total := size
	for n := size; n > 1; {
		n = (n + liveFan - 1) / liveFan
		if n > 1 {
			n = (n + liveFan - 1) / liveFan * liveFan
		}
		x.off = append(x.off, total)
		total += n
	}
	x.key, x.at = make([]uint64, total), make([]int32, total)
}

// rebuild recomputes every slot's key from its worker's cached selection
// key and every node above, O(slots).
func (x *liveIndex) rebuild() {
	for i, w := range x.slots {
		x.key[i], x.at[i] = 0, int32(i)
		if w != nil {
			x.key[i] = w.key
		}
	}
	for l := 1; l < len(x.off); l++ {
		below, end := x.off[l-1], x.off[l]
		for g := end; g < x.levelEnd(l); g++ {
			x.key[g], x.at[g] = 0, -1 // padding: a node with no children
			if c := below + (g-end)*liveFan; c < end {
				x.key[g], x.at[g] = x.nodeBest(uint(c))
			}
		}
	}
}

// levelEnd is where level l ends in key and at.
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
	x.alloc(max(liveFan, 1<<bits.Len(uint(2*len(ws)-1))))
	for i, w := range ws {
		x.slots[i], x.hb[i], w.slot = w, w.lastHeartbeat, int32(i)
		w.rescore()
	}
	x.head, x.tail, x.n = 0, len(ws), len(ws)
	x.rebuild()
}

// root returns the best eligible linked worker, or nil.
func (x *liveIndex) root() *workerRec {
	if x.n == 0 {
		return nil
	}
	if a := x.at[len(x.at)-1]; a >= 0 {
		return x.slots[a]
	}
	return nil
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
	var k uint64
	a := int32(-1)
	switch lo, hi := x.slotOf(p), x.slotOf(x.tail); {
	case p == x.tail:
	case lo < hi:
		k, a = x.rangeBest(lo, hi)
	default:
		k, a = x.rangeBest(lo, len(x.slots))
		if k2, a2 := x.rangeBest(0, hi); k2 > k {
			a = a2
		}
	}
	if a < 0 {
		return nil
	}
	return x.slots[a]
}

// rangeBest returns the highest key in slots [lo, hi) and its slot (0,
// -1 for none): on each level the partial groups at the two ends are
// scanned and the whole groups between them are left to the level above,
// O(8 log₈ n).
func (x *liveIndex) rangeBest(lo, hi int) (uint64, int32) {
	bk, ba := uint64(0), int32(-1)
	scan := func(base, from, to int) {
		for j := base + from; j < base+to; j++ {
			if x.key[j] > bk {
				bk, ba = x.key[j], x.at[j]
			}
		}
	}
	for _, base := range x.off {
		if lo >= hi || lo/liveFan == (hi-1)/liveFan {
			scan(base, lo, hi)
			break
		}
		if r := lo % liveFan; r != 0 {
			scan(base, lo, lo-r+liveFan)
			lo += liveFan - r
		}
		if r := hi % liveFan; r != 0 {
			scan(base, hi-r, hi)
			hi -= r
		}
		lo, hi = lo/liveFan, hi/liveFan
	}
	return bk, ba
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
