package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestBench_TraceAndSwitches: --trace writes an execution trace of the
// measured run (the runtime's header and more than its header), and on
// Linux the run reports its context switches per task (each task's calls
// park and wake goroutines, so never zero).
func TestBench_TraceAndSwitches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.trace")
	res := runBenchArgs(t, []string{"--tasks", "200", "--batch", "20", "--producers", "1", "--workers", "2", "--rate", "2000", "--trace", path,
		"--lease-ttl-secs", testLeaseTTL}, true)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("go 1.")) || len(b) < 4096 {
		t.Errorf("trace: %d bytes starting %q, want a runtime trace of the run", len(b), b[:min(len(b), 16)])
	}
	if runtime.GOOS == "linux" && res.switches <= 0 {
		t.Errorf("context switches during the run = %d, want > 0:\n%s", res.switches, res.String())
	}
}
