// Goal: spans leave the process only when OTEL_EXPORTER_OTLP_ENDPOINT is
// set. Method: Setup with an empty environment must create no exporter
// (the exporter constructor is a counting stub) and hand out
// non-recording spans; with the variable pointing at a local HTTP server,
// a span ends up POSTed to its /v1/traces after Shutdown flushes.
package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/protobuf/types/known/emptypb"
)

func TestSetup_NoEndpointNoExporter(t *testing.T) {
	var created atomic.Int32
	cfg := Config{Getenv: func(string) string { return "" }, ServiceName: "t",
		NewExporterFunc: func(context.Context) (sdktrace.SpanExporter, error) {
			created.Add(1)
			return tracetest.NewInMemoryExporter(), nil
		}}
	p, err := Setup(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	if p.Exporting || created.Load() != 0 {
		t.Fatalf("no endpoint: Exporting %v, exporters created %d; want false, 0", p.Exporting, created.Load())
	}
	_, span := p.Tracer("t").Start(context.Background(), "s")
	if span.IsRecording() {
		t.Error("no endpoint: span is recording")
	}
	span.End()
	// The same config with an endpoint creates exactly one exporter.
	cfg.Getenv = func(k string) string {
		if k == EnvEndpoint {
			return "http://127.0.0.1:1"
		}
		return ""
	}
	p2, err := Setup(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Shutdown(context.Background())
	if !p2.Exporting || created.Load() != 1 {
		t.Fatalf("endpoint set: Exporting %v, exporters created %d; want true, 1", p2.Exporting, created.Load())
	}
}

// TestSetup_ExportsToEndpoint uses the real OTLP/HTTP exporter. NB: not
// parallel (t.Setenv): the exporter reads the standard variables itself.
func TestSetup_ExportsToEndpoint(t *testing.T) {
	got := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got <- r.Method + " " + r.URL.Path
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	t.Setenv(EnvEndpoint, srv.URL)
	p, err := Setup(context.Background(), Config{Getenv: os.Getenv, ServiceName: "t"})
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Tracer("t").Start(context.Background(), "s")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r != "POST /v1/traces" {
			t.Errorf("exporter sent %q, want POST /v1/traces", r)
		}
	default:
		t.Fatal("no span was exported")
	}
}

// TestServerInterceptors_OnlyWhenExporting: a provider without an
// exporter gets no interceptor (its spans would record nothing); one that
// exports gets the span interceptor.
func TestServerInterceptors_OnlyWhenExporting(t *testing.T) {
	off, err := Setup(context.Background(), Config{Getenv: func(string) string { return "" }, ServiceName: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ics, err := ServerInterceptors(off)
	if err != nil || len(ics) != 0 {
		t.Fatalf("ServerInterceptors(no exporter) = %d interceptors, %v; want 0, nil", len(ics), err)
	}
	exp := &countingExporter{}
	on, err := Setup(context.Background(), Config{Getenv: func(k string) string {
		if k == EnvEndpoint {
			return "http://127.0.0.1:1"
		}
		return ""
	}, ServiceName: "t", NewExporterFunc: func(context.Context) (sdktrace.SpanExporter, error) {
		return exp, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ics, err = ServerInterceptors(on)
	if err != nil || len(ics) != 1 {
		t.Fatalf("ServerInterceptors(exporting) = %d interceptors, %v; want 1, nil", len(ics), err)
	}
	call := ics[0].WrapUnary(func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
		return connect.NewResponse(&emptypb.Empty{}), nil
	})
	if _, err := call(context.Background(), connect.NewRequest(&emptypb.Empty{})); err != nil {
		t.Fatal(err)
	}
	if err := on.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := exp.spans.Load(); n != 1 {
		t.Errorf("exporting interceptor: %d spans exported, want 1", n)
	}
}

// countingExporter counts the spans exported to it.
type countingExporter struct{ spans atomic.Int32 }

func (c *countingExporter) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	c.spans.Add(int32(len(s)))
	return nil
}

func (c *countingExporter) Shutdown(context.Context) error { return nil }
