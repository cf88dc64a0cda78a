package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// This file holds the commands of failure reasons and re-runs
// (docs/contract.md Part F): task (one task with its attempt history) and
// retry, and the enqueue --timeout parsing.

// attemptJSON is one attempt of task --json.
type attemptJSON struct {
	Attempt        uint32  `json:"attempt"`
	TaskGeneration uint64  `json:"task_generation"`
	WorkerID       string  `json:"worker_id"`
	LeaseID        uint64  `json:"lease_id"`
	AcquiredAt     uint64  `json:"acquired_at"`
	StartedAt      *uint64 `json:"started_at,omitempty"`
	EndedAt        uint64  `json:"ended_at"`
	Outcome        string  `json:"outcome"`
	Reason         string  `json:"reason,omitempty"`
}

// taskDetailJSON is task --json: the tasks --json fields and the history.
type taskDetailJSON struct {
	taskJSON
	Attempts []attemptJSON `json:"attempts"`
}

func runTask(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommandNamed("task"), &g, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("usage: termivar-coord task TASK")
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	resp, err := c.GetTask(ctx, &pb.GetTaskRequest{TaskId: fs.Arg(0)})
	if err != nil {
		return err
	}
	t := resp.GetTask()
	if g.json {
		out := taskDetailJSON{taskJSON: toTaskJSON(t), Attempts: []attemptJSON{}}
		for _, a := range t.GetAttempts() {
			out.Attempts = append(out.Attempts, attemptJSON{
				Attempt: a.GetAttempt(), TaskGeneration: a.GetTaskGeneration(), WorkerID: a.GetWorkerId(), LeaseID: a.GetLeaseId(),
				AcquiredAt: a.GetAcquiredAt(), StartedAt: a.StartedAt, EndedAt: a.GetEndedAt(), Outcome: a.GetOutcome(), Reason: a.GetReason(),
			})
		}
		return writeJSON(env.stdout, out)
	}
	return printTask(env, t)
}

// printTask writes a task's fields and its attempt history as tables.
func printTask(env *cliEnv, t *pb.TaskInfo) error {
	w := tabwriter.NewWriter(env.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "task\t%s (scan %s, priority %s)\n", t.GetTaskId(), t.GetScanId(), t.GetPriority())
	fmt.Fprintf(w, "status\t%s (attempt %d, retries %d, generation %d, re-runs %d)\n", t.GetStatus(), t.GetAttempt(), t.GetRetryCount(), t.GetTaskGeneration(), t.GetReruns())
	if s := t.GetAttemptTimeoutSecs(); s > 0 {
		fmt.Fprintf(w, "timeout\t%s per attempt\n", time.Duration(s)*time.Second)
	}
	if t.GetAssignedTo() != "" {
		fmt.Fprintf(w, "worker\t%s (lease %d, expires %s)\n", t.GetAssignedTo(), t.GetLeaseId(), clock(t.GetLeaseExpiresAt()))
	}
	fmt.Fprintf(w, "result\t%v\n", t.GetHasResult())
	if err := w.Flush(); err != nil {
		return err
	}
	if len(t.GetAttempts()) == 0 {
		_, err := fmt.Fprintln(env.stdout, "\nno ended attempts")
		return err
	}
	fmt.Fprintln(env.stdout, "\nattempts (oldest first, at most", distributed.MaxAttemptHistory, "kept):")
	w = tabwriter.NewWriter(env.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ATTEMPT\tGEN\tWORKER\tLEASE\tSTARTED\tENDED\tOUTCOME\tREASON")
	for _, a := range t.GetAttempts() {
		started := a.GetAcquiredAt()
		if a.StartedAt != nil {
			started = a.GetStartedAt()
		}
		fmt.Fprintf(w, "%d\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n", a.GetAttempt(), a.GetTaskGeneration(), a.GetWorkerId(), a.GetLeaseId(),
			clock(started), clock(a.GetEndedAt()), a.GetOutcome(), oneLine(a.GetReason()))
	}
	return w.Flush()
}

// clock renders a logical second (the leader's wall clock seconds) as a
// time of day.
func clock(secs uint64) string { return time.Unix(int64(secs), 0).Format(time.TimeOnly) }

// oneLine makes a reason fit a table cell: newlines and tabs become spaces
// ("-" when empty).
func oneLine(reason string) string {
	if reason == "" {
		return "-"
	}
	return strings.Join(strings.Fields(reason), " ")
}

// shortReason is oneLine cut to 60 characters, keeping the beginning (the
// cause: exit status, signal, timeout).
func shortReason(reason string) string {
	r := []rune(oneLine(reason))
	if len(r) > 60 {
		return string(r[:57]) + "..."
	}
	return string(r)
}

func runRetry(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommandNamed("retry"), &g, true)
	scan := fs.String("scan", "", "the scan whose tasks to re-run (required)")
	statuses := fs.String("status", "", "comma-separated statuses to re-run: failed, expired, cancelled (default all three)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *scan == "" {
		return usagef("--scan is required")
	}
	req := &pb.RetryRequest{ScanId: *scan, TaskIds: dedupe(fs.Args())}
	if *statuses != "" {
		for _, s := range strings.Split(*statuses, ",") {
			st, ok := distributed.ParseTaskStatus(strings.TrimSpace(s))
			if !ok || (st != distributed.TaskFailed && st != distributed.TaskExpired && st != distributed.TaskCancelled) {
				return usagef("--status takes failed, expired and cancelled, not %q", s)
			}
			req.Statuses = append(req.Statuses, st.String())
		}
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	resp, err := c.Retry(ctx, req)
	if err != nil {
		return err
	}
	if g.json {
		requeued := resp.GetRequeued()
		if requeued == nil {
			requeued = []string{}
		}
		return writeJSON(env.stdout, map[string]any{"scan_id": *scan, "requeued": requeued, "unchanged": resp.GetUnchanged(), "revision": resp.GetRevision()})
	}
	fmt.Fprintf(env.stdout, "re-queued %d task(s) of scan %s; %d left as they were\n", len(resp.GetRequeued()), *scan, resp.GetUnchanged())
	for _, id := range resp.GetRequeued() {
		fmt.Fprintln(env.stdout, "  "+id)
	}
	return nil
}

// dedupe drops repeated task IDs, keeping the first (the server refuses a
// request that names a task twice).
func dedupe(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	var out []string
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// attemptTimeoutSecs checks enqueue --timeout: whole seconds, 0 or 1 s up
// to the core's ceiling (distributed.MaxTaskTTLSecs).
func attemptTimeoutSecs(d time.Duration) (uint64, error) {
	switch {
	case d == 0:
		return 0, nil
	case d < time.Second || d%time.Second != 0:
		return 0, usagef("--timeout must be whole seconds, at least 1s (got %s)", d)
	case uint64(d/time.Second) > distributed.MaxTaskTTLSecs:
		return 0, usagef("--timeout is at most %s", time.Duration(distributed.MaxTaskTTLSecs)*time.Second)
	}
	return uint64(d / time.Second), nil
}
