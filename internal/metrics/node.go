package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Node is the raft shell's instruments (node/). A nil *Node records
// nothing. Safe for concurrent use.
type Node struct {
	applySeconds    prometheus.Histogram
	batchCommands   prometheus.Histogram
	storeSeconds    prometheus.Histogram
	snapshotSeconds prometheus.Histogram
	snapshotBytes   prometheus.Gauge
	leaderChanges   prometheus.Counter
	recovered       *prometheus.CounterVec
	wal             *prometheus.CounterVec
	walGauges       *prometheus.GaugeVec
}

func newNode() *Node {
	return &Node{
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "termivar_raft_apply_seconds",
			Help:    "Time from handing a log entry to raft until it is applied (proposing node).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		batchCommands: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "termivar_raft_batch_commands",
			Help:    "Commands per proposed log entry.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}}),
		storeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "termivar_raft_log_store_seconds",
			Help:    "Time of one raft log store write (raft-wal append including its fsync).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		snapshotSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "termivar_raft_snapshot_seconds",
			Help:    "Time to write one FSM snapshot to the snapshot store.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		snapshotBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "termivar_raft_snapshot_bytes",
			Help: "Size of the last FSM snapshot written."}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: "termivar_raft_leader_changes_total",
			Help: "Leader changes this node observed."}),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "termivar_recovery_total",
			Help: "What the leader's background recovery did (this node's terms as leader): tasks_requeued, tasks_failed, workers_dead, tasks_expired."},
			[]string{"tenant", "outcome"}),
		wal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "termivar_wal_events_total",
			Help: "raft-wal's own counters, by raft-wal's name."}, []string{"name"}),
		walGauges: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "termivar_wal_gauge",
			Help: "raft-wal's own gauges, by raft-wal's name."}, []string{"name"}),
	}
}

func (m *Node) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.applySeconds, m.batchCommands, m.storeSeconds, m.snapshotSeconds,
		m.snapshotBytes, m.leaderChanges, m.recovered, m.wal, m.walGauges}
}

// ObserveApply records one log entry of n commands applied after d.
func (m *Node) ObserveApply(n int, d time.Duration) {
	if m == nil {
		return
	}
	m.batchCommands.Observe(float64(n))
	m.applySeconds.Observe(d.Seconds())
}

// ObserveStore records one log store write.
func (m *Node) ObserveStore(d time.Duration) {
	if m != nil {
		m.storeSeconds.Observe(d.Seconds())
	}
}

// ObserveSnapshot records one snapshot written.
func (m *Node) ObserveSnapshot(bytes int64, d time.Duration) {
	if m != nil {
		m.snapshotSeconds.Observe(d.Seconds())
		m.snapshotBytes.Set(float64(bytes))
	}
}

// LeaderChanged counts a leader change.
func (m *Node) LeaderChanged() {
	if m != nil {
		m.leaderChanges.Inc()
	}
}

// Recovered adds n to a recovery outcome of tenant.
func (m *Node) Recovered(tenant, outcome string, n int) {
	if m != nil && n > 0 {
		m.recovered.WithLabelValues(tenant, outcome).Add(float64(n))
	}
}

// IncrementCounter implements raft-wal's metrics.Collector.
func (m *Node) IncrementCounter(name string, delta uint64) {
	if m != nil {
		m.wal.WithLabelValues(name).Add(float64(delta))
	}
}

// SetGauge implements raft-wal's metrics.Collector.
func (m *Node) SetGauge(name string, val uint64) {
	if m != nil {
		m.walGauges.WithLabelValues(name).Set(float64(val))
	}
}
