//go:build !race

package main

// raceEnabled: the race detector slows code 5-10x, so
// and audits the core's whole state after every command (invariants.go),
// so TestCLI_EnqueueFlowControlStream streams fewer targets under it.
const raceEnabled = false
