// The web dashboard in a real browser (docs/observability.md,
// "Dashboard"). Goal: what a user sees at / of the API listener is the
// node's state, live, and the page's actions obey the key's role. Method:
// an in-process `serve` node; headless Chromium (Debian's chromium, driven
// by github.com/chromedp/chromedp) opens the page and signs in with a
// producer key; a worker agent (a shell command per task) then works a
// 30-task scan with one target that always fails with a message on
// stderr, and two tasks that run until cancelled. The test asserts the
// scan's progress bar advances through intermediate values to the end,
// the worker appears, the failure's reason (the command's exit status and
// stderr) is shown, a retry and a cancel from the page work with the
// producer key and is refused with a worker key (the
// buttons are hidden, and the page's own call is refused by the server),
// the page fits a phone's width, and nothing violates the page's
// Content-Security-Policy. Screenshots at desktop (1280x800) and phone
// (390x844) width are saved under the test's temp dir (and under
// $TERMIVAR_SCREENSHOT_DIR when set).
//
// The test skips only when no browser binary exists; with
// TERMIVAR_REQUIRE_BROWSER=1 (set by .ci/run) it fails instead.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/termivar/distributed/agent"
	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// browserPath returns the Chromium binary, or skips (fails under
// TERMIVAR_REQUIRE_BROWSER=1) when there is none.
func browserPath(t *testing.T) string {
	t.Helper()
	path, missing := findBrowser(os.Stat, exec.LookPath)
	return requireOrSkip(t, "TERMIVAR_REQUIRE_BROWSER", path, missing)
}

// fakeT records what requireOrSkip asked for; Fatal and Skip stop the
// caller as the real ones do (by panicking, recovered by the test).
type fakeT struct{ failed, skipped bool }

func (f *fakeT) Helper()      {}
func (f *fakeT) Fatal(...any) { f.failed = true; panic("fatal") }
func (f *fakeT) Skip(...any)  { f.skipped = true; panic("skip") }

// findBrowser returns /usr/bin/chromium or chromium on PATH, or why there
// is none.
func findBrowser(stat func(string) (os.FileInfo, error), lookPath func(string) (string, error)) (path, missing string) {
	if _, err := stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium", ""
	}
	if p, err := lookPath("chromium"); err == nil {
		return p, ""
	}
	return "", "no browser: /usr/bin/chromium is missing (apt-get install -y chromium; .ci/run installs it)"
}

// TestBrowser_RequiredNeverSkips: without a browser the dashboard test
// skips, except under TERMIVAR_REQUIRE_BROWSER=1, where it fails.
func TestBrowser_RequiredNeverSkips(t *testing.T) {
	none := func(string) (os.FileInfo, error) { return nil, os.ErrNotExist }
	notOnPath := func(string) (string, error) { return "", exec.ErrNotFound }
	if p, missing := findBrowser(none, notOnPath); p != "" || !strings.Contains(missing, "apt-get install -y chromium") {
		t.Fatalf("findBrowser without a browser = %q, %q", p, missing)
	}
	if p, missing := findBrowser(none, func(string) (string, error) { return "/opt/chromium", nil }); p != "/opt/chromium" || missing != "" {
		t.Fatalf("findBrowser with chromium on PATH = %q, %q", p, missing)
	}
	path, missing := findBrowser(none, notOnPath)
	for _, require := range []string{"", "1"} {
		t.Setenv("TERMIVAR_REQUIRE_BROWSER", require)
		ft := &fakeT{}
		func() {
			defer func() { _ = recover() }()
			requireOrSkip(ft, "TERMIVAR_REQUIRE_BROWSER", path, missing)
		}()
		if ft.failed != (require == "1") || ft.skipped != (require == "") {
			t.Fatalf("TERMIVAR_REQUIRE_BROWSER=%q and no browser: failed %v, skipped %v", require, ft.failed, ft.skipped)
		}
	}
	ft := &fakeT{}
	if got := requireOrSkip(ft, "TERMIVAR_REQUIRE_BROWSER", "/usr/bin/chromium", ""); got != "/usr/bin/chromium" || ft.failed || ft.skipped {
		t.Fatalf("requireOrSkip with a browser = %q, %+v", got, ft)
	}
}

// newBrowser starts headless Chromium with a fresh profile and returns a
// tab's context; it is closed when the test ends.
func newBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "profile")),
		chromedp.WindowSize(1280, 800),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		acancel()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// consoleLog collects the page's console messages, exceptions and browser
// log entries (CSP violations are reported there).
type consoleLog struct {
	mu   sync.Mutex
	msgs []string
}

func (c *consoleLog) watch(ctx context.Context) {
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			c.mu.Lock()
			c.msgs = append(c.msgs, m.String())
			c.mu.Unlock()
		}
	}()
}

func (c *consoleLog) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.msgs...)
}

// browserWorkerScript is the agent's command: "fail" targets fail with a
// message on stderr, "hold" targets run until cancelled, others take a
// moment and print a result.
const browserWorkerScript = `case "$TERMIVAR_TARGET" in
fail*) echo "probe refused by target: connection reset" >&2; exit 3;;
hold*) exec sleep 300;;
*) sleep 0.3; echo "ok $TERMIVAR_TARGET";;
esac`

func TestBrowser_Dashboard(t *testing.T) {
	path := browserPath(t)
	t.Parallel()
	// One retry: the failing target is final after its second attempt.
	o := startObsNode(t, func(f *serveFlags) { f.limits.MaxRetries = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin := o.client(t)
	producerKey := createKey(t, ctx, admin, "producer")
	workerKey := createKey(t, ctx, admin, "worker")
	const scanSize = 30
	enqueueBrowserWorkload(t, ctx, admin, scanSize)

	tab := newBrowser(t, path)
	var console consoleLog
	console.watch(tab)
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, scancel := context.WithTimeout(tab, 30*time.Second)
		defer scancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Fatalf("%s: %v\nconsole: %s", what, err, strings.Join(console.all(), "\n"))
		}
	}
	evalBool := func(what, expr string) bool {
		t.Helper()
		v, err := chromedp.Run(tab, chromedp.Evaluate[bool](expr))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}

	// Sign in with the producer key; the scan shows, nothing done yet.
	signIn(t, step, o.tn.url, producerKey)
	if evalBool("key in the URL", fmt.Sprintf("location.href.includes(%q)", producerKey)) {
		t.Fatal("the key is in the page's URL")
	}
	step("scan card at 0",
		chromedp.WaitVisible(chromedp.CSS(`[data-scan="web"][data-done="0"]`)),
		// Every progress value the page renders is recorded from here on.
		chromedp.Evaluate[chromedp.Void](`window.__seen = []; new MutationObserver(() => {
			const c = document.querySelector('[data-scan="web"]');
			if (c && window.__seen[window.__seen.length - 1] !== c.dataset.done) window.__seen.push(c.dataset.done);
		}).observe(document.getElementById('scans'), {subtree: true, childList: true, attributes: true})`))

	// A worker starts: it appears, and the scan advances to its end.
	startBrowserAgent(t, o.tn.url, workerKey)
	step("worker appears", chromedp.WaitVisible(chromedp.CSS(`#workers tr[data-worker="w-browser"]`)))
	step("scan finishes", chromedp.Poll[chromedp.Void](fmt.Sprintf(
		`document.querySelector('[data-scan="web"]')?.dataset.done === "%d"`, scanSize), chromedp.WithPollingTimeout(40*time.Second)))
	seen, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`window.__seen`))
	if err != nil {
		t.Fatal(err)
	}
	if !strictlyRising(seen) || len(seen) < 3 {
		t.Fatalf("progress values rendered = %v, want at least 3 rising values ending at %d", seen, scanSize)
	}
	t.Logf("progress values rendered: %v", seen)

	// The failure and its reason.
	step("failure reason shown", chromedp.Poll[chromedp.Void](
		`document.querySelector('#failures tr[data-task="web-fail"] td.reason')?.textContent.includes("probe refused by target")`,
		chromedp.WithPollingTimeout(20*time.Second)))

	// Retry the failed task from the page: it is re-run (and fails again).
	retry := chromedp.CSS(`#failures button[data-action="retry:web-fail"]`)
	step("retry web-fail", chromedp.WaitVisible(retry), chromedp.Click(retry),
		chromedp.Poll[chromedp.Void](`document.getElementById('message').textContent.includes("Re-queued task web-fail")`))
	if r, err := admin.GetTask(ctx, &pb.GetTaskRequest{TaskId: "web-fail"}); err != nil || r.GetTask().GetReruns() != 1 {
		t.Fatalf("web-fail after the page's retry = %v, %v; want 1 re-run", r, err)
	}

	// Cancel hold-1 from the page (two clicks: arm, confirm).
	btn := chromedp.CSS(`#leases button[data-action="task:hold-1"]`)
	step("cancel hold-1", chromedp.WaitVisible(btn), chromedp.Click(btn), chromedp.WaitVisible(chromedp.CSS(`#leases button.confirm[data-action="task:hold-1"]`)),
		chromedp.Click(btn),
		chromedp.Poll[chromedp.Void](`document.getElementById('message').textContent.includes("Cancelled task hold-1")`),
		chromedp.Poll[chromedp.Void](`!document.querySelector('#leases tr[data-task="hold-1"]')`))
	if st := taskStatus(t, ctx, admin, "hold-1"); st != "cancelled" {
		t.Fatalf("hold-1 after the page's cancel is %s", st)
	}
	// Pause scan "hold" (hold-2 still runs, so the scan has work left) and
	// resume it: the page shows each new state without a reload.
	pause := chromedp.CSS(`[data-scan="hold"] button[data-action="pause:hold"]`)
	step("pause hold", chromedp.WaitVisible(pause), chromedp.Click(pause),
		chromedp.Poll[chromedp.Void](`document.getElementById('message').textContent.includes("Paused scan hold")`),
		chromedp.Poll[chromedp.Void](`document.querySelector('[data-scan="hold"] button[data-action="pause:hold"]')?.textContent === "Resume"`),
		chromedp.Poll[chromedp.Void](`document.querySelector('[data-scan="hold"] .state')?.textContent.includes("(paused)")`))
	if !scanPaused(t, ctx, admin, "hold") {
		t.Fatal("scan hold is not paused after the page's Pause")
	}
	step("resume hold", chromedp.Click(pause),
		chromedp.Poll[chromedp.Void](`document.getElementById('message').textContent.includes("Resumed scan hold")`),
		chromedp.Poll[chromedp.Void](`document.querySelector('[data-scan="hold"] button[data-action="pause:hold"]')?.textContent === "Pause"`),
		chromedp.Poll[chromedp.Void](`!document.querySelector('[data-scan="hold"] .state')?.textContent.includes("(paused)")`))
	if scanPaused(t, ctx, admin, "hold") {
		t.Fatal("scan hold is still paused after the page's Resume")
	}
	screenshots(t, step, tab, "producer")

	// Sign out; a worker key sees the dashboard read-only, and the page's
	// own cancel call is refused by the server.
	step("sign out", chromedp.Click(chromedp.CSS(`#signout`)), chromedp.WaitVisible(chromedp.CSS(`#key`)))
	if evalBool("session storage after sign-out", `sessionStorage.length !== 0`) {
		t.Fatal("the key stays in session storage after sign-out")
	}
	signIn(t, step, o.tn.url, workerKey)
	step("read-only view",
		chromedp.Poll[chromedp.Void](`document.getElementById('who').textContent.includes("worker key (read-only)")`),
		chromedp.WaitVisible(chromedp.CSS(`#leases tr[data-task="hold-2"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-scan="web"]`)))
	if evalBool("buttons for a worker key", `document.querySelectorAll('button[data-action]').length !== 0`) {
		t.Fatal("the page offers actions to a worker key")
	}
	step("worker's cancel refused",
		chromedp.Evaluate[chromedp.Void](`termivarDashboard.cancelTask("hold-2")`),
		chromedp.Poll[chromedp.Void](`document.getElementById('message').textContent.includes("permission_denied")`))
	if st := taskStatus(t, ctx, admin, "hold-2"); st != "running" {
		t.Fatalf("hold-2 after the worker key's cancel is %s, want running", st)
	}
	screenshots(t, step, tab, "worker")

	for _, m := range console.all() {
		if strings.Contains(m, "Content Security Policy") || strings.Contains(m, "Refused to") {
			t.Errorf("CSP violation: %s", m)
		}
	}
}

type stepFunc func(what string, actions ...chromedp.Action[chromedp.Void])

func signIn(t *testing.T, step stepFunc, url, key string) {
	t.Helper()
	step("sign in", chromedp.Navigate(url+"/"), chromedp.WaitVisible(chromedp.CSS(`#key`)),
		chromedp.SendKeys(chromedp.CSS(`#key`), key), chromedp.Click(chromedp.CSS(`#signin-button`)),
		chromedp.WaitVisible(chromedp.CSS(`#board`)), chromedp.WaitVisible(chromedp.CSS(`#live`)))
}

// screenshots saves the page at desktop and phone width, and checks that
// nothing is wider than the phone's screen.
func screenshots(t *testing.T, step stepFunc, tab context.Context, name string) {
	t.Helper()
	dirs := []string{t.TempDir()}
	if d := os.Getenv("TERMIVAR_SCREENSHOT_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	for _, vp := range []struct {
		label         string
		width, height int64
		mobile        bool
	}{{"desktop", 1280, 800, false}, {"phone", 390, 844, true}} {
		opts := []chromedp.EmulateViewportOption{chromedp.EmulateScale(1)}
		if vp.mobile {
			opts = append(opts, chromedp.EmulateMobile, chromedp.EmulateTouch)
		}
		step("viewport "+vp.label, chromedp.EmulateViewport(vp.width, vp.height, opts...),
			chromedp.Poll[chromedp.Void](fmt.Sprintf(`window.innerWidth === %d`, vp.width)))
		// Nothing is wider than the screen: not the page, and no table
		// needs sideways scrolling inside its panel.
		overflow, err := chromedp.Run(tab, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth ||
			[...document.querySelectorAll('.table-wrap')].some((w) => w.scrollWidth > w.clientWidth + 1)`))
		if err != nil || overflow {
			t.Fatalf("%s: the page or a table is wider than the %d px viewport (%v)", vp.label, vp.width, err)
		}
		png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dirs {
			p := filepath.Join(d, "dashboard-"+name+"-"+vp.label+".png")
			if err := os.WriteFile(p, png, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("screenshot: %s (%d bytes)", p, len(png))
		}
	}
	step("viewport reset", chromedp.EmulateViewport(1280, 800))
}

func strictlyRising(vs []string) bool {
	prev := -1
	for _, v := range vs {
		var n int
		if _, err := fmt.Sscan(v, &n); err != nil || n <= prev {
			return false
		}
		prev = n
	}
	return true
}

func createKey(t *testing.T, ctx context.Context, c *client.Client, role string) string {
	t.Helper()
	r, err := c.CreateKey(ctx, &pb.CreateKeyRequest{Role: role})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetKey()
}

// enqueueBrowserWorkload enqueues scan "web" (n tasks, web-fail among
// them) and scan "hold" (two high-priority tasks that run until
// cancelled).
func enqueueBrowserWorkload(t *testing.T, ctx context.Context, c *client.Client, n int) {
	t.Helper()
	tasks := []*pb.NewTask{
		{TaskId: "hold-1", ScanId: "hold", TargetRef: "hold-1", Priority: "high"},
		{TaskId: "hold-2", ScanId: "hold", TargetRef: "hold-2", Priority: "high"},
		{TaskId: "web-fail", ScanId: "web", TargetRef: "fail.example"},
	}
	for i := 1; len(tasks) < n+2; i++ {
		tasks = append(tasks, &pb.NewTask{TaskId: fmt.Sprintf("web-%03d", i), ScanId: "web", TargetRef: fmt.Sprintf("host-%03d.example", i)})
	}
	if _, err := c.Enqueue(ctx, &pb.EnqueueRequest{Tasks: tasks}); err != nil {
		t.Fatal(err)
	}
}

// startBrowserAgent runs worker w-browser (4 slots) with
// browserWorkerScript until the test ends.
func startBrowserAgent(t *testing.T, url, key string) {
	t.Helper()
	c, err := client.New(client.Config{ServerURL: url, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{
		Client: c, WorkerID: "w-browser", Capacity: 4, PollWait: time.Second, Grace: 100 * time.Millisecond,
		LeaseTTL: 6 * time.Second, HeartbeatInterval: time.Second,
		Command:         []string{"sh", "-c", browserWorkerScript},
		UtilizationFunc: func() (uint32, uint32) { return 0, 0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(actx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		c.Close()
	})
}

func taskStatus(t *testing.T, ctx context.Context, c *client.Client, id string) string {
	t.Helper()
	r, err := c.GetTask(ctx, &pb.GetTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	return r.GetTask().GetStatus()
}

// scanPaused reports whether scan id is paused, read through the API.
func scanPaused(t *testing.T, ctx context.Context, c *client.Client, id string) bool {
	t.Helper()
	r, err := c.ListScans(ctx, &pb.ListScansRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range r.GetScans() {
		if s.GetScanId() == id {
			return s.GetPaused()
		}
	}
	t.Fatalf("scan %s not listed", id)
	return false
}
