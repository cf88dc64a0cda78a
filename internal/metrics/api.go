package metrics

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
)

// API is the API server's instruments (server/). A nil *API records
// nothing. Safe for concurrent use.
type API struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	authFail *prometheus.CounterVec
	limits   *prometheus.CounterVec
	catchUps *prometheus.CounterVec
	barriers prometheus.Counter
}

func newAPI() *API {
	return &API{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "termivar_api_requests_total",
			Help: "API requests handled by this node, by procedure and Connect code (ok for success)."},
			[]string{"procedure", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "termivar_api_request_seconds",
			Help:    "Latency of API requests handled by this node (Acquire includes its long-poll wait).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)}, []string{"procedure"}),
		authFail: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "termivar_api_auth_rejected_total",
			Help: "Requests refused before their body: unauthenticated (bad or unknown key), throttled (source over its failure budget), busy (too many awaiting authentication)."},
			[]string{"reason"}),
		limits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "termivar_limit_rejections_total",
			Help: "Commands refused because a tenant limit was reached, by error kind."},
			[]string{"tenant", "kind"}),
		catchUps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "termivar_api_key_catchups_total",
			Help: "Requests whose API key the leader did not know and looked up again after a catch-up barrier: found, unknown (refused unauthenticated), failed (no barrier in time: answered unavailable)."},
			[]string{"outcome"}),
		barriers: prometheus.NewCounter(prometheus.CounterOpts{Name: "termivar_api_key_catchup_barriers_total",
			Help: "Catch-up barriers run for unknown API keys (each serves every request that waited for it)."}),
	}
}

func (m *API) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.latency, m.authFail, m.limits, m.catchUps, m.barriers}
}

// AuthRejected counts a request refused before its body for reason.
func (m *API) AuthRejected(reason string) {
	if m != nil {
		m.authFail.WithLabelValues(reason).Inc()
	}
}

// KeyCatchUp counts a request decided after a catch-up barrier, by
// outcome (server/keycatchup.go).
func (m *API) KeyCatchUp(outcome string) {
	if m != nil {
		m.catchUps.WithLabelValues(outcome).Inc()
	}
}

// KeyCatchUpBarrier counts one shared catch-up barrier.
func (m *API) KeyCatchUpBarrier() {
	if m != nil {
		m.barriers.Inc()
	}
}

// LimitReached counts a command of tenant refused by a limit of kind.
func (m *API) LimitReached(tenant, kind string) {
	if m != nil {
		m.limits.WithLabelValues(tenant, kind).Inc()
	}
}

// Interceptor returns a Connect interceptor that counts and times every
// request the handlers answer. The procedure label is bounded by the
// registered procedures (unknown paths never reach an interceptor).
func (m *API) Interceptor() connect.Interceptor { return apiInterceptor{m} }

type apiInterceptor struct{ m *API }

func (i apiInterceptor) observe(procedure string, start time.Time, err error) {
	i.m.Observe(procedure, start, err)
}

// Observe counts and times one request of procedure that started at start
// and ended with err: what the interceptor records for a call, and what a
// worker session records for each of its messages (server/session.go).
func (m *API) Observe(procedure string, start time.Time, err error) {
	if m == nil {
		return
	}
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String() // unknown for an error that is no *connect.Error
	}
	m.requests.WithLabelValues(procedure, code).Inc()
	m.latency.WithLabelValues(procedure).Observe(time.Since(start).Seconds())
}

func (i apiInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		res, err := next(ctx, req)
		i.observe(req.Spec().Procedure, start, err)
		return res, err
	}
}

func (i apiInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i apiInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		err := next(ctx, conn)
		i.observe(conn.Spec().Procedure, start, err)
		return err
	}
}
