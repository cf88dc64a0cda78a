// Package tracing sets up OpenTelemetry tracing for a node: spans for API
// calls (a Connect interceptor, interceptor.go) and raft proposals
// (node.Propose). Spans are exported over OTLP/HTTP only when the standard
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is
// set; otherwise the provider is a no-op and no exporter exists, so
// nothing is dialled (docs/observability.md).
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Environment variables that turn exporting on (the OTLP exporter's own).
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
)

// Config configures Setup.
type Config struct {
	// Getenv reads the environment (os.Getenv in production).
	Getenv func(string) string
	// ServiceName and ServiceVersion describe the node in every span's
	// resource.
	ServiceName, ServiceVersion string
	// NewExporterFunc creates the exporter when an endpoint is set; nil:
	// OTLP over HTTP, configured by the standard OTEL_EXPORTER_OTLP_*
	// variables.
	NewExporterFunc func(ctx context.Context) (sdktrace.SpanExporter, error)
}

// Provider is the node's tracer provider and how to flush it.
type Provider struct {
	trace.TracerProvider
	// Exporting reports whether spans leave the process.
	Exporting bool
	shutdown  func(context.Context) error
}

// Shutdown flushes and stops the exporter (nothing without one).
func (p *Provider) Shutdown(ctx context.Context) error {
	if p.shutdown == nil {
		return nil
	}
	return p.shutdown(ctx)
}

// Setup returns a no-op provider when no OTLP endpoint is set (no
// exporter is created), else a batching SDK provider exporting to it.
func Setup(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.Getenv(EnvEndpoint) == "" && cfg.Getenv(EnvTracesEndpoint) == "" {
		return &Provider{TracerProvider: noop.NewTracerProvider()}, nil
	}
	newExp := cfg.NewExporterFunc
	if newExp == nil {
		newExp = func(ctx context.Context) (sdktrace.SpanExporter, error) { return otlptracehttp.New(ctx) }
	}
	exp, err := newExp(ctx)
	if err != nil {
		return nil, err
	}
	res := resource.NewSchemaless(attribute.String("service.name", cfg.ServiceName),
		attribute.String("service.version", cfg.ServiceVersion))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{TracerProvider: tp, Exporting: true, shutdown: tp.Shutdown}, nil
}
