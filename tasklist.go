package distributed

import (
	"cmp"
	"slices"
)

// The age and finish indexes (I3): every non-terminal task is in the age
// list, ordered by CreatedAt, and every terminal task in the finish list,
// ordered by its finish time. A task is added with the current logical
// second, which no record's time exceeds (I8), so adding is appending and
// each list stays in time order without comparisons; removal unlinks.
// Both are O(1) where a B-tree insert or delete was O(log n) — a
// lifecycle adds and removes three entries. The order of tasks with equal
// times is their order of addition; no command's outcome depends on it
// (ExpireOldTasks, purge and the scheduling index collect every task up to
// a time), and Restore orders ties by task ID.
//
// A task is in at most one list, so the two share its prev/next links.

// taskList is an intrusive doubly linked list of task records. Its length
// is not kept: the counters active and terminal are the lengths of the age
// and finish lists (I1, I3).
type taskList struct {
	head, tail *taskRec
}

// push appends t, which is in no list.
func (l *taskList) push(t *taskRec) {
	t.prev, t.next = l.tail, nil
	if l.tail == nil {
		l.head = t
	} else {
		l.tail.next = t
	}
	l.tail = t
}

// remove unlinks t, which is in l.
func (l *taskList) remove(t *taskRec) {
	if t.prev == nil {
		l.head = t.next
	} else {
		t.prev.next = t.next
	}
	if t.next == nil {
		l.tail = t.prev
	} else {
		t.next.prev = t.prev
	}
	t.prev, t.next = nil, nil
}

// walk visits the records in order until visit returns false.
func (l *taskList) walk(visit func(*taskRec) bool) {
	for t := l.head; t != nil; t = t.next {
		if !visit(t) {
			return
		}
	}
}

// rebuildList links ts, which are in task-ID order, ordered by time (ties
// by task ID) into a new list. Records restored in ID order are often in
// time order already; then no sort runs.
func rebuildList(ts []*taskRec, time func(*taskRec) uint64) taskList {
	var l taskList
	if slices.IsSortedFunc(ts, func(a, b *taskRec) int { return cmp.Compare(time(a), time(b)) }) {
		for _, t := range ts {
			l.push(t)
		}
		return l
	}
	// Sorted by (time, position in ID order): integers, no record reads.
	keys := make([]timedPos, len(ts))
	for i, t := range ts {
		keys[i] = timedPos{time(t), i}
	}
	slices.SortFunc(keys, func(a, b timedPos) int {
		if c := cmp.Compare(a.time, b.time); c != 0 {
			return c
		}
		return cmp.Compare(a.pos, b.pos)
	})
	for _, k := range keys {
		l.push(ts[k.pos])
	}
	return l
}

// timedPos is a record's time and its position in task-ID order.
type timedPos struct {
	time uint64
	pos  int
}

func createdAtOf(t *taskRec) uint64  { return t.createdAt }
func finishedAtOf(t *taskRec) uint64 { return t.finishedAt }

// auditList checks one list (I3): exactly n records, linked both ways,
// each a record of c in the list's state (terminal or not), in time order.
func (c *coordinator) auditList(l *taskList, terminal bool, n int, time func(*taskRec) uint64) bool {
	count := 0
	var prev *taskRec
	for t := l.head; t != nil; t = t.next {
		count++
		if count > n || t.prev != prev || c.tasks[t.id] != t || t.status.Terminal() != terminal ||
			(prev != nil && time(prev) > time(t)) {
			return false
		}
		prev = t
	}
	return count == n && l.tail == prev
}
