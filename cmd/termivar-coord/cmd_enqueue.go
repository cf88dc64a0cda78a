package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/termivar/distributed/client"
)

// The enqueue command's exit codes follow the CLI's (contract Part D):
// 0 when every target asked for is stored (duplicate lines count, they are
// stored once); 1 for a usage error, including an unreadable file or a
// target the server would refuse found before anything was sent; 2 when
// the server refused part of the input (a task ID collision, a tenant
// limit the command does not wait on, an invalid target of a stream); 3
// when the node could not be reached; 130 when interrupted. Whenever the
// exit code is not 0 the message says how many targets are stored, and
// re-running the same command stores the rest without duplicates.

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
	noWait := fs.Bool("no-wait", false, "fail when the tenant's queue is full instead of waiting for workers to free room")
	waitRecords := fs.Bool("wait-records", false, "also wait while the tenant's task-record or terminal limit is reached (frees only when terminal tasks are deleted)")
	retryFor := fs.Duration("retry-for", 30*time.Second, "keep retrying this long while the node cannot be reached (a restart, a leader change) before giving up; a re-run continues where it stopped")
	quiet := fs.Bool("quiet", false, "no progress bar on stderr")
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
	opts, err := enqueueOptions(*scan, *priority, *phases, *batch)
	if err != nil {
		return err
	}
	opts.NoWait, opts.WaitForRecords, opts.KeepTaskIDs, opts.RetryUnreachableFor = *noWait, *waitRecords, g.json, *retryFor
	opts.AttemptTimeoutSecs, opts.Schedule = timeoutSecs, sched
	in, err := openTargets(env, fs.Args(), *file, ids)
	if err != nil {
		return err
	}
	defer in.close()
	if len(ids) > 0 {
		opts.TaskIDs = ids
	}
	opts.DeclaredTotal = uint64(in.distinct)
	if *retryFor > 0 {
		// NB: --retry-for bounds the ride through an unreachable node from
		// the last answer on; one call's own retries must not outlast it.
		g.retryTimeout = min(g.retryTimeout, *retryFor)
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	if err := sf.applyLimit(ctx, c, *scan); err != nil {
		return err
	}
	if !*quiet && !g.json {
		opts.ProgressFunc = enqueueBar(env.stderr, in.distinct)
	}
	res, err := c.EnqueueTargets(ctx, opts, in.seq())
	if client.KindOf(err) == "cluster_version" && opts.DeclaredTotal != 0 && opts.Schedule.IsZero() && in.rewind() == nil {
		// A cluster in a rolling upgrade (docs/node.md, "Versions and
		// rolling upgrades") refuses the declared total the command adds on
		// its own; send the same input without it (what is stored is
		// skipped, so nothing is duplicated). With scheduling flags
		// (cluster version 3) the refusal may be theirs, so it stands.
		fmt.Fprintln(env.stderr, "note: the cluster runs version 1 until every node is upgraded: the scan's total is not declared, so watch cannot show the part not yet admitted")
		opts.DeclaredTotal = 0
		res, err = c.EnqueueTargets(ctx, opts, in.seq())
	}
	if opts.ProgressFunc != nil {
		fmt.Fprintln(env.stderr)
	}
	if err == nil {
		err = in.readErr
	}
	return reportEnqueue(env, g.json, *scan, in, res, err)
}

// enqueueOptions checks the scan, priority, phases and batch flags.
func enqueueOptions(scan, priority, phases string, batch int) (client.EnqueueOptions, error) {
	if scan == "" {
		return client.EnqueueOptions{}, usagef("--scan is required")
	}
	prio, err := client.ParsePriority(priority)
	if err != nil {
		return client.EnqueueOptions{}, usageError{err.Error()}
	}
	ph, err := client.ParsePhases(phases)
	if err != nil {
		return client.EnqueueOptions{}, usageError{err.Error()}
	}
	if batch < 1 || batch > client.MaxEnqueueBatch {
		return client.EnqueueOptions{}, usagef("--batch must be 1 to %d", client.MaxEnqueueBatch)
	}
	return client.EnqueueOptions{ScanID: scan, Priority: prio, Phases: ph, BatchSize: batch}, nil
}

// targetInput is the command's input: arguments, a file (read twice: once
// to check every target and count them, once to send them) or stdin (a
// stream, read once).
type targetInput struct {
	args  []string
	r     io.Reader
	f     *os.File
	name  string // "", "stdin" or the file name, for messages
	ids   []string
	lines []uint32 // the input line of each target, by position
	// distinct counts the distinct targets of arguments or a file (0 for
	// a stream: unknown until it ends).
	distinct int
	readErr  error
}

func openTargets(env *cliEnv, args []string, file string, ids []string) (*targetInput, error) {
	switch {
	case file != "" && len(args) > 0:
		return nil, usagef("give targets as arguments or with --file, not both")
	case file == "" && len(args) == 1 && args[0] == "-":
		file = "-"
	case file == "" && len(args) == 0:
		return nil, usagef("no targets")
	}
	in := &targetInput{args: args, ids: ids}
	if file == "-" {
		in.args, in.r, in.name = nil, env.stdin, "stdin"
		return in, nil
	}
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, usageError{err.Error()}
		}
		in.args, in.f, in.r, in.name = nil, f, f, file
	}
	if err := in.check(); err != nil {
		in.close()
		return nil, err
	}
	return in, nil
}

func (in *targetInput) close() {
	if in.f != nil {
		in.f.Close()
	}
}

// check reads arguments or a file once before anything is sent: every
// target must be one the server accepts, --task-id must give one ID per
// target, and the distinct targets are counted (the scan's declared
// total). A file is rewound for the second read.
func (in *targetInput) check() error {
	seen := map[[16]byte]struct{}{}
	n := 0
	var bad error
	in.each(func(line int, t string) bool {
		n++
		if err := client.CheckTarget(t); err != nil {
			bad = usagef("%s: target %v", in.where(line), err)
			return false
		}
		id := ""
		if n <= len(in.ids) {
			id = in.ids[n-1]
		}
		h := sha256.Sum256([]byte(id + "\x00" + t))
		seen[[16]byte(h[:16])] = struct{}{}
		return true
	})
	switch {
	case bad != nil:
		return bad
	case in.readErr != nil:
		return usageError{in.readErr.Error()}
	case n == 0:
		return usagef("no targets")
	case len(in.ids) > 0 && len(in.ids) != n:
		return usagef("got %d --task-id for %d targets", len(in.ids), n)
	}
	in.distinct = len(seen)
	if in.f != nil {
		if _, err := in.f.Seek(0, io.SeekStart); err != nil {
			return usageError{err.Error()}
		}
	}
	return nil
}

// each calls fn with every target and its line (1-based; for arguments
// the argument's position) until fn returns false.
func (in *targetInput) each(fn func(line int, t string) bool) {
	if in.r == nil {
		for i, a := range in.args {
			if !fn(i+1, a) {
				return
			}
		}
		return
	}
	sc := bufio.NewScanner(in.r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if !fn(line, t) {
			return
		}
	}
	in.readErr = sc.Err()
}

// seq is the input as the sequence EnqueueTargets reads; it records each
// target's line.
func (in *targetInput) seq() iter.Seq[string] {
	in.lines = in.lines[:0]
	return func(yield func(string) bool) {
		in.each(func(line int, t string) bool {
			in.lines = append(in.lines, uint32(line))
			return yield(t)
		})
	}
}

// rewind makes arguments or a file readable again from the start (a
// stream cannot be).
func (in *targetInput) rewind() error {
	switch {
	case in.r == nil:
		return nil
	case in.f != nil:
		_, err := in.f.Seek(0, io.SeekStart)
		return err
	}
	return errors.New("a stream cannot be read again")
}

// line returns the input line of the target at a 1-based position.
func (in *targetInput) line(pos int) int {
	if pos < 1 || pos > len(in.lines) {
		return pos
	}
	return int(in.lines[pos-1])
}

// where names a line of the input for messages.
func (in *targetInput) where(line int) string {
	if in.r == nil {
		return fmt.Sprintf("argument %d", line)
	}
	return fmt.Sprintf("line %d", line)
}

// enqueueBar returns a ProgressFunc drawing a bar of stored targets on w
// (a spinner with counts when the total is unknown).
func enqueueBar(w io.Writer, total int) func(client.EnqueueProgress) {
	max := int64(total)
	if max == 0 {
		max = -1
	}
	bar := progressbar.NewOptions64(max,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetWidth(20),
		progressbar.OptionShowCount(),
		progressbar.OptionSetDescription("stored"),
		progressbar.OptionThrottle(200*time.Millisecond),
		// NB: no spinner goroutine for a stream (unknown total): the bar
		// changes when the enqueue reports, and nothing outlives the call.
		progressbar.OptionSetSpinnerChangeInterval(0),
	)
	return func(p client.EnqueueProgress) {
		desc := "stored"
		if p.Waiting {
			desc = "stored (waiting for room or for the node)"
		}
		bar.Describe(desc)
		_ = bar.Set64(int64(p.Stored))
	}
}

// enqueueJSON is enqueue's --json summary.
type enqueueJSON struct {
	ScanID         string          `json:"scan_id"`
	Read           int             `json:"read"`
	Stored         int             `json:"stored"`
	Enqueued       int             `json:"enqueued"`
	Existing       int             `json:"existing"`
	Duplicates     int             `json:"duplicates"`
	DuplicateLines []int           `json:"duplicate_lines,omitempty"`
	CollisionCount int             `json:"collision_count"`
	Collisions     []collisionJSON `json:"collisions,omitempty"`
	Complete       bool            `json:"complete"`
	// Waits counts the backoff sleeps while the tenant had no room.
	Waits   int      `json:"waits"`
	TaskIDs []string `json:"task_ids,omitempty"`
}

type collisionJSON struct {
	Line    int    `json:"line"`
	TaskID  string `json:"task_id"`
	ScanID  string `json:"scan_id"`
	InInput bool   `json:"in_input,omitempty"`
}

// reportEnqueue prints what was stored (stdout) and, for an incomplete
// enqueue, what stopped it and how to go on (the returned error, which
// sets the exit code). Messages name lines and task IDs, never a target.
func reportEnqueue(env *cliEnv, asJSON bool, scan string, in *targetInput, res client.EnqueueResult, err error) error {
	if asJSON {
		j := enqueueJSON{ScanID: scan, Read: res.Read, Stored: res.Stored(), Enqueued: res.Enqueued, Existing: res.Existing,
			Duplicates: res.Duplicates, CollisionCount: res.CollisionCount, Complete: err == nil, Waits: res.Waits, TaskIDs: res.TaskIDs}
		for _, p := range res.DuplicatePositions {
			j.DuplicateLines = append(j.DuplicateLines, in.line(p))
		}
		for _, c := range res.Collisions {
			j.Collisions = append(j.Collisions, collisionJSON{Line: in.line(c.Position), TaskID: c.TaskID, ScanID: c.ScanID, InInput: c.InInput})
		}
		if werr := writeJSON(env.stdout, j); werr != nil && err == nil {
			return werr
		}
	} else {
		fmt.Fprintln(env.stdout, enqueueSummary(scan, in, res))
	}
	if err == nil {
		return nil
	}
	return enqueueFailure(env, scan, in, res, err)
}

// enqueueSummary is the one-line summary: tasks created, already present
// and duplicate lines (with the first few line numbers).
func enqueueSummary(scan string, in *targetInput, res client.EnqueueResult) string {
	s := fmt.Sprintf("enqueued %d tasks to scan %s", res.Enqueued, scan)
	var notes []string
	if res.Existing > 0 {
		notes = append(notes, fmt.Sprintf("%d already present", res.Existing))
	}
	if res.Duplicates > 0 {
		notes = append(notes, fmt.Sprintf("%d duplicate %s stored once (%s)", res.Duplicates, plural(res.Duplicates, "line", "lines"), in.lineList(res.DuplicatePositions, res.Duplicates)))
	}
	if len(notes) > 0 {
		s += " (" + strings.Join(notes, "; ") + ")"
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// lineList names the lines at the given positions, "…" when total is
// larger.
func (in *targetInput) lineList(positions []int, total int) string {
	parts := make([]string, len(positions))
	for i, p := range positions {
		parts[i] = in.where(in.line(p))
	}
	s := strings.Join(parts, ", ")
	if total > len(positions) {
		s += ", …"
	}
	return s
}

// enqueueFailure turns the error of an incomplete enqueue into the
// command's error: what stopped it, how many targets are stored, and how
// to go on.
func enqueueFailure(env *cliEnv, scan string, in *targetInput, res client.EnqueueResult, err error) error {
	stored := storedPhrase(in, res)
	var le *client.LimitError
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(env.stderr, "termivar-coord enqueue: interrupted: %s; run the same command again to store the rest\n", stored)
		return err
	case errors.As(err, &le):
		return fmt.Errorf("stopped by the tenant's %s limit (%d): %s; raise it with --%s (serve sets the default tenant's, tenants create a new tenant's)%s, then run the same command again: %w",
			le.Name, le.Value, stored, strings.ReplaceAll(le.Name, "_", "-"), limitHint(le.Name), err)
	case errors.Is(err, client.ErrTaskIDCollision):
		for _, c := range res.Collisions {
			fmt.Fprintf(env.stderr, "  %s: %s\n", in.where(in.line(c.Position)), collisionText(scan, c))
		}
		if res.CollisionCount > len(res.Collisions) {
			fmt.Fprintf(env.stderr, "  … and %d more\n", res.CollisionCount-len(res.Collisions))
		}
		return rejectedError{fmt.Sprintf("%d %s not stored because the task ID is taken (listed above); %s", res.CollisionCount, plural(res.CollisionCount, "target", "targets"), stored)}
	case errors.Is(err, client.ErrInvalidTarget):
		return rejectedError{fmt.Sprintf("%s: %v; %s", in.name, err, stored)}
	}
	// NB: "at least": the last request may have been applied by a node
	// that went away before it answered; the re-run finds it present.
	return fmt.Errorf("at least %s; run the same command again to store the rest: %w", stored, err)
}

// limitHint adds what frees a limit that workers do not free. tenants
// update sets only the retention policy, not the limits, so the limit's
// flag stays the one that raises it.
func limitHint(name string) string {
	if name == "max_task_records" || name == "max_terminal_tasks" {
		return " or delete finished scans (scans delete SCAN), or set a retention policy (tenants update --result-retention) and enqueue with --wait-records while it frees them"
	}
	return " or leave out --no-wait to wait for workers to free room"
}

// collisionText says who holds a colliding task ID.
func collisionText(scan string, c client.Collision) string {
	switch {
	case c.InInput:
		return "task " + c.TaskID + " is given to an earlier line with another target"
	case c.ScanID == scan:
		return "task " + c.TaskID + " is already in this scan with another target"
	}
	return "task " + c.TaskID + " already belongs to scan " + c.ScanID
}

// storedPhrase says how many distinct targets are stored, of how many
// when the input was counted.
func storedPhrase(in *targetInput, res client.EnqueueResult) string {
	if in.distinct > 0 {
		return fmt.Sprintf("%d of %d targets are stored", res.Stored(), in.distinct)
	}
	return fmt.Sprintf("%d targets are stored (%d read)", res.Stored(), res.Read)
}
