package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRun runs the example host end to end and checks its story: a retry, a
// lost worker whose late completion is rejected, and all six results back in
// enqueue order.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{
		"failed: requeued (retry 1, generation 1)",
		"lost scanner-c: 1 task(s) requeued",
		"late completion of scan-1:02 is rejected",
		"aggregated 6 results in enqueue order",
		"invariants hold",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	i0, i5 := strings.Index(s, "    scan-1:00"), strings.Index(s, "    scan-1:05")
	if i0 < 0 || i5 < i0 {
		t.Errorf("results are not in enqueue order:\n%s", s)
	}
}
