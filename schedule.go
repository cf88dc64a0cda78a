package distributed

import (
	"iter"
	"math"
	"math/bits"
	"slices"
)

// Scheduling (contract Part F, "Scheduling fields"): not-before times,
// backoff on retry, required tags, per-scan in-flight limits, pause and
// fairness between scans. All of it is in logical time and derived from the
// command sequence alone. With none of it used — a TaskSpec with a zero
// Scheduling, no UpdateScan and zero SchedulingOptions — the core behaves
// exactly as contract Part A says (ADR 0003).

// MaxBackoffSecs is the hard ceiling of a backoff base or cap: the longest
// task TTL, beyond which a backed-off task would expire before it woke.
const MaxBackoffSecs = MaxTaskTTLSecs

// TaskScheduling holds a task's scheduling fields. The zero value asks for
// nothing: no not-before time, no required tags, the pool's backoff.
type TaskScheduling struct {
	// NotBeforeSecs is the logical second from which the task may be leased
	// (0: at once). A queued task whose NotBeforeSecs is after the pool's
	// logical time is "scheduled"; it becomes leasable when a command
	// commits at or after that second (AdvanceTime is the host's no-op).
	NotBeforeSecs uint64
	// RequiredTags are the tags a worker must have declared, all of them,
	// to lease the task (at most MaxWorkerTags distinct, stored sorted).
	RequiredTags []WorkerTag
	// BackoffBaseSecs and BackoffCapSecs override the pool's backoff for
	// this task (base 0: the pool's; cap 0: MaxBackoffSecs).
	BackoffBaseSecs, BackoffCapSecs uint64
}

// IsZero reports whether s asks for nothing.
func (s TaskScheduling) IsZero() bool {
	return s.NotBeforeSecs == 0 && len(s.RequiredTags) == 0 && s.BackoffBaseSecs == 0 && s.BackoffCapSecs == 0
}

// SchedulingOptions are a pool's scheduling options. The zero value is
// contract Part A: retries are requeued at once and scans are served in
// queue order.
type SchedulingOptions struct {
	// BackoffBaseSecs is the delay before the first retry (0: no backoff);
	// retry k waits base × 2^(k−1), at most BackoffCapSecs (0:
	// MaxBackoffSecs), minus a deterministic jitter of up to half of it.
	BackoffBaseSecs, BackoffCapSecs uint64
	// FairScans serves scans of the same priority round-robin: the scan
	// served longest ago goes first, so a large scan enqueued first does not
	// starve a small one enqueued after it.
	FairScans bool
}

// ScanSettings are one scan's scheduling settings. The zero value is no
// limit, not paused.
type ScanSettings struct {
	// MaxInFlight bounds the scan's leased and running tasks (0: no limit).
	MaxInFlight uint32
	// Paused stops new leases of the scan's tasks; running tasks finish.
	Paused bool
}

// ScanUpdate changes the named settings of one scan; a field whose Set flag
// is false stays as it is.
type ScanUpdate struct {
	ScanID         string
	SetMaxInFlight bool
	MaxInFlight    uint32
	SetPaused      bool
	Paused         bool
}

// ScanState is a scan's settings and its in-flight count (ScanSettings
// read).
type ScanState struct {
	ScanID   string
	Settings ScanSettings
	// InFlight counts the scan's leased and running tasks.
	InFlight uint32
	// Active counts the scan's non-terminal tasks.
	Active int
}

// validate checks the options: ErrTimeLimitExceedsMaximum (above
// MaxBackoffSecs), ErrInvalidLimitRelationship (a cap without a base, or a
// cap below the base).
func (o SchedulingOptions) validate() *Error {
	return validateBackoff(o.BackoffBaseSecs, o.BackoffCapSecs, limitError)
}

// Validate checks the options as SetSchedulingOptions does.
func (o SchedulingOptions) Validate() error {
	if err := o.validate(); err != nil {
		return err
	}
	return nil
}

// limitError reports a backoff problem as a limit error (options).
func limitError(name string, actual uint64, reason string) *Error {
	if reason == "" {
		return &Error{Kind: KindTimeLimitExceedsMaximum, Name: name, Actual: actual, Maximum: MaxBackoffSecs}
	}
	return &Error{Kind: KindInvalidLimitRelationship, Reason: reason}
}

// taskError reports a backoff problem as an InvalidTask reason (a spec).
func taskError(name string, _ uint64, reason string) *Error {
	if reason == "" {
		return &Error{Kind: KindInvalidTask, Reason: name + " is too large"}
	}
	return &Error{Kind: KindInvalidTask, Reason: reason}
}

func validateBackoff(base, limit uint64, bad func(string, uint64, string) *Error) *Error {
	switch {
	case base > MaxBackoffSecs:
		return bad("backoff_base_secs", base, "")
	case limit > MaxBackoffSecs:
		return bad("backoff_cap_secs", limit, "")
	case base == 0 && limit != 0:
		return bad("", 0, "backoff_cap_secs needs backoff_base_secs")
	case limit != 0 && limit < base:
		return bad("", 0, "backoff_cap_secs is below backoff_base_secs")
	}
	return nil
}

// validateScheduling checks a spec's scheduling fields (InvalidTask).
func validateScheduling(s TaskScheduling) *Error {
	if _, err := tagMask(s.RequiredTags, "required "); err != nil {
		return err
	}
	return validateBackoff(s.BackoffBaseSecs, s.BackoffCapSecs, taskError)
}

// tagMask turns tags into a bit set: ≤ MaxWorkerTags distinct declared
// tags, duplicates allowed (as for a WorkerSpec).
func tagMask(tags []WorkerTag, what string) (uint8, *Error) {
	var m uint8
	for _, t := range tags {
		if !t.Valid() {
			return 0, &Error{Kind: KindInvalidTask, Reason: what + "tag is invalid"}
		}
		m |= 1 << t
	}
	return m, nil
}

// maskTags lists the tags of a bit set in tag order (nil for none): a
// task's required tags, a worker's tags (tagList) and, without the
// slice, the export's order (workerRec.encode, tagsOf).
func maskTags(m uint8) []WorkerTag {
	if m == 0 {
		return nil
	}
	return slices.AppendSeq(make([]WorkerTag, 0, bits.OnesCount8(m)), tagsOf(m))
}

// tagsOf yields the tags of a bit set in increasing order.
func tagsOf(m uint8) iter.Seq[WorkerTag] {
	return func(yield func(WorkerTag) bool) {
		for t := TagLinux; t <= TagExternal; t++ {
			if m&(1<<t) != 0 && !yield(t) {
				return
			}
		}
	}
}

// workerMask is the tag bit set a worker declared.
func (w *workerRec) mask() uint8 { return w.tagBits }

// tagCount is the number of w's tags.
func (w *workerRec) tagCount() int { return bits.OnesCount8(w.tagBits) }

// tagList returns w's tags in increasing order (nil for none): the
// WorkerNode's and the export's form.
func (w *workerRec) tagList() []WorkerTag { return maskTags(w.tagBits) }

// scheduling returns t's scheduling fields as a TaskScheduling.
func (t *taskRec) scheduling() TaskScheduling {
	return TaskScheduling{NotBeforeSecs: t.notBefore, RequiredTags: maskTags(t.tagMask),
		BackoffBaseSecs: uint64(t.backoffBase), BackoffCapSecs: uint64(t.backoffCap)}
}

// hasScheduling reports whether t carries any scheduling field.
func (t *taskRec) hasScheduling() bool {
	return t.notBefore != 0 || t.tagMask != 0 || t.backoffBase != 0 || t.backoffCap != 0
}

// backoffSecs is the delay before retry number retry (1 for the first) of
// a task: base × 2^(retry−1), capped, minus a jitter of up to half of it
// derived from the task ID and attempt — deterministic, so every replica
// and the reference model compute the same not-before time.
func backoffSecs(base, limit uint64, retry uint32, taskID string, attempt uint32) uint64 {
	if base == 0 {
		return 0
	}
	if limit == 0 {
		limit = MaxBackoffSecs
	}
	d := limit
	if shift := retry - 1; retry > 0 && shift < 63 && base <= limit>>shift {
		d = base << shift
	}
	half := d / 2
	return d - half + jitterHash(taskID, attempt)%(half+1)
}

// jitterHash mixes a task ID and an attempt (FNV-1a, splitmix64 finalizer).
func jitterHash(taskID string, attempt uint32) uint64 {
	h := idHash(taskID) ^ uint64(attempt)*0x9e3779b97f4a7c15
	h ^= h >> 31
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 29
	return h
}

// idHash is a fixed hash of an ID, the first half of jitterHash.
func idHash(id string) uint64 {
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

// BackoffSecs is the delay the core applies before retry number retry (1
// for the first) of the task with that ID and attempt, for a backoff base
// and cap (exported so hosts and the reference model can show it).
func BackoffSecs(base, limit uint64, retry uint32, taskID string, attempt uint32) uint64 {
	return backoffSecs(base, limit, retry, taskID, attempt)
}

// retryNotBefore is the not-before time of a task being requeued at now by
// the retry rule (its retry count already incremented), or 0 without
// backoff. It saturates instead of overflowing.
func (c *coordinator) retryNotBefore(t *taskRec, now uint64) uint64 {
	base, limit := uint64(t.backoffBase), uint64(t.backoffCap)
	if base == 0 && c.sched != nil {
		base, limit = c.sched.opts.BackoffBaseSecs, c.sched.opts.BackoffCapSecs
	}
	d := backoffSecs(base, limit, uint32(t.retryCount), t.id, t.attempt)
	if d == 0 {
		return t.notBefore
	}
	if now > math.MaxUint64-d {
		return math.MaxUint64
	}
	return now + d
}

// SetSchedulingOptions replaces the pool's scheduling options. Errors:
// ErrTimeLimitExceedsMaximum, ErrInvalidLimitRelationship (see
// SchedulingOptions.Validate), ErrRevisionConflict,
// ErrLogicalTimeRegression, ErrCounterExhausted.
func (p *WorkerPool) SetSchedulingOptions(expectedRevision, nowSecs uint64, o SchedulingOptions) (Transition[SchedulingOptions], error) {
	var zero Transition[SchedulingOptions]
	if err := o.validate(); err != nil {
		return zero, err
	}
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return zero, err
	}
	if err := c.canCommit(); err != nil {
		return zero, err
	}
	c.ensureSched().setOptions(o)
	return Transition[SchedulingOptions]{Revision: c.commit(nowSecs), Value: o}, nil
}

// SchedulingOptions returns the pool's scheduling options.
func (p *WorkerPool) SchedulingOptions() SchedulingOptions {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	if p.c.sched == nil {
		return SchedulingOptions{}
	}
	return p.c.sched.opts
}

// NewWorkerPoolWithOptions returns an empty pool with limits and
// scheduling options, or the first validation error.
func NewWorkerPoolWithOptions(l Limits, o SchedulingOptions) (*WorkerPool, error) {
	p, err := NewWorkerPoolWithLimits(l)
	if err != nil {
		return nil, err
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o != (SchedulingOptions{}) {
		p.c.ensureSched().setOptions(o)
	}
	return p, nil
}

// UpdateScan changes one scan's settings (pause, resume, in-flight limit).
// A scan need not have tasks yet, so its limit can be set before its first
// enqueue; a scan with settings counts against MaxTaskRecords configured
// scans. Pausing keeps queued tasks queued and lets leased and running
// tasks finish; no task record changes, so fences stay valid. Errors:
// ErrInvalidTask ("scan_id …", "scan update sets nothing"),
// ErrRevisionConflict, ErrLogicalTimeRegression, ErrScanCapacityReached,
// ErrCounterExhausted.
func (p *WorkerPool) UpdateScan(expectedRevision, nowSecs uint64, u ScanUpdate) (Transition[ScanState], error) {
	var zero Transition[ScanState]
	if pr := identifierProblem(u.ScanID); pr != "" {
		return zero, &Error{Kind: KindInvalidTask, Reason: "scan_id " + pr}
	}
	if !u.SetMaxInFlight && !u.SetPaused {
		return zero, &Error{Kind: KindInvalidTask, Reason: "scan update sets nothing"}
	}
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return zero, err
	}
	next := c.scanSettings(u.ScanID)
	if u.SetMaxInFlight {
		next.MaxInFlight = u.MaxInFlight
	}
	if u.SetPaused {
		next.Paused = u.Paused
	}
	if err := c.checkScanCapacity(u.ScanID, next); err != nil {
		return zero, err
	}
	if err := c.canCommit(); err != nil {
		return zero, err
	}
	sc := c.ensureSched().applySettings(u.ScanID, next)
	st := sc.state()
	return Transition[ScanState]{Revision: c.commit(nowSecs), Value: st}, nil
}

// checkScanCapacity is UpdateScan's check 4: configuring a scan that has
// no settings yet needs room among the configured scans.
func (c *coordinator) checkScanCapacity(id string, next ScanSettings) *Error {
	if next == (ScanSettings{}) || c.scanSettings(id) != (ScanSettings{}) {
		return nil
	}
	if c.sched != nil && c.sched.configured >= c.limits.MaxTaskRecords {
		return &Error{Kind: KindScanCapacityReached, Limit: uint64(c.limits.MaxTaskRecords)}
	}
	return nil
}

// scanSettings returns a scan's current settings (zero if it has none).
func (c *coordinator) scanSettings(id string) ScanSettings {
	if c.sched == nil {
		return ScanSettings{}
	}
	if sc := c.sched.scans[id]; sc != nil {
		return sc.settings
	}
	return ScanSettings{}
}

// ScanSettings returns a scan's settings (zero if it has none), O(1). The
// error is ErrInvalidTask, only for an invalid scan ID.
func (p *WorkerPool) ScanSettings(scanID string) (ScanSettings, error) {
	if pr := identifierProblem(scanID); pr != "" {
		return ScanSettings{}, &Error{Kind: KindInvalidTask, Reason: "scan_id " + pr}
	}
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	return p.c.scanSettings(scanID), nil
}

// ScanState returns a scan's settings and counts. The error is
// ErrInvalidTask, only for an invalid scan ID; a scan with no tasks and no
// settings gives a zero ScanState with its ID. NB: O(1) once the pool has
// used a scheduling feature; before, the counts take one pass over the
// non-terminal tasks (hosts that poll use ScanSettings).
func (p *WorkerPool) ScanState(scanID string) (ScanState, error) {
	if pr := identifierProblem(scanID); pr != "" {
		return ScanState{}, &Error{Kind: KindInvalidTask, Reason: "scan_id " + pr}
	}
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sched != nil {
		if sc := c.sched.scans[scanID]; sc != nil {
			return sc.state(), nil
		}
	}
	st := ScanState{ScanID: scanID}
	if c.sched == nil {
		c.ages.walk(func(t *taskRec) bool {
			if t.scanID() == scanID {
				st.Active++
				if t.hasLease {
					st.InFlight++
				}
			}
			return true
		})
	}
	return st, nil
}

// AdvanceTime is a command that only moves logical time to now (and the
// revision by one), so that scheduled tasks whose not-before time has come
// become leasable without any other call; the node's ticker proposes it
// when WakeDue says so. It returns how many scheduled tasks became
// leasable. Errors: ErrRevisionConflict, ErrLogicalTimeRegression,
// ErrCounterExhausted.
func (p *WorkerPool) AdvanceTime(expectedRevision, nowSecs uint64) (Transition[int], error) {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.begin(expectedRevision, nowSecs); err != nil {
		return Transition[int]{}, err
	}
	if err := c.canCommit(); err != nil {
		return Transition[int]{}, err
	}
	before := c.delayedLen()
	rev := c.commit(nowSecs)
	return Transition[int]{Revision: rev, Value: before - c.delayedLen()}, nil
}

// WakeDue reports, without changing anything, whether a command committed
// at now would make a scheduled task leasable (O(1)).
func (p *WorkerPool) WakeDue(now uint64) bool {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sched == nil {
		return false
	}
	t, ok := c.sched.delayed.Min()
	return ok && t.notBefore <= now
}

func (c *coordinator) delayedLen() int {
	if c.sched == nil {
		return 0
	}
	return c.sched.delayed.Len()
}

// Scheduled reports whether the task is queued with a not-before time
// after logical time now: it is waiting for its time, not for a worker.
func (t ScanTask) Scheduled(now uint64) bool {
	return t.status == TaskQueued && t.scheduling.NotBeforeSecs > now
}

// Scheduling returns a copy of the task's scheduling fields.
func (t ScanTask) Scheduling() TaskScheduling {
	s := t.scheduling
	s.RequiredTags = append([]WorkerTag(nil), s.RequiredTags...)
	if len(s.RequiredTags) == 0 {
		s.RequiredTags = nil
	}
	return s
}
