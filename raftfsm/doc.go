// Package raftfsm is the node's deterministic state machine: a
// hashicorp/raft FSM that checks one replicated log entry's integrity
// frame (version byte + CRC-32C, frame.go), decodes it (a protobuf
// termivar.v1.Command) and calls the core. Nothing else. A committed entry
// that fails the check or does not decode stops the FSM (fatal.go); it is
// never applied as a rejected command.
//
// Per tenant it owns one distributed.WorkerPool and one ResultAggregator plus
// a little metadata that the core does not keep (limits, worker → API key
// bindings, each scan's task IDs in enqueue order). Cluster-wide it keeps the
// epoch ID every token is bound to, the API key table (hashes only) and the
// last applied logical time.
//
// Determinism: Apply never reads a clock, randomness or Log.AppendedAt. The
// logical time of a command is max(Command.now_secs, last applied time), so
// time never regresses even across a leader change; the revision passed to
// the core is the tenant's current one unless the command asks for
// compare-and-set. Domain failures (every *distributed.Error and the FSM's
// own *Error) travel back in the apply response; the error path of raft is
// left to infrastructure failures.
//
// Concurrency: raft calls Apply, Snapshot and Restore from one goroutine.
// Readers (the API) call the read methods from any goroutine; an RWMutex
// guards the FSM's own maps, and the core instances have their own locks.
// The reads every API call makes (its key, its tenant, the logical time)
// do not take the RWMutex, which Apply holds for a whole entry: they read
// copies published at the end of each applied entry (published.go).
package raftfsm
