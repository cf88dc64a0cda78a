package metrics

import (
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// HandlerConfig configures Handler.
type HandlerConfig struct {
	// Ready returns why the node cannot serve, or nil (/readyz).
	Ready func() error
	// Pprof serves net/http/pprof under /debug/pprof/.
	Pprof bool
}

// Handler serves the metrics listener: /metrics, /healthz (the process
// answers), /readyz (cfg.Ready) and, with cfg.Pprof, /debug/pprof/. It is
// plain HTTP with no API key: bind it to loopback or a private network
// (docs/observability.md).
func (r *Registry) Handler(cfg HandlerConfig) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.Reg, promhttp.HandlerOpts{Registry: r.Reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if cfg.Ready != nil {
			if err := cfg.Ready(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
