package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/termivar/distributed/client"
)

func runEnqueue(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommandNamed("enqueue"), &g, true)
	scan := fs.String("scan", "", "scan ID (required)")
	priority := fs.String("priority", "normal", "low, normal, high or critical")
	phases := fs.String("phases", "", "comma-separated phase numbers, e.g. 1,2")
	file := fs.String("file", "", "read targets from this file, one per line ('-' = stdin); blank lines and # comments are skipped")
	var ids stringList
	fs.Var(&ids, "task-id", "explicit task ID, one per target in order (repeatable)")
	batch := fs.Int("batch", 1000, fmt.Sprintf("tasks per request (at most %d)", client.MaxEnqueueBatch))
	timeout := fs.Duration("timeout", 0, "per-attempt timeout in whole seconds, e.g. 5m (0 = none): the worker kills the command after it and the attempt fails with reason timeout")
	sf := addScheduleFlags(fs) // cmd_schedule.go
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	timeoutSecs, err := attemptTimeoutSecs(*timeout)
	if err != nil {
		return err
	}
	sched, err := sf.schedule()
	if err != nil {
		return err
	}
	if *scan == "" {
		return usagef("--scan is required")
	}
	prio, err := client.ParsePriority(*priority)
	if err != nil {
		return usageError{err.Error()}
	}
	ph, err := client.ParsePhases(*phases)
	if err != nil {
		return usageError{err.Error()}
	}
	targets := fs.Args()
	switch {
	case *file != "" && len(targets) > 0:
		return usagef("give targets as arguments or with --file, not both")
	case *file == "" && len(targets) == 1 && targets[0] == "-":
		*file = "-"
		targets = nil
	}
	if *file != "" {
		r := env.stdin
		if *file != "-" {
			f, err := os.Open(*file)
			if err != nil {
				return usageError{err.Error()}
			}
			defer f.Close()
			r = f
		}
		if targets, err = readTargets(r); err != nil {
			return usageError{err.Error()}
		}
	}
	if len(targets) == 0 {
		return usagef("no targets")
	}
	if len(ids) > 0 && len(ids) != len(targets) {
		return usagef("got %d --task-id for %d targets", len(ids), len(targets))
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	opts := client.EnqueueOptions{ScanID: *scan, Priority: prio, Phases: ph, BatchSize: *batch, AttemptTimeoutSecs: timeoutSecs, Schedule: sched}
	if len(ids) > 0 {
		opts.TaskIDs = ids
	}
	if err := sf.applyLimit(ctx, c, *scan); err != nil {
		return err
	}
	res, err := c.EnqueueTargets(ctx, opts, targets)
	if errors.Is(err, client.ErrTargetMismatch) {
		return rejectedError{err.Error()}
	}
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(env.stdout, map[string]any{
			"scan_id": *scan, "enqueued": res.Enqueued, "existing": res.Existing, "task_ids": res.TaskIDs,
		})
	}
	fmt.Fprintf(env.stdout, "enqueued %d tasks to scan %s", res.Enqueued, *scan)
	if res.Existing > 0 {
		fmt.Fprintf(env.stdout, " (%d already present)", res.Existing)
	}
	fmt.Fprintln(env.stdout)
	return nil
}

// readTargets reads one target per line, skipping blank lines and lines
// starting with '#'; surrounding whitespace is trimmed.
func readTargets(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	return out, sc.Err()
}
