package tracing

import (
	"context"
	"strings"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentationName names the tracers of this module.
const InstrumentationName = "github.com/termivar/distributed"

// Interceptor returns a Connect interceptor that opens one server span per
// API call, named by its procedure, continuing a W3C traceparent the
// caller sent. Attributes follow OpenTelemetry's RPC conventions; no
// request or response content is recorded.
func Interceptor(tp trace.TracerProvider) connect.Interceptor {
	return interceptor{tr: tp.Tracer(InstrumentationName), prop: propagation.TraceContext{}}
}

type interceptor struct {
	tr   trace.Tracer
	prop propagation.TextMapPropagator
}

func (i interceptor) start(ctx context.Context, procedure string, h propagation.HeaderCarrier) (context.Context, trace.Span) {
	ctx = i.prop.Extract(ctx, h)
	service, method, _ := strings.Cut(strings.TrimPrefix(procedure, "/"), "/")
	return i.tr.Start(ctx, strings.TrimPrefix(procedure, "/"), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("rpc.system", "connect_rpc"),
			attribute.String("rpc.service", service), attribute.String("rpc.method", method)))
}

func end(span trace.Span, err error) {
	if err != nil {
		span.SetAttributes(attribute.String("rpc.connect_rpc.error_code", connect.CodeOf(err).String()))
		span.SetStatus(codes.Error, connect.CodeOf(err).String())
	}
	span.End()
}

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		ctx, span := i.start(ctx, req.Spec().Procedure, propagation.HeaderCarrier(req.Header()))
		res, err := next(ctx, req)
		end(span, err)
		return res, err
	}
}

func (i interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, span := i.start(ctx, conn.Spec().Procedure, propagation.HeaderCarrier(conn.RequestHeader()))
		err := next(ctx, conn)
		end(span, err)
		return err
	}
}
