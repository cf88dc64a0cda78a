// Package client is the Go client of a termivar coordinator node: typed
// wrappers over the generated ConnectRPC clients of the Worker, Producer and
// Admin services that add bearer-key authentication, retries with capped
// exponential backoff on Unavailable and connection errors, and one error
// type, *Error, that carries the RPC, the Connect code and the server's
// error kind, and unwraps to the core's *distributed.Error.
//
// The worker agent (package agent) and the termivar-coord CLI are built on
// it; it is also the way to write a worker or producer in Go:
//
//	c, err := client.New(client.Config{ServerURL: "http://127.0.0.1:7420", Key: key})
//	if err != nil { ... }
//	res, err := c.EnqueueTargets(ctx, client.EnqueueOptions{ScanID: "s1"}, slices.Values([]string{"a.example", "b.example"}))
//	...
//	err = c.Results(ctx, "s1", func(taskID string, result []byte) error { ... })
//
// # Retries and failover
//
// A Client configured with several URLs (ServerURL "http://a:7420,
// http://b:7420,http://c:7420") sends each try to its current node, follows
// a not_leader answer that names the leader (LeaderHeader), and moves on to
// the next URL when a node does not answer: a connection error, or — for
// the calls marked "replay" below — a try that runs out of its own
// deadline, Config.AttemptTimeout (default 1 s, a cluster's default
// election timeout; an Acquire or FollowResults try gets its long-poll wait on top, and
// every try one second per MiB of request). A
// paused (SIGSTOPped) node still accepts TCP connections, so the attempt
// deadline is what takes a client off it. A try that timed out is
// re-issued at once on the next node; other retries back off. Unavailable
// answers are retried for every call, up to Config.MaxAttempts tries (or,
// with Config.RetryTimeout, for that long since the call began),
// except that a call without "replay" is not retried when the answer says
// the outcome is unknown (OutcomeHeader); ResourceExhausted, every other
// code and a TLS handshake refused on the certificates are returned at
// once.
//
// A call is marked "replay" when sending it again after a try that may
// have been applied changes nothing the first try did not:
//
//	RPC                      replay  why
//	Producer.GetTask,        yes     reads
//	  ListTasks, ScanProgress,
//	  ListScans, FollowResults,
//	  Admin.Status, ListWorkers,
//	  ListKeys,
//	  Cluster.Members
//	Worker.Heartbeat         yes     sets the same status again
//	Worker.Start             yes     same lease: AlreadyStarted
//	Worker.Complete,         yes     same lease: AlreadyCompleted with the
//	  CompleteMany                   same receipt
//	Worker.Fail              yes     same lease: the same outcome (retries
//	                                 exhausted) or stale_ownership (the
//	                                 task was requeued under a new lease)
//	Worker.RenewLease        yes     the old token is stale once the first
//	                                 try applied: stale_ownership, and the
//	                                 lease runs out at its earlier expiry
//	Worker.Deregister        yes     names the generation: a replay fails
//	                                 (worker_unavailable or a generation
//	                                 conflict)
//	Worker.Acquire           yes     leases a lost reply granted expire and
//	                                 the tasks are leased again (retry rule);
//	                                 its complete items as CompleteMany
//	Producer.Enqueue         yes     task IDs are required: a replay fails
//	                                 with task_already_exists, or, with
//	                                 skip_existing (EnqueueTargets), finds
//	                                 its tasks present
//	Producer.EnqueueMany     yes     each request as its Enqueue (the
//	                                 client's coalesced Enqueue calls)
//	Producer.Cancel          yes     AlreadyCancelled
//	Producer.Retry           yes     tasks already queued are left as they
//	                                 are (only a task that became terminal
//	                                 again in between is re-run again)
//	Worker.RegisterWorker    no      a replay fails worker_already_exists,
//	                                 which the caller cannot tell from a
//	                                 real conflict
//	Admin.CreateTenant       no      likewise (tenant exists)
//	Admin.CreateKey          no      a replay creates a second key
//	Admin.RevokeKey,         no      a replay of an applied revocation or
//	  RotateKey                      rotation fails: the key is revoked
//	Cluster.Join,            no      membership changes
//	  RemoveMember
//	Cluster.Join with        yes     changes nothing: hands out the
//	  credential_only                cluster secret
//
// A request that names an expected revision (expected_revision, on the
// request or on one of its items) is a compare-and-set and is not safe to
// replay whatever its RPC: once the first try applied, a replay fails
// revision_conflict (a replay still has to name the current revision,
// contract A.6) instead of AlreadyCompleted and the like.
//
// A connection that breaks under a request (a node killed mid-call; connect
// reports it as Canceled, or Unavailable: EOF), or an answer cut off after
// its status and headers (connect: Unknown, "read message: unexpected
// EOF"), is Unavailable with an unknown outcome: retried only for the
// calls marked "yes". Every other code is an answer: the node decided the
// call. MayHaveApplied tells a caller that the error it got leaves the
// outcome unknown (a node said so, the connection broke, or the last try
// got no answer in time): the call must not be taken as one that changed
// nothing.
//
// Results (a stream) has no attempt deadline (a paused node holds it until
// the caller's context ends) and is retried on Unavailable only until its
// first result arrived.
//
// # Fewer calls per task
//
// Concurrent Enqueue callers of one Client share calls: while
// Config.EnqueueCallsInFlight calls are in flight, the callers that arrive
// wait and go together in the next one, a Producer.EnqueueMany whose
// requests the server admits one by one, each all-or-nothing and answered
// with exactly what its own Enqueue would have returned. A caller alone is
// sent at once. A worker that completes one task at a time hands the
// completion to its next Acquire (AcquireRequest.Complete) instead of a
// call of its own.
//
// # Worker sessions
//
// With Config.WorkerSession, Acquire, CompleteMany and Complete go as
// messages of one Worker.Session stream (HTTP/2) per node instead of one
// HTTP request each (session.go). Each try is one message under the rules
// above: a message whose stream broke before its answer is Unavailable
// with an unknown outcome, as a unary call whose connection broke, and is
// retried on a new stream (all three are marked "replay"). A server
// without sessions, a connection that speaks only HTTP/1.1, or a session
// refused at its open because its key has the server's
// --max-sessions-per-key open, turns sessions off for the Client and the
// calls go unary. AcquireNotify lets
// a worker carry completions on an Acquire that long-polls: the session
// answers the completions at once, the leases when tasks arrive; its
// callback runs on a goroutine of its own (it may call the Client), and
// the Acquire returns after it. A caller that gives up (its context ends)
// returns at once and its message is cancelled on the server: a
// long-polling Acquire given up leases nothing; one the server had
// already proposed may still be applied, as a unary call cancelled
// mid-flight may (its Canceled error does not say it was not). A message over
// the server's request bound fails ResourceExhausted (message_too_large)
// without a retry, as its unary call does.
//
// # Producer sessions
//
// With Config.ProducerSession, the coalesced Enqueue calls go as
// enqueue_many messages of one Producer.Session stream (HTTP/2) per node
// instead of one HTTP request each, a lone caller as an enqueue_many of
// one request; EnqueueCallsInFlight then defaults to 4. Every caller gets
// what its own Enqueue would have returned, and the rules of worker
// sessions hold: a stream cut before an answer is Unavailable with an
// unknown outcome (retried on a new stream; a replayed request that was
// applied answers task_already_exists), a revoked key fails without a
// retry, and a server without producer sessions gets unary calls.
//
// Every method is safe for concurrent use. Errors that the server returns
// match the core's sentinels: errors.Is(err, distributed.ErrLeaseExpired);
// errors.As(err, &de) with a *distributed.Error de gives the same error,
// every detail field included, that the core returned on the server.
// ItemError gives a CompleteMany item's error the same shape.
// Errors never contain the key, target references or result bytes.
package client
