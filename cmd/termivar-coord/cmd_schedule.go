package main

// This file holds the scheduling commands (contract Part F): pause,
// resume and limit a scan, the tenant's scheduling options, and the
// enqueue flags --delay, --at, --require-tag, --backoff-base,
// --backoff-cap and --max-in-flight.

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strconv"
	"time"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// scheduleFlags are enqueue's scheduling flags.
type scheduleFlags struct {
	delay, backoffBase, backoffCap time.Duration
	at                             string
	tags                           stringList
	maxInFlight                    int
}

func addScheduleFlags(fs *flag.FlagSet) *scheduleFlags {
	s := &scheduleFlags{}
	fs.DurationVar(&s.delay, "delay", 0, "make the tasks leasable this long after they are enqueued, e.g. 10m")
	fs.StringVar(&s.at, "at", "", "make the tasks leasable from this time (RFC 3339, e.g. 2026-12-01T22:00:00Z)")
	fs.Var(&s.tags, "require-tag", "only workers with this tag lease the tasks: linux, windows, gpu, internal, external (repeatable)")
	fs.DurationVar(&s.backoffBase, "backoff-base", 0, "retry backoff for these tasks: first delay (doubles per retry; default the tenant's)")
	fs.DurationVar(&s.backoffCap, "backoff-cap", 0, "retry backoff for these tasks: longest delay")
	fs.IntVar(&s.maxInFlight, "max-in-flight", -1, "at most this many of the scan's tasks leased or running at once (0: no limit)")
	return s
}

// schedule validates the flags and returns the client's Schedule.
func (s *scheduleFlags) schedule() (client.Schedule, error) {
	var out client.Schedule
	for _, d := range []time.Duration{s.delay, s.backoffBase, s.backoffCap} {
		if d < 0 || (d > 0 && d < time.Second) {
			return out, usagef("--delay, --backoff-base and --backoff-cap take whole seconds or more, e.g. 30s")
		}
	}
	if s.backoffCap > 0 && s.backoffBase == 0 {
		return out, usagef("--backoff-cap needs --backoff-base")
	}
	if s.maxInFlight < -1 || s.maxInFlight > math.MaxUint32 {
		return out, usagef("--max-in-flight must be 0 or more")
	}
	out.DelaySecs = uint64(s.delay / time.Second)
	out.BackoffBaseSecs, out.BackoffCapSecs = uint64(s.backoffBase/time.Second), uint64(s.backoffCap/time.Second)
	if s.at != "" {
		t, err := time.Parse(time.RFC3339, s.at)
		if err != nil || t.Unix() < 0 {
			return out, usagef("--at takes an RFC 3339 time, e.g. 2026-12-01T22:00:00Z")
		}
		out.NotBeforeSecs = uint64(t.Unix())
	}
	for _, name := range s.tags {
		if _, ok := distributed.ParseWorkerTag(name); !ok {
			return out, usagef("--require-tag %q is not a tag (linux, windows, gpu, internal, external)", name)
		}
	}
	if len(s.tags) > distributed.MaxWorkerTags {
		return out, usagef("at most %d --require-tag", distributed.MaxWorkerTags)
	}
	out.RequiredTags = s.tags
	return out, nil
}

// applyLimit sets the scan's in-flight limit before its tasks are
// enqueued (so none is leased above it), when --max-in-flight was given.
func (s *scheduleFlags) applyLimit(ctx context.Context, c *client.Client, scan string) error {
	if s.maxInFlight < 0 {
		return nil
	}
	n := uint32(s.maxInFlight)
	_, err := c.UpdateScan(ctx, &pb.UpdateScanRequest{ScanId: scan, MaxInFlight: &n})
	return err
}

// scanArg parses a scan command's flags and its one SCAN argument.
func scanArg(env *cliEnv, name string, g *globalFlags, extra func(*flag.FlagSet), args []string) (string, *flag.FlagSet, error) {
	fs := newFlagSet(env, clientCommandNamed(name), g, true)
	if extra != nil {
		extra(fs)
	}
	if err := parseFlags(fs, args); err != nil {
		return "", nil, err
	}
	if fs.NArg() != 1 {
		return "", nil, usagef("%s takes one scan ID", name)
	}
	return fs.Arg(0), fs, nil
}

func runPause(ctx context.Context, env *cliEnv, args []string) error {
	return updateScanCommand(ctx, env, "pause", args, func(s string) *pb.UpdateScanRequest {
		paused := true
		return &pb.UpdateScanRequest{ScanId: s, Paused: &paused}
	})
}

func runResume(ctx context.Context, env *cliEnv, args []string) error {
	return updateScanCommand(ctx, env, "resume", args, func(s string) *pb.UpdateScanRequest {
		paused := false
		return &pb.UpdateScanRequest{ScanId: s, Paused: &paused}
	})
}

func runLimit(ctx context.Context, env *cliEnv, args []string) error {
	var max uint
	return updateScanCommand(ctx, env, "limit", args, func(s string) *pb.UpdateScanRequest {
		n := uint32(min(max, math.MaxUint32))
		return &pb.UpdateScanRequest{ScanId: s, MaxInFlight: &n}
	}, func(fs *flag.FlagSet) {
		fs.UintVar(&max, "max-in-flight", 0, "at most this many of the scan's tasks leased or running at once (0: no limit)")
	})
}

// updateScanCommand runs pause, resume and limit: one UpdateScan and the
// scan's settings after it.
func updateScanCommand(ctx context.Context, env *cliEnv, name string, args []string, build func(string) *pb.UpdateScanRequest, extra ...func(*flag.FlagSet)) error {
	var g globalFlags
	var ex func(*flag.FlagSet)
	if len(extra) > 0 {
		ex = extra[0]
	}
	scan, _, err := scanArg(env, name, &g, ex, args)
	if err != nil {
		return err
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	r, err := c.UpdateScan(ctx, build(scan))
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(env.stdout, map[string]any{"scan_id": scan, "paused": r.GetPaused(),
			"max_in_flight": r.GetMaxInFlight(), "in_flight": r.GetInFlight(), "active": r.GetActive(), "revision": r.GetRevision()})
	}
	state := "running"
	if r.GetPaused() {
		state = "paused"
	}
	limit := "no limit"
	if r.GetMaxInFlight() > 0 {
		limit = "at most " + strconv.FormatUint(uint64(r.GetMaxInFlight()), 10)
	}
	fmt.Fprintf(env.stdout, "scan %s: %s, %d in flight (%s), %d not finished\n", scan, state, r.GetInFlight(), limit, r.GetActive())
	return nil
}

func runScheduling(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommandNamed("scheduling"), &g, true)
	base := fs.Duration("backoff-base", 0, "first retry delay (doubles per retry, with jitter); 0: no backoff")
	limit := fs.Duration("backoff-cap", 0, "longest retry delay (0: the 31-day ceiling)")
	fair := fs.Bool("fair-scans", false, "serve scans of one priority round-robin")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("scheduling takes no arguments")
	}
	if *base < 0 || *limit < 0 || *base%time.Second != 0 || *limit%time.Second != 0 {
		return usagef("--backoff-base and --backoff-cap take whole seconds")
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	o := &pb.SchedulingOptions{BackoffBaseSecs: uint64(*base / time.Second), BackoffCapSecs: uint64(*limit / time.Second), FairScans: *fair}
	r, err := c.SetSchedulingOptions(ctx, &pb.SetSchedulingOptionsRequest{Options: o})
	if err != nil {
		return err
	}
	if g.json {
		return writeJSON(env.stdout, map[string]any{"backoff_base_secs": o.BackoffBaseSecs, "backoff_cap_secs": o.BackoffCapSecs,
			"fair_scans": o.FairScans, "revision": r.GetRevision()})
	}
	fmt.Fprintf(env.stdout, "scheduling: backoff base %s cap %s, fair scans %v\n", *base, *limit, *fair)
	return nil
}

// displayStatus is a task's status for the tasks table: "scheduled" for a
// queued task that waits for its not-before time.
func displayStatus(t *pb.TaskInfo) string {
	if t.GetScheduled() {
		return "scheduled"
	}
	return t.GetStatus()
}

// describeScheduling is watch's scheduling label: scheduled tasks, a
// paused scan, and — what watch must say — queued tasks that no live
// worker can take because none declared their required tags.
func describeScheduling(p *pb.ScanProgressResponse) string {
	s := ""
	if n := p.GetScheduled(); n > 0 {
		s += fmt.Sprintf(" scheduled %d", n)
	}
	if p.GetPaused() {
		s += " PAUSED"
	}
	if n := p.GetUnroutable(); n > 0 {
		s += fmt.Sprintf(" | %d queued need tags no live worker has (%d live)", n, p.GetLiveWorkers())
	}
	return s
}

// schedulingStall says what a stalled scan waits for when scheduling holds
// it (contract Part F): the scan is paused, every queued task waits for its
// not-before time, every queued task that is due needs tags no live worker
// declared, or the scan runs at its in-flight limit. "" otherwise, and when
// no worker is live (explainStall says that).
func schedulingStall(p *pb.ScanProgressResponse) string {
	queued, sched := p.GetQueued(), p.GetScheduled()
	leases := p.GetLeased() + p.GetRunning()
	switch {
	case queued == 0:
		return ""
	case p.GetPaused():
		return fmt.Sprintf("scan paused with %d queued tasks: resume it with termivar-coord resume", queued)
	case p.GetLiveWorkers() == 0:
		return ""
	case sched == queued:
		return fmt.Sprintf("%d queued tasks are scheduled for later (a delay, a not-before time or a retry backoff)", queued)
	case p.GetUnroutable() > 0 && p.GetUnroutable()+sched >= queued:
		return fmt.Sprintf("%d queued tasks need tags no live worker declared (%d live workers): start a worker with those --tag flags",
			p.GetUnroutable(), p.GetLiveWorkers())
	case p.GetMaxInFlight() > 0 && leases >= p.GetMaxInFlight():
		return fmt.Sprintf("at its in-flight limit (%d leased or running): %d queued tasks wait for one to finish", leases, queued)
	}
	return ""
}

// sameScheduling reports whether two polls show the same scheduling facts
// (a change is printed by watch --json but is no progress of the scan).
func sameScheduling(a, b *pb.ScanProgressResponse) bool {
	return a.GetScheduled() == b.GetScheduled() && a.GetPaused() == b.GetPaused() &&
		a.GetMaxInFlight() == b.GetMaxInFlight() && a.GetUnroutable() == b.GetUnroutable() &&
		a.GetLiveWorkers() == b.GetLiveWorkers()
}
