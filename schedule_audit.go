package distributed

// The I13 audit (ARCHITECTURE.md): the scheduling index agrees with the
// task records, the scan records hold exactly the scans that need one with
// the right counts, and heads holds exactly the selectable lanes at their
// keys. Without an index no record carries a scheduling field. The
// per-task part runs in audit's one pass over the tasks (auditSchedTask);
// auditSched then checks the scans against what it counted.

// schedTally accumulates what the per-task scheduling checks count.
type schedTally struct {
	counts map[string]*ScanState
	ready  int
}

// auditSchedOpts checks the scheduling options before the task pass.
func (c *coordinator) auditSchedOpts() *Error {
	if c.sched != nil && c.sched.opts.validate() != nil {
		return auditError("I13: scheduling options are invalid")
	}
	return nil
}

// auditSched checks the scan records, lanes and heads against the tally
// of the task pass.
func (c *coordinator) auditSched(tally *schedTally) *Error {
	if c.sched == nil {
		return nil
	}
	return c.auditScans(tally.counts, tally.ready)
}

// auditSchedTask checks one task's scheduling fields and index membership
// and counts it for its scan.
func (c *coordinator) auditSchedTask(t *taskRec, tally *schedTally) *Error {
	s := c.sched
	if s == nil {
		if t.hasScheduling() {
			return auditError("I13: a task has scheduling fields but the pool has no scheduling index")
		}
		return nil
	}
	if t.tagMask >= 1<<(TagExternal+1) || validateBackoff(uint64(t.backoffBase), uint64(t.backoffCap), taskError) != nil {
		return auditError("I13: a task holds invalid scheduling fields")
	}
	if t.status.Terminal() {
		if s.delayed.Has(t) {
			return auditError("I13: a terminal task is in the delayed index")
		}
		return nil
	}
	n := tally.counts[t.scanID()]
	if n == nil {
		n = &ScanState{}
		tally.counts[t.scanID()] = n
	}
	n.Active++
	if t.hasLease {
		n.InFlight++
	}
	inDelayed := s.delayed.Has(t)
	if t.status != TaskQueued {
		if inDelayed {
			return auditError("I13: a task that is not queued is in the delayed index")
		}
		return nil
	}
	if inDelayed != (t.notBefore > c.logicalTime) {
		return auditError("I13: delayed index membership differs from the not-before time")
	}
	if inDelayed {
		return nil
	}
	tally.ready++
	if sc := s.scans[t.scanID()]; sc == nil || !sc.laneHas(t) {
		return auditError("I13: a due queued task is not in its lane")
	}
	return nil
}

func (sc *scanRec) laneHas(t *taskRec) bool {
	for _, l := range sc.lanes {
		if l.mask == t.tagMask {
			return l.ready.Has(t)
		}
	}
	return false
}

// auditScans checks the scan records against the counts, and the lanes
// and heads against the scans.
func (c *coordinator) auditScans(counts map[string]*ScanState, ready int) *Error {
	s := c.sched
	configured, inHeads, laneTasks := 0, 0, 0
	for id, sc := range s.scans {
		n := counts[id]
		if n == nil {
			n = &ScanState{}
		}
		switch {
		case sc.id != id || !ValidIdentifier(id):
			return auditError("I13: scan map key differs from its record")
		case sc.active != n.Active || sc.inFlight != n.InFlight:
			return auditError("I13: scan counts differ from its tasks")
		case sc.active == 0 && sc.settings == (ScanSettings{}):
			return auditError("I13: an idle scan without settings is retained")
		case sc.lastServed > c.lastLeaseID:
			return auditError("I13: a scan was served by an unissued lease")
		}
		if sc.settings != (ScanSettings{}) {
			configured++
		}
		for i, l := range sc.lanes {
			if err := c.auditLane(sc, i, l); err != nil {
				return err
			}
			laneTasks += l.ready.Len()
			if l.inHeads {
				inHeads++
			}
		}
	}
	for id := range counts {
		if s.scans[id] == nil {
			return auditError("I13: a scan with active tasks has no record")
		}
	}
	if laneTasks != ready || configured != s.configured || inHeads != s.heads.Len() ||
		configured > c.limits.MaxTaskRecords {
		return auditError("I13: lane, configured-scan or heads counts are inconsistent")
	}
	return nil
}

// auditLane checks that a lane holds queued, due tasks of its scan and tag
// set and sits in heads iff selectable, at its head's key.
func (c *coordinator) auditLane(sc *scanRec, i int, l *lane) *Error {
	for _, o := range sc.lanes[:i] {
		if o.mask == l.mask {
			return auditError("I13: two lanes of a scan share a tag set")
		}
	}
	bad := false
	l.ready.Ascend(func(t *taskRec) bool {
		bad = t.status != TaskQueued || t.scanID() != sc.id || t.tagMask != l.mask || c.tasks[t.id] != t
		return !bad
	})
	head, ok := l.ready.Min()
	want := ok && sc.selectable()
	switch {
	case bad || l.scan != sc:
		return auditError("I13: a lane holds a task of another scan, tag set or status")
	case l.inHeads != want || c.sched.heads.Has(l) != want:
		return auditError("I13: heads membership differs from the lane's selectability")
	case want && (l.keyPrio != head.priority || l.keyOrdinal != head.ordinal || l.keyServed != sc.lastServed):
		return auditError("I13: a lane's heads key is stale")
	}
	return nil
}
