package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
)

// The standard gRPC tooling on the API listener (docs/observability.md):
//
//   - grpc.health.v1.Health answers without an API key, like /healthz and
//     /readyz, so that load balancers and Kubernetes gRPC probes need no
//     credential; it says SERVING exactly when /readyz says ok, for the
//     whole server ("") and for each termivar service.
//   - gRPC server reflection (v1 and v1alpha) needs a valid API key of any
//     role and tenant, as Kubernetes serves its discovery documents only
//     to authenticated callers: it reveals no state, only the schema, but
//     the schema is still not for anonymous scanners. Failures count
//     against the source's failed-authentication budget like any other.
//
// Both are answered by the node that receives them, never forwarded.

// apiServices are the services the API listener serves, for reflection
// and health.
var apiServices = []string{termivarv1connect.WorkerName, termivarv1connect.ProducerName,
	termivarv1connect.AdminName, termivarv1connect.ClusterName}

// Ready returns why this node cannot serve API calls now (it cannot
// commit, or knows no leader), or nil: the answer of /readyz and of the
// gRPC health check.
func (s *Server) Ready() error {
	if err := s.node.CommitHealth(); err != nil {
		return fmt.Errorf("cannot commit: %w", err)
	}
	if !s.readyToServe() {
		return errNoLeader
	}
	return nil
}

var errNoLeader = &apiError{KindUnavailable, "no leader"}

// mountTooling adds the health and reflection services to mux.
func (s *Server) mountTooling(mux *http.ServeMux) {
	mux.Handle(grpchealth.NewHandler(healthChecker{s}))
	names := append(append([]string(nil), apiServices...), grpchealth.HealthV1ServiceName,
		grpcreflect.ReflectV1ServiceName, grpcreflect.ReflectV1AlphaServiceName)
	r := grpcreflect.NewStaticReflector(names...)
	path, h := grpcreflect.NewHandlerV1(r)
	mux.Handle(path, s.keyGate(h))
	path, h = grpcreflect.NewHandlerV1Alpha(r)
	mux.Handle(path, s.keyGate(h))
}

// healthChecker answers grpc.health.v1 from Ready.
type healthChecker struct{ s *Server }

// Check implements grpchealth.Checker.
func (h healthChecker) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if req.Service != "" && !slices.Contains(apiServices, req.Service) {
		return nil, connect.NewError(connect.CodeNotFound, nil)
	}
	if h.s.Ready() != nil {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}

// keyGate lets a request through only with a valid API key (any role),
// charging failures to the source like preauth does.
func (s *Server) keyGate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := s.now()
		src := s.source(r, now)
		if s.refuseThrottled(w, r, src, now) {
			return
		}
		if _, err := s.identify(r.Header); err != nil {
			s.failed(w, r, authResult{err: err, src: src}, now)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// limitKinds are the error kinds of a tenant limit reached (the
// per-request bounds, e.g. result_too_large, are not among them).
var limitKinds = map[string]bool{
	"active_task_capacity_reached": true, "queued_task_capacity_reached": true,
	"task_record_capacity_reached": true, "terminal_capacity_reserved": true,
	"worker_capacity_reached": true, "result_capacity_reached": true,
	"total_result_bytes_exceeded": true, "key_limit": true,
}

// limitLogEvery is how often one tenant's limit of one kind is logged.
const limitLogEvery = time.Minute

// limitLog remembers when a (tenant, kind) limit was last logged, so a
// client hammering a full queue yields one line a minute, not one per
// request. Bounded: it forgets everything past 1024 entries.
type limitLog struct {
	mu   sync.Mutex
	last map[[2]string]time.Time
}

// noteLimit counts a command refused by a tenant limit and logs it (at
// most once per limitLogEvery per tenant and kind).
func (s *Server) noteLimit(tenant string, err error) {
	kind := kindOf(err)
	if !limitKinds[kind] {
		return
	}
	s.cfg.Metrics.LimitReached(tenant, kind)
	now := s.now()
	s.limitLog.mu.Lock()
	if s.limitLog.last == nil || len(s.limitLog.last) >= 1024 {
		s.limitLog.last = map[[2]string]time.Time{}
	}
	key := [2]string{tenant, kind}
	due := now.Sub(s.limitLog.last[key]) >= limitLogEvery
	if due {
		s.limitLog.last[key] = now
	}
	s.limitLog.mu.Unlock()
	if due {
		s.log.Warn("tenant limit reached", "tenant", tenant, "kind", kind)
	}
}

// interceptors are the handler options every API service gets: metrics
// first (it times the whole call), then the configured ones (tracing).
func (s *Server) interceptors() connect.HandlerOption {
	ics := append([]connect.Interceptor{s.cfg.Metrics.Interceptor()}, s.cfg.Interceptors...)
	return connect.WithInterceptors(ics...)
}
