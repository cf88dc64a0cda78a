package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
)

// The spike of the worker session stream (docs/benchmarks.md, "A worker
// session stream: the spike"): CPU per request/response message pair on
// an open Connect bidi stream over h2c, against one unary Connect call
// over HTTP/1.1 and over h2c, both ends in this process, with auth, the
// same read (GetTask) behind each. CPU is the process's (getrusage), per
// op, reported as cpu-µs/op.

const spikeProcedure = "/termivar.v1.Worker/SpikeSession"

// spikeHandler serves the real API plus a bidi stream that answers each
// GetTaskRequest with what GetTask answers, after checking the stream's
// key in the published key table (the per-message revocation check a
// session would make).
func spikeHandler(s *Server) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(spikeProcedure, connect.NewBidiStreamHandler(spikeProcedure, func(ctx context.Context, st *connect.BidiStream[pb.GetTaskRequest, pb.GetTaskResponse]) error {
		p, err := principalFrom(ctx)
		if err != nil {
			return toConnect(err)
		}
		for {
			m, err := st.Receive()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			if _, ok := s.node.Reads().Key(p.KeyID); !ok {
				return connect.NewError(connect.CodeUnauthenticated, errors.New("key revoked"))
			}
			if err := s.readBarrier(ctx, p, "/termivar.v1.Producer/GetTask"); err != nil {
				return toConnect(err)
			}
			tv, _ := s.node.Reads().Tenant(p.Tenant)
			t, ok, err := tv.GetTask(m.GetTaskId())
			if err != nil || !ok {
				return connect.NewError(connect.CodeNotFound, errors.New("no task"))
			}
			if err := st.Send(&pb.GetTaskResponse{Task: s.taskInfo(p, tv, t)}); err != nil {
				return err
			}
		}
	}, readMax(MaxWorkerRequestBytes), connect.WithCompressMinBytes(256<<10)))
	api := s.Handler()
	outer := http.NewServeMux()
	outer.Handle(spikeProcedure, s.preauth(s.localGate(mux)))
	outer.Handle("/", api)
	return outer
}

func spikeCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func h2cHTTPClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// spikeBench starts the node with the spike handler and one task "x".
func spikeBench(b *testing.B) (*testBundle, string) {
	b.Helper()
	tb := setup(b, nil)
	if _, err := tb.clients(tb.adminKey).producer.Enqueue(context.Background(), connect.NewRequest(&pb.EnqueueRequest{Tasks: []*pb.NewTask{{TaskId: "x", ScanId: "s", TargetRef: "t"}}})); err != nil {
		b.Fatal(err)
	}
	// NB: a server of its own for the spike's handler, HTTP/1.1 and h2c
	// as serve speaks them; tb's clients then talk to it.
	srv := httptest.NewUnstartedServer(spikeHandler(tb.api))
	srv.Config.Protocols = NewHTTPServer("", nil).Protocols
	srv.Start()
	b.Cleanup(srv.Close)
	tb.srv = srv
	return tb, tb.adminKey
}

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(spikeCPU()-start)/float64(b.N)/1e3, "cpu-µs/op")
}

func BenchmarkSpike_UnaryHTTP1(b *testing.B) { spikeUnary(b, spikeProducer(b, false)) }

func BenchmarkSpike_UnaryH2C(b *testing.B) { spikeUnary(b, spikeProducer(b, true)) }

// spikeProducer is a producer client of a new spike server, over HTTP/1.1
// or (h2c) HTTP/2 without TLS.
func spikeProducer(b *testing.B, h2c bool) termivarv1connect.ProducerClient {
	tb, key := spikeBench(b)
	hc := tb.srv.Client()
	if h2c {
		hc = h2cHTTPClient()
		b.Cleanup(hc.CloseIdleConnections)
	}
	return termivarv1connect.NewProducerClient(hc, tb.srv.URL, connect.WithInterceptors(authInterceptor{key}))
}

func spikeUnary(b *testing.B, pc termivarv1connect.ProducerClient) {
	ctx := context.Background()
	req := &pb.GetTaskRequest{TaskId: "x"}
	if _, err := pc.GetTask(ctx, connect.NewRequest(req)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := spikeCPU()
	for range b.N {
		if _, err := pc.GetTask(ctx, connect.NewRequest(req)); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, start)
}

func BenchmarkSpike_StreamH2C(b *testing.B) {
	tb, key := spikeBench(b)
	hc := h2cHTTPClient()
	defer hc.CloseIdleConnections()
	cl := connect.NewClient[pb.GetTaskRequest, pb.GetTaskResponse](hc, tb.srv.URL+spikeProcedure, connect.WithInterceptors(authInterceptor{key}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := cl.CallBidiStream(ctx)
	req := &pb.GetTaskRequest{TaskId: "x"}
	exchange := func() {
		if err := st.Send(req); err != nil {
			b.Fatal(err)
		}
		if _, err := st.Receive(); err != nil {
			b.Fatal(err)
		}
	}
	exchange()
	b.ReportAllocs()
	b.ResetTimer()
	start := spikeCPU()
	for range b.N {
		exchange()
	}
	reportCPU(b, start)
	b.StopTimer()
	_ = st.CloseRequest()
	_, _ = st.Receive()
	_ = st.CloseResponse()
}

// The parallel forms: 16 callers, as the bench's 16 workers (HTTP/1.1:
// a connection each; h2c: calls multiplexed on shared connections; the
// stream: one stream each).
func BenchmarkSpike_UnaryHTTP1Parallel(b *testing.B) { spikeUnaryParallel(b, spikeProducer(b, false)) }

func BenchmarkSpike_UnaryH2CParallel(b *testing.B) { spikeUnaryParallel(b, spikeProducer(b, true)) }

func spikeUnaryParallel(b *testing.B, pc termivarv1connect.ProducerClient) {
	parallelCPU(b, 16, func(pb_ *testing.PB) {
		req := &pb.GetTaskRequest{TaskId: "x"}
		for pb_.Next() {
			if _, err := pc.GetTask(context.Background(), connect.NewRequest(req)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkSpike_StreamH2CParallel(b *testing.B) {
	tb, key := spikeBench(b)
	hc := h2cHTTPClient()
	defer hc.CloseIdleConnections()
	cl := connect.NewClient[pb.GetTaskRequest, pb.GetTaskResponse](hc, tb.srv.URL+spikeProcedure, connect.WithInterceptors(authInterceptor{key}))
	parallelCPU(b, 16, func(pb_ *testing.PB) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st := cl.CallBidiStream(ctx)
		exchangeLoop(b, pb_, st, &pb.GetTaskRequest{TaskId: "x"})
		_ = st.CloseRequest()
		_, _ = st.Receive()
		_ = st.CloseResponse()
	})
}
