package model

import (
	"math"
	"sort"

	distributed "github.com/termivar/distributed"
)

// Model is the reference WorkerPool (and its TaskQueue). It is not safe for
// concurrent use. Every method checks everything before it changes anything,
// so a failed command leaves the model exactly as it was.
type Model struct {
	limits      distributed.Limits
	revision    uint64
	logicalTime uint64
	tasks       []Task   // task-ID order; looked up by linear scan
	workers     []Worker // worker-ID order; looked up by linear scan
	lastLeaseID uint64   // the last lease ID granted (0: none yet)
	lastOrdinal uint64   // the last enqueue ordinal used
	// genFloor is the generation new tasks start at: one above the
	// highest generation of any purged task (docs/adr/0002-purge.md).
	genFloor uint64
}

// New returns a model with the given limits, or the limits' validation error.
func New(l distributed.Limits) (*Model, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &Model{limits: l}, nil
}

// Revision returns the current revision.
func (m *Model) Revision() uint64 { return m.revision }

// LogicalTime returns the current logical time.
func (m *Model) LogicalTime() uint64 { return m.logicalTime }

// ---------------------------------------------------------------- errors

func kerr(k distributed.ErrorKind) *distributed.Error { return &distributed.Error{Kind: k} }

func invalidTask(reason string) *distributed.Error {
	return &distributed.Error{Kind: distributed.KindInvalidTask, Reason: reason}
}

func invalidWorker(reason string) *distributed.Error {
	return &distributed.Error{Kind: distributed.KindInvalidWorker, Reason: reason}
}

const (
	badTaskCommandID   = "task command identifier is invalid"
	badWorkerCommandID = "worker command identifier is invalid"
)

// ---------------------------------------------------------------- reads

// Snapshot returns the state summary.
func (m *Model) Snapshot() distributed.StateSnapshot {
	s := distributed.StateSnapshot{
		Revision:    m.revision,
		LogicalTime: m.logicalTime,
		TaskRecords: len(m.tasks),
		Workers:     len(m.workers),
	}
	for _, t := range m.tasks {
		if t.Status.Terminal() {
			s.TerminalTasks++
		} else {
			s.ActiveTasks++
		}
		if t.Status == distributed.TaskQueued {
			s.QueuedTasks++
		}
	}
	return s
}

// Workers returns copies of every worker in worker-ID order.
func (m *Model) Workers() []Worker {
	out := make([]Worker, 0, len(m.workers))
	for _, w := range m.workers {
		w.Tags = append([]distributed.WorkerTag(nil), w.Tags...)
		out = append(out, w)
	}
	return out
}

// TaskRecords returns the model's own task records in task-ID order, without
// copying. Callers must treat them as read-only; it exists so that the
// simulator can compare every record after every step cheaply.
func (m *Model) TaskRecords() []Task { return m.tasks }

// GetTask returns the task with that ID. An invalid ID is an error.
func (m *Model) GetTask(id string) (Task, bool, error) {
	if !distributed.ValidIdentifier(id) {
		return Task{}, false, invalidTask(badTaskCommandID)
	}
	t, ok := m.taskAt(m.taskIndex(id))
	return t, ok, nil
}

// GetWorker returns the worker with that ID. An invalid ID is an error.
func (m *Model) GetWorker(id string) (Worker, bool, error) {
	if !distributed.ValidIdentifier(id) {
		return Worker{}, false, invalidWorker(badWorkerCommandID)
	}
	w, ok := m.workerAt(m.workerIndex(id))
	return w, ok, nil
}

// PeekNext returns the task at the head of the queue.
func (m *Model) PeekNext() (Task, bool) { return m.taskAt(m.nextQueued()) }

// GetAvailableWorker returns the best eligible worker at now (read-only).
func (m *Model) GetAvailableWorker(now uint64) (Worker, bool, error) {
	if now < m.logicalTime {
		return Worker{}, false, &distributed.Error{Kind: distributed.KindLogicalTimeRegression, Current: m.logicalTime, Proposed: now}
	}
	w, ok := m.workerAt(m.bestWorker(now))
	return w, ok, nil
}

// taskAt returns a copy of task i (false for i < 0, no task).
func (m *Model) taskAt(i int) (Task, bool) {
	if i < 0 {
		return Task{}, false
	}
	t := m.tasks[i]
	t.Phases = append([]uint8(nil), t.Phases...)
	return t, true
}

// workerAt returns a copy of worker i (false for i < 0, no worker).
func (m *Model) workerAt(i int) (Worker, bool) {
	if i < 0 {
		return Worker{}, false
	}
	w := m.workers[i]
	w.Tags = append([]distributed.WorkerTag(nil), w.Tags...)
	return w, true
}

func (m *Model) taskIndex(id string) int {
	for i := range m.tasks {
		if m.tasks[i].TaskID == id {
			return i
		}
	}
	return -1
}

func (m *Model) workerIndex(id string) int {
	for i := range m.workers {
		if m.workers[i].WorkerID == id {
			return i
		}
	}
	return -1
}

// queuedBefore reports whether queued task a is served before queued task b:
// priority descending, then enqueue ordinal, then task ID.
func queuedBefore(a, b Task) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if a.Ordinal != b.Ordinal {
		return a.Ordinal < b.Ordinal
	}
	return a.TaskID < b.TaskID
}

func (m *Model) nextQueued() int {
	best := -1
	for i, t := range m.tasks {
		if t.Status != distributed.TaskQueued {
			continue
		}
		if best < 0 || queuedBefore(t, m.tasks[best]) {
			best = i
		}
	}
	return best
}

func (m *Model) count(status distributed.TaskStatus) int {
	n := 0
	for _, t := range m.tasks {
		if t.Status == status {
			n++
		}
	}
	return n
}

func (m *Model) nonTerminal() int {
	n := 0
	for _, t := range m.tasks {
		if !t.Status.Terminal() {
			n++
		}
	}
	return n
}

func (m *Model) dead(w Worker, now uint64) bool {
	return now-w.LastHeartbeat >= m.limits.HeartbeatTimeoutSecs
}

func (m *Model) eligible(w Worker, now uint64) bool {
	return w.Status == distributed.WorkerHealthy && !m.dead(w, now) && w.AvailableSlots() >= 1
}

// bestWorker returns the eligible worker with the most available slots, ties
// to the smallest worker ID, or -1.
func (m *Model) bestWorker(now uint64) int {
	best := -1
	for i, w := range m.workers {
		if !m.eligible(w, now) {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := m.workers[best]
		if w.AvailableSlots() > b.AvailableSlots() ||
			(w.AvailableSlots() == b.AvailableSlots() && w.WorkerID < b.WorkerID) {
			best = i
		}
	}
	return best
}

// ---------------------------------------------------------------- common checks

// begin runs the revision and logical-time checks (contract A.6 steps 2 and 3).
func (m *Model) begin(rev, now uint64) error {
	if rev != m.revision {
		return &distributed.Error{Kind: distributed.KindRevisionConflict, Expected: rev, Actual: m.revision}
	}
	if now < m.logicalTime {
		return &distributed.Error{Kind: distributed.KindLogicalTimeRegression, Current: m.logicalTime, Proposed: now}
	}
	return nil
}

// commit records a successful command: revision +1, logical time = now.
func (m *Model) commit(now uint64) uint64 {
	m.revision++
	m.logicalTime = now
	return m.revision
}

// revisionExhausted is step 5 for the revision counter.
func (m *Model) revisionExhausted() error {
	if m.revision == math.MaxUint64 {
		return &distributed.Error{Kind: distributed.KindCounterExhausted, Counter: "revision"}
	}
	return nil
}

func (m *Model) checkTTL(ttl uint64) error {
	if ttl == 0 || ttl > m.limits.MaxLeaseTTLSecs {
		return &distributed.Error{Kind: distributed.KindLeaseTTLOutOfRange, Actual: ttl, Maximum: m.limits.MaxLeaseTTLSecs}
	}
	return nil
}

func checkLeaseIDs(l Lease) error {
	if !distributed.ValidIdentifier(l.TaskID) {
		return invalidTask(badTaskCommandID)
	}
	if !distributed.ValidIdentifier(l.WorkerID) {
		return invalidWorker(badWorkerCommandID)
	}
	return nil
}

func checkOwnershipIDs(o Ownership) error {
	if o.IsLease {
		return checkLeaseIDs(o.Lease)
	}
	if !distributed.ValidIdentifier(o.Fence.TaskID) {
		return invalidTask(badTaskCommandID)
	}
	return nil
}

func checkIdentifier(field, s string) error {
	switch {
	case len(s) == 0:
		return invalidTask(field + " is empty")
	case len(s) > distributed.MaxIdentifierBytes:
		return invalidTask(field + " is too long")
	case !distributed.ValidIdentifier(s):
		return invalidTask(field + " contains unsafe characters")
	}
	return nil
}

func checkTaskSpec(s distributed.TaskSpec) error {
	if err := checkIdentifier("task_id", s.TaskID); err != nil {
		return err
	}
	if err := checkIdentifier("scan_id", s.ScanID); err != nil {
		return err
	}
	switch {
	case len(s.TargetRef) == 0:
		return invalidTask("target_ref is empty")
	case len(s.TargetRef) > distributed.MaxTargetRefBytes:
		return invalidTask("target_ref is too long")
	case len(s.Phases) > distributed.MaxTaskPhases:
		return invalidTask("too many phases")
	case s.Priority > distributed.PriorityCritical:
		return invalidTask("priority is invalid")
	case s.AttemptTimeoutSecs > distributed.MaxTaskTTLSecs:
		return invalidTask("attempt timeout is too long")
	}
	return nil
}

func utilizationTooHigh(cpu, mem, net uint16) bool {
	return cpu > 10000 || mem > 10000 || net > 10000
}

// checkWorkerSpec validates a spec and returns its tags deduplicated and sorted.
func checkWorkerSpec(s distributed.WorkerSpec) ([]distributed.WorkerTag, error) {
	if !distributed.ValidIdentifier(s.WorkerID) {
		return nil, invalidWorker("worker_id is invalid")
	}
	if s.Capacity == 0 {
		return nil, invalidWorker("capacity is zero")
	}
	if s.Capacity > distributed.MaxWorkerCapacity {
		return nil, invalidWorker("capacity exceeds absolute maximum")
	}
	if utilizationTooHigh(s.CPUBasisPoints, s.MemoryBasisPoints, s.NetworkBasisPoints) {
		return nil, invalidWorker("utilization exceeds 10000 basis points")
	}
	var tags []distributed.WorkerTag
	for _, t := range s.Tags {
		dup := false
		for _, have := range tags {
			if have == t {
				dup = true
			}
		}
		if !dup {
			tags = append(tags, t)
		}
	}
	if len(tags) > distributed.MaxWorkerTags {
		return nil, invalidWorker("too many tags")
	}
	for _, t := range tags {
		if t > distributed.TagExternal {
			return nil, invalidWorker("tag is invalid")
		}
	}
	sort.Slice(tags, func(i, j int) bool { return tags[i] < tags[j] })
	return tags, nil
}
