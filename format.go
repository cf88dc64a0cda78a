package distributed

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
)

// Redaction (contract A.1): every type that holds a target reference or result
// bytes implements fmt.Formatter (so %v %+v %#v %s %q %x all go through it),
// fmt.Stringer, fmt.GoStringer and slog.LogValuer, and none of them prints the
// target. Getters still return the real values.

const redacted = "<redacted>"

// String renders the spec with its target redacted.
func (s TaskSpec) String() string {
	var b strings.Builder
	b.WriteString("TaskSpec{TaskID:")
	b.WriteString(safeID(s.TaskID))
	b.WriteString(" ScanID:")
	b.WriteString(safeID(s.ScanID))
	b.WriteString(" TargetRef:" + redacted + " Phases:")
	b.WriteString(strconv.Itoa(len(s.Phases)))
	b.WriteString(" Priority:")
	b.WriteString(s.Priority.String())
	b.WriteString("}")
	return b.String()
}

// GoString renders the spec with its target redacted.
func (s TaskSpec) GoString() string { return s.String() }

// Format renders the spec with its target redacted, whatever the verb.
func (s TaskSpec) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(s.String())) }

// LogValue renders the spec for slog with its target redacted.
func (s TaskSpec) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("task_id", safeID(s.TaskID)),
		slog.String("scan_id", safeID(s.ScanID)),
		slog.String("target_ref", redacted),
		slog.Int("phases", len(s.Phases)),
		slog.String("priority", s.Priority.String()),
	)
}

// safeID returns id if it is a valid identifier and a placeholder otherwise,
// so that formatting a spec never echoes hostile bytes.
func safeID(id string) string {
	if ValidIdentifier(id) {
		return id
	}
	return "<invalid>"
}

// String renders the task with its target redacted.
func (t ScanTask) String() string {
	var b strings.Builder
	b.WriteString("ScanTask{TaskID:")
	b.WriteString(t.taskID)
	b.WriteString(" ScanID:")
	b.WriteString(t.scanID)
	b.WriteString(" TargetRef:" + redacted + " Status:")
	b.WriteString(t.status.String())
	b.WriteString(" Priority:")
	b.WriteString(t.priority.String())
	b.WriteString(" Attempt:")
	b.WriteString(strconv.FormatUint(uint64(t.attempt), 10))
	b.WriteString(" TaskGeneration:")
	b.WriteString(strconv.FormatUint(t.taskGeneration, 10))
	b.WriteString(" RecordVersion:")
	b.WriteString(strconv.FormatUint(t.recordVersion, 10))
	if t.hasLease {
		b.WriteString(" AssignedTo:")
		b.WriteString(t.lease.workerID)
		b.WriteString(" LeaseID:")
		b.WriteString(strconv.FormatUint(t.lease.leaseID, 10))
	}
	b.WriteString("}")
	return b.String()
}

// GoString renders the task with its target redacted.
func (t ScanTask) GoString() string { return t.String() }

// Format renders the task with its target redacted, whatever the verb.
func (t ScanTask) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(t.String())) }

// LogValue renders the task for slog with its target redacted.
func (t ScanTask) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("task_id", t.taskID),
		slog.String("scan_id", t.scanID),
		slog.String("target_ref", redacted),
		slog.String("status", t.status.String()),
		slog.Uint64("attempt", uint64(t.attempt)),
		slog.Uint64("task_generation", t.taskGeneration),
		slog.Uint64("record_version", t.recordVersion),
	)
}

func snapshotString(name string, s StateSnapshot) string {
	return fmt.Sprintf("%s{Revision:%d LogicalTime:%d TaskRecords:%d ActiveTasks:%d QueuedTasks:%d TerminalTasks:%d Workers:%d}",
		name, s.Revision, s.LogicalTime, s.TaskRecords, s.ActiveTasks, s.QueuedTasks, s.TerminalTasks, s.Workers)
}

func snapshotLogValue(s StateSnapshot) slog.Value {
	return slog.GroupValue(
		slog.Uint64("revision", s.Revision),
		slog.Uint64("logical_time", s.LogicalTime),
		slog.Int("task_records", s.TaskRecords),
		slog.Int("active_tasks", s.ActiveTasks),
		slog.Int("queued_tasks", s.QueuedTasks),
		slog.Int("terminal_tasks", s.TerminalTasks),
		slog.Int("workers", s.Workers),
	)
}

// String summarizes the pool's counters; it never prints targets.
func (p *WorkerPool) String() string { return snapshotString("WorkerPool", p.Snapshot()) }

// GoString summarizes the pool's counters.
func (p *WorkerPool) GoString() string { return p.String() }

// Format summarizes the pool's counters, whatever the verb.
func (p *WorkerPool) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(p.String())) }

// LogValue summarizes the pool's counters for slog.
func (p *WorkerPool) LogValue() slog.Value { return snapshotLogValue(p.Snapshot()) }

// String summarizes the queue's counters; it never prints targets.
func (q *TaskQueue) String() string { return snapshotString("TaskQueue", q.Snapshot()) }

// GoString summarizes the queue's counters.
func (q *TaskQueue) GoString() string { return q.String() }

// Format summarizes the queue's counters, whatever the verb.
func (q *TaskQueue) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(q.String())) }

// LogValue summarizes the queue's counters for slog.
func (q *TaskQueue) LogValue() slog.Value { return snapshotLogValue(q.Snapshot()) }

var outcomeNames = map[string][]string{
	"start":        {"", "started", "already_started"},
	"completion":   {"", "completed", "already_completed"},
	"failure":      {"", "requeued", "retry_exhausted"},
	"cancellation": {"", "cancelled", "already_cancelled"},
	"store":        {"", "stored", "already_stored"},
}

func outcomeName(family string, k uint8) string {
	names := outcomeNames[family]
	if int(k) > 0 && int(k) < len(names) {
		return names[k]
	}
	return family + "(" + strconv.Itoa(int(k)) + ")"
}

// String returns "started" or "already_started".
func (k StartOutcomeKind) String() string { return outcomeName("start", uint8(k)) }

// String returns "completed" or "already_completed".
func (k CompletionOutcomeKind) String() string { return outcomeName("completion", uint8(k)) }

// String returns "requeued" or "retry_exhausted".
func (k FailureOutcomeKind) String() string { return outcomeName("failure", uint8(k)) }

// String returns "cancelled" or "already_cancelled".
func (k CancellationOutcomeKind) String() string { return outcomeName("cancellation", uint8(k)) }

// String returns "stored" or "already_stored".
func (k StoreResultOutcomeKind) String() string { return outcomeName("store", uint8(k)) }

// MarshalJSON renders the spec with its target redacted, so that slog's JSON
// handler (which JSON-encodes slices and structs that contain specs) never
// prints a target. Hosts that need the target on the wire use their own
// message types.
func (s TaskSpec) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		TaskID    string
		ScanID    string
		TargetRef string
		Phases    int
		Priority  string
	}{safeID(s.TaskID), safeID(s.ScanID), redacted, len(s.Phases), s.Priority.String()})
}

// MarshalJSON renders the task with its target redacted; see TaskSpec.MarshalJSON.
func (t ScanTask) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		TaskID, ScanID, TargetRef, Status string
		Attempt                           uint32
		TaskGeneration, RecordVersion     uint64
	}{t.taskID, t.scanID, redacted, t.status.String(), t.attempt, t.taskGeneration, t.recordVersion})
}

// MarshalJSON renders the result with its bytes redacted; see TaskSpec.MarshalJSON.
func (r AggregatedResult) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		TaskID      string
		Result      string
		ResultBytes int
	}{r.TaskID, redacted, len(r.Result)})
}
