package main

import (
	"context"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/schollz/progressbar/v3"

	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// progressJSON is one line of watch --json.
type progressJSON struct {
	ScanID    string  `json:"scan_id"`
	Total     uint32  `json:"total"`
	Queued    uint32  `json:"queued"`
	Leased    uint32  `json:"leased"`
	Running   uint32  `json:"running"`
	Completed uint32  `json:"completed"`
	Failed    uint32  `json:"failed"`
	Cancelled uint32  `json:"cancelled"`
	Expired   uint32  `json:"expired"`
	Results   uint32  `json:"results"`
	Done      bool    `json:"done"`
	Elapsed   float64 `json:"elapsed_secs"`
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

func terminalCount(p *pb.ScanProgressResponse) uint32 {
	return p.GetCompleted() + p.GetFailed() + p.GetCancelled() + p.GetExpired()
}

// scanDone reports whether every task of a non-empty scan is terminal.
func scanDone(p *pb.ScanProgressResponse) bool {
	return p.GetTotal() > 0 && terminalCount(p) >= p.GetTotal()
}

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
	return s + describeScheduling(p) // cmd_schedule.go
}

func runWatch(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommandNamed("watch"), &g, true)
	scan := fs.String("scan", "", "scan ID (required)")
	interval := fs.Duration("interval", 500*time.Millisecond, "polling interval")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *scan == "" || fs.NArg() > 0 {
		return usagef("usage: termivar-coord watch --scan S")
	}
	if *interval < 50*time.Millisecond {
		return usagef("--interval must be at least 50ms")
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	return watchScan(ctx, c, *scan, *interval, g.json, env.stdout)
}

// watchScan polls a scan until it is terminal, drawing a progress bar (or
// printing a JSON line per change) on w.
func watchScan(ctx context.Context, c *client.Client, scan string, interval time.Duration, asJSON bool, w io.Writer) error {
	start := time.Now()
	var bar *progressbar.ProgressBar
	var last *pb.ScanProgressResponse
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		p, err := c.ScanProgress(ctx, &pb.ScanProgressRequest{ScanId: scan})
		if err != nil {
			return err
		}
		if p.GetTotal() == 0 {
			return rejectedError{"scan " + scan + " has no tasks"}
		}
		done := scanDone(p)
		if asJSON {
			if last == nil || !sameProgress(last, p) || done {
				if err := writeJSON(w, progressJSON{
					ScanID: scan, Total: p.GetTotal(), Queued: p.GetQueued(), Leased: p.GetLeased(), Running: p.GetRunning(),
					Completed: p.GetCompleted(), Failed: p.GetFailed(), Cancelled: p.GetCancelled(), Expired: p.GetExpired(),
					Results: p.GetResults(), Done: done, Elapsed: time.Since(start).Seconds(), Reruns: p.GetReruns(),
					Scheduled: p.GetScheduled(), Paused: p.GetPaused(), MaxInFlight: p.GetMaxInFlight(),
					Unroutable: p.GetUnroutable(), LiveWorkers: p.GetLiveWorkers(),
				}); err != nil {
					return err
				}
			}
		} else {
			if bar == nil {
				bar = progressbar.NewOptions64(int64(p.GetTotal()),
					progressbar.OptionSetWriter(w),
					progressbar.OptionSetWidth(20),
					progressbar.OptionShowCount(),
					progressbar.OptionSetPredictTime(true),
					progressbar.OptionShowElapsedTimeOnFinish(),
					progressbar.OptionSetRenderBlankState(true),
					progressbar.OptionThrottle(0),
				)
			}
			bar.ChangeMax64(int64(p.GetTotal()))
			bar.Describe(describeProgress(p))
			_ = bar.Set64(int64(terminalCount(p)))
		}
		last = p
		if done {
			if !asJSON {
				_ = bar.Finish()
				fmt.Fprintf(w, "\nscan %s done in %s: %d completed, %d failed, %d cancelled, %d expired, %d results\n",
					scan, time.Since(start).Round(100*time.Millisecond), p.GetCompleted(), p.GetFailed(), p.GetCancelled(), p.GetExpired(), p.GetResults())
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func sameProgress(a, b *pb.ScanProgressResponse) bool {
	return a.GetTotal() == b.GetTotal() && a.GetQueued() == b.GetQueued() && a.GetLeased() == b.GetLeased() &&
		a.GetRunning() == b.GetRunning() && a.GetCompleted() == b.GetCompleted() && a.GetFailed() == b.GetFailed() &&
		a.GetCancelled() == b.GetCancelled() && a.GetExpired() == b.GetExpired() && a.GetResults() == b.GetResults() &&
		a.GetScheduled() == b.GetScheduled() && a.GetPaused() == b.GetPaused() && a.GetUnroutable() == b.GetUnroutable() &&
		a.GetLiveWorkers() == b.GetLiveWorkers()
}

// resultJSON is one line of results --json: the result as a string when it
// is UTF-8, else base64 in result_base64.
type resultJSON struct {
	Index        int    `json:"index"`
	TaskID       string `json:"task_id"`
	Result       string `json:"result,omitempty"`
	ResultBase64 []byte `json:"result_base64,omitempty"`
}

func runResults(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommandNamed("results"), &g, true)
	scan := fs.String("scan", "", "scan ID (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *scan == "" || fs.NArg() > 0 {
		return usagef("usage: termivar-coord results --scan S [--json]")
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	i := 0
	return c.Results(ctx, *scan, func(taskID string, result []byte) error {
		i++
		if g.json {
			r := resultJSON{Index: i, TaskID: taskID}
			if utf8.Valid(result) {
				r.Result = string(result)
			} else {
				r.ResultBase64 = result
			}
			return writeJSON(env.stdout, r)
		}
		if _, err := env.stdout.Write(result); err != nil {
			return err
		}
		if len(result) > 0 && result[len(result)-1] != '\n' {
			_, err := io.WriteString(env.stdout, "\n")
			return err
		}
		return nil
	})
}
