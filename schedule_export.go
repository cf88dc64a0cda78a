package distributed

// State export version 3 (contract A.13, Part F): written only when the
// state holds scheduling data — non-zero SchedulingOptions, a task with a
// scheduling field, or a scan record with settings or a fairness position
// — so a pool that uses no scheduling feature still exports version 2,
// byte for byte. Version 3 is version 2 plus:
//
//	after the header counters: BackoffBaseSecs BackoffCapSecs FairScans
//	after each task:           notBefore tagMask backoffBase backoffCap
//	after the workers:         scans: count, then each in scan-ID order:
//	                           id MaxInFlight Paused lastServed
//	                           (then version 2's extensions section)
//
// Restore of version 3 builds the scheduling index, and refuses a version 3
// frame without scheduling data (it would not re-export to the same bytes).

const poolVersionSched = 3

// exportsSched reports whether the state needs export version 2.
func (c *coordinator) exportsSched() bool {
	s := c.sched
	if s == nil {
		return false
	}
	if s.opts != (SchedulingOptions{}) || len(s.exportedScans()) > 0 {
		return true
	}
	for _, t := range c.tasks {
		if t.hasScheduling() {
			return true
		}
	}
	return false
}

// exportedScans lists, in ID order, the scans whose record carries state:
// settings or a fairness position.
func (s *scheduler) exportedScans() []*scanRec {
	var out []*scanRec
	for _, id := range sortedKeys(s.scans) {
		if sc := s.scans[id]; sc.settings != (ScanSettings{}) || sc.lastServed != 0 {
			out = append(out, sc)
		}
	}
	return out
}

func (o SchedulingOptions) encode(e *encoder) {
	e.uvarint(o.BackoffBaseSecs)
	e.uvarint(o.BackoffCapSecs)
	e.boolean(o.FairScans)
}

func decodeSchedulingOptions(d *decoder) SchedulingOptions {
	return SchedulingOptions{BackoffBaseSecs: d.uvarint(), BackoffCapSecs: d.uvarint(), FairScans: d.boolean()}
}

func (t *taskRec) encodeSched(e *encoder) {
	e.uvarint(t.notBefore)
	e.uvarint(uint64(t.tagMask))
	e.uvarint(uint64(t.backoffBase))
	e.uvarint(uint64(t.backoffCap))
}

func (t *taskRec) decodeSched(d *decoder) {
	t.notBefore = d.uvarint()
	t.tagMask = d.u8()
	t.backoffBase = backoffField(d.uvarint())
	t.backoffCap = backoffField(d.uvarint())
}

// backoffField narrows a decoded backoff to the record's uint32; a value
// above MaxBackoffSecs stays above it, so the audit still refuses it.
func backoffField(v uint64) uint32 { return uint32(min(v, MaxBackoffSecs+1)) }

func (s *scheduler) encodeScans(e *encoder) {
	scans := s.exportedScans()
	e.uvarint(uint64(len(scans)))
	for _, sc := range scans {
		e.str(sc.id)
		e.uvarint(uint64(sc.settings.MaxInFlight))
		e.boolean(sc.settings.Paused)
		e.uvarint(sc.lastServed)
	}
}

// decodedScan is a scan record as read from version 2 state.
type decodedScan struct {
	id         string
	settings   ScanSettings
	lastServed uint64
}

// decodeScans reads the scan section: strict ID order, every record
// carrying state (a scan record takes at least 4 bytes).
func decodeScans(d *decoder, limit int) ([]decodedScan, *Error) {
	n := d.count(uint64(limit)+MaxActiveTasks, 4)
	out := make([]decodedScan, 0, n)
	for i := 0; i < n && !d.failed; i++ {
		sc := decodedScan{id: d.str(MaxIdentifierBytes)}
		sc.settings.MaxInFlight = d.u32()
		sc.settings.Paused = d.boolean()
		sc.lastServed = d.uvarint()
		if d.failed {
			break
		}
		if !ValidIdentifier(sc.id) || (i > 0 && sc.id <= out[i-1].id) {
			return nil, invalidState("scan records are not in strict scan-ID order")
		}
		if sc.settings == (ScanSettings{}) && sc.lastServed == 0 {
			return nil, invalidState("a scan record carries no state")
		}
		out = append(out, sc)
	}
	return out, nil
}

// restoreSched builds the scheduling index of a decoded version 2 state
// after rebuildIndexes, then installs the decoded scans. Scan records
// that would not exist live (no settings and no active tasks) are refused.
func (c *coordinator) restoreSched(o SchedulingOptions, scans []decodedScan) *Error {
	if o.validate() != nil {
		return invalidState("scheduling options are invalid")
	}
	s := c.ensureSched()
	s.setOptions(o)
	for _, d := range scans {
		sc := s.scans[d.id]
		if sc == nil && d.settings == (ScanSettings{}) {
			return invalidState("a scan record without settings has no active task")
		}
		s.applySettings(d.id, d.settings)
		sc = s.scans[d.id]
		sc.lastServed = d.lastServed
		s.repositionScan(sc)
	}
	if !c.exportsSched() {
		return invalidState("version 3 state carries no scheduling data")
	}
	return nil
}
