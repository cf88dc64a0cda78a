//go:build linux

package agent

import "testing"

// TestUtilization reads the real /proc values: both in range, memory
// non-zero on any running Linux machine, and repeated CPU samples within the
// minimum window return the same measurement.
func TestUtilization(t *testing.T) {
	var s cpuSampler
	cpu := s.sample()
	if cpu > 10000 {
		t.Errorf("cpu = %d bp, want <= 10000", cpu)
	}
	if again := s.sample(); again != cpu {
		t.Errorf("second sample within the window = %d, want %d", again, cpu)
	}
	if mem := memoryBasisPoints(); mem == 0 || mem > 10000 {
		t.Errorf("memory = %d bp, want 1..10000", mem)
	}
}
