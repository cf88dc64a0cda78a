// Package clienttest is a test-only, in-process termivar node: the real
// server.Server (the same handlers, authentication, tokens and error
// mapping as production) over a real raftfsm.FSM, with an in-memory
// backend in place of raft (backend.go). Nothing is replicated or written
// to disk. It lets the client, the agent and the CLI be tested in
// milliseconds against the handlers they meet in production.
//
// Do not use it outside tests: its state lives only in memory and its
// cluster secret is thrown away on Close.
package clienttest

import (
	"cmp"
	"context"
	"net/http/httptest"
	"sync"
	"time"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/internal/apikey"
	"github.com/termivar/distributed/internal/membackend"
	"github.com/termivar/distributed/raftfsm"
	"github.com/termivar/distributed/server"
)

// Options configures a Server. Zero values take the core's defaults.
type Options struct {
	// Limits are the system tenant's limits (default
	// distributed.DefaultLimits).
	Limits distributed.Limits
	// MaxResultBytes bounds one result (default 1 MiB).
	MaxResultBytes int
	// TickInterval is the cadence of background recovery: expired leases,
	// dead workers, old tasks (default 100 ms).
	TickInterval time.Duration
	// MaxSessionMessages is server.Limits.MaxSessionMessages (0: its
	// default).
	MaxSessionMessages int
	// MaxSessionsPerKey is server.Limits.MaxSessionsPerKey (0: its
	// default).
	MaxSessionsPerKey int
}

// Server is a running in-process node. Its methods are safe for concurrent
// use.
type Server struct {
	// URL is the base URL to give client.Config.ServerURL.
	URL string
	// Key is an admin key of the system tenant, the tenant the tasks live
	// in: it may call every Worker, Producer and Admin method.
	Key string

	be   *membackend.Backend // the in-memory node (internal/membackend)
	api  *server.Server
	http *httptest.Server
	stop chan struct{}
	wg   sync.WaitGroup
}

var _ server.Backend = (*membackend.Backend)(nil)

// New starts a node on a loopback port. Close it when done.
func New(opts Options) (*Server, error) {
	opts.Limits = cmp.Or(opts.Limits, distributed.DefaultLimits())
	rl := distributed.DefaultResultLimits()
	if opts.MaxResultBytes != 0 {
		rl.MaxResultBytes = opts.MaxResultBytes
	}
	opts.TickInterval = cmp.Or(opts.TickInterval, 100*time.Millisecond)
	be, err := membackend.New("clienttest", opts.Limits, rl)
	if err != nil {
		return nil, err
	}
	key, err := server.CreateKey(context.Background(), be, raftfsm.SystemTenant, apikey.RoleAdmin)
	if err != nil {
		return nil, err
	}
	api := server.New(server.Config{Backend: be, Limits: server.Limits{MaxSessionMessages: opts.MaxSessionMessages, MaxSessionsPerKey: opts.MaxSessionsPerKey}})
	hs := httptest.NewUnstartedServer(api.Handler())
	// NB: HTTP/1.1 and h2c, as serve speaks them (worker sessions need
	// HTTP/2).
	hs.Config.Protocols = server.NewHTTPServer("", nil).Protocols
	hs.Start()
	s := &Server{Key: key.Key, be: be, api: api, http: hs, stop: make(chan struct{})}
	s.URL = s.http.URL
	s.wg.Go(func() { s.tickLoop(opts.TickInterval) })
	return s, nil
}

// Close stops the node: pending Acquire long-polls answer at once, then
// the HTTP server and the recovery ticker stop.
func (s *Server) Close() {
	close(s.stop)
	s.wg.Wait()
	s.api.Close()
	s.http.CloseClientConnections()
	s.http.Close()
}

// Advance moves the node's clock forward by d (whole seconds) and runs
// background recovery at once, to expire leases or heartbeats without
// waiting.
func (s *Server) Advance(d time.Duration) {
	s.be.Advance(d)
	s.be.Tick()
}

// LongPollsWaiting returns how many Acquire calls (or worker session
// acquires) wait for work now.
func (s *Server) LongPollsWaiting() int64 { return s.api.LongPollsWaiting() }

// LongPollsChanged returns a channel closed at the next change of
// LongPollsWaiting (take it before reading LongPollsWaiting).
func (s *Server) LongPollsChanged() <-chan struct{} { return s.api.LongPollsChanged() }

// Renewals returns how many RenewLease commands succeeded.
func (s *Server) Renewals() int { return s.be.Renewals() }

func (s *Server) tickLoop(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.be.Tick()
		}
	}
}
