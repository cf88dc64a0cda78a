package metrics

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/raftfsm"
)

// DefaultRecentScans is how many scans per tenant get progress series when
// StateConfig.RecentScans is 0; MaxRecentScans bounds it.
const (
	DefaultRecentScans = 10
	MaxRecentScans     = 100
)

// StateSource is what the state collector reads at scrape time: the
// applied state (read-only) and raft's own statistics. node.Node provides
// both; RaftStats may be nil (no raft series).
type StateSource struct {
	Reads     func() raftfsm.Reader
	RaftStats func() map[string]string
}

// StateConfig configures NewStateCollector.
type StateConfig struct {
	// RecentScans is how many scans per tenant (the most recently
	// enqueued, by their newest task) get termivar_scan_tasks series; 0:
	// DefaultRecentScans, at most MaxRecentScans. It bounds the scan
	// label's cardinality to tenants × RecentScans.
	RecentScans int
}

// stateCollector reads the whole applied state when scraped; nothing on
// the request path is instrumented for these series.
type stateCollector struct {
	src    StateSource
	recent int

	tasks, queue, leases, retries, workers   *prometheus.Desc
	records, results, resultBytes, limit     *prometheus.Desc
	scanTasks, revision, logicalTime         *prometheus.Desc
	raftState, raftTerm, raftCommit, raftApp *prometheus.Desc
	raftLast, raftSnapIdx, raftPeers, leader *prometheus.Desc
	tenants, failedBy, scheduled             *prometheus.Desc
}

// NewStateCollector returns a prometheus.Collector of the per-tenant task,
// worker, lease and result-store state and of raft's state, read from src
// at scrape time.
func NewStateCollector(src StateSource, cfg StateConfig) prometheus.Collector {
	n := cmp.Or(max(cfg.RecentScans, 0), DefaultRecentScans)
	n = min(n, MaxRecentScans)
	t := []string{"tenant"}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &stateCollector{src: src, recent: n,
		tenants:     d("termivar_tenants", "Tenants."),
		scheduled:   d("termivar_scheduled_tasks", "Queued tasks not yet due (a not-before time or a retry's backoff in the future).", t...),
		failedBy:    d("termivar_failed_tasks_by_reason", "Retained failed tasks by the class of their last failure reason.", "tenant", "class"),
		tasks:       d("termivar_tasks", "Retained task records by status.", "tenant", "status"),
		queue:       d("termivar_queue_depth", "Queued tasks by priority.", "tenant", "priority"),
		leases:      d("termivar_leases_in_flight", "Tasks leased or running (live leases).", t...),
		retries:     d("termivar_task_retries", "Retries (RetryCount) summed over retained task records.", t...),
		workers:     d("termivar_workers", "Worker records by status (offline: deregistered or declared dead).", "tenant", "status"),
		records:     d("termivar_task_records", "Retained task records (limit: max_task_records).", t...),
		results:     d("termivar_result_records", "Stored results (limit: max_results).", t...),
		resultBytes: d("termivar_result_bytes", "Bytes of stored results (limit: max_total_result_bytes).", t...),
		limit:       d("termivar_tenant_limit", "A tenant's configured limit.", "tenant", "limit"),
		scanTasks:   d("termivar_scan_tasks", "Tasks of one of the tenant's most recent scans by status.", "tenant", "scan", "status"),
		revision:    d("termivar_tenant_revision", "The tenant's core revision (+1 per accepted command).", t...),
		logicalTime: d("termivar_logical_time_seconds", "Logical time of the last applied command (Unix seconds)."),
		raftState:   d("termivar_raft_state", "1 for this node's current raft state.", "state"),
		leader:      d("termivar_raft_leader", "1 if this node is the raft leader."),
		raftTerm:    d("termivar_raft_term", "Current raft term."),
		raftCommit:  d("termivar_raft_commit_index", "Raft commit index."),
		raftApp:     d("termivar_raft_applied_index", "Raft applied index."),
		raftLast:    d("termivar_raft_last_log_index", "Index of the last raft log entry."),
		raftSnapIdx: d("termivar_raft_last_snapshot_index", "Index of the last raft snapshot."),
		raftPeers:   d("termivar_raft_peers", "Other voters in the raft configuration."),
	}
}

// Describe sends every descriptor.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.tenants, c.failedBy, c.scheduled, c.tasks, c.queue, c.leases, c.retries, c.workers, c.records,
		c.results, c.resultBytes, c.limit, c.scanTasks, c.revision, c.logicalTime, c.raftState, c.leader,
		c.raftTerm, c.raftCommit, c.raftApp, c.raftLast, c.raftSnapIdx, c.raftPeers} {
		ch <- d
	}
}

// Collect reads the state now.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.src.Reads()
	names := r.TenantNames()
	gauge(ch, c.tenants, float64(len(names)))
	gauge(ch, c.logicalTime, float64(r.LastTime()))
	for _, name := range names {
		tv, ok := r.Tenant(name)
		if !ok {
			continue
		}
		c.collectTenant(ch, tv, r.LastTime())
	}
	if c.src.RaftStats != nil {
		c.collectRaft(ch, c.src.RaftStats())
	}
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

// tenantCounts is one pass over a tenant's task records.
type tenantCounts struct {
	byStatus   [8]int
	byPriority [8]int
	failedBy   map[string]int // failed tasks by reasonClass
	scheduled  int            // queued tasks not yet due
	retries    uint64
	scans      map[string]*scanCounts
}

type scanCounts struct {
	id       string
	newest   uint64 // the newest CreatedAt of the scan's tasks
	byStatus [8]int
}

func countTasks(tasks []distributed.ScanTask, now uint64) tenantCounts {
	tc := tenantCounts{scans: map[string]*scanCounts{}, failedBy: map[string]int{}}
	for _, t := range tasks {
		st := int(t.Status()) & 7
		tc.byStatus[st]++
		if t.Status() == distributed.TaskQueued {
			tc.byPriority[int(t.Priority())&7]++
		}
		if t.Scheduled(now) {
			tc.scheduled++
		}
		tc.retries += uint64(t.RetryCount())
		if t.Status() == distributed.TaskFailed {
			r, _ := t.LastFailureReason()
			tc.failedBy[reasonClass(r)]++
		}
		sc := tc.scans[t.ScanID()]
		if sc == nil {
			sc = &scanCounts{id: t.ScanID()}
			tc.scans[t.ScanID()] = sc
		}
		sc.newest = max(sc.newest, t.CreatedAt())
		sc.byStatus[st]++
	}
	return tc
}

// reasonClasses are the values of the class label of
// termivar_failed_tasks_by_reason: a closed set (the reason itself is free
// text and may hold stderr, so it is never a label).
var reasonClasses = [...]string{"exit", "signal", "timeout", "output_too_large", "handler", "other", "none"}

// reasonClass classifies a failure reason by the agent's wording
// (agent/reason.go): "exit status N", "signal: …", "timeout: …", "output
// exceeds …", "handler error: …"; anything else is other, no reason none.
func reasonClass(r string) string {
	for _, c := range [...]struct{ prefix, class string }{
		{"exit status ", "exit"}, {"signal: ", "signal"}, {"timeout", "timeout"},
		{"output exceeds ", "output_too_large"}, {"handler error", "handler"},
	} {
		if strings.HasPrefix(r, c.prefix) {
			return c.class
		}
	}
	if r == "" {
		return "none"
	}
	return "other"
}

// recentScans returns the n scans with the newest tasks (ties: scan ID).
func recentScans(m map[string]*scanCounts, n int) []*scanCounts {
	all := make([]*scanCounts, 0, len(m))
	for _, s := range m {
		all = append(all, s)
	}
	slices.SortFunc(all, func(a, b *scanCounts) int {
		if c := cmp.Compare(b.newest, a.newest); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	return all[:min(n, len(all))]
}

func (c *stateCollector) collectTenant(ch chan<- prometheus.Metric, tv raftfsm.TenantView, now uint64) {
	name := tv.Name()
	tc := countTasks(tv.Tasks(), now)
	gauge(ch, c.scheduled, float64(tc.scheduled), name)
	for _, s := range distributed.AllTaskStatuses() {
		gauge(ch, c.tasks, float64(tc.byStatus[s]), name, s.String())
	}
	for _, p := range distributed.AllTaskPriorities() {
		gauge(ch, c.queue, float64(tc.byPriority[p]), name, p.String())
	}
	gauge(ch, c.leases, float64(tc.byStatus[distributed.TaskLeased]+tc.byStatus[distributed.TaskRunning]), name)
	for _, class := range reasonClasses {
		gauge(ch, c.failedBy, float64(tc.failedBy[class]), name, class)
	}
	gauge(ch, c.retries, float64(tc.retries), name)
	c.collectWorkers(ch, name, tv.Workers())
	cnt := tv.Counters()
	gauge(ch, c.records, float64(cnt.TaskRecords), name)
	gauge(ch, c.revision, float64(cnt.Revision), name)
	gauge(ch, c.results, float64(tv.ResultCount()), name)
	gauge(ch, c.resultBytes, float64(tv.ResultBytes()), name)
	for _, l := range limitValues(tv.Limits(), tv.ResultLimits()) {
		gauge(ch, c.limit, l.v, name, l.name)
	}
	for _, s := range recentScans(tc.scans, c.recent) {
		for _, st := range distributed.AllTaskStatuses() {
			gauge(ch, c.scanTasks, float64(s.byStatus[st]), name, s.id, st.String())
		}
	}
}

func (c *stateCollector) collectWorkers(ch chan<- prometheus.Metric, tenant string, ws []distributed.WorkerNode) {
	var by [8]int
	for _, w := range ws {
		by[int(w.Status())&7]++
	}
	for _, s := range distributed.AllWorkerStatuses() {
		gauge(ch, c.workers, float64(by[s]), tenant, s.String())
	}
}

type namedLimit struct {
	name string
	v    float64
}

// limitValues lists a tenant's limits under the names of the serve flags
// (with _ for -).
func limitValues(l distributed.Limits, rl distributed.ResultLimits) []namedLimit {
	return []namedLimit{
		{"max_task_records", float64(l.MaxTaskRecords)}, {"max_active_tasks", float64(l.MaxActiveTasks)},
		{"max_queued_tasks", float64(l.MaxQueuedTasks)}, {"max_terminal_tasks", float64(l.MaxTerminalTasks)},
		{"max_workers", float64(l.MaxWorkers)}, {"max_retries", float64(l.MaxRetries)},
		{"max_results", float64(rl.MaxResults)}, {"max_result_bytes", float64(rl.MaxResultBytes)},
		{"max_total_result_bytes", float64(rl.MaxTotalBytes)},
	}
}

// raftStates are hashicorp/raft's state names (RaftState.String).
var raftStates = []string{"Follower", "Candidate", "Leader", "Shutdown"}

func (c *stateCollector) collectRaft(ch chan<- prometheus.Metric, st map[string]string) {
	for _, s := range raftStates {
		gauge(ch, c.raftState, b2f(st["state"] == s), s)
	}
	gauge(ch, c.leader, b2f(st["state"] == "Leader"))
	for _, kv := range []struct {
		d   *prometheus.Desc
		key string
	}{{c.raftTerm, "term"}, {c.raftCommit, "commit_index"}, {c.raftApp, "applied_index"},
		{c.raftLast, "last_log_index"}, {c.raftSnapIdx, "last_snapshot_index"}, {c.raftPeers, "num_peers"}} {
		v, err := strconv.ParseUint(st[kv.key], 10, 64)
		if err == nil {
			gauge(ch, kv.d, float64(v))
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
