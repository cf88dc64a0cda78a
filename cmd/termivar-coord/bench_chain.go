package main

import (
	"fmt"
	"time"

	"github.com/termivar/distributed/internal/metrics"
)

// benchChain is what the embedded node's raft instruments (metrics.Node)
// counted: entries answered and their time from raft.Apply to the answer,
// the commands in them, and the log store writes (raft-wal append with its
// fsync) and their time. The difference of two is a run's
// (docs/benchmarks.md, "One task per call, session 7": the stages of the
// per-call chain).
type benchChain struct {
	entries, commands, stores float64
	entrySecs, storeSecs      float64
}

// nodeChain reads reg's raft instruments; the zero benchChain when reg is
// nil (a bench against --server) or cannot be read.
func nodeChain(reg *metrics.Registry) benchChain {
	var c benchChain
	if reg == nil {
		return c
	}
	mfs, err := reg.Reg.Gather()
	if err != nil {
		return c
	}
	for _, mf := range mfs {
		if len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetHistogram() == nil {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		switch mf.GetName() {
		case "termivar_raft_apply_seconds":
			c.entries, c.entrySecs = float64(h.GetSampleCount()), h.GetSampleSum()
		case "termivar_raft_batch_commands":
			c.commands = h.GetSampleSum()
		case "termivar_raft_log_store_seconds":
			c.stores, c.storeSecs = float64(h.GetSampleCount()), h.GetSampleSum()
		}
	}
	return c
}

// since is c less what before had counted.
func (c benchChain) since(before benchChain) benchChain {
	return benchChain{entries: c.entries - before.entries, commands: c.commands - before.commands, stores: c.stores - before.stores,
		entrySecs: c.entrySecs - before.entrySecs, storeSecs: c.storeSecs - before.storeSecs}
}

// line is the run's chain line, "" when nothing was counted.
func (c benchChain) line() string {
	if c.entries <= 0 || c.stores <= 0 {
		return ""
	}
	mean := func(secs, n float64) time.Duration {
		return time.Duration(secs / n * float64(time.Second)).Round(time.Microsecond)
	}
	return fmt.Sprintf("\nraft_entry_apply_to_answer_mean=%s commands_per_entry=%.1f wal_store_mean=%s entries_per_wal_store=%.2f",
		mean(c.entrySecs, c.entries), c.commands/c.entries, mean(c.storeSecs, c.stores), c.entries/c.stores)
}
