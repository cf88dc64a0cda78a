package server

import (
	"cmp"
	"errors"
	"fmt"
	"time"
)

// Limits are the server's pre-authentication and connection bounds: what an
// unauthenticated or slow client can make the node hold. Every field has a
// serve flag (cmd/termivar-coord/serve_limits.go) and its default is in
// DefaultLimits and docs/node.md, "Pre-authentication limits". A zero field
// takes its default.
type Limits struct {
	// MaxConns bounds open API connections; Accept waits while it is reached
	// (further clients queue in the kernel's backlog).
	MaxConns int
	// MaxConnsPerSource bounds open connections from one IP address; a
	// connection above it is closed at once.
	MaxConnsPerSource int
	// MaxPreAuthRequests bounds requests between the arrival of their
	// headers and the decision on their key; a request above it is answered
	// Unavailable without being looked at.
	MaxPreAuthRequests int
	// HeaderTimeout bounds the time to receive a request's headers.
	HeaderTimeout time.Duration
	// BodyTimeout bounds the time to receive a request's body, counted from
	// the end of its headers; a stalled body is cut off and the connection
	// closed.
	BodyTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long.
	IdleTimeout time.Duration
	// AuthFailureBurst is how many failed authentications a source may have
	// in a row before it is throttled.
	AuthFailureBurst int
	// AuthFailureRefill is the time after which a throttled source may try
	// once more (one failure token refills per AuthFailureRefill).
	AuthFailureRefill time.Duration
	// AuthSources bounds the per-source tables (failure throttle and
	// failure audit).
	AuthSources int
	// AuthAuditWindow is the failed-authentication audit interval: one line
	// per source per window.
	AuthAuditWindow time.Duration
	// MaxSessionsPerKey bounds the open worker sessions (Worker.Session)
	// of one API key; one more is refused with session_limit.
	MaxSessionsPerKey int
	// MaxSessionMessages bounds the messages of one worker session awaiting
	// their final answer; one more is answered session_limit.
	MaxSessionMessages int
}

// DefaultLimits returns the documented defaults.
func DefaultLimits() Limits {
	return Limits{
		MaxConns:           4096,
		MaxConnsPerSource:  512,
		MaxPreAuthRequests: 1024,
		HeaderTimeout:      10 * time.Second,
		BodyTimeout:        60 * time.Second,
		IdleTimeout:        120 * time.Second,
		AuthFailureBurst:   20,
		AuthFailureRefill:  time.Second,
		AuthSources:        4096,
		AuthAuditWindow:    time.Minute,
		MaxSessionsPerKey:  256,
		MaxSessionMessages: 64,
	}
}

// withDefaults fills zero fields from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	l.MaxConns = cmp.Or(l.MaxConns, d.MaxConns)
	l.MaxConnsPerSource = cmp.Or(l.MaxConnsPerSource, d.MaxConnsPerSource)
	l.MaxPreAuthRequests = cmp.Or(l.MaxPreAuthRequests, d.MaxPreAuthRequests)
	l.HeaderTimeout = cmp.Or(l.HeaderTimeout, d.HeaderTimeout)
	l.BodyTimeout = cmp.Or(l.BodyTimeout, d.BodyTimeout)
	l.IdleTimeout = cmp.Or(l.IdleTimeout, d.IdleTimeout)
	l.AuthFailureBurst = cmp.Or(l.AuthFailureBurst, d.AuthFailureBurst)
	l.AuthFailureRefill = cmp.Or(l.AuthFailureRefill, d.AuthFailureRefill)
	l.AuthSources = cmp.Or(l.AuthSources, d.AuthSources)
	l.AuthAuditWindow = cmp.Or(l.AuthAuditWindow, d.AuthAuditWindow)
	l.MaxSessionsPerKey = cmp.Or(l.MaxSessionsPerKey, d.MaxSessionsPerKey)
	l.MaxSessionMessages = cmp.Or(l.MaxSessionMessages, d.MaxSessionMessages)
	return l
}

// ErrInvalidLimits is returned by Limits.Validate.
var ErrInvalidLimits = errors.New("server: invalid limits")

// Validate reports a negative field (zero means the default). A
// per-source connection bound above the total is allowed: it never binds.
func (l Limits) Validate() error {
	type field struct {
		name string
		v    int64
	}
	for _, f := range []field{
		{"max-conns", int64(l.MaxConns)}, {"max-conns-per-source", int64(l.MaxConnsPerSource)},
		{"max-preauth-requests", int64(l.MaxPreAuthRequests)}, {"header-timeout", int64(l.HeaderTimeout)},
		{"body-timeout", int64(l.BodyTimeout)}, {"idle-timeout", int64(l.IdleTimeout)},
		{"auth-failure-burst", int64(l.AuthFailureBurst)}, {"auth-failure-refill", int64(l.AuthFailureRefill)},
		{"auth-sources", int64(l.AuthSources)}, {"auth-audit-window", int64(l.AuthAuditWindow)},
		{"max-sessions-per-key", int64(l.MaxSessionsPerKey)}, {"max-session-messages", int64(l.MaxSessionMessages)},
	} {
		if f.v < 0 {
			return fmt.Errorf("%s must not be negative: %w", f.name, ErrInvalidLimits)
		}
	}
	return nil
}
