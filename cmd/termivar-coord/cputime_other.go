//go:build !unix

package main

import "time"

// processCPU is the CPU time this process has used; 0: not reported here.
func processCPU() time.Duration { return 0 }
