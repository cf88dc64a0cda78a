// Package agent is the termivar worker agent: it registers (or reactivates)
// a worker, heartbeats (with the host's CPU and memory utilization only when
// Config.AdaptiveCapacity is on: the node then scales Capacity down by it;
// by default the worker gets the Capacity it declares), long-polls Acquire
// for up to that many concurrent tasks and runs each one, either as
// an external command (Config.Command, one process group per task) or as an
// in-process HandlerFunc.
//
// For every task the agent:
//
//  1. starts it (in the Acquire command when the server supports it,
//     otherwise with Start) before running it;
//  2. runs CMD with TERMIVAR_TARGET, TERMIVAR_TASK_ID, TERMIVAR_SCAN_ID,
//     TERMIVAR_PHASES, TERMIVAR_ATTEMPT and TERMIVAR_FENCE (the lease ID at
//     start, a monotonic fencing token for downstream writes) in its
//     environment; CMD's stderr goes to the agent's log with the task ID;
//  3. renews the lease every third of its TTL, so a renewal is always sent
//     before half the TTL has passed;
//  4. on exit 0 completes the task with CMD's stdout as the result (bounded
//     by Config.MaxResultBytes; larger output fails the attempt), otherwise
//     fails the attempt; when every slot is busy the completion rides on
//     the Acquire that fills the slot again (AcquireRequest.Complete), so a
//     saturated worker makes one call per task, else it is a Complete of
//     its own;
//  5. if a renewal says the lease is stale or gone, or a heartbeat says this
//     worker incarnation is gone, kills CMD's process group at once and
//     reports nothing for it (the server has already given the task to the
//     retry rule).
//
// Run returns when its context ends, after a graceful drain: stop acquiring,
// let running tasks finish within Config.Grace, kill and fail the rest,
// deregister. A lost connection is retried with backoff; the agent never
// gives up on a server that is restarting or failing over.
//
//	a, err := agent.New(agent.Config{Client: c, WorkerID: "w1", Capacity: 4, Command: []string{"./scan.sh"}})
//	...
//	err = a.Run(ctx) // cancel ctx (e.g. on SIGTERM) to drain
package agent
