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
