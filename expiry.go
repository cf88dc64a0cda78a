package distributed

import "github.com/google/btree"

// The expiry index (I3): every leased or running task, bucketed by its
// lease's ExpiresAt second. A lease's expiry is a whole second, so the
// tasks of one second form an intrusive doubly linked list (through
// taskRec.xnext and xprev) and only the seconds are ordered, in a B-tree
// with one entry per second that has leases. Granting, renewing and ending
// a lease link or unlink in O(1) plus one map lookup, where an ordered
// index of every lease was O(log n) with key comparisons at each level —
// two such operations per task lifecycle (docs/benchmarks.md, issue 15).
//
// Within a second the order is not kept: RecoverExpiredLeases, the only
// command that reads leases from the index in bulk, sorts the leases it
// collects by lease ID (contract A.10), and RecoveryDue reads only the
// earliest second.
//
// The bucket of the latest insert stays allocated and indexed when it
// empties (the next lease usually expires in the same second); every other
// bucket is dropped when its last lease leaves, so at most one bucket is
// empty and the buckets are bounded by the leases plus one.
type expiryIndex struct {
	buckets map[uint64]*expiryBucket
	order   *btree.BTreeG[*expiryBucket] // the buckets by second
	last    *expiryBucket                // the bucket of the latest insert, or nil
	n       int                          // linked tasks
}

// expiryBucket is the list of the linked tasks whose lease expires at second.
type expiryBucket struct {
	second uint64
	head   *taskRec
}

func expiryBucketLess(a, b *expiryBucket) bool { return a.second < b.second }

func newExpiryIndex() *expiryIndex {
	return &expiryIndex{
		buckets: make(map[uint64]*expiryBucket),
		order:   btree.NewG(btreeDegree, expiryBucketLess),
	}
}

// Len returns the number of linked tasks.
func (x *expiryIndex) Len() int { return x.n }

// Has reports whether the leased or running task t is linked: it has a
// predecessor or heads the bucket of its lease's second. (The links of a
// task without a lease belong to the queue.)
func (x *expiryIndex) Has(t *taskRec) bool {
	if !t.hasLease {
		return false
	}
	if t.xprev != nil {
		return true
	}
	b := x.buckets[t.lease.expiresAt]
	return b != nil && b.head == t
}

// ReplaceOrInsert links the leased or running task t under its lease's
// ExpiresAt unless it is linked
// already, and then reports true (a duplicate) and changes nothing. The
// name and results are those of the ordered index it replaces, so that
// Restore's bulk build reads the same.
func (x *expiryIndex) ReplaceOrInsert(t *taskRec) (*taskRec, bool) {
	if x.Has(t) {
		return t, true
	}
	x.insert(t)
	return nil, false
}

// insert links the leased or running task t, which is not linked, under its
// lease's ExpiresAt (the commands' path: no duplicate check).
func (x *expiryIndex) insert(t *taskRec) {
	b := x.bucket(t.lease.expiresAt)
	t.xprev, t.xnext = nil, b.head
	if b.head != nil {
		b.head.xprev = t
	}
	b.head = t
	x.n++
}

// bucket returns the bucket of second, creating it when there is none, and
// makes it the latest; an empty previous latest bucket is reused or dropped.
func (x *expiryIndex) bucket(second uint64) *expiryBucket {
	if b := x.last; b != nil && b.second == second {
		return b
	}
	b := x.buckets[second]
	old := x.last
	if old != nil && old.head == nil {
		x.drop(old)
		if b == nil {
			b = old // reuse its allocation
		}
	}
	if b == nil {
		b = &expiryBucket{}
	}
	if x.buckets[second] == nil { // new or reused: index it

		b.second = second
		x.buckets[second] = b
		x.order.ReplaceOrInsert(b)
	}
	x.last = b
	return b
}

// drop removes the empty bucket b from the index.
func (x *expiryIndex) drop(b *expiryBucket) {
	delete(x.buckets, b.second)
	x.order.Delete(b)
	if x.last == b {
		x.last = nil
	}
}

// Delete unlinks t, which must be linked with its lease's ExpiresAt
// unchanged since it was linked.
func (x *expiryIndex) Delete(t *taskRec) {
	if t.xprev != nil {
		t.xprev.xnext = t.xnext
	} else {
		b := x.last // the latest insert's bucket needs no lookup
		if b == nil || b.second != t.lease.expiresAt {
			b = x.buckets[t.lease.expiresAt]
		}
		b.head = t.xnext
		if b.head == nil && b != x.last {
			x.drop(b)
		}
	}
	if t.xnext != nil {
		t.xnext.xprev = t.xprev
	}
	t.xprev, t.xnext = nil, nil
	x.n--
}

// Min returns a linked task of the earliest second.
func (x *expiryIndex) Min() (*taskRec, bool) {
	var first *taskRec
	x.order.Ascend(func(b *expiryBucket) bool {
		first = b.head
		return first == nil // only the latest bucket can be empty
	})
	return first, first != nil
}

// Ascend visits the linked tasks by second (in no order within a second)
// until visit returns false.
func (x *expiryIndex) Ascend(visit func(*taskRec) bool) {
	x.order.Ascend(func(b *expiryBucket) bool {
		for t := b.head; t != nil; t = t.xnext {
			if !visit(t) {
				return false
			}
		}
		return true
	})
}

// audit checks the index's own structure (I3): the map and the ordered
// buckets agree, every bucket but the latest holds a task, every linked
// task is leased or running with its lease expiring at its bucket's
// second and is linked both ways, and n counts them. That every leased or
// running task is linked is checked per task (Has) with n against the
// tally.
func (x *expiryIndex) audit() bool {
	if x.order.Len() != len(x.buckets) || (x.last != nil && x.buckets[x.last.second] != x.last) {
		return false
	}
	ok, count := true, 0
	x.order.Ascend(func(b *expiryBucket) bool {
		ok = x.buckets[b.second] == b && (b.head != nil || b == x.last)
		var prev *taskRec
		for t := b.head; ok && t != nil; t = t.xnext {
			count++
			ok = count <= x.n && t.hasLease && t.lease.expiresAt == b.second && t.xprev == prev
			prev = t
		}
		return ok
	})
	return ok && count == x.n
}
