// Goal: hclog lines reach slog with their level, component and attributes,
// below-level lines (and hclog's trace) are dropped, and bad flags are
// errors. Method: a JSON slog logger into a buffer, lines parsed back.
package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestHCLog_RoutesIntoSlog(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(&buf, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	hl := HCLog(l, "raft")
	hl.Trace("trace line")
	hl.Debug("debug line")
	hl.Info("entering leader state", "term", 3, "servers", hclog.Fmt("%d voters", 3))
	hl.Named("wal").Warn("slow", "error", errors.New("disk"))
	var got []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		got = append(got, m)
	}
	if len(got) != 2 {
		t.Fatalf("got %d lines, want 2 (trace and debug dropped at info): %v", len(got), got)
	}
	if got[0]["msg"] != "entering leader state" || got[0]["level"] != "INFO" || got[0]["component"] != "raft" ||
		got[0]["term"] != float64(3) || got[0]["servers"] != "3 voters" {
		t.Errorf("info line = %v", got[0])
	}
	if got[1]["level"] != "WARN" || got[1]["component"] != "raft.wal" || got[1]["error"] != "disk" {
		t.Errorf("warn line = %v", got[1])
	}
	if !hl.IsInfo() || hl.IsDebug() {
		t.Errorf("hclog level: IsInfo %v, IsDebug %v; want true, false", hl.IsInfo(), hl.IsDebug())
	}
}

func TestNew_RefusesBadFlags(t *testing.T) {
	for _, c := range [][2]string{{"xml", "info"}, {"json", "verbose"}, {"", "info"}} {
		if _, err := New(&bytes.Buffer{}, c[0], c[1]); err == nil {
			t.Errorf("New(%q, %q) = nil error", c[0], c[1])
		}
	}
	for _, lv := range levels {
		if _, err := New(&bytes.Buffer{}, "text", lv); err != nil {
			t.Errorf("New(text, %q) = %v", lv, err)
		}
	}
}
