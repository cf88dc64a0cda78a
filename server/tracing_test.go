// Goal: an API call yields one server span named by its procedure, and
// the raft proposal it makes is a child span of it. Method: a node and
// server sharing an SDK tracer provider with an in-memory exporter; one
// Enqueue; the finished spans are inspected.
package server

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/tracing"
	"github.com/termivar/distributed/node"
)

func TestTracing_APISpanParentsProposal(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	ic, err := tracing.Interceptor(tp)
	if err != nil {
		t.Fatal(err)
	}
	b := setupServer(t, func(c *node.Config) { c.TracerProvider = tp },
		Config{Interceptors: []connect.Interceptor{ic}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	exp.Reset() // bootstrap proposals
	_, err = b.clients(b.adminKey).producer.Enqueue(ctx, req(&pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "t1", ScanId: "s", TargetRef: "x"}}}))
	if err != nil {
		t.Fatal(err)
	}
	var api, prop *tracetest.SpanStub
	spans := exp.GetSpans()
	for i := range spans {
		switch spans[i].Name {
		case "termivar.v1.Producer/Enqueue":
			api = &spans[i]
		case "raft.propose":
			prop = &spans[i]
		}
	}
	if api == nil || prop == nil {
		t.Fatalf("spans = %v; want termivar.v1.Producer/Enqueue and raft.propose", names(spans))
	}
	if api.SpanKind != trace.SpanKindServer {
		t.Errorf("API span kind = %v, want server", api.SpanKind)
	}
	if prop.Parent.SpanID() != api.SpanContext.SpanID() || prop.SpanContext.TraceID() != api.SpanContext.TraceID() {
		t.Error("raft.propose is not a child of the API span")
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
