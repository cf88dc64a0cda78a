package tracing

import (
	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentationName names the tracers of this module.
const InstrumentationName = "github.com/termivar/distributed"

// Interceptor returns connectrpc.com/otelconnect's interceptor: one server
// span per API call, named by its procedure, with OpenTelemetry's RPC
// attributes, linked to a W3C traceparent the caller sent. Metrics stay
// with Prometheus (internal/metrics); no message events or peer addresses
// are recorded, and no request or response content ever is.
func Interceptor(tp trace.TracerProvider) (connect.Interceptor, error) {
	return otelconnect.NewInterceptor(otelconnect.WithTracerProvider(tp),
		otelconnect.WithPropagator(propagation.TraceContext{}), otelconnect.WithoutMetrics(),
		otelconnect.WithoutTraceEvents(), otelconnect.WithoutServerPeerAttributes())
}

// ServerInterceptors returns the interceptors a node's API server needs
// for p: Interceptor(p) when p exports spans, none when it does not. A
// provider without an exporter records nothing, yet otelconnect still
// extracted the traceparent, built the attributes and started a
// non-recording span for every call: ≈ 900 B and about a twentieth of
// the CPU of a call whose handler does nothing (docs/benchmarks.md, "One
// task per call, session 8 (branch msgfloor)").
func ServerInterceptors(p *Provider) ([]connect.Interceptor, error) {
	if !p.Exporting {
		return nil, nil
	}
	ic, err := Interceptor(p)
	if err != nil {
		return nil, err
	}
	return []connect.Interceptor{ic}, nil
}
