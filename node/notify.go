package node

import "sync"

// notifier is a per-tenant broadcast: wait returns a channel that the next
// notify for that tenant closes. notify runs on the FSM's apply goroutine
// and never blocks.
type notifier struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

func newNotifier() *notifier { return &notifier{ch: map[string]chan struct{}{}} }

func (w *notifier) wait(tenant string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.ch[tenant]
	if !ok {
		c = make(chan struct{})
		w.ch[tenant] = c
	}
	return c
}

func (w *notifier) notify(tenant string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.ch[tenant]; ok {
		close(c)
		delete(w.ch, tenant)
	}
}
