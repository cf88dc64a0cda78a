package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"
	"unicode/utf8"

	"github.com/schollz/progressbar/v3"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// progressJSON is one line of watch --json. stall explains why nothing
// moved for --stall-after, or says the result store is full (absent
// otherwise); eta_secs is absent while nothing moves; not_admitted is the
// part of the producer's declared total not enqueued yet (flow control:
// the tenant's window is full), absent when 0.
type progressJSON struct {
	ScanID    string `json:"scan_id"`
	Total     uint32 `json:"total"`
	Queued    uint32 `json:"queued"`
	Leased    uint32 `json:"leased"`
	Running   uint32 `json:"running"`
	Completed uint32 `json:"completed"`
	Failed    uint32 `json:"failed"`
	Cancelled uint32 `json:"cancelled"`
	Expired   uint32 `json:"expired"`
	Results   uint32 `json:"results"`
	// NotAdmitted: ScanProgressResponse.pending.
	NotAdmitted uint64   `json:"not_admitted,omitempty"`
	Done        bool     `json:"done"`
	Elapsed     float64  `json:"elapsed_secs"`
	ETA         *float64 `json:"eta_secs,omitempty"`
	Stall       string   `json:"stall,omitempty"`
	// Reruns counts re-runs of the scan's tasks (retry; contract Part F).
	Reruns uint32 `json:"reruns,omitempty"`
	// Scheduling (contract Part F): unroutable counts queued tasks whose
	// required tags no live worker declared.
	Scheduled   uint32 `json:"scheduled"`
	Paused      bool   `json:"paused,omitempty"`
	MaxInFlight uint32 `json:"max_in_flight,omitempty"`
	Unroutable  uint32 `json:"unroutable"`
	LiveWorkers uint32 `json:"live_workers"`
}

// scanFailedError: the watched scan ended with failed or expired tasks
// (exit code exitScanFailed).
type scanFailedError struct {
	scan            string
	failed, expired uint32
}

func (e scanFailedError) Error() string {
	return fmt.Sprintf("scan %s ended with %d failed and %d expired tasks", e.scan, e.failed, e.expired)
}

func terminalCount(p *pb.ScanProgressResponse) uint32 {
	return p.GetCompleted() + p.GetFailed() + p.GetCancelled() + p.GetExpired()
}

// scanDone reports whether every task of a non-empty scan is terminal and
// every declared target admitted.
func scanDone(p *pb.ScanProgressResponse) bool {
	return p.GetTotal() > 0 && terminalCount(p) >= p.GetTotal() && notAdmitted(p) == 0
}

// notAdmitted is the part of the scan's declared total not enqueued yet
// (the node counts every task ever admitted, purged ones too).
func notAdmitted(p *pb.ScanProgressResponse) uint64 { return p.GetPending() }

// describeProgress is the bar's short label: counts per status, the
// terminal ones other than completed only when present (the bar itself
// shows terminal/total).
func describeProgress(p *pb.ScanProgressResponse) string {
	s := fmt.Sprintf("queued %3d running %3d", p.GetQueued(), p.GetLeased()+p.GetRunning())
	if n := p.GetFailed(); n > 0 {
		s += fmt.Sprintf(" failed %d", n)
	}
	if n := p.GetCancelled(); n > 0 {
		s += fmt.Sprintf(" cancelled %d", n)
	}
	if n := p.GetExpired(); n > 0 {
		s += fmt.Sprintf(" expired %d", n)
	}
	if n := p.GetReruns(); n > 0 {
		s += fmt.Sprintf(" re-runs %d", n)
	}
	if n := notAdmitted(p); n > 0 {
		s += fmt.Sprintf(" not yet admitted %d", n)
	}
	return s + describeScheduling(p) // cmd_schedule.go
}

// explainStall says what a scan that stopped moving waits for, from the
// facts ScanProgress read in the same state: the tenant's result store is
// full (completions are rejected), queued tasks and no live worker or no
// free slot, or only leased tasks left, whose workers must complete them
// or let the leases expire; or every admitted task ended while declared
// targets are not admitted yet (the producer stopped). "" when none of
// these holds.
func explainStall(p *pb.ScanProgressResponse) string {
	open := p.GetTotal() - min(p.GetTotal(), terminalCount(p))
	leases := p.GetLeased() + p.GetRunning()
	if full := storeFull(p); full != "" {
		return full
	}
	if open == 0 {
		if n := notAdmitted(p); n > 0 {
			return fmt.Sprintf("every admitted task ended and %d declared targets are not admitted: is the enqueue still running? (re-run it to store the rest)", n)
		}
		return ""
	}
	if why := schedulingStall(p); why != "" { // cmd_schedule.go
		return why
	}
	switch {
	case p.GetQueued() > 0 && p.GetLiveWorkers() == 0:
		return fmt.Sprintf("%d queued tasks and no live worker: start one with termivar-coord worker", p.GetQueued())
	case p.GetQueued() > 0 && p.GetFreeSlots() == 0:
		return fmt.Sprintf("no worker with free slots (%d live workers, every slot taken; %d queued tasks)", p.GetLiveWorkers(), p.GetQueued())
	case p.GetQueued() == 0 && leases > 0 && p.GetNextLeaseExpiry() > 0:
		left := time.Duration(int64(p.GetNextLeaseExpiry())-int64(p.GetNowSecs())) * time.Second
		if left <= 0 {
			return fmt.Sprintf("waiting for %d leases: the first has expired and is recovered on the node's next tick", leases)
		}
		return fmt.Sprintf("waiting for %d leases to complete or expire (the first expires in %s)", leases, left)
	}
	return ""
}

// storeFull says the tenant's result store is full while the scan has
// tasks left: every completion is rejected until results are deleted or
// the limit is raised. "" otherwise.
func storeFull(p *pb.ScanProgressResponse) string {
	if terminalCount(p) >= p.GetTotal() {
		return ""
	}
	switch {
	case p.GetMaxResults() > 0 && p.GetTenantResults() >= p.GetMaxResults():
		return fmt.Sprintf("result store full (%d of %d results): raise --max-results or delete scans", p.GetTenantResults(), p.GetMaxResults())
	case p.GetMaxResultTotalBytes() > 0 && p.GetTenantResultBytes() >= p.GetMaxResultTotalBytes():
		return fmt.Sprintf("result store full (%s of %s): raise --max-total-result-bytes or delete scans",
			byteSize(p.GetTenantResultBytes()), byteSize(p.GetMaxResultTotalBytes()))
	}
	return ""
}

// watchState follows a watched scan's progress over polls: when it last
// moved, and its rate since the watch began.
type watchState struct {
	start, moved time.Time
	startDone    uint32
	last         *pb.ScanProgressResponse
}

// observe records a poll at now.
func (w *watchState) observe(p *pb.ScanProgressResponse, now time.Time) {
	if w.last == nil {
		w.start, w.moved, w.startDone = now, now, terminalCount(p)
	} else if !sameProgress(w.last, p) {
		w.moved = now
	}
	w.last = p
}

// eta estimates the time left from the rate since the watch began; ok is
// false while nothing has finished since then or nothing moved for
// stallAfter (a stalled scan has no honest ETA).
func (w *watchState) eta(now time.Time, stallAfter time.Duration) (time.Duration, bool) {
	p := w.last
	done := terminalCount(p)
	all := uint64(p.GetTotal()) + notAdmitted(p)
	if done <= w.startDone || now.Sub(w.moved) >= stallAfter || uint64(done) >= all {
		return 0, false
	}
	rate := float64(done-w.startDone) / now.Sub(w.start).Seconds()
	return time.Duration(float64(all-uint64(done)) / rate * float64(time.Second)), true
}

// stall returns the explanation of a scan that did not move for
// stallAfter, or "". A full result store is reported at once: the scan
// may still move (rejected completions end as failures once their leases
// expire and their retries run out), but no task of it can complete.
func (w *watchState) stall(now time.Time, stallAfter time.Duration) string {
	if full := storeFull(w.last); full != "" {
		return full
	}
	if now.Sub(w.moved) < stallAfter {
		return ""
	}
	if why := explainStall(w.last); why != "" {
		return why
	}
	return "no progress for " + now.Sub(w.moved).Round(time.Second).String()
}

func runWatch(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommandNamed("watch"), &g, true)
	scan := fs.String("scan", "", "scan ID (required)")
	interval := fs.Duration("interval", 500*time.Millisecond, "polling interval")
	stallAfter := fs.Duration("stall-after", 5*time.Second, "explain the wait when nothing moved for this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *scan == "" || fs.NArg() > 0 {
		return usagef("usage: termivar-coord watch --scan S")
	}
	if *interval < 50*time.Millisecond {
		return usagef("--interval must be at least 50ms")
	}
	if *stallAfter <= 0 {
		return usagef("--stall-after must be positive")
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	return watchScan(ctx, c, watchOptions{scan: *scan, interval: *interval, stallAfter: *stallAfter, json: g.json}, env.stdout)
}

// watchOptions configure watchScan.
type watchOptions struct {
	scan                 string
	interval, stallAfter time.Duration
	json                 bool
}

// watchScan polls a scan until it is terminal, drawing a progress bar (or
// printing a JSON line per change) on w. It returns a scanFailedError when
// the scan ended with failed or expired tasks.
func watchScan(ctx context.Context, c *client.Client, o watchOptions, w io.Writer) error {
	var ws watchState
	var bar *progressbar.ProgressBar
	t := time.NewTicker(o.interval)
	defer t.Stop()
	lastStall := ""
	for {
		p, err := c.ScanProgress(ctx, &pb.ScanProgressRequest{ScanId: o.scan})
		if err != nil {
			return err
		}
		if p.GetTotal() == 0 {
			return rejectedError{"scan " + o.scan + " has no tasks"}
		}
		now := time.Now()
		changed := ws.last == nil || !sameProgress(ws.last, p) || !sameScheduling(ws.last, p)
		ws.observe(p, now)
		done := scanDone(p)
		stall := ws.stall(now, o.stallAfter)
		eta, hasETA := ws.eta(now, o.stallAfter)
		if o.json {
			if changed || done || stall != lastStall {
				if err := writeJSON(w, progressLine(o.scan, p, ws, now, stall, eta, hasETA)); err != nil {
					return err
				}
			}
		} else {
			bar = drawBar(bar, w, p, stall, eta, hasETA)
		}
		lastStall = stall
		if done {
			return finishWatch(o, p, bar, w, now.Sub(ws.start))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// progressLine is the JSON line of one poll.
func progressLine(scan string, p *pb.ScanProgressResponse, ws watchState, now time.Time, stall string, eta time.Duration, hasETA bool) progressJSON {
	l := progressJSON{
		ScanID: scan, Total: p.GetTotal(), Queued: p.GetQueued(), Leased: p.GetLeased(), Running: p.GetRunning(),
		Completed: p.GetCompleted(), Failed: p.GetFailed(), Cancelled: p.GetCancelled(), Expired: p.GetExpired(),
		Results: p.GetResults(), NotAdmitted: notAdmitted(p), Done: scanDone(p), Elapsed: now.Sub(ws.start).Seconds(), Stall: stall, Reruns: p.GetReruns(),
		Scheduled: p.GetScheduled(), Paused: p.GetPaused(), MaxInFlight: p.GetMaxInFlight(),
		Unroutable: p.GetUnroutable(), LiveWorkers: p.GetLiveWorkers(),
	}
	if hasETA {
		secs := eta.Seconds()
		l.ETA = &secs
	}
	return l
}

// drawBar draws one poll on the progress bar (created on the first): the
// counts, then the ETA or the stall's explanation. The bar's own time
// prediction is off: it shows "ETA 0s" when nothing moves.
func drawBar(bar *progressbar.ProgressBar, w io.Writer, p *pb.ScanProgressResponse, stall string, eta time.Duration, hasETA bool) *progressbar.ProgressBar {
	if bar == nil {
		bar = progressbar.NewOptions64(int64(p.GetTotal()),
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetWidth(20),
			progressbar.OptionShowCount(),
			progressbar.OptionShowElapsedTimeOnFinish(),
			progressbar.OptionSetRenderBlankState(true),
			progressbar.OptionThrottle(0),
		)
	}
	desc := describeProgress(p)
	switch {
	case stall != "":
		desc += " | " + stall
	case hasETA:
		desc += " | ETA " + eta.Round(time.Second).String()
	}
	bar.ChangeMax64(int64(uint64(p.GetTotal()) + notAdmitted(p)))
	bar.Describe(desc)
	_ = bar.Set64(int64(terminalCount(p)))
	return bar
}

// finishWatch prints the summary of a terminal scan and returns its
// outcome: a scanFailedError when tasks failed or expired.
func finishWatch(o watchOptions, p *pb.ScanProgressResponse, bar *progressbar.ProgressBar, w io.Writer, took time.Duration) error {
	if !o.json {
		_ = bar.Finish()
		fmt.Fprintf(w, "\nscan %s done in %s: %d completed, %d failed, %d cancelled, %d expired, %d results\n",
			o.scan, took.Round(100*time.Millisecond), p.GetCompleted(), p.GetFailed(), p.GetCancelled(), p.GetExpired(), p.GetResults())
	}
	if p.GetFailed()+p.GetExpired() > 0 {
		return scanFailedError{scan: o.scan, failed: p.GetFailed(), expired: p.GetExpired()}
	}
	return nil
}

func sameProgress(a, b *pb.ScanProgressResponse) bool {
	return a.GetTotal() == b.GetTotal() && a.GetQueued() == b.GetQueued() && a.GetLeased() == b.GetLeased() &&
		a.GetRunning() == b.GetRunning() && a.GetCompleted() == b.GetCompleted() && a.GetFailed() == b.GetFailed() &&
		a.GetCancelled() == b.GetCancelled() && a.GetExpired() == b.GetExpired() && a.GetResults() == b.GetResults() &&
		a.GetDeclaredTotal() == b.GetDeclaredTotal() && a.GetPending() == b.GetPending()
}

// resultsUsage is the usage line of results.
const resultsUsage = "results --scan S [--json] [--follow [--completion-order] [--cursor C] [--delete-after-read]]"

// resultJSON is one line of results --json: the result as a string when it
// is UTF-8, else base64 in result_base64; cursor (with --follow) resumes
// after this result.
type resultJSON struct {
	Index        int    `json:"index"`
	TaskID       string `json:"task_id"`
	TargetRef    string `json:"target_ref"`
	Result       string `json:"result,omitempty"`
	ResultBase64 []byte `json:"result_base64,omitempty"`
	Cursor       string `json:"cursor,omitempty"`
}

func runResults(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommandNamed("results"), &g, true)
	scan := fs.String("scan", "", "scan ID (required)")
	follow := fs.Bool("follow", false, "stream results as tasks finish until the scan is terminal")
	completion := fs.Bool("completion-order", false, "with --follow: in completion order instead of enqueue order")
	cursor := fs.String("cursor", "", "with --follow: resume after the result that carried this cursor (--json prints it)")
	deleteAfterRead := fs.Bool("delete-after-read", false, "with --follow: purge each result's task once a later request acknowledged it (output synced first)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *scan == "" || fs.NArg() > 0 {
		return usagef("usage: termivar-coord " + resultsUsage)
	}
	if !*follow && (*completion || *cursor != "" || *deleteAfterRead) {
		return usagef("--completion-order, --cursor and --delete-after-read need --follow")
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	i := 0
	emit := func(r client.Result) error {
		i++
		return printResult(env.stdout, g.json, i, r)
	}
	if !*follow {
		return c.EachResult(ctx, *scan, emit)
	}
	last := *cursor
	opts := client.FollowOptions{ScanID: *scan, Cursor: *cursor, CompletionOrder: *completion,
		DeleteAfterRead: *deleteAfterRead, AckFunc: func() error { return syncOutput(env.stdout) }}
	err = c.Follow(ctx, opts, func(r client.Result) error {
		if err := emit(r); err != nil {
			return err
		}
		last = r.Cursor
		return nil
	})
	if err != nil && last != "" {
		fmt.Fprintf(env.stderr, "termivar-coord results: stopped after %d results; resume with --cursor %s\n", i, last)
	}
	return err
}

// syncOutput flushes results to stable storage before a follow
// acknowledges them (--delete-after-read purges what it acknowledged):
// a regular file is synced; a pipe or terminal has nothing to sync.
func syncOutput(w io.Writer) error {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil
	}
	return f.Sync()
}

// printResult writes one result: raw bytes with a final newline, or a JSON
// line.
func printResult(w io.Writer, asJSON bool, index int, res client.Result) error {
	if asJSON {
		r := resultJSON{Index: index, TaskID: res.TaskID, TargetRef: res.TargetRef, Cursor: res.Cursor}
		if utf8.Valid(res.Result) {
			r.Result = string(res.Result)
		} else {
			r.ResultBase64 = res.Result
		}
		return writeJSON(w, r)
	}
	if _, err := w.Write(res.Result); err != nil {
		return err
	}
	if len(res.Result) > 0 && res.Result[len(res.Result)-1] != '\n' {
		_, err := io.WriteString(w, "\n")
		return err
	}
	return nil
}
