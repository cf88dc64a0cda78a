package model

import (
	"math"

	distributed "github.com/termivar/distributed"
)

// Scheduling (contract Part F), modelled naively: a queued task is
// selectable when its not-before time is at or before logical time (before
// the command), its scan is not paused and below its in-flight limit; a
// worker may take it when it declared every required tag. Selectable tasks
// are served by priority, then — with FairScans — the scan served longest
// ago (the lease ID of its last grant, forgotten when the scan has neither
// active tasks nor settings), then enqueue ordinal.

// Scan is the model's record of one scan.
type Scan struct {
	Settings   distributed.ScanSettings
	LastServed uint64
}

// SchedulingOptions returns the pool options.
func (m *Model) SchedulingOptions() distributed.SchedulingOptions { return m.opts }

// SetSchedulingOptions replaces the pool options.
func (m *Model) SetSchedulingOptions(rev, now uint64, o distributed.SchedulingOptions) (distributed.SchedulingOptions, uint64, error) {
	if err := checkBackoff(o.BackoffBaseSecs, o.BackoffCapSecs, true); err != nil {
		return distributed.SchedulingOptions{}, 0, err
	}
	if err := m.begin(rev, now); err != nil {
		return distributed.SchedulingOptions{}, 0, err
	}
	if err := m.revisionExhausted(); err != nil {
		return distributed.SchedulingOptions{}, 0, err
	}
	m.opts = o
	return o, m.commit(now), nil
}

// UpdateScan changes the named settings of one scan.
func (m *Model) UpdateScan(rev, now uint64, u distributed.ScanUpdate) (distributed.ScanState, uint64, error) {
	if err := checkIdentifier("scan_id", u.ScanID); err != nil {
		return distributed.ScanState{}, 0, err
	}
	if !u.SetMaxInFlight && !u.SetPaused {
		return distributed.ScanState{}, 0, invalidTask("scan update sets nothing")
	}
	if err := m.begin(rev, now); err != nil {
		return distributed.ScanState{}, 0, err
	}
	old := m.scans[u.ScanID].Settings
	next := old
	if u.SetMaxInFlight {
		next.MaxInFlight = u.MaxInFlight
	}
	if u.SetPaused {
		next.Paused = u.Paused
	}
	zero := distributed.ScanSettings{}
	if next != zero && old == zero && m.configuredScans() >= m.limits.MaxTaskRecords {
		return distributed.ScanState{}, 0, &distributed.Error{Kind: distributed.KindScanCapacityReached, Limit: uint64(m.limits.MaxTaskRecords)}
	}
	if err := m.revisionExhausted(); err != nil {
		return distributed.ScanState{}, 0, err
	}
	sc := m.scans[u.ScanID]
	sc.Settings = next
	m.scans[u.ScanID] = sc
	st := m.scanState(u.ScanID)
	return st, m.commit(now), nil
}

// ScanState returns a scan's settings and counts.
func (m *Model) ScanState(scanID string) (distributed.ScanState, error) {
	if err := checkIdentifier("scan_id", scanID); err != nil {
		return distributed.ScanState{}, err
	}
	return m.scanState(scanID), nil
}

func (m *Model) scanState(id string) distributed.ScanState {
	st := distributed.ScanState{ScanID: id, Settings: m.scans[id].Settings}
	for _, t := range m.tasks {
		if t.ScanID == id && !t.Status.Terminal() {
			st.Active++
			if t.HasLease {
				st.InFlight++
			}
		}
	}
	return st
}

// AdvanceTime moves logical time and reports how many scheduled tasks
// became leasable.
func (m *Model) AdvanceTime(rev, now uint64) (int, uint64, error) {
	if err := m.begin(rev, now); err != nil {
		return 0, 0, err
	}
	if err := m.revisionExhausted(); err != nil {
		return 0, 0, err
	}
	n := 0
	for _, t := range m.tasks {
		if t.Status == distributed.TaskQueued && t.Scheduling.NotBeforeSecs > m.logicalTime && t.Scheduling.NotBeforeSecs <= now {
			n++
		}
	}
	return n, m.commit(now), nil
}

// WakeDue reports whether a command at now would make a scheduled task
// leasable.
func (m *Model) WakeDue(now uint64) bool {
	for _, t := range m.tasks {
		if t.Status == distributed.TaskQueued && t.Scheduling.NotBeforeSecs > m.logicalTime && t.Scheduling.NotBeforeSecs <= now {
			return true
		}
	}
	return false
}

func (m *Model) configuredScans() int {
	n := 0
	for _, sc := range m.scans {
		if sc.Settings != (distributed.ScanSettings{}) {
			n++
		}
	}
	return n
}

// checkBackoff validates a backoff base and cap, as options (limit
// errors) or as a spec (InvalidTask).
func checkBackoff(base, limit uint64, options bool) error {
	tooLarge := func(name string, v uint64) error {
		if options {
			return &distributed.Error{Kind: distributed.KindTimeLimitExceedsMaximum, Name: name, Actual: v, Maximum: distributed.MaxBackoffSecs}
		}
		return invalidTask(name + " is too large")
	}
	relation := func(reason string) error {
		if options {
			return &distributed.Error{Kind: distributed.KindInvalidLimitRelationship, Reason: reason}
		}
		return invalidTask(reason)
	}
	switch {
	case base > distributed.MaxBackoffSecs:
		return tooLarge("backoff_base_secs", base)
	case limit > distributed.MaxBackoffSecs:
		return tooLarge("backoff_cap_secs", limit)
	case base == 0 && limit != 0:
		return relation("backoff_cap_secs needs backoff_base_secs")
	case limit != 0 && limit < base:
		return relation("backoff_cap_secs is below backoff_base_secs")
	}
	return nil
}

func checkScheduling(s distributed.TaskScheduling) error {
	for _, t := range s.RequiredTags {
		if t > distributed.TagExternal {
			return invalidTask("required tag is invalid")
		}
	}
	return checkBackoff(s.BackoffBaseSecs, s.BackoffCapSecs, false)
}

// normalTags returns the distinct tags sorted (nil for none).
func normalTags(in []distributed.WorkerTag) []distributed.WorkerTag {
	var out []distributed.WorkerTag
	for t := distributed.TagLinux; t <= distributed.TagExternal; t++ {
		for _, have := range in {
			if have == t {
				out = append(out, t)
				break
			}
		}
	}
	return out
}

// covers reports whether worker tags include every required tag.
func covers(worker, required []distributed.WorkerTag) bool {
	for _, r := range required {
		found := false
		for _, w := range worker {
			found = found || w == r
		}
		if !found {
			return false
		}
	}
	return true
}

// selectable reports whether queued task t may be leased by someone now;
// it returns the reason it may not otherwise.
func (m *Model) notSelectable(t Task) string {
	sc := m.scans[t.ScanID]
	switch {
	case t.Scheduling.NotBeforeSecs > m.logicalTime:
		return "task is scheduled for later"
	case sc.Settings.Paused:
		return "scan is paused"
	case sc.Settings.MaxInFlight != 0 && m.scanState(t.ScanID).InFlight >= sc.Settings.MaxInFlight:
		return "scan is at its in-flight limit"
	}
	return ""
}

// servedBefore is the serving order of two selectable tasks.
func (m *Model) servedBefore(a, b Task) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if m.opts.FairScans {
		sa, sb := m.scans[a.ScanID].LastServed, m.scans[b.ScanID].LastServed
		if sa != sb {
			return sa < sb
		}
	}
	return queuedBefore(a, b)
}

// selectable returns the indexes of the selectable queued tasks in
// serving order.
func (m *Model) selectable() []int {
	var out []int
	for i, t := range m.tasks {
		if t.Status != distributed.TaskQueued || m.notSelectable(t) != "" {
			continue
		}
		at := len(out)
		for at > 0 && m.servedBefore(t, m.tasks[out[at-1]]) {
			at--
		}
		out = append(out, 0)
		copy(out[at+1:], out[at:])
		out[at] = i
	}
	return out
}

// retryNotBefore is the not-before time of task t requeued at now (its
// retry count already incremented).
func (m *Model) retryNotBefore(t Task, now uint64) uint64 {
	base, limit := t.Scheduling.BackoffBaseSecs, t.Scheduling.BackoffCapSecs
	if base == 0 {
		base, limit = m.opts.BackoffBaseSecs, m.opts.BackoffCapSecs
	}
	if base == 0 {
		return t.Scheduling.NotBeforeSecs
	}
	if limit == 0 {
		limit = distributed.MaxBackoffSecs
	}
	d := base
	for k := uint32(1); k < t.RetryCount && d < limit; k++ {
		d *= 2
	}
	d = min(d, limit)
	half := d / 2
	d = d - half + jitter(t.TaskID, t.Attempt)%(half+1)
	if now > math.MaxUint64-d {
		return math.MaxUint64
	}
	return now + d
}

// jitter is the documented jitter hash: FNV-1a of the task ID through the
// splitmix64 finalizer, xor the attempt times the golden ratio, then one
// more mixing round.
func jitter(taskID string, attempt uint32) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(taskID); i++ {
		h ^= uint64(taskID[i])
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	h ^= uint64(attempt) * 0x9e3779b97f4a7c15
	h ^= h >> 31
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 29
	return h
}
