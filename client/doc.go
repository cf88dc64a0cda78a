// Package client is the Go client of a termivar coordinator node: typed
// wrappers over the generated ConnectRPC clients of the Worker, Producer and
// Admin services that add bearer-key authentication, retries with capped
// exponential backoff on Unavailable and connection errors, and one error
// type, *Error, that exposes the core's ErrorKind and the Connect code.
//
// The worker agent (package agent) and the termivar-coord CLI are built on
// it; it is also the way to write a worker or producer in Go:
//
//	c, err := client.New(client.Config{ServerURL: "http://127.0.0.1:7420", Key: key})
//	if err != nil { ... }
//	ids, err := c.EnqueueTargets(ctx, client.EnqueueOptions{ScanID: "s1"}, []string{"a.example", "b.example"})
//	...
//	err = c.Results(ctx, "s1", func(taskID string, result []byte) error { ... })
//
// Every method is safe for concurrent use. Errors that the server returns
// match the core's sentinels: errors.Is(err, distributed.ErrLeaseExpired).
// Errors never contain the key, target references or result bytes.
package client
