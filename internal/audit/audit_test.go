// Tests for the audit log: file mode, line shape and field set.
package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestOpen_ModeAndLines(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), FileName)
	var tee bytes.Buffer
	l, err := Open(path, &tee)
	if err != nil {
		t.Fatal(err)
	}
	l.Record(context.Background(), Entry{KeyID: "k1", Tenant: "default", Method: "Producer.Enqueue", Outcome: OutcomeOK, Revision: 3})
	l.Record(context.Background(), Entry{KeyID: "k1", Tenant: "default", Method: "Worker.Complete", Outcome: "stale_ownership"})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("audit.log mode = %v, %v, want 0600", st.Mode().Perm(), err)
	}
	data, _ := os.ReadFile(path)
	if !bytes.Equal(data, tee.Bytes()) {
		t.Fatal("tee differs from file")
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2", len(lines))
	}
	var m map[string]any
	if err := json.Unmarshal(lines[0], &m); err != nil {
		t.Fatal(err)
	}
	want := []string{"time", "key_id", "tenant", "method", "outcome", "revision"}
	if len(m) != len(want) {
		t.Fatalf("line has fields %v, want exactly %v", m, want)
	}
	for _, k := range want {
		if _, ok := m[k]; !ok {
			t.Fatalf("line %s lacks %q", lines[0], k)
		}
	}
	if m["outcome"] != "ok" || m["revision"] != float64(3) {
		t.Fatalf("line = %v", m)
	}
}

func TestLogger_NilSafe(t *testing.T) {
	t.Parallel()
	var l *Logger
	l.Record(context.Background(), Entry{})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	New(nil).Record(context.Background(), Entry{})
}

// failureLines decodes the auth_failures lines of data.
func failureLines(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ln := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		if len(ln) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(ln, &m); err != nil {
			t.Fatalf("line %q: %v", ln, err)
		}
		if m["event"] == "auth_failures" {
			out = append(out, m)
		}
	}
	return out
}

func TestFailureAggregator_OneLinePerSourcePerWindow(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	a := NewFailureAggregator(New(&buf), FailureConfig{Window: time.Minute, MaxSources: 8})
	t0 := time.Unix(1_000_000, 0)
	for i := range 10_000 {
		a.Add(t0.Add(time.Duration(i)*time.Millisecond), "198.51.100.7", i%2 == 0)
	}
	a.Add(t0, "203.0.113.9", false)
	if buf.Len() != 0 {
		t.Fatalf("lines written inside the window: %s", buf.String())
	}
	a.Tick(t0.Add(time.Minute)) // window over: its lines appear
	lines := failureLines(t, buf.Bytes())
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2 (one per source):\n%s", len(lines), buf.String())
	}
	if lines[0]["source"] != "198.51.100.7" || lines[0]["failures"] != float64(5000) || lines[0]["throttled"] != float64(5000) {
		t.Fatalf("line = %v, want 5000 failures and 5000 throttled", lines[0])
	}
	if lines[1]["source"] != "203.0.113.9" || lines[1]["failures"] != float64(1) {
		t.Fatalf("line = %v", lines[1])
	}
	want := []string{"time", "event", "source", "failures", "throttled", "since"}
	if len(lines[0]) != len(want) {
		t.Fatalf("line has fields %v, want exactly %v", lines[0], want)
	}
	if a.Sources() != 0 {
		t.Fatalf("table holds %d sources after the flush, want 0", a.Sources())
	}
}

func TestFailureAggregator_BoundedTable(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	a := NewFailureAggregator(New(&buf), FailureConfig{Window: time.Minute, MaxSources: 4})
	t0 := time.Unix(1_000_000, 0)
	for i := range 1000 {
		a.Add(t0, fmt.Sprintf("192.0.2.%d", i), false)
	}
	if got := a.Sources(); got != 5 {
		t.Fatalf("table holds %d sources, want 4 + overflow", got)
	}
	a.Flush(t0)
	lines := failureLines(t, buf.Bytes())
	if len(lines) != 5 {
		t.Fatalf("got %d lines, want 5", len(lines))
	}
	var total float64
	for _, l := range lines {
		total += l["failures"].(float64)
		if l["source"] == OverflowSource && l["failures"] != float64(996) {
			t.Fatalf("overflow line = %v, want 996 failures", l)
		}
	}
	if total != 1000 {
		t.Fatalf("lines count %v failures, want 1000", total)
	}
}

func TestLogger_CloseFlushesFailures(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), FileName)
	l, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Failures(FailureConfig{}).Add(time.Now(), "192.0.2.1", false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if got := failureLines(t, data); len(got) != 1 || got[0]["source"] != "192.0.2.1" {
		t.Fatalf("after Close: %s", data)
	}
	var nl *Logger
	nl.Failures(FailureConfig{}).Add(time.Now(), "x", false) // nil-safe
}

// TestAppendEntry_MatchesSlog: Record's own formatting writes, byte for
// byte, the line slog's JSON handler (which wrote the log before issue
// 15) writes for the same entry and time, escapes included.
func TestAppendEntry_MatchesSlog(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 13, 4, 5, 123456789, time.FixedZone("X", 3600))
	for _, e := range []Entry{
		{KeyID: "k1", Tenant: "default", Method: "Producer.Enqueue", Outcome: OutcomeOK, Revision: 3},
		{KeyID: "", Tenant: "", Method: "Worker.Complete", Outcome: "stale_ownership"},
		{KeyID: "k\"\\2", Tenant: "t\n\r\t\x01\x7f<>&", Method: "Admin.RevokeKey", Outcome: "ok", Revision: 1<<64 - 1, Subject: "k9"},
		{KeyID: "\xff\xfe", Tenant: "ünï\u2028\u2029", Method: "m", Outcome: "o", Subject: "\x00"},
	} {
		var want bytes.Buffer
		l := New(&want)
		r := slog.NewRecord(at, slog.LevelInfo, "audit", 0)
		r.AddAttrs(slog.String("key_id", e.KeyID), slog.String("tenant", e.Tenant), slog.String("method", e.Method),
			slog.String("outcome", e.Outcome), slog.Uint64("revision", e.Revision))
		if e.Subject != "" {
			r.AddAttrs(slog.String("subject_key_id", e.Subject))
		}
		if err := l.log.Handler().Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if got := appendEntry(nil, at, e); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("appendEntry(%+v)\n got %s\nwant %s", e, got, want.Bytes())
		}
	}
}

// TestLogger_RecordAllocs: a Record allocates nothing once its line
// buffer is pooled (it is on the path of every mutating request).
func TestLogger_RecordAllocs(t *testing.T) {
	l := New(io.Discard)
	e := Entry{KeyID: "k1", Tenant: "default", Method: "Producer.Enqueue", Outcome: OutcomeOK, Revision: 3}
	if n := testing.AllocsPerRun(100, func() { l.Record(context.Background(), e) }); n > 0 {
		t.Fatalf("Record allocates %.0f times, want 0", n)
	}
}
