//go:build linux

package agent

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// minCPUWindow is the shortest window a CPU utilization is measured over:
// /proc/stat counts in jiffies (10 ms), so shorter windows are noise.
const minCPUWindow = time.Second

// cpuSampler turns two readings of /proc/stat into a utilization. It is
// safe for concurrent use.
type cpuSampler struct {
	mu                  sync.Mutex
	prevIdle, prevTotal uint64
	at                  time.Time
	last                uint32
}

// sample returns the CPU utilization in basis points over the window since
// the previous measurement (since boot on the first call); a call less than
// minCPUWindow after the last measurement returns that measurement. 0 if
// /proc is unreadable.
func (s *cpuSampler) sample() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.at.IsZero() && time.Since(s.at) < minCPUWindow {
		return s.last
	}
	s.at = time.Now()
	s.last = s.read()
	return s.last
}

func (s *cpuSampler) read() uint32 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n") // the "cpu" totals
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0
	}
	var idle, total uint64
	// user nice system idle iowait irq softirq steal; guest and guest_nice
	// are already counted in user and nice.
	for i, f := range fields[1:min(len(fields), 9)] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0
		}
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	dIdle, dTotal := idle-s.prevIdle, total-s.prevTotal
	s.prevIdle, s.prevTotal = idle, total
	if dTotal == 0 || dIdle > dTotal {
		return 0
	}
	return uint32((dTotal - dIdle) * 10000 / dTotal)
}

// memoryBasisPoints returns (MemTotal − MemAvailable) / MemTotal in basis
// points from /proc/meminfo; 0 if unreadable.
func memoryBasisPoints() uint32 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	var total, avail uint64
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		v, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "MemTotal:":
			total = v
		case "MemAvailable:":
			avail = v
		}
	}
	if total == 0 || avail > total {
		return 0
	}
	return uint32((total - avail) * 10000 / total)
}
