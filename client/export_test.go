package client

// PendingEnqueues returns how many Enqueue callers of c wait for a call
// slot (tests only).
func PendingEnqueues(c *Client) int {
	if c.enq == nil {
		return 0
	}
	c.enq.mu.Lock()
	defer c.enq.mu.Unlock()
	return len(c.enq.pending)
}

// AttemptExpired is attemptExpired (tests only).
var AttemptExpired = attemptExpired
