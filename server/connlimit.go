package server

import (
	"net"
	"sync"
	"sync/atomic"
)

// LimitListener returns ln bounded by s's Limits: at most MaxConns open
// connections (Accept waits for one to close, leaving further clients in
// the kernel's backlog instead of spending file descriptors on them) and at
// most MaxConnsPerSource from one IP address (a connection above it is
// closed as soon as it is accepted). serve wraps its API listener with it.
func (s *Server) LimitListener(ln net.Listener) net.Listener {
	return newLimitListener(ln, s.limits.MaxConns, s.limits.MaxConnsPerSource)
}

// limitListener is a net.Listener with a total and a per-source bound on
// open connections. It is safe for concurrent use.
type limitListener struct {
	net.Listener
	sem       chan struct{} // one token per open connection
	perSource int
	done      chan struct{} // closed by Close: a waiting Accept returns
	closeOnce sync.Once

	mu sync.Mutex
	// Invariant: bySource[src] is the number of open connections from src,
	// and has no zero entries, so len(bySource) <= cap(sem).
	bySource map[string]int

	open, peak, refused atomic.Int64
}

func newLimitListener(ln net.Listener, maxConns, perSource int) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, maxConns), perSource: perSource,
		done: make(chan struct{}), bySource: map[string]int{}}
}

// Accept waits for a free slot, then accepts; a connection whose source is
// at its bound is closed and the next one accepted.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		select {
		case l.sem <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.sem
			return nil, err
		}
		src := sourceOf(c.RemoteAddr().String())
		if !l.admit(src) {
			l.refused.Add(1)
			c.Close()
			<-l.sem
			continue
		}
		n := l.open.Add(1)
		for p := l.peak.Load(); n > p && !l.peak.CompareAndSwap(p, n); p = l.peak.Load() {
		}
		return &limitConn{Conn: c, l: l, src: src}, nil
	}
}

// Close closes the listener and wakes a waiting Accept.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

func (l *limitListener) admit(src string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.bySource[src] >= l.perSource {
		return false
	}
	l.bySource[src]++
	return true
}

func (l *limitListener) release(src string) {
	l.mu.Lock()
	if l.bySource[src]--; l.bySource[src] <= 0 {
		delete(l.bySource, src)
	}
	l.mu.Unlock()
	l.open.Add(-1)
	<-l.sem
}

// limitConn gives its slot back on the first Close.
type limitConn struct {
	net.Conn
	l    *limitListener
	src  string
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.src) })
	return err
}

// sourceOf returns the IP address of a host:port remote address (the whole
// string when it has no port).
func sourceOf(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return remote
	}
	return host
}
