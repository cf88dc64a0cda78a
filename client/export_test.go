package client

// AttemptExpired is attemptExpired (tests only).
var AttemptExpired = attemptExpired

// NotifyEnqueueJoins makes c's coalescer send on ch each time a caller
// joins its pending callers (ch must have room for every caller). Call it
// before c's first Enqueue.
func NotifyEnqueueJoins(c *Client, ch chan<- struct{}) { c.enq.joined = ch }
