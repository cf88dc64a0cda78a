// Metrics of a real node (docs/observability.md). Goal: the series an
// operator alerts on say exactly what the node holds. Method: an
// in-process `serve` node (startNode) with its metrics listener on a
// loopback port runs a known workload — seven tasks in two scans, three
// leased, two completed with results of known sizes, one failed and
// requeued, one leased again, one cancelled, one request with a bad key —
// then one scrape of /metrics is parsed and the task, queue, lease, retry,
// worker, result-store, scan and API series are compared with exact
// values; raft's series must be present and plausible.
package main

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/apikey"
)

// obsNode is an in-process node serving its API and metrics listeners.
type obsNode struct {
	tn         *tnode
	ms         *metricsServer
	metricsURL string
	adminKey   string
}

// startObsNode starts a single node with --metrics-addr on a free
// loopback port.
func startObsNode(t *testing.T, mut ...func(*serveFlags)) *obsNode {
	t.Helper()
	dir := t.TempDir()
	apiLn, raftLn := listen(t), listen(t)
	f := nodeFlags(t, filepath.Join(dir, "data"), "n1", apiLn, raftLn)
	for _, m := range mut {
		m(&f)
	}
	f.obs.metricsAddr, f.obs.metricsAddrGiven = "127.0.0.1:0", true
	tn := &tnode{id: "n1", dir: f.dataDir}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tn.start(ctx, f); err != nil {
		t.Fatal(err)
	}
	o := &obsNode{tn: tn}
	t.Cleanup(func() {
		o.ms.close(context.Background())
		tn.rn.close()
		<-tn.served
	})
	ms, err := startMetrics(f, tn.rn.obs, tn.rn.srv, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	o.ms = ms
	o.metricsURL = "http://" + ms.ln.Addr().String()
	o.adminKey = readAdminKey(t, f.dataDir)
	return o
}

// client is a client of o's API with its admin key, closed when the test
// ends.
func (o *obsNode) client(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{ServerURL: o.tn.url, Key: o.adminKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func readAdminKey(t *testing.T, dataDir string) string {
	t.Helper()
	k, err := client.LoadKey(filepath.Join(dataDir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// scrape parses one scrape of /metrics.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", res.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// sample returns the value of the series name{labels} (labels as
// "k=v,k=v"), and whether it exists.
func sample(fams map[string]*dto.MetricFamily, name, labels string) (float64, bool) {
	fam := fams[name]
	if fam == nil {
		return 0, false
	}
	want := map[string]string{}
	for kv := range strings.SplitSeq(labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			want[k] = v
		}
	}
	for _, m := range fam.GetMetric() {
		if labelsMatch(m.GetLabel(), want) {
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			case m.GetUntyped() != nil:
				return m.GetUntyped().GetValue(), true
			}
		}
	}
	return 0, false
}

func labelsMatch(got []*dto.LabelPair, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, l := range got {
		if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
			return false
		}
	}
	return true
}

// runKnownWorkload drives the workload of the file comment through the
// admin key and returns the number of result bytes stored.
func runKnownWorkload(t *testing.T, ctx context.Context, cl *client.Client) {
	t.Helper()
	if _, err := cl.RegisterWorker(ctx, &pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 4}); err != nil {
		t.Fatal(err)
	}
	tasks := []*pb.NewTask{
		{TaskId: "a", ScanId: "s1", TargetRef: "secret-target-a.example", Priority: "critical"},
		{TaskId: "b", ScanId: "s1", TargetRef: "secret-target-b.example", Priority: "high"},
		{TaskId: "c", ScanId: "s1", TargetRef: "secret-target-c.example"},
		{TaskId: "d", ScanId: "s1", TargetRef: "secret-target-d.example"},
		{TaskId: "e", ScanId: "s1", TargetRef: "secret-target-e.example"},
		{TaskId: "f", ScanId: "s2", TargetRef: "secret-target-f.example", Priority: "low"},
		{TaskId: "g", ScanId: "s2", TargetRef: "secret-target-g.example", Priority: "low"},
	}
	if _, err := cl.Enqueue(ctx, &pb.EnqueueRequest{Tasks: tasks}); err != nil {
		t.Fatal(err)
	}
	acq, err := cl.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w1", MaxTasks: 3, Start: true})
	if err != nil || len(acq.GetTasks()) != 3 {
		t.Fatalf("Acquire 3 = %d tasks, %v", len(acq.GetTasks()), err)
	}
	byID := map[string]*pb.LeasedTask{}
	for _, lt := range acq.GetTasks() {
		byID[lt.GetTaskId()] = lt
	}
	for id, result := range map[string]string{"a": "result-A", "b": "result-BB"} {
		if byID[id] == nil {
			t.Fatalf("Acquire leased %v, want a, b and c", acq.GetTasks())
		}
		if _, err := cl.Complete(ctx, &pb.CompleteRequest{LeaseToken: byID[id].GetLeaseToken(), Result: []byte(result)}); err != nil {
			t.Fatal(err)
		}
	}
	if byID["c"] == nil {
		t.Fatalf("Acquire leased %v, want a, b and c", acq.GetTasks())
	}
	if fr, err := cl.Fail(ctx, &pb.FailRequest{LeaseToken: byID["c"].GetLeaseToken()}); err != nil || !fr.GetRequeued() {
		t.Fatalf("Fail = %v, %v; want requeued", fr, err)
	}
	if acq, err := cl.Acquire(ctx, &pb.AcquireRequest{WorkerId: "w1", MaxTasks: 1}); err != nil || len(acq.GetTasks()) != 1 {
		t.Fatalf("Acquire 1 = %v, %v", acq, err)
	}
	if _, err := cl.Cancel(ctx, &pb.CancelRequest{TaskId: "g"}); err != nil {
		t.Fatal(err)
	}
}

func TestMetrics_KnownWorkload(t *testing.T) {
	t.Parallel()
	o := startObsNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := o.client(t)
	runKnownWorkload(t, ctx, cl)
	unknown, err := apikey.Generate(nil) // well-formed, never registered
	if err != nil {
		t.Fatal(err)
	}
	bad, err := client.New(client.Config{ServerURL: o.tn.url, Key: unknown.Key, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := bad.Status(ctx, &pb.StatusRequest{}); err == nil {
		t.Fatal("Status with an unknown key succeeded")
	}
	fams := scrape(t, o.metricsURL)
	exact := []struct {
		name, labels string
		want         float64
	}{
		{"termivar_tasks", "tenant=default,status=queued", 3},
		{"termivar_tasks", "tenant=default,status=leased", 1},
		{"termivar_tasks", "tenant=default,status=running", 0},
		{"termivar_tasks", "tenant=default,status=completed", 2},
		{"termivar_tasks", "tenant=default,status=failed", 0},
		{"termivar_failed_tasks_by_reason", "tenant=default,class=exit", 0},
		{"termivar_tasks", "tenant=default,status=cancelled", 1},
		{"termivar_tasks", "tenant=default,status=expired", 0},
		{"termivar_task_records", "tenant=default", 7},
		{"termivar_queue_depth", "tenant=default,priority=critical", 0},
		{"termivar_queue_depth", "tenant=default,priority=high", 0},
		{"termivar_queue_depth", "tenant=default,priority=normal", 2},
		{"termivar_queue_depth", "tenant=default,priority=low", 1},
		{"termivar_leases_in_flight", "tenant=default", 1},
		{"termivar_task_retries", "tenant=default", 1},
		{"termivar_workers", "tenant=default,status=offline", 0},
		{"termivar_result_records", "tenant=default", 2},
		{"termivar_result_bytes", "tenant=default", float64(len("result-A") + len("result-BB"))},
		// serve's default tenant has the service's limits (service_limits.go).
		{"termivar_tenant_limit", "tenant=default,limit=max_total_result_bytes", float64(serviceResultLimits().MaxTotalBytes)},
		{"termivar_tenant_limit", "tenant=default,limit=max_results", float64(serviceResultLimits().MaxResults)},
		{"termivar_scan_tasks", "tenant=default,scan=s1,status=completed", 2},
		{"termivar_scan_tasks", "tenant=default,scan=s1,status=leased", 1},
		{"termivar_scan_tasks", "tenant=default,scan=s1,status=queued", 2},
		{"termivar_scan_tasks", "tenant=default,scan=s2,status=queued", 1},
		{"termivar_scan_tasks", "tenant=default,scan=s2,status=cancelled", 1},
		{"termivar_api_requests_total", "procedure=/termivar.v1.Worker/Complete,code=ok", 2},
		{"termivar_api_requests_total", "procedure=/termivar.v1.Worker/Fail,code=ok", 1},
		{"termivar_api_requests_total", "procedure=/termivar.v1.Worker/Acquire,code=ok", 2},
		{"termivar_api_requests_total", "procedure=/termivar.v1.Producer/Enqueue,code=ok", 1},
		{"termivar_api_request_seconds", "procedure=/termivar.v1.Worker/Complete", 2},
		{"termivar_api_auth_rejected_total", "reason=unauthenticated", 1},
		{"termivar_api_long_polls", "", 0},
		{"termivar_raft_leader", "", 1},
		{"termivar_raft_state", "state=Leader", 1},
	}
	for _, e := range exact {
		got, ok := sample(fams, e.name, e.labels)
		if !ok || got != e.want {
			t.Errorf("%s{%s} = %v (present %v), want %v", e.name, e.labels, got, ok, e.want)
		}
	}
	checkRaftSeries(t, fams)
}

// checkRaftSeries checks that the raft series exist and are plausible.
func checkRaftSeries(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	commit, _ := sample(fams, "termivar_raft_commit_index", "")
	applied, _ := sample(fams, "termivar_raft_applied_index", "")
	term, _ := sample(fams, "termivar_raft_term", "")
	if commit < 1 || applied < 1 || term < 1 {
		t.Errorf("raft commit %v, applied %v, term %v: want all ≥ 1", commit, applied, term)
	}
	for _, name := range []string{"termivar_raft_apply_seconds", "termivar_raft_batch_commands", "termivar_raft_log_store_seconds"} {
		if n, ok := sample(fams, name, ""); !ok || n < 1 {
			t.Errorf("%s count = %v (present %v), want ≥ 1", name, n, ok)
		}
	}
	for _, name := range []string{"termivar_raft_last_log_index", "termivar_raft_last_snapshot_index", "termivar_raft_peers",
		"termivar_raft_snapshot_seconds", "termivar_raft_snapshot_bytes", "termivar_raft_leader_changes_total",
		"termivar_build_info", "go_goroutines", "process_resident_memory_bytes"} {
		if fams[name] == nil {
			t.Errorf("%s missing from the scrape", name)
		}
	}
}

// TestMetrics_ListenerEndpoints checks /healthz and /readyz on the
// metrics listener and that pprof is off by default.
func TestMetrics_ListenerEndpoints(t *testing.T) {
	t.Parallel()
	o := startObsNode(t)
	wantStatus(t, map[string]int{o.metricsURL + "/healthz": 200, o.metricsURL + "/readyz": 200, o.metricsURL + "/debug/pprof/": 404,
		o.metricsURL + "/metrics": 200})
}

// wantStatus GETs every URL and checks its status code.
func wantStatus(t *testing.T, want map[string]int) {
	t.Helper()
	for url, code := range want {
		res, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != code {
			t.Errorf("GET %s = %d, want %d", url, res.StatusCode, code)
		}
	}
}

// TestMetrics_DefaultAddressBusy checks that a busy default
// --metrics-addr is a warning (the node serves without it) while a busy
// explicit one is an error.
func TestMetrics_DefaultAddressBusy(t *testing.T) {
	t.Parallel()
	o := startObsNode(t)
	busy := o.ms.ln.Addr().String()
	f := serveFlags{obs: obsFlags{metricsAddr: busy}}
	ms, err := startMetrics(f, o.tn.rn.obs, o.tn.rn.srv, discardLogger())
	if err != nil || ms != nil {
		t.Fatalf("default address busy: startMetrics = %v, %v; want nil, nil", ms, err)
	}
	f.obs.metricsAddrGiven = true
	if ms, err := startMetrics(f, o.tn.rn.obs, o.tn.rn.srv, discardLogger()); err == nil {
		ms.close(context.Background())
		t.Fatal("explicit busy --metrics-addr: no error")
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestMetrics_PprofFlag checks that --pprof serves net/http/pprof on the
// metrics listener (and only there: the API listener still 404s it).
func TestMetrics_PprofFlag(t *testing.T) {
	t.Parallel()
	o := startObsNode(t, func(f *serveFlags) { f.obs.pprof = true })
	wantStatus(t, map[string]int{o.metricsURL + "/debug/pprof/": 200, o.metricsURL + "/debug/pprof/cmdline": 200,
		o.tn.url + "/debug/pprof/": 404})
}

// TestMetrics_ScanSeriesBounded checks --metrics-scans: with 2, a tenant
// with three scans enqueued together exports the first two by scan ID
// (equal recency) and none of the third.
func TestMetrics_ScanSeriesBounded(t *testing.T) {
	t.Parallel()
	o := startObsNode(t, func(f *serveFlags) { f.obs.metricsScans = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := o.client(t)
	tasks := []*pb.NewTask{{TaskId: "1", ScanId: "s1", TargetRef: "x"}, {TaskId: "2", ScanId: "s2", TargetRef: "x"},
		{TaskId: "3", ScanId: "s3", TargetRef: "x"}}
	if _, err := cl.Enqueue(ctx, &pb.EnqueueRequest{Tasks: tasks}); err != nil {
		t.Fatal(err)
	}
	scans := map[string]bool{}
	for _, m := range scrape(t, o.metricsURL)["termivar_scan_tasks"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "scan" {
				scans[l.GetValue()] = true
			}
		}
	}
	if len(scans) != 2 || !scans["s1"] || !scans["s2"] {
		t.Errorf("scan labels = %v, want s1 and s2", scans)
	}
}

// TestMetrics_ProbesWithoutClientCertUnderMutualTLS: with mutual TLS on
// the API, a probe without a client certificate cannot reach the API's
// /readyz, but gets /healthz, /readyz and /metrics from the plain-HTTP
// metrics listener.
func TestMetrics_ProbesWithoutClientCertUnderMutualTLS(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	o := startObsNode(t, func(f *serveFlags) { f.tlsCert, f.tlsKey, f.clientCA = p.serverCert, p.serverKey, p.ca })
	pool, err := loadCertPool(p.ca)
	if err != nil {
		t.Fatal(err)
	}
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer noCert.CloseIdleConnections()
	if res, err := noCert.Get(o.tn.url + "/readyz"); err == nil {
		res.Body.Close()
		t.Fatalf("API /readyz without a client certificate = %s, want a refused handshake", res.Status)
	}
	wantStatus(t, map[string]int{o.metricsURL + "/healthz": 200, o.metricsURL + "/readyz": 200, o.metricsURL + "/metrics": 200})
}
