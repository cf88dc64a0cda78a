// Tests for the audit log: file mode, line shape and field set.
package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
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
