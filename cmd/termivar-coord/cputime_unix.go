//go:build unix

package main

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system) this process has used, or 0
// when the platform does not report it.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processSwitches is the context switches (voluntary + involuntary) of
// every thread this process has had, or 0 when not reported.
func processSwitches() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Nvcsw + ru.Nivcsw)
}
