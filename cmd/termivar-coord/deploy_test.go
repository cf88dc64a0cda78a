// The sample monitoring in deploy/ (docs/observability.md). Goal: the
// alert rules and the Grafana dashboard parse, are complete, and name no
// metric a node does not export. Method: deploy/prometheus-rules.yml is
// decoded as YAML and deploy/grafana-dashboard.json as JSON; every
// metric name in their expressions is looked up in a live scrape of a
// node that ran the known workload plus the events that create the
// counters' first series (a limit rejection, a worker declared dead, a
// bad key). NB: the expressions' PromQL syntax is not checked here (no
// PromQL parser in the module); names and structure are.
package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/internal/apikey"
)

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// readRules parses the rules file and checks each rule's shape; it
// returns the expressions.
func readRules(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("prometheus-rules.yml: %v", err)
	}
	var exprs []string
	seen := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Annotations["summary"] == "" || seen[r.Alert] {
				t.Errorf("rule %q in %s: needs a unique alert name, an expr and a summary", r.Alert, g.Name)
			}
			if sev := r.Labels["severity"]; sev != "warning" && sev != "critical" {
				t.Errorf("rule %s: severity %q, want warning or critical", r.Alert, sev)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("rule %s: for %q: %v", r.Alert, r.For, err)
				}
			}
			seen[r.Alert] = true
			exprs = append(exprs, r.Expr)
		}
	}
	for _, want := range []string{"TermivarNoLeader", "TermivarQueueNearLimit", "TermivarResultBytesNearLimit", "TermivarWorkersDeclaredDead"} {
		if !seen[want] {
			t.Errorf("prometheus-rules.yml lacks %s", want)
		}
	}
	return exprs
}

type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// readDashboard parses the dashboard and returns every query in it.
func readDashboard(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard has title %q, uid %q, %d panels", d.Title, d.UID, len(d.Panels))
	}
	var exprs []string
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			exprs = append(exprs, q["query"].(string))
		}
	}
	return exprs
}

// metricRef matches the metric names the deploy files may use.
var metricRef = regexp.MustCompile(`\b(?:termivar|go|process)_[a-zA-Z0-9_]+\b`)

// missingMetrics returns the names in exprs that the scrape lacks
// (histogram series by their family's name).
func missingMetrics(exprs []string, fams map[string]*dto.MetricFamily) []string {
	var missing []string
	seen := map[string]bool{}
	for _, e := range exprs {
		for _, name := range metricRef.FindAllString(e, -1) {
			if seen[name] {
				continue
			}
			seen[name] = true
			if fams[name] != nil {
				continue
			}
			found := false
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				base, ok := strings.CutSuffix(name, suf)
				found = found || (ok && fams[base] != nil && fams[base].GetType() == dto.MetricType_HISTOGRAM)
			}
			if !found {
				missing = append(missing, name)
			}
		}
	}
	sort.Strings(missing)
	return missing
}

func TestDeploy_RulesAndDashboardUseLiveMetrics(t *testing.T) {
	t.Parallel()
	exprs := append(readRules(t), readDashboard(t)...)
	o := startObsNode(t, func(f *serveFlags) {
		f.limits.MaxQueuedTasks = 8
		f.limits.HeartbeatTimeoutSecs = 3
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := o.client(t)
	runKnownWorkload(t, ctx, cl)
	var more []*pb.NewTask
	for _, id := range []string{"h", "i", "j", "k", "l", "m"} {
		more = append(more, &pb.NewTask{TaskId: id, ScanId: "s3", TargetRef: "x"})
	}
	if _, err := cl.Enqueue(ctx, &pb.EnqueueRequest{Tasks: more}); err == nil {
		t.Fatal("enqueue beyond --max-queued-tasks succeeded")
	}
	unknown, err := apikey.Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	bad, err := client.New(client.Config{ServerURL: o.tn.url, Key: unknown.Key, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_, _ = bad.Status(ctx, &pb.StatusRequest{})
	// w1 holds a lease and stops heartbeating: declared dead within 3 s.
	var fams map[string]*dto.MetricFamily
	waitCond(t, "a worker declared dead", func() bool {
		fams = scrape(t, o.metricsURL)
		_, ok := sample(fams, "termivar_recovery_total", "tenant=default,outcome=workers_dead")
		return ok
	})
	if missing := missingMetrics(exprs, fams); len(missing) > 0 {
		t.Errorf("deploy/ references metrics the node does not export: %v", missing)
	}
	if len(metricRef.FindAllString(strings.Join(exprs, " "), -1)) < 20 {
		t.Error("deploy/ references suspiciously few metrics")
	}
}
