// Package notify is a per-tenant broadcast for the node's and clienttest's
// wake-ups: Wait returns a channel that the next Notify for that tenant
// closes. Notify runs on the FSM's apply goroutine and never blocks.
package notify

import "sync"

// Notifier is a per-tenant broadcast. The zero value is ready to use.
type Notifier struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

// Wait returns the channel the next Notify(tenant) closes.
func (w *Notifier) Wait(tenant string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.ch[tenant]
	if !ok {
		c = make(chan struct{})
		if w.ch == nil {
			w.ch = map[string]chan struct{}{}
		}
		w.ch[tenant] = c
	}
	return c
}

// Notify wakes every Wait(tenant) so far.
func (w *Notifier) Notify(tenant string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.ch[tenant]; ok {
		close(c)
		delete(w.ch, tenant)
	}
}
