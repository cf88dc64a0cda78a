// Goal: split the per-call floor of issue 15 (docs/benchmarks.md, "One
// task per call, session 8") into what Connect and net/http cost and what
// this server adds on top. Method: 16 or 32 concurrent callers in this
// process call a unary procedure whose handler does nothing, over HTTP/1.1
// and over h2c, against (a) a bare Connect handler on its own mux
// (BenchmarkFloor_BareConnect) and (b) the same no-op behind this
// server's whole stack as serve builds it — pre-auth gate with key
// check, forwarder, local gate, the metrics interceptor, callMsg with its
// audit line (BenchmarkFloor_ServerNoop; BenchmarkFloor_ServerNoopOtel
// adds the OpenTelemetry interceptor serve installed before session 8).
// cpu-µs/op is the process's CPU (getrusage) per call, both ends; (b) − (a)
// is ours.
package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
	"github.com/termivar/distributed/internal/apikey"
	"github.com/termivar/distributed/internal/audit"
	"github.com/termivar/distributed/internal/metrics"
	"github.com/termivar/distributed/internal/tracing"
	"github.com/termivar/distributed/raftfsm"
	"go.opentelemetry.io/otel/trace/noop"
)

// floorProcedure is the no-op's procedure: a Producer method, so that a
// producer key passes the role check as for Enqueue.
const floorProcedure = "/termivar.v1.Producer/FloorNoop"

func noopUnary(_ context.Context, _ *connect.Request[pb.GetTaskRequest]) (*connect.Response[pb.GetTaskResponse], error) {
	return connect.NewResponse(&pb.GetTaskResponse{}), nil
}

// floorServer starts h on HTTP/1.1 and h2c, as serve does.
func floorServer(b *testing.B, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = NewHTTPServer("", nil).Protocols
	srv.Start()
	b.Cleanup(srv.Close)
	return srv
}

// serverNoop is this server over an in-memory backend with serve's
// interceptors for a tracer provider without an exporter (metrics; the
// span interceptor too when otel is set, as serve installed it before
// session 8) and the audit log discarding its lines, plus the no-op
// procedure behind the same gates as the API; it returns the handler
// and a producer key.
func serverNoop(b *testing.B, otel bool) (http.Handler, string) {
	be := newMemBackend(b)
	g, err := CreateKey(context.Background(), be, raftfsm.SystemTenant, apikey.RoleProducer)
	if err != nil {
		b.Fatal(err)
	}
	tp := &tracing.Provider{TracerProvider: noop.NewTracerProvider()}
	ics, err := tracing.ServerInterceptors(tp)
	if err == nil && otel {
		var ic connect.Interceptor
		ic, err = tracing.Interceptor(tp)
		ics = []connect.Interceptor{ic}
	}
	if err != nil {
		b.Fatal(err)
	}
	s := New(Config{Backend: be, Audit: audit.New(nil), Metrics: metrics.New().API, Interceptors: ics})
	mux := http.NewServeMux()
	mux.Handle(floorProcedure, connect.NewUnaryHandler(floorProcedure, func(ctx context.Context, req *connect.Request[pb.GetTaskRequest]) (*connect.Response[pb.GetTaskResponse], error) {
		return call(ctx, s, req, true, func(context.Context, principal, *pb.GetTaskRequest) (*pb.GetTaskResponse, uint64, error) {
			return &pb.GetTaskResponse{}, 0, nil
		})
	}, readMax(MaxProducerRequestBytes), connect.WithCompressMinBytes(256<<10), s.interceptors()))
	outer := http.NewServeMux()
	outer.Handle(floorProcedure, s.preauth(s.fwd.handler(s.localGate(mux))))
	outer.Handle("/", s.Handler())
	return outer, g.Key
}

func BenchmarkFloor_BareConnect(b *testing.B) {
	mux := http.NewServeMux()
	// NB: responses uncompressed below 256 KiB, as Handler's: Connect's
	// default gzips every response the client accepts gzip for.
	mux.Handle(floorProcedure, connect.NewUnaryHandler(floorProcedure, noopUnary, connect.WithCompressMinBytes(256<<10)))
	floorMatrix(b, func(b *testing.B) (http.Handler, string) { return mux, "" })
}

func BenchmarkFloor_ServerNoop(b *testing.B) {
	floorMatrix(b, func(b *testing.B) (http.Handler, string) { return serverNoop(b, false) })
}

// BenchmarkFloor_ServerNoopOtel is BenchmarkFloor_ServerNoop with the
// span interceptor on a provider that exports nothing, as serve had it
// before session 8: the A/B of that change in one binary.
func BenchmarkFloor_ServerNoopOtel(b *testing.B) {
	floorMatrix(b, func(b *testing.B) (http.Handler, string) { return serverNoop(b, true) })
}

// floorMatrix runs the no-op over HTTP/1.1 and h2c with 16 and 32
// callers.
func floorMatrix(b *testing.B, handler func(*testing.B) (http.Handler, string)) {
	for _, proto := range []string{"http1", "h2c"} {
		for _, callers := range []int{16, 32} {
			b.Run(proto+"/callers="+strconv.Itoa(callers), func(b *testing.B) {
				h, key := handler(b)
				srv := floorServer(b, h)
				hc := srv.Client()
				if proto == "h2c" {
					hc = h2cHTTPClient()
				}
				b.Cleanup(hc.CloseIdleConnections)
				var opts []connect.ClientOption
				if key != "" {
					opts = append(opts, connect.WithInterceptors(authInterceptor{key}))
				}
				cl := connect.NewClient[pb.GetTaskRequest, pb.GetTaskResponse](hc, srv.URL+floorProcedure, opts...)
				floorCalls(b, cl, callers)
			})
		}
	}
}

// floorCalls makes b.N no-op calls from callers goroutines (on 2 cores,
// b.SetParallelism(callers/2)) and reports CPU per call.
func floorCalls(b *testing.B, cl *connect.Client[pb.GetTaskRequest, pb.GetTaskResponse], callers int) {
	req := &pb.GetTaskRequest{TaskId: "x"}
	if _, err := cl.CallUnary(context.Background(), connect.NewRequest(req)); err != nil {
		b.Fatal(err)
	}
	parallelCPU(b, callers, func(p *testing.PB) {
		for p.Next() {
			if _, err := cl.CallUnary(context.Background(), connect.NewRequest(req)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// parallelCPU runs body from callers goroutines (b.SetParallelism on 2
// cores) and reports the process's CPU per op.
func parallelCPU(b *testing.B, callers int, body func(*testing.PB)) {
	b.SetParallelism(max(1, callers/2))
	b.ReportAllocs()
	b.ResetTimer()
	start := spikeCPU()
	b.RunParallel(body)
	reportCPU(b, start)
}

// floorH2C starts h (floorServer) and returns a client of it that
// speaks h2c, for the stream benchmarks.
func floorH2C(b *testing.B, h http.Handler) (*httptest.Server, *http.Client) {
	srv := floorServer(b, h)
	hc := h2cHTTPClient()
	b.Cleanup(hc.CloseIdleConnections)
	return srv, hc
}

// BenchmarkFloor_BareStream is (d)'s floor: one message round trip on an
// open Connect bidi stream over h2c whose handler answers each message
// with an empty one, each caller on a stream of its own (the bench's
// workers each hold one session).
func BenchmarkFloor_BareStream(b *testing.B) {
	mux := http.NewServeMux()
	mux.Handle(floorProcedure, connect.NewBidiStreamHandler(floorProcedure, func(_ context.Context, st *connect.BidiStream[pb.GetTaskRequest, pb.GetTaskResponse]) error {
		for {
			if _, err := st.Receive(); err != nil {
				return nil
			}
			if err := st.Send(&pb.GetTaskResponse{}); err != nil {
				return err
			}
		}
	}, connect.WithCompressMinBytes(256<<10)))
	for _, callers := range []int{16, 32} {
		b.Run("h2c/callers="+strconv.Itoa(callers), func(b *testing.B) {
			srv, hc := floorH2C(b, mux)
			cl := connect.NewClient[pb.GetTaskRequest, pb.GetTaskResponse](hc, srv.URL+floorProcedure)
			parallelCPU(b, callers, func(p *testing.PB) {
				st := cl.CallBidiStream(context.Background())
				defer func() { _ = st.CloseRequest(); _ = st.CloseResponse() }()
				exchangeLoop(b, p, st, &pb.GetTaskRequest{TaskId: "x"})
			})
		})
	}
}

// BenchmarkFloor_SessionAcquireEmpty is (d) through this server: one
// Worker.Session message round trip, an Acquire of one task without
// waiting that finds the queue empty (answered from the applied state,
// nothing proposed), each caller a worker with a session of its own,
// over h2c, with serve's interceptors and the audit line formatted; to
// read against BenchmarkFloor_BareStream.
func BenchmarkFloor_SessionAcquireEmpty(b *testing.B) {
	for _, callers := range []int{16, 32} {
		b.Run("h2c/callers="+strconv.Itoa(callers), func(b *testing.B) {
			h, key := serverWorkers(b, callers)
			srv, hc := floorH2C(b, h)
			cl := connect.NewClient[pb.SessionRequest, pb.SessionResponse](hc, srv.URL+sessionProcedure, connect.WithInterceptors(authInterceptor{key}))
			var next atomic.Int32
			parallelCPU(b, callers, func(p *testing.PB) {
				st := cl.CallBidiStream(context.Background())
				defer func() { _ = st.CloseRequest(); _ = st.CloseResponse() }()
				w := "w" + strconv.Itoa(int(next.Add(1)-1))
				for id := uint64(1); p.Next(); id++ {
					m := &pb.SessionRequest{Id: id, Op: &pb.SessionRequest_Acquire{Acquire: &pb.AcquireRequest{WorkerId: w, MaxTasks: 1, Start: true}}}
					if err := st.Send(m); err != nil {
						b.Error(err)
						return
					}
					r, err := st.Receive()
					if err != nil || r.GetId() != id || r.GetAcquire() == nil || len(r.GetAcquire().GetTasks()) != 0 {
						b.Errorf("answer %v, %v; want an empty acquire of message %d", r, err, id)
						return
					}
				}
			})
		})
	}
}

// serverWorkers is serve's stack (as serverNoop without the span
// interceptor) with a worker key and workers w0..w(n-1) registered.
func serverWorkers(b *testing.B, n int) (http.Handler, string) {
	h, key, _ := serverWorkersProducer(b, n)
	return h, key
}

// BenchmarkFloor_SessionAcquireCarrying is the bench's worker message
// through this server over an in-memory backend (no raft, no disk): an
// Acquire of one task (wait 5 s, started) carrying the completion of the
// task the worker leased before, each caller a worker with a session of
// its own, over h2c; the tasks are enqueued before the timer starts.
func BenchmarkFloor_SessionAcquireCarrying(b *testing.B) {
	const callers = 16
	if b.N+callers > 16000 {
		b.Fatalf("%d tasks: the tenant's active-task limit is 16 384; run with -benchtime Nx, N <= 15 984", b.N+callers)
	}
	h, key, producer := serverWorkersProducer(b, callers)
	pc := &perCall{h: h, producer: producer}
	for i := 0; i < b.N+callers; i += 1000 {
		in := &pb.EnqueueRequest{}
		for j := i; j < min(i+1000, b.N+callers); j++ {
			id := "t" + strconv.Itoa(j)
			in.Tasks = append(in.Tasks, &pb.NewTask{TaskId: id, ScanId: "s", TargetRef: "target-" + id})
		}
		var out pb.EnqueueResponse
		pc.do(b, termivarv1connect.ProducerEnqueueProcedure, producer, in, &out)
	}
	srv, hc := floorH2C(b, h)
	cl := connect.NewClient[pb.SessionRequest, pb.SessionResponse](hc, srv.URL+sessionProcedure, connect.WithInterceptors(authInterceptor{key}))
	var next atomic.Int32
	result := make([]byte, 32)
	parallelCPU(b, callers, func(p *testing.PB) {
		st := cl.CallBidiStream(context.Background())
		defer func() { _ = st.CloseRequest(); _ = st.CloseResponse() }()
		w := "w" + strconv.Itoa(int(next.Add(1)-1))
		var held []byte
		for id := uint64(1); p.Next(); id++ {
			in := &pb.AcquireRequest{WorkerId: w, MaxTasks: 1, Start: true, WaitSecs: 5}
			if held != nil {
				in.Complete = []*pb.CompleteRequest{{LeaseToken: held, Result: result}}
			}
			if err := st.Send(&pb.SessionRequest{Id: id, Op: &pb.SessionRequest_Acquire{Acquire: in}}); err != nil {
				b.Error(err)
				return
			}
			r, err := st.Receive()
			for err == nil && r.GetCompleted() != nil { // NB: a waiting acquire answers its completions first
				r, err = st.Receive()
			}
			if err != nil || r.GetId() != id || len(r.GetAcquire().GetTasks()) != 1 {
				b.Errorf("answer %v, %v; want one task leased by message %d", r, err, id)
				return
			}
			held = r.GetAcquire().GetTasks()[0].GetLeaseToken()
		}
	})
}

// serverWorkersProducer is serverWorkers with a producer key too.
func serverWorkersProducer(b *testing.B, n int) (http.Handler, string, string) {
	be := newMemBackend(b)
	keys := roleKeys(b, be)
	s := New(Config{Backend: be, Audit: audit.New(nil), Metrics: metrics.New().API})
	pc := &perCall{h: s.Handler(), work: keys[apikey.RoleWorker]}
	for i := range n {
		var reg pb.RegisterWorkerResponse
		pc.do(b, termivarv1connect.WorkerRegisterWorkerProcedure, pc.work, &pb.RegisterWorkerRequest{WorkerId: "w" + strconv.Itoa(i), Capacity: 1}, &reg)
	}
	return pc.h, keys[apikey.RoleWorker], keys[apikey.RoleProducer]
}

// exchangeLoop sends req and receives one answer on st for each op of p.
func exchangeLoop(b *testing.B, p *testing.PB, st *connect.BidiStreamForClient[pb.GetTaskRequest, pb.GetTaskResponse], req *pb.GetTaskRequest) {
	for p.Next() {
		if err := st.Send(req); err != nil {
			b.Error(err)
			return
		}
		if _, err := st.Receive(); err != nil {
			b.Error(err)
			return
		}
	}
}
