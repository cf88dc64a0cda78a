package main

import distributed "github.com/termivar/distributed"

// Per-tenant defaults of the service: the limits `serve` gives the default
// tenant and `tenants create` a new one unless flags say otherwise. The
// core's own DefaultLimits (contract A.3: a coordinator created per job)
// stay as they are; these are sized for a node that runs for months, from
// the memory measured by BenchmarkServe_Memory (docs/benchmarks.md, "Memory
// per task and per result byte"): a node holding one tenant at every one
// of these limits peaks at about 720 MiB of RSS, under 1 GiB with room for
// requests in flight. The core's hard ceilings still bound every value.

// serviceTotalResultBytes bounds one tenant's stored result bytes: at the
// measured peak of 4.3 bytes of RSS per stored result byte (a snapshot
// encodes the whole store once more), 128 MiB peaks at about 550 MiB.
const serviceTotalResultBytes = 128 << 20

// serviceLimits returns the core's defaults with every task bound at its
// hard ceiling: 65 536 records (peak ≈ 2.5 KB of RSS each, ≈ 160 MiB),
// 16 384 active and queued, 65 536 terminal.
func serviceLimits() distributed.Limits {
	l := distributed.DefaultLimits()
	l.MaxTaskRecords = distributed.MaxTaskRecords
	l.MaxActiveTasks = distributed.MaxActiveTasks
	l.MaxQueuedTasks = distributed.MaxActiveTasks
	l.MaxTerminalTasks = distributed.MaxTaskRecords
	return l
}

// serviceResultLimits returns the core's result defaults with room for a
// result per task record (65 536) and serviceTotalResultBytes in all.
func serviceResultLimits() distributed.ResultLimits {
	rl := distributed.DefaultResultLimits()
	rl.MaxResults = distributed.MaxResults
	rl.MaxTotalBytes = serviceTotalResultBytes
	return rl
}
