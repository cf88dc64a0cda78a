//go:build !linux

package distributed

import "time"

var cpuEpoch = time.Now()

// threadCPU falls back to wall time where the thread CPU clock is not
// read (bench_cpu_linux_test.go).
func threadCPU() time.Duration { return time.Since(cpuEpoch) }
