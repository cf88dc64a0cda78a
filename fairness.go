package distributed

import (
	"sort"

	"github.com/google/btree"
)

// The scheduling index (I13). It exists only once a pool has used a
// scheduling feature (coordinator.ensureSched); until then selection is
// the queue's minimum, exactly contract A.9. Once it exists, every queued
// task is in exactly one of:
//
//   - delayed: its not-before time is after logical time, ordered by
//     (not-before, ordinal, ID), so waking is a prefix;
//   - the ready tree of its lane: one lane per (scan, required-tag set),
//     in queue order.
//
// A lane is in heads iff it has a ready task and its scan is neither
// paused nor at its in-flight limit. heads is ordered by the head task's
// priority (descending), then — with FairScans — the scan's lastServed
// (the lease ID of its last grant, 0 for never), then the head's ordinal.
// The first lane a worker's tags cover gives the next task: with no
// scheduling feature in use this is the queue's minimum, because every
// task is in the single untagged lane of its scan and lanes are ordered
// by their heads' queue keys.

// scanRec is one scan's settings and derived counts. Invariant (I13): it
// exists iff the scan has non-terminal tasks or non-zero settings.
type scanRec struct {
	id         string
	settings   ScanSettings
	inFlight   uint32 // leased and running tasks
	active     int    // non-terminal tasks
	lastServed uint64 // lease ID of the last grant under FairScans (0: never)
	lanes      []*lane
}

func (sc *scanRec) state() ScanState {
	return ScanState{ScanID: sc.id, Settings: sc.settings, InFlight: sc.inFlight, Active: sc.active}
}

// selectable reports whether the scan may get a new lease now.
func (sc *scanRec) selectable() bool {
	return !sc.settings.Paused && (sc.settings.MaxInFlight == 0 || sc.inFlight < sc.settings.MaxInFlight)
}

// lane holds a scan's ready tasks with one required-tag set.
type lane struct {
	scan  *scanRec
	mask  uint8
	ready *btree.BTreeG[*taskRec]

	// The lane's key in heads, valid while inHeads.
	inHeads               bool
	keyPrio               TaskPriority
	keyServed, keyOrdinal uint64
}

type scheduler struct {
	opts       SchedulingOptions
	scans      map[string]*scanRec
	configured int // scans with non-zero settings
	heads      *btree.BTreeG[*lane]
	delayed    *btree.BTreeG[*taskRec]
}

func delayedLess(a, b *taskRec) bool {
	if a.notBefore != b.notBefore {
		return a.notBefore < b.notBefore
	}
	if a.ordinal != b.ordinal {
		return a.ordinal < b.ordinal
	}
	return a.id < b.id
}

// headLess orders lanes by their stored keys; fair adds lastServed.
func headLess(fair bool) func(a, b *lane) bool {
	return func(a, b *lane) bool {
		if a.keyPrio != b.keyPrio {
			return a.keyPrio > b.keyPrio
		}
		if fair && a.keyServed != b.keyServed {
			return a.keyServed < b.keyServed
		}
		if a.keyOrdinal != b.keyOrdinal {
			return a.keyOrdinal < b.keyOrdinal
		}
		if a.scan.id != b.scan.id {
			return a.scan.id < b.scan.id
		}
		return a.mask < b.mask
	}
}

// ensureSched builds the scheduling index from the queue and the task
// records the first time a scheduling feature is used. It changes no
// record; the caller is committing a successful command.
func (c *coordinator) ensureSched() *scheduler {
	if c.sched != nil {
		return c.sched
	}
	s := &scheduler{
		scans:   make(map[string]*scanRec),
		heads:   btree.NewG(btreeDegree, headLess(false)),
		delayed: btree.NewG(btreeDegree, delayedLess),
	}
	c.sched = s
	c.ages.walk(func(t *taskRec) bool {
		sc := s.scan(t.scanID())
		sc.active++
		if t.hasLease {
			sc.inFlight++
		}
		return true
	})
	c.queue.Ascend(func(t *taskRec) bool {
		s.addQueued(t, c.logicalTime)
		return true
	})
	return s
}

// scan returns the scan's record, creating it.
func (s *scheduler) scan(id string) *scanRec {
	sc := s.scans[id]
	if sc == nil {
		sc = &scanRec{id: id}
		s.scans[id] = sc
	}
	return sc
}

// dropIfIdle removes a scan record that no longer needs to exist (I13).
func (s *scheduler) dropIfIdle(sc *scanRec) {
	if sc.active == 0 && sc.settings == (ScanSettings{}) {
		delete(s.scans, sc.id)
	}
}

func (s *scheduler) laneOf(t *taskRec) *lane {
	sc := s.scans[t.scanID()]
	for _, l := range sc.lanes {
		if l.mask == t.tagMask {
			return l
		}
	}
	l := &lane{scan: sc, mask: t.tagMask, ready: btree.NewG(btreeDegree, queueLess)}
	sc.lanes = append(sc.lanes, l)
	return l
}

// addQueued indexes a queued task: delayed while its not-before time is
// after logical time, else ready in its lane.
func (s *scheduler) addQueued(t *taskRec, logicalTime uint64) {
	if t.notBefore > logicalTime {
		s.delayed.ReplaceOrInsert(t)
		return
	}
	l := s.laneOf(t)
	l.ready.ReplaceOrInsert(t)
	s.reposition(l)
}

// removeQueued unindexes a queued task (leased, cancelled or expired);
// logicalTime says where it is (I13). Taking a lane's head, the common
// case, needs no key comparisons.
func (s *scheduler) removeQueued(t *taskRec, logicalTime uint64) {
	if t.notBefore > logicalTime {
		s.delayed.Delete(t)
		return
	}
	l := s.laneOf(t)
	if head, _ := l.ready.Min(); head == t {
		l.ready.DeleteMin()
	} else {
		l.ready.Delete(t)
	}
	s.reposition(l)
}

// wake makes every delayed task whose time has come at now ready.
func (s *scheduler) wake(now uint64) {
	for {
		t, ok := s.delayed.Min()
		if !ok || t.notBefore > now {
			return
		}
		s.delayed.DeleteMin()
		l := s.laneOf(t)
		l.ready.ReplaceOrInsert(t)
		s.reposition(l)
	}
}

// reposition puts l where its head and scan say it belongs in heads.
func (s *scheduler) reposition(l *lane) {
	if l.inHeads {
		s.heads.Delete(l)
		l.inHeads = false
	}
	head, ok := l.ready.Min()
	if !ok || !l.scan.selectable() {
		return
	}
	l.keyPrio, l.keyServed, l.keyOrdinal = head.priority, l.scan.lastServed, head.ordinal
	s.heads.ReplaceOrInsert(l)
	l.inHeads = true
}

func (s *scheduler) repositionScan(sc *scanRec) {
	for _, l := range sc.lanes {
		s.reposition(l)
	}
}

// setOptions replaces the options; a change of FairScans reorders heads.
func (s *scheduler) setOptions(o SchedulingOptions) {
	fairChanged := o.FairScans != s.opts.FairScans
	s.opts = o
	if !fairChanged {
		return
	}
	old := s.heads
	s.heads = btree.NewG(btreeDegree, headLess(o.FairScans))
	old.Ascend(func(l *lane) bool {
		l.inHeads = false
		return true
	})
	for _, id := range sortedKeys(s.scans) {
		s.repositionScan(s.scans[id])
	}
}

// applySettings sets a scan's settings and repositions its lanes.
func (s *scheduler) applySettings(id string, next ScanSettings) *scanRec {
	sc := s.scan(id)
	if (sc.settings == ScanSettings{}) != (next == ScanSettings{}) {
		if next == (ScanSettings{}) {
			s.configured--
		} else {
			s.configured++
		}
	}
	sc.settings = next
	s.repositionScan(sc)
	out := *sc
	s.dropIfIdle(sc)
	return &out
}

// take records the lease leaseID of the due queued task t: t leaves its
// lane, the scan counts one more in flight and, with FairScans, was
// served now. Its lanes are repositioned once for all three changes.
func (s *scheduler) take(t *taskRec, leaseID, logicalTime uint64) {
	sc := s.scans[t.scanID()]
	sc.inFlight++
	if s.opts.FairScans {
		sc.lastServed = leaseID
	}
	if !s.opts.FairScans && sc.settings.MaxInFlight == 0 {
		s.removeQueued(t, logicalTime) // repositions t's lane only
		return
	}
	l := s.laneOf(t)
	if head, _ := l.ready.Min(); head == t {
		l.ready.DeleteMin()
	} else {
		l.ready.Delete(t)
	}
	s.repositionScan(sc)
}

// released records the end of a lease of a task of the scan.
func (s *scheduler) released(scanID string) {
	sc := s.scans[scanID]
	sc.inFlight--
	if sc.settings.MaxInFlight != 0 {
		s.repositionScan(sc)
	}
}

// next returns the first ready task a worker with tag set mask may lease,
// or nil.
func (s *scheduler) next(mask uint8) *taskRec {
	var out *taskRec
	s.heads.Ascend(func(l *lane) bool {
		if l.mask&^mask != 0 {
			return true
		}
		out, _ = l.ready.Min()
		return false
	})
	return out
}

// notLeasable says why the queued task t may not go to worker w now, or
// returns nil (AssignTask's scheduling check).
func (c *coordinator) notLeasable(t *taskRec, w *workerRec) *Error {
	if c.sched == nil {
		return nil
	}
	reason := ""
	switch sc := c.sched.scans[t.scanID()]; {
	case c.sched.delayed.Has(t):
		reason = "task is scheduled for later"
	case t.tagMask&^w.mask() != 0:
		reason = "worker lacks a required tag"
	case sc.settings.Paused:
		reason = "scan is paused"
	case !sc.selectable():
		reason = "scan is at its in-flight limit"
	default:
		return nil
	}
	return &Error{Kind: KindTaskNotLeasable, TaskID: t.id, WorkerID: w.id, Reason: reason}
}

// nextQueued is the task AssignNext gives worker w (nil: none): the queue's
// minimum, or with scheduling the first ready task w's tags cover.
func (c *coordinator) nextQueued(w *workerRec) *taskRec {
	if c.sched == nil {
		t, _ := c.queue.Min()
		return t
	}
	return c.sched.next(w.mask())
}

// anyQueued reports whether a queued task could be leased by some worker.
func (c *coordinator) anyQueued() bool {
	if c.sched == nil {
		return c.queue.Len() > 0
	}
	return c.sched.heads.Len() > 0
}

// pickAvailable is AssignNextAvailable's selection: the first ready task
// (in heads order) that some eligible worker can take, and the best such
// worker. Errors: ErrNoQueuedTask (nothing leasable), ErrNoAvailableWorker.
func (c *coordinator) pickAvailable(now uint64) (*taskRec, *workerRec, *Error) {
	if !c.anyQueued() {
		return nil, nil, &Error{Kind: KindNoQueuedTask}
	}
	best := c.bestWorker(now)
	if best == nil {
		return nil, nil, &Error{Kind: KindNoAvailableWorker}
	}
	if c.sched == nil {
		t, _ := c.queue.Min()
		return t, best, nil
	}
	var tagged [32]*workerRec
	var looked [32]bool
	var t *taskRec
	var w *workerRec
	c.sched.heads.Ascend(func(l *lane) bool {
		if l.mask == 0 {
			t, w = l.headTask(), best
			return false
		}
		if !looked[l.mask] {
			looked[l.mask], tagged[l.mask] = true, c.bestTagged(now, l.mask)
		}
		if tagged[l.mask] != nil {
			t, w = l.headTask(), tagged[l.mask]
			return false
		}
		return true
	})
	if t == nil {
		return nil, nil, &Error{Kind: KindNoAvailableWorker}
	}
	return t, w, nil
}

func (l *lane) headTask() *taskRec {
	t, _ := l.ready.Min()
	return t
}

// bestTagged is bestWorker restricted to workers that declared every tag
// of mask: one walk over the live workers, O(workers). Only tagged tasks
// pay it, once per tag set per AssignNextAvailable.
func (c *coordinator) bestTagged(now uint64, mask uint8) *workerRec {
	var best *workerRec
	c.alive.walk(func(w *workerRec) bool {
		if w.key > 0 && !c.dead(w, now) && mask&^w.mask() == 0 {
			best = betterWorker(best, w)
		}
		return true
	})
	return best
}

// peek is PeekNext's task: the queue's minimum, or the first ready head.
func (c *coordinator) peek() (*taskRec, bool) {
	if c.sched == nil {
		return c.queue.Min()
	}
	l, ok := c.sched.heads.Min()
	if !ok {
		return nil, false
	}
	return l.headTask(), true
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
