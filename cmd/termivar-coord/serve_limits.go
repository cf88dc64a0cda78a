package main

import (
	"flag"
	"log/slog"
	"net"

	"github.com/termivar/distributed/server"
)

// addServerLimitFlags defines one flag per pre-authentication and
// connection limit (server.Limits), defaulting to server.DefaultLimits
// (docs/node.md, "Pre-authentication limits").
func addServerLimitFlags(fs *flag.FlagSet, l *server.Limits) {
	d := server.DefaultLimits()
	fs.IntVar(&l.MaxConns, "max-conns", d.MaxConns, "open API connections; more wait in the kernel's backlog")
	fs.IntVar(&l.MaxConnsPerSource, "max-conns-per-source", d.MaxConnsPerSource, "open API connections from one IP address; more are closed at once")
	fs.IntVar(&l.MaxPreAuthRequests, "max-preauth-requests", d.MaxPreAuthRequests, "requests awaiting the decision on their key; more are answered unavailable")
	fs.DurationVar(&l.HeaderTimeout, "header-timeout", d.HeaderTimeout, "time to receive a request's headers")
	fs.DurationVar(&l.BodyTimeout, "body-timeout", d.BodyTimeout, "time to receive a request's body after its headers; a stalled body is cut off")
	fs.DurationVar(&l.IdleTimeout, "idle-timeout", d.IdleTimeout, "close keep-alive connections idle this long")
	fs.IntVar(&l.AuthFailureBurst, "auth-failure-burst", d.AuthFailureBurst, "failed authentications in a row before a source is throttled")
	fs.DurationVar(&l.AuthFailureRefill, "auth-failure-refill", d.AuthFailureRefill, "a throttled source may try once more per this interval")
	fs.IntVar(&l.AuthSources, "auth-sources", d.AuthSources, "sources tracked by the failure throttle and the failure audit")
	fs.DurationVar(&l.AuthAuditWindow, "auth-audit-window", d.AuthAuditWindow, "failed authentications are audited as one line per source per window")
	fs.IntVar(&l.MaxSessionsPerKey, "max-sessions-per-key", d.MaxSessionsPerKey, "open worker sessions (Worker.Session streams) of one API key; more are refused")
	fs.IntVar(&l.MaxSessionMessages, "max-session-messages", d.MaxSessionMessages, "messages of one worker session awaiting their answer; more are refused")
}

// warnPlaintext logs a warning when the API listens beyond loopback
// without TLS: bearer keys and lease tokens would cross the network in
// clear text.
func warnPlaintext(logger *slog.Logger, addr net.Addr, tls bool) {
	if tls || !beyondLoopback(addr) {
		return
	}
	logger.Warn("the API listens beyond loopback without TLS: API keys and tokens cross the network in clear text; use --tls-cert and --tls-key", "api", addr.String())
}

// beyondLoopback reports whether addr accepts connections from other hosts
// (an unspecified or non-loopback IP, or an address that is not TCP).
func beyondLoopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return true
	}
	return !ta.IP.IsLoopback()
}
