package distributed

// Goal: Limits.Validate and ResultLimits.Validate report the first failure in
// the contract A.3 order with the pinned names, details and reasons.

import (
	"errors"
	"testing"
)

func TestLimits_Validate(t *testing.T) {
	type mod func(*Limits)
	tests := []struct {
		name string
		mod  mod
		want *Error
	}{
		{"defaults", func(*Limits) {}, nil},
		{"maximum", func(l *Limits) { *l = MaximumLimits() }, nil},
		{"zero records", func(l *Limits) { l.MaxTaskRecords = 0 }, &Error{Kind: KindInvalidLimit, Name: "max_task_records"}},
		{"zero active", func(l *Limits) { l.MaxActiveTasks = 0 }, &Error{Kind: KindInvalidLimit, Name: "max_active_tasks"}},
		{"zero queued", func(l *Limits) { l.MaxQueuedTasks = 0 }, &Error{Kind: KindInvalidLimit, Name: "max_queued_tasks"}},
		{"zero terminal", func(l *Limits) { l.MaxTerminalTasks = 0 }, &Error{Kind: KindInvalidLimit, Name: "max_terminal_tasks"}},
		{"zero workers", func(l *Limits) { l.MaxWorkers = 0 }, &Error{Kind: KindInvalidLimit, Name: "max_workers"}},
		{"negative workers", func(l *Limits) { l.MaxWorkers = -1 }, &Error{Kind: KindInvalidLimit, Name: "max_workers"}},
		{"zero count before ceiling", func(l *Limits) { l.MaxWorkers = 0; l.MaxTaskRecords = MaxTaskRecords + 1 }, &Error{Kind: KindInvalidLimit, Name: "max_workers"}},
		{"records above ceiling", func(l *Limits) { l.MaxTaskRecords = MaxTaskRecords + 1 }, &Error{Kind: KindCountLimitExceedsMaximum, Name: "max_task_records", Actual: MaxTaskRecords + 1, Maximum: MaxTaskRecords}},
		{"active above ceiling", func(l *Limits) { l.MaxActiveTasks = MaxActiveTasks + 1 }, &Error{Kind: KindCountLimitExceedsMaximum, Name: "max_active_tasks", Actual: MaxActiveTasks + 1, Maximum: MaxActiveTasks}},
		{"queued uses the active ceiling", func(l *Limits) { l.MaxQueuedTasks = MaxActiveTasks + 1 }, &Error{Kind: KindCountLimitExceedsMaximum, Name: "max_queued_tasks", Actual: MaxActiveTasks + 1, Maximum: MaxActiveTasks}},
		{"terminal uses the records ceiling", func(l *Limits) { l.MaxTerminalTasks = MaxTaskRecords + 1 }, &Error{Kind: KindCountLimitExceedsMaximum, Name: "max_terminal_tasks", Actual: MaxTaskRecords + 1, Maximum: MaxTaskRecords}},
		{"workers above ceiling", func(l *Limits) { l.MaxWorkers = MaxWorkers + 1 }, &Error{Kind: KindCountLimitExceedsMaximum, Name: "max_workers", Actual: MaxWorkers + 1, Maximum: MaxWorkers}},
		{"count ceiling before time ceiling", func(l *Limits) { l.MaxWorkers = MaxWorkers + 1; l.MaxLeaseTTLSecs = MaxLeaseTTLSecs + 1 }, &Error{Kind: KindCountLimitExceedsMaximum, Name: "max_workers", Actual: MaxWorkers + 1, Maximum: MaxWorkers}},
		{"lease ttl above ceiling", func(l *Limits) { l.MaxLeaseTTLSecs = MaxLeaseTTLSecs + 1 }, &Error{Kind: KindTimeLimitExceedsMaximum, Name: "max_lease_ttl_secs", Actual: MaxLeaseTTLSecs + 1, Maximum: MaxLeaseTTLSecs}},
		{"task ttl above ceiling", func(l *Limits) { l.MaxTaskTTLSecs = MaxTaskTTLSecs + 1 }, &Error{Kind: KindTimeLimitExceedsMaximum, Name: "max_task_ttl_secs", Actual: MaxTaskTTLSecs + 1, Maximum: MaxTaskTTLSecs}},
		{"heartbeat above ceiling", func(l *Limits) { l.HeartbeatTimeoutSecs = MaxHeartbeatTimeoutSecs + 1 }, &Error{Kind: KindTimeLimitExceedsMaximum, Name: "heartbeat_timeout_secs", Actual: MaxHeartbeatTimeoutSecs + 1, Maximum: MaxHeartbeatTimeoutSecs}},
		{"time ceiling before retries", func(l *Limits) { l.MaxRetries = 33; l.HeartbeatTimeoutSecs = MaxHeartbeatTimeoutSecs + 1 }, &Error{Kind: KindTimeLimitExceedsMaximum, Name: "heartbeat_timeout_secs", Actual: MaxHeartbeatTimeoutSecs + 1, Maximum: MaxHeartbeatTimeoutSecs}},
		{"retries at 32", func(l *Limits) { l.MaxRetries = 32 }, nil},
		{"retries at 33", func(l *Limits) { l.MaxRetries = 33 }, &Error{Kind: KindRetryLimitExceedsMaximum, Actual: 33, Maximum: 32}},
		{"retries before zero time", func(l *Limits) { l.MaxRetries = 33; l.MaxLeaseTTLSecs = 0 }, &Error{Kind: KindRetryLimitExceedsMaximum, Actual: 33, Maximum: 32}},
		{"zero retries is valid", func(l *Limits) { l.MaxRetries = 0 }, nil},
		{"zero lease ttl", func(l *Limits) { l.MaxLeaseTTLSecs = 0 }, &Error{Kind: KindInvalidLimit, Name: "max_lease_ttl_secs"}},
		{"zero task ttl", func(l *Limits) { l.MaxTaskTTLSecs = 0 }, &Error{Kind: KindInvalidLimit, Name: "max_task_ttl_secs"}},
		{"zero heartbeat", func(l *Limits) { l.HeartbeatTimeoutSecs = 0 }, &Error{Kind: KindInvalidLimit, Name: "heartbeat_timeout_secs"}},
		{"zero time before relations", func(l *Limits) {
			l.HeartbeatTimeoutSecs = 0
			l.MaxActiveTasks = 2000
			l.MaxTaskRecords = 1500
			l.MaxTerminalTasks = 1500
		}, &Error{Kind: KindInvalidLimit, Name: "heartbeat_timeout_secs"}},
		{"active above records", func(l *Limits) {
			l.MaxTaskRecords = 1000
			l.MaxTerminalTasks = 1000
			l.MaxActiveTasks = 1001
			l.MaxQueuedTasks = 1001
		}, &Error{Kind: KindInvalidLimitRelationship, Reason: "max_active_tasks exceeds max_task_records"}},
		{"queued above active", func(l *Limits) { l.MaxQueuedTasks = l.MaxActiveTasks + 1 }, &Error{Kind: KindInvalidLimitRelationship, Reason: "max_queued_tasks exceeds max_active_tasks"}},
		{"terminal above records", func(l *Limits) { l.MaxTerminalTasks = l.MaxTaskRecords + 1 }, &Error{Kind: KindInvalidLimitRelationship, Reason: "max_terminal_tasks exceeds max_task_records"}},
		{"terminal below active", func(l *Limits) { l.MaxTerminalTasks = l.MaxActiveTasks - 1 }, &Error{Kind: KindInvalidLimitRelationship, Reason: "max_terminal_tasks is smaller than max_active_tasks"}},
		{"terminal equal to active", func(l *Limits) { l.MaxTerminalTasks = l.MaxActiveTasks }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := DefaultLimits()
			tt.mod(&l)
			err := l.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || *e != *tt.want {
				t.Fatalf("Validate() = %#v, want %#v", err, tt.want)
			}
			if _, err := NewWorkerPoolWithLimits(l); err == nil || !errors.Is(err, tt.want) {
				t.Fatalf("NewWorkerPoolWithLimits() = %v, want kind %v", err, tt.want.Kind)
			}
			if _, err := NewTaskQueueWithLimits(l); err == nil || !errors.Is(err, tt.want) {
				t.Fatalf("NewTaskQueueWithLimits() = %v, want kind %v", err, tt.want.Kind)
			}
		})
	}
}

func TestDefaultLimits(t *testing.T) {
	want := Limits{4096, 1024, 1024, 4096, 256, 3, 3600, 86400, 60}
	if got := DefaultLimits(); got != want {
		t.Fatalf("DefaultLimits() = %+v, want %+v", got, want)
	}
	wantR := ResultLimits{1024, 1 << 20, 16 << 20, 1024, 16 << 20}
	if got := DefaultResultLimits(); got != wantR {
		t.Fatalf("DefaultResultLimits() = %+v, want %+v", got, wantR)
	}
}

func TestError_IsMatchesByKind(t *testing.T) {
	sentinels := allSentinels()
	if len(sentinels) != len(AllErrorKinds()) {
		t.Fatalf("%d sentinels for %d kinds", len(sentinels), len(AllErrorKinds()))
	}
	for i, s := range sentinels {
		if s.Kind != AllErrorKinds()[i] {
			t.Fatalf("sentinel %d has kind %v, want %v", i, s.Kind, AllErrorKinds()[i])
		}
		err := error(&Error{Kind: s.Kind, TaskID: "t1", Actual: 3})
		for j, other := range sentinels {
			if got := errors.Is(err, other); got != (i == j) {
				t.Fatalf("errors.Is(%v, %v) = %v", s.Kind, other.Kind, got)
			}
		}
		if k, ok := ParseErrorKind(s.Kind.String()); !ok || k != s.Kind {
			t.Fatalf("ParseErrorKind(%q) = %v, %v", s.Kind.String(), k, ok)
		}
	}
}
