package server

// Goal: the dashboard's API (Dashboard.Overview, Producer.CancelScan) and
// its static routes do what docs/observability.md ("Dashboard") says.
// Method: a real node behind the HTTP handler; a known workload (two
// scans, a worker, a lease, a task failed to exhaustion, a completion) is
// read back through Overview over the Connect JSON protocol the page uses,
// and each field is compared; the long-poll is woken by a write and times
// out without one; roles, bounds and bad input are refused and change
// nothing; the static routes are served without a key with the security
// headers, and hold no inline script or style.

import (
	"io"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
	"github.com/termivar/distributed/gen/termivar/v1/termivarv1connect"
)

func (b *testBundle) dashboard(key string) termivarv1connect.DashboardClient {
	return termivarv1connect.NewDashboardClient(b.srv.Client(), b.srv.URL, connect.WithInterceptors(authInterceptor{key}))
}

// dashWorkload runs: scan a (a1..a4) and scan b (b1); worker w1 (capacity
// 3); a1 completed with a result, a2 failed to exhaustion (4 attempts, each
// with a reason), a3 failed once with a reason and running again; a4 and
// b1 queued (b1 high priority).
func dashWorkload(t *testing.T, b *testBundle, w, p clients) {
	t.Helper()
	if _, err := w.worker.RegisterWorker(ctx, req(&pb.RegisterWorkerRequest{WorkerId: "w1", Capacity: 3})); err != nil {
		t.Fatal(err)
	}
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("a", "a1", "a2"))); err != nil {
		t.Fatal(err)
	}
	acq, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", MaxTasks: 1, Start: true}))
	if err != nil || len(acq.Msg.GetTasks()) != 1 {
		t.Fatalf("acquire = %v, %v", acq, err)
	}
	if _, err := w.worker.Complete(ctx, req(&pb.CompleteRequest{LeaseToken: acq.Msg.GetTasks()[0].GetLeaseToken(), Result: []byte("secret-result-a1")})); err != nil {
		t.Fatal(err)
	}
	for range 4 { // the default MaxRetries is 3: the fourth failure is final
		acq, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", MaxTasks: 1, Start: true}))
		if err != nil || len(acq.Msg.GetTasks()) != 1 || acq.Msg.GetTasks()[0].GetTaskId() != "a2" {
			t.Fatalf("acquire a2 = %v, %v", acq, err)
		}
		if _, err := w.worker.Fail(ctx, req(&pb.FailRequest{LeaseToken: acq.Msg.GetTasks()[0].GetLeaseToken(), Reason: "exit status 3: connection refused"})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("a", "a3"))); err != nil {
		t.Fatal(err)
	}
	// a3 fails once (requeued with its reason), then runs again.
	for i, reason := range []string{"exit status 1: flaky", ""} {
		acq, err := w.worker.Acquire(ctx, req(&pb.AcquireRequest{WorkerId: "w1", MaxTasks: 1, Start: true}))
		if err != nil || len(acq.Msg.GetTasks()) != 1 || acq.Msg.GetTasks()[0].GetTaskId() != "a3" {
			t.Fatalf("acquire a3 = %v, %v", acq, err)
		}
		if i == 0 {
			if _, err := w.worker.Fail(ctx, req(&pb.FailRequest{LeaseToken: acq.Msg.GetTasks()[0].GetLeaseToken(), Reason: reason})); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("a", "a4"))); err != nil {
		t.Fatal(err)
	}
	high := enqueueReq("b", "b1")
	high.Tasks[0].Priority = "high"
	if _, err := p.producer.Enqueue(ctx, req(high)); err != nil {
		t.Fatal(err)
	}
}

func TestDashboard_OverviewOfKnownWorkload(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	w := b.clients(b.createKey(t, "", "worker"))
	p := b.clients(b.createKey(t, "", "producer"))
	dashWorkload(t, b, w, p)

	// The page's call: Connect JSON with a plain POST.
	raw := postJSON(t, b, "/termivar.v1.Dashboard/Overview", b.adminKey, `{}`, http.StatusOK)
	for _, secret := range []string{"secret-target", "secret-result", b.adminKey} {
		if strings.Contains(raw, secret) {
			t.Fatalf("overview JSON contains %q", secret)
		}
	}
	res, err := b.dashboard(b.adminKey).Overview(ctx, req(&pb.OverviewRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	v := res.Msg
	if v.GetRole() != "admin" || v.GetTenant() != "default" || v.GetRevision() == 0 || v.GetNowSecs() < v.GetLogicalTime() {
		t.Fatalf("header = role %q tenant %q rev %d now %d lt %d", v.GetRole(), v.GetTenant(), v.GetRevision(), v.GetNowSecs(), v.GetLogicalTime())
	}
	wantTotals := &pb.TaskCounts{Total: 5, Queued: 2, Running: 1, Completed: 1, Failed: 1}
	if got := v.GetTotals(); !sameCounts(got, wantTotals) {
		t.Fatalf("totals = %v, want %v", got, wantTotals)
	}
	if v.GetScansTotal() != 2 || len(v.GetScans()) != 2 {
		t.Fatalf("scans = %v (total %d)", v.GetScans(), v.GetScansTotal())
	}
	sa := scanByID(v, "a")
	if sa == nil || !sameCounts(sa.GetCounts(), &pb.TaskCounts{Total: 4, Queued: 1, Running: 1, Completed: 1, Failed: 1}) || sa.GetResults() != 1 ||
		sa.GetCompletedLastMinute() != 1 || sa.GetThroughputPerSec() <= 0 || sa.EtaSecs == nil || sa.GetState() != "running" ||
		sa.GetStartedAt() == 0 || sa.GetFinishedAt() != 0 {
		t.Fatalf("scan a = %v", sa)
	}
	wantQueue := "critical=0 high=1 normal=1 low=0"
	if got := queueString(v.GetQueue()); got != wantQueue {
		t.Fatalf("queue = %s, want %s", got, wantQueue)
	}
	if h := v.GetQueueHead(); len(h) != 2 || h[0].GetTaskId() != "b1" || h[1].GetTaskId() != "a4" {
		t.Fatalf("queue head = %v", h)
	}
	if ws := v.GetWorkers(); v.GetWorkersTotal() != 1 || len(ws) != 1 || ws[0].GetWorkerId() != "w1" || ws[0].GetDeclaredSlots() != 3 ||
		ws[0].GetEffectiveSlots() != 3 || ws[0].GetCurrentTasks() != 1 || ws[0].GetCompletedTasks() != 1 || ws[0].GetDead() || ws[0].GetLastHeartbeat() == 0 {
		t.Fatalf("workers = %v", ws)
	}
	if ls := v.GetLeases(); v.GetLeasesTotal() != 1 || len(ls) != 1 || ls[0].GetTaskId() != "a3" || ls[0].GetWorkerId() != "w1" ||
		ls[0].GetStatus() != "running" || ls[0].GetExpiresAt() <= v.GetNowSecs()-1 {
		t.Fatalf("leases = %v", ls)
	}
	// Failures: a2 for good, a3 retried (running again), each with the
	// reason of its newest attempt; a1 (completed) is not one.
	fails := map[string]*pb.FailureSummary{}
	for _, f := range v.GetFailures() {
		fails[f.GetTaskId()] = f
	}
	if v.GetFailuresTotal() != 2 || len(fails) != 2 {
		t.Fatalf("failures = %v (total %d)", v.GetFailures(), v.GetFailuresTotal())
	}
	if f := fails["a2"]; f.GetStatus() != "failed" || f.GetAttempt() != 4 || f.GetRetryCount() != 3 || f.GetOutcome() != "failed" ||
		f.GetReason() != "exit status 3: connection refused" || f.GetWorkerId() != "w1" || f.GetFailedAt() == 0 {
		t.Fatalf("failure a2 = %v", f)
	}
	if f := fails["a3"]; f.GetStatus() != "running" || f.GetAttempt() != 1 || f.GetReason() != "exit status 1: flaky" || f.GetOutcome() != "failed" {
		t.Fatalf("failure a3 = %v", f)
	}
	c := v.GetCluster()
	if c.GetRaftState() != "Leader" || c.GetTerm() == 0 || c.GetCommitIndex() == 0 || c.GetAppliedIndex() == 0 || c.GetLeaderId() != c.GetNodeId() || len(c.GetMembers()) != 1 {
		t.Fatalf("cluster = %v", c)
	}
	if v.GetResultRecords() != 1 || v.GetResultBytes() != uint64(len("secret-result-a1")) {
		t.Fatalf("results = %d records, %d bytes", v.GetResultRecords(), v.GetResultBytes())
	}
}

func sameCounts(a, b *pb.TaskCounts) bool {
	return a.GetTotal() == b.GetTotal() && a.GetQueued() == b.GetQueued() && a.GetLeased() == b.GetLeased() &&
		a.GetRunning() == b.GetRunning() && a.GetCompleted() == b.GetCompleted() && a.GetFailed() == b.GetFailed() &&
		a.GetCancelled() == b.GetCancelled() && a.GetExpired() == b.GetExpired()
}

func scanByID(v *pb.OverviewResponse, id string) *pb.ScanSummary {
	for _, s := range v.GetScans() {
		if s.GetScanId() == id {
			return s
		}
	}
	return nil
}

func queueString(q []*pb.PriorityQueue) string {
	var parts []string
	for _, p := range q {
		parts = append(parts, p.GetPriority()+"="+strconv.Itoa(int(p.GetQueued())))
	}
	return strings.Join(parts, " ")
}

// postJSON posts body to path with key and checks the status.
func postJSON(t *testing.T, b *testBundle, path, key, body string, status int) string {
	t.Helper()
	r, err := http.NewRequest(http.MethodPost, b.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := b.srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("POST %s = %d %s, want %d", path, resp.StatusCode, out, status)
	}
	return string(out)
}

// TestDashboard_LongPoll: Overview with after_revision answers at once when
// the revision differs, waits for a write otherwise (and answers with the
// new revision as soon as it is applied), and answers unchanged after
// wait_secs when nothing happens.
func TestDashboard_LongPoll(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := b.clients(b.createKey(t, "", "producer"))
	d := b.dashboard(b.createKey(t, "", "worker"))
	first, err := d.Overview(ctx, req(&pb.OverviewRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	rev := first.Msg.GetRevision()
	stale := rev - 1
	start := time.Now()
	if r, err := d.Overview(ctx, req(&pb.OverviewRequest{AfterRevision: &stale, WaitSecs: 20})); err != nil || r.Msg.GetRevision() != rev || time.Since(start) > 5*time.Second {
		t.Fatalf("overview after a stale revision = %v, %v after %v", r, err, time.Since(start))
	}
	type answer struct {
		v   *pb.OverviewResponse
		err error
		at  time.Duration
	}
	done := make(chan answer, 1)
	start = time.Now()
	go func() {
		r, err := d.Overview(ctx, req(&pb.OverviewRequest{AfterRevision: &rev, WaitSecs: 25}))
		if err != nil {
			done <- answer{err: err}
			return
		}
		done <- answer{v: r.Msg, at: time.Since(start)}
	}()
	waitUntil(t, "the long-poll to wait", func() bool { return time.Since(start) > 200*time.Millisecond })
	if _, err := p.producer.Enqueue(ctx, req(enqueueReq("s", "t1"))); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil || a.v.GetRevision() <= rev || a.v.GetTotals().GetQueued() != 1 || a.at > 10*time.Second {
		t.Fatalf("woken long-poll = %v, %v after %v", a.v, a.err, a.at)
	}
	now := a.v.GetRevision()
	start = time.Now()
	r, err := d.Overview(ctx, req(&pb.OverviewRequest{AfterRevision: &now, WaitSecs: 1}))
	if el := time.Since(start); err != nil || r.Msg.GetRevision() != now || el < time.Second || el > 8*time.Second {
		t.Fatalf("idle long-poll = %v, %v after %v", r, err, el)
	}
}

// TestDashboard_RolesAndBadInput: every role of the tenant reads its own
// tenant's overview and nothing else; a worker key cannot cancel; a missing
// or unknown key and a wait above the bound are refused; none of it
// changes the state.
func TestDashboard_RolesAndBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.createTenant(t, "other", nil, nil)
	wk := b.createKey(t, "", "worker")
	pk := b.createKey(t, "", "producer")
	ok := b.createKey(t, "other", "producer")
	dashWorkload(t, b, b.clients(wk), b.clients(pk))
	for key, role := range map[string]string{wk: "worker", pk: "producer", b.adminKey: "admin"} {
		r, err := b.dashboard(key).Overview(ctx, req(&pb.OverviewRequest{}))
		if err != nil || r.Msg.GetRole() != role || r.Msg.GetTotals().GetTotal() != 5 {
			t.Fatalf("overview with a %s key = %v, %v", role, r, err)
		}
	}
	r, err := b.dashboard(ok).Overview(ctx, req(&pb.OverviewRequest{}))
	if err != nil || r.Msg.GetTenant() != "other" || r.Msg.GetTotals().GetTotal() != 0 || len(r.Msg.GetWorkers()) != 0 {
		t.Fatalf("other tenant's overview = %v, %v", r, err)
	}
	before := b.state(t)
	_, err = b.clients(wk).producer.Cancel(ctx, req(&pb.CancelRequest{TaskId: "a4"}))
	mustCode(t, err, connect.CodePermissionDenied, "")
	_, err = b.clients(wk).producer.CancelScan(ctx, req(&pb.CancelScanRequest{ScanId: "a"}))
	mustCode(t, err, connect.CodePermissionDenied, "")
	_, err = b.dashboard(wk).Overview(ctx, req(&pb.OverviewRequest{WaitSecs: MaxDashboardWaitSecs + 1}))
	mustCode(t, err, connect.CodeInvalidArgument, "")
	_, err = b.dashboard("").Overview(ctx, req(&pb.OverviewRequest{}))
	mustCode(t, err, connect.CodeUnauthenticated, "")
	postJSON(t, b, "/termivar.v1.Dashboard/Overview", "", `{}`, http.StatusUnauthorized)
	b.assertUnchanged(t, before, "refused dashboard calls")
}

// TestServer_CancelScan cancels a scan's queued and running tasks, leaves
// its terminal ones, is harmless when repeated, and refuses an invalid or
// unknown scan ID without changing anything.
func TestServer_CancelScan(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	p := b.clients(b.createKey(t, "", "producer"))
	dashWorkload(t, b, b.clients(b.createKey(t, "", "worker")), p)
	r, err := p.producer.CancelScan(ctx, req(&pb.CancelScanRequest{ScanId: "a"}))
	if err != nil || r.Msg.GetCancelled() != 2 || r.Msg.GetUnchanged() != 2 || r.Msg.GetRevision() == 0 {
		t.Fatalf("cancel scan = %v, %v", r, err)
	}
	for id, want := range map[string]string{"a1": "completed", "a2": "failed", "a3": "cancelled", "a4": "cancelled", "b1": "queued"} {
		g, err := p.producer.GetTask(ctx, req(&pb.GetTaskRequest{TaskId: id}))
		if err != nil || g.Msg.GetTask().GetStatus() != want {
			t.Fatalf("%s = %v, %v, want %s", id, g, err, want)
		}
	}
	again, err := p.producer.CancelScan(ctx, req(&pb.CancelScanRequest{ScanId: "a"}))
	if err != nil || again.Msg.GetCancelled() != 0 || again.Msg.GetUnchanged() != 4 {
		t.Fatalf("repeated cancel scan = %v, %v", again, err)
	}
	before := b.state(t)
	for _, bad := range []string{"", "bad scan", strings.Repeat("x", 300)} {
		_, err := p.producer.CancelScan(ctx, req(&pb.CancelScanRequest{ScanId: bad}))
		mustCode(t, err, connect.CodeInvalidArgument, "")
	}
	_, err = p.producer.CancelScan(ctx, req(&pb.CancelScanRequest{ScanId: "nosuchscan"}))
	mustCode(t, err, connect.CodeNotFound, KindScanNotFound)
	b.assertUnchanged(t, before, "refused CancelScan")
}

// TestUI_StaticRoutes: the page and its assets are served without a key,
// with the security headers, no inline script or style and nothing from
// another origin; other paths and methods are refused.
func TestUI_StaticRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cases := []struct{ path, ctype string }{
		{"/", "text/html"}, {"/ui/app.js", "text/javascript"}, {"/ui/app.css", "text/css"}, {"/ui/favicon.svg", "image/svg+xml"},
	}
	for _, c := range cases {
		resp, err := b.srv.Client().Get(b.srv.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h := resp.Header
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), c.ctype) {
			t.Fatalf("GET %s = %d %q", c.path, resp.StatusCode, h.Get("Content-Type"))
		}
		if h.Get("Content-Security-Policy") != UIContentSecurityPolicy || h.Get("X-Content-Type-Options") != "nosniff" ||
			h.Get("X-Frame-Options") != "DENY" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Fatalf("GET %s headers = %v", c.path, h)
		}
		assertNoInlineOrForeign(t, c.path, string(body))
	}
	for _, csp := range []string{"default-src 'self'", "frame-ancestors 'none'", "form-action 'none'", "script-src 'self';"} {
		if !strings.Contains(UIContentSecurityPolicy, csp) {
			t.Fatalf("CSP lacks %q", csp)
		}
	}
	if strings.Contains(UIContentSecurityPolicy, "unsafe") {
		t.Fatalf("CSP allows something unsafe: %s", UIContentSecurityPolicy)
	}
	for path, want := range map[string]int{"/nope": 404, "/ui/": 404, "/ui/missing.js": 404, "/index.html": 404} {
		resp, err := b.srv.Client().Get(b.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("GET %s = %d, want %d", path, resp.StatusCode, want)
		}
	}
	resp, err := b.srv.Client().Post(b.srv.URL+"/", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST / = %d", resp.StatusCode)
	}
}

var (
	inlineScript = regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>\s*[^<\s]`)
	scriptTag    = regexp.MustCompile(`(?i)<script[^>]*>`)
	styleAttr    = regexp.MustCompile(`(?i)\sstyle\s*=|<style|\son[a-z]+\s*=|javascript:|innerHTML|insertAdjacentHTML|eval\(|new Function`)
	foreignURL   = regexp.MustCompile(`(?i)(?:src|href)\s*=\s*"(?:https?:)?//`)
)

func assertNoInlineOrForeign(t *testing.T, path, body string) {
	t.Helper()
	for _, tag := range scriptTag.FindAllString(body, -1) {
		if !strings.Contains(tag, ` src="/ui/`) {
			t.Fatalf("%s has a script tag without a local src: %q", path, tag)
		}
	}
	for name, re := range map[string]*regexp.Regexp{"inline script": inlineScript,
		"inline style, handler or HTML injection": styleAttr, "another origin": foreignURL} {
		if m := re.FindString(body); m != "" {
			t.Fatalf("%s has %s: %q", path, name, m)
		}
	}
}

// TestKeepFirst: the bounded head of the queue equals the first
// overviewQueueHead of a full sort, for random inputs in random order.
func TestKeepFirst(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		n := rng.IntN(3 * overviewQueueHead)
		var all, head []queuedRef
		for i := range n {
			r := queuedRef{prio: distributed.TaskPriority(rng.IntN(4)), createdAt: uint64(rng.IntN(5)), taskID: "t" + strconv.Itoa(i)}
			all = append(all, r)
			head = keepFirst(head, r)
		}
		slices.SortFunc(all, queuedBefore)
		want := all[:min(len(all), overviewQueueHead)]
		if !slices.Equal(head, want) {
			t.Fatalf("round %d (%d tasks): keepFirst = %v, want %v", round, n, head, want)
		}
	}
}

// TestDashboard_ShowsPausedScan: a scan paused with Producer.UpdateScan
// (the page's Pause button) is paused in the overview; the other is not;
// resumed, it is not.
func TestDashboard_ShowsPausedScan(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	w := b.clients(b.createKey(t, "", "worker"))
	p := b.clients(b.createKey(t, "", "producer"))
	dashWorkload(t, b, w, p)
	paused := func() map[string]bool {
		t.Helper()
		res, err := b.dashboard(b.adminKey).Overview(ctx, req(&pb.OverviewRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, s := range res.Msg.GetScans() {
			out[s.GetScanId()] = s.GetPaused()
		}
		return out
	}
	for _, want := range []bool{true, false} {
		if _, err := p.producer.UpdateScan(ctx, req(&pb.UpdateScanRequest{ScanId: "b", Paused: &want})); err != nil {
			t.Fatal(err)
		}
		if got := paused(); got["b"] != want || got["a"] {
			t.Fatalf("paused after UpdateScan(b, %v) = %v", want, got)
		}
	}
}
