package node

import (
	"context"
	"sync"
)

// lifetime is the node's one Start/Stop shape (after riverqueue/river's
// internal/startstop): every background loop is started with Go and gets
// the node-lifetime context, every background call derives its context
// from it, and Stop cancels that context first, then waits for the loops.
// Stop may be called more than once; later calls wait like the first.
//
// NB: the context is kept in the struct on purpose: it is not a request's
// context but the node's own lifetime, created in Open and ended by Close
// (the exception google/styleguide's "Contexts" allows for a type whose
// methods run on behalf of the instance, not of a caller).
type lifetime struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newLifetime() *lifetime {
	ctx, cancel := context.WithCancel(context.Background())
	return &lifetime{ctx: ctx, cancel: cancel}
}

// Go runs loop on its own goroutine with the lifetime context; loop must
// return soon after that context is done.
func (l *lifetime) Go(loop func(ctx context.Context)) {
	l.wg.Go(func() { loop(l.ctx) })
}

// Done is closed when the lifetime has ended (Stop was called).
func (l *lifetime) Done() <-chan struct{} { return l.ctx.Done() }

// Stop cancels the lifetime context and waits until every loop started
// with Go has returned. Safe to call twice and concurrently.
func (l *lifetime) Stop() {
	l.cancel()
	l.wg.Wait()
}

// bound returns a context that ends with ctx or with the lifetime,
// whichever ends first (a caller's call that must not outlive the node).
// The caller must call the returned cancel function.
func (l *lifetime) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	// NB: context.AfterFunc registers a callback on the lifetime; no
	// goroutine runs unless the lifetime ends while the call is running.
	stop := context.AfterFunc(l.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}
