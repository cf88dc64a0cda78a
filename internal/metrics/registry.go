package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Registry is one node's metrics: the Prometheus registry, the raft
// instruments and the API instruments, all registered.
type Registry struct {
	Reg  *prometheus.Registry
	Node *Node
	API  *API
}

// New returns a registry with the Go runtime and process collectors and
// the node's and the API's instruments.
func New() *Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r := &Registry{Reg: reg, Node: newNode(), API: newAPI()}
	reg.MustRegister(r.Node.collectors()...)
	reg.MustRegister(r.API.collectors()...)
	return r
}

// AddState registers the state collector over src.
func (r *Registry) AddState(src StateSource, cfg StateConfig) {
	r.Reg.MustRegister(NewStateCollector(src, cfg))
}

// AddGaugeFunc registers a gauge read from f at scrape time.
func (r *Registry) AddGaugeFunc(name, help string, f func() float64) {
	r.Reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

// AddBuildInfo registers termivar_build_info{version,revision,go_version}
// = 1.
func (r *Registry) AddBuildInfo(version, revision, goVersion string) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "termivar_build_info", Help: "This binary's build; always 1.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "go_version": goVersion}})
	g.Set(1)
	r.Reg.MustRegister(g)
}
