package distributed

import "slices"

// The queue (I2): every queued task in lease order — priority descending,
// then enqueue ordinal, then task ID (contract A.7). A command queues a
// task only with a fresh ordinal (pushQueue: enqueue, retry, re-run), above
// every ordinal in the queue, so each priority's tasks are a FIFO: one
// intrusive doubly linked list per priority (through taskRec.xprev and
// xnext) keeps the order by appending, the next task is the head of the
// highest non-empty list, and removal unlinks. Every operation is O(1) with
// no comparisons, where a B-tree of every queued task was O(log n) — an
// insert and a delete per task lifecycle (docs/benchmarks.md, issue 15).
//
// Restore's bulk build inserts in task-ID order; an insert below its
// list's tail marks the queue unsorted, and the next read that needs the
// order sorts each list once (O(n log n)), so the order is the B-tree's.
type queueIndex struct {
	lanes    [PriorityCritical + 1]queueLane // by priority
	n        int
	unsorted bool // an insert broke a lane's order; settle sorts
}

type queueLane struct{ head, tail *taskRec }

func newQueueIndex() *queueIndex { return &queueIndex{} }

// Len returns the number of queued tasks.
func (q *queueIndex) Len() int { return q.n }

// Has reports whether the queued task t is linked: it has a predecessor
// or heads its priority's list. (The links of a task that is not queued
// belong to the expiry index.)
func (q *queueIndex) Has(t *taskRec) bool {
	return t.status == TaskQueued && t.priority.Valid() && (t.xprev != nil || q.lanes[t.priority].head == t)
}

// ReplaceOrInsert appends the queued task t (valid priority) to its
// priority's list unless
// it is linked already, and then reports true (a duplicate) and changes
// nothing. The name and results are those of the B-tree it replaces, so
// that Restore's bulk build reads the same.
func (q *queueIndex) ReplaceOrInsert(t *taskRec) (*taskRec, bool) {
	if q.Has(t) {
		return t, true
	}
	l := &q.lanes[t.priority]
	if l.tail != nil && !queueLess(l.tail, t) {
		q.unsorted = true
	}
	l.push(t)
	q.n++
	return nil, false
}

// push appends t, which is in no list, to l.
func (l *queueLane) push(t *taskRec) {
	t.xprev, t.xnext = l.tail, nil
	if l.tail == nil {
		l.head = t
	} else {
		l.tail.xnext = t
	}
	l.tail = t
}

// Delete unlinks t, which must be linked.
func (q *queueIndex) Delete(t *taskRec) {
	l := &q.lanes[t.priority]
	if t.xprev == nil {
		l.head = t.xnext
	} else {
		t.xprev.xnext = t.xnext
	}
	if t.xnext == nil {
		l.tail = t.xprev
	} else {
		t.xnext.xprev = t.xprev
	}
	t.xprev, t.xnext = nil, nil
	q.n--
}

// Min returns the next task in lease order.
func (q *queueIndex) Min() (*taskRec, bool) {
	q.settle()
	for p := len(q.lanes) - 1; p >= 0; p-- {
		if t := q.lanes[p].head; t != nil {
			return t, true
		}
	}
	return nil, false
}

// Ascend visits the queued tasks in lease order until visit returns false.
func (q *queueIndex) Ascend(visit func(*taskRec) bool) {
	q.settle()
	for p := len(q.lanes) - 1; p >= 0; p-- {
		for t := q.lanes[p].head; t != nil; t = t.xnext {
			if !visit(t) {
				return
			}
		}
	}
}

// settle sorts every list after inserts out of order (Restore).
func (q *queueIndex) settle() {
	if !q.unsorted {
		return
	}
	for p := range q.lanes {
		l := &q.lanes[p]
		var ts []*taskRec
		for t := l.head; t != nil; t = t.xnext {
			ts = append(ts, t)
		}
		slices.SortFunc(ts, func(a, b *taskRec) int {
			if queueLess(a, b) {
				return -1
			}
			return 1 // distinct records never tie: the ID breaks every tie
		})
		*l = queueLane{}
		for _, t := range ts {
			l.push(t)
		}
	}
	q.unsorted = false
}

// audit checks the queue's own structure (I2): every list is linked both
// ways, holds queued tasks of its priority only, in lease order unless
// marked unsorted, and n counts them. That every queued task is linked is
// checked per task (Has) with n against the tally.
func (q *queueIndex) audit() bool {
	count := 0
	for p := range q.lanes {
		var prev *taskRec
		for t := q.lanes[p].head; t != nil; t = t.xnext {
			count++
			if count > q.n || t.status != TaskQueued || int(t.priority) != p || t.xprev != prev ||
				(prev != nil && !q.unsorted && !queueLess(prev, t)) {
				return false
			}
			prev = t
		}
		if q.lanes[p].tail != prev {
			return false
		}
	}
	return count == q.n
}
