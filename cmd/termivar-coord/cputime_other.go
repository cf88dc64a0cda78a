//go:build !unix

package main

import "time"

// processCPU is the CPU time this process has used; 0: not reported here.
func processCPU() time.Duration { return 0 }

// processSwitches is the context switches of this process; 0: not
// reported here.
func processSwitches() int64 { return 0 }
