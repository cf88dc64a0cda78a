package main

// This file holds the schedules command: recurring scans the leader
// enqueues at every tick, once per tick (raftfsm/recurring.go).

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

const schedulesUsage = "create --every D --scan-prefix P [--name N] [--priority P] (--file F | TARGET...) | list | delete NAME"

func runSchedules(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) == 0 {
		return usagef("schedules %s", schedulesUsage)
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(env.stderr, "usage: termivar-coord schedules "+schedulesUsage)
		return flag.ErrHelp
	case "create":
		return runSchedulesCreate(ctx, env, args[1:])
	case "list":
		return runSchedulesList(ctx, env, args[1:])
	case "delete":
		return runSchedulesDelete(ctx, env, args[1:])
	}
	return usagef("unknown subcommand %q: schedules %s", args[0], schedulesUsage)
}

func runSchedulesCreate(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommand{name: "schedules create", usage: schedulesUsage}, &g, true)
	every := fs.Duration("every", 0, "period, e.g. 24h (whole seconds; the first tick is due at once)")
	prefix := fs.String("scan-prefix", "", "each tick enqueues the scan PREFIX-TICK (required)")
	name := fs.String("name", "", "schedule name (default: the scan prefix)")
	priority := fs.String("priority", "normal", "low, normal, high or critical")
	file := fs.String("file", "", "read targets from this file, one per line ('-' = stdin)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *prefix == "" || *every < time.Second || *every%time.Second != 0 {
		return usagef("--scan-prefix and --every (whole seconds, at least 1s) are required")
	}
	targets := fs.Args()
	if *file != "" {
		if len(targets) > 0 {
			return usagef("give targets as arguments or with --file, not both")
		}
		r := env.stdin
		if *file != "-" {
			f, err := os.Open(*file)
			if err != nil {
				return usageError{err.Error()}
			}
			defer f.Close()
			r = f
		}
		var err error
		if targets, err = readTargets(r); err != nil {
			return usageError{err.Error()}
		}
	}
	if len(targets) == 0 {
		return usagef("no targets")
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	req := &pb.CreateScheduleRequest{Name: *name, EverySecs: uint64(*every / time.Second), ScanPrefix: *prefix, Targets: targets, Priority: *priority}
	if _, err := c.CreateSchedule(ctx, req); err != nil {
		return err
	}
	n := *name
	if n == "" {
		n = *prefix
	}
	if g.json {
		return writeJSON(env.stdout, map[string]any{"name": n, "every_secs": req.EverySecs, "scan_prefix": *prefix, "targets": len(targets)})
	}
	fmt.Fprintf(env.stdout, "schedule %s: %d targets every %s as scans %s-1, %s-2, ...\n", n, len(targets), *every, *prefix, *prefix)
	return nil
}

// readTargets reads a target per line, skipping blank lines and #
// comments (as enqueue --file does).
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

func runSchedulesList(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommand{name: "schedules list", usage: schedulesUsage}, &g, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("schedules list takes no arguments")
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	r, err := c.ListSchedules(ctx, &pb.ListSchedulesRequest{})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 0, 2, ' ', 0)
	if !g.json {
		fmt.Fprintln(tw, "NAME\tEVERY\tTARGETS\tLAST TICK\tLAST SCAN\tNEXT TICK\tLAST ERROR")
	}
	for _, s := range r.GetSchedules() {
		if g.json {
			if err := writeJSON(env.stdout, s); err != nil {
				return err
			}
			continue
		}
		next := time.Unix(int64(s.GetNextTickSecs()), 0).UTC().Format(time.RFC3339)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", s.GetName(), time.Duration(s.GetEverySecs())*time.Second, s.GetTargets(),
			s.GetLastTick(), dash(s.GetLastScanId()), next, dash(s.GetLastError()))
	}
	return tw.Flush()
}

func runSchedulesDelete(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommand{name: "schedules delete", usage: schedulesUsage}, &g, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("schedules delete takes one schedule name")
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	if _, err := c.DeleteSchedule(ctx, &pb.DeleteScheduleRequest{Name: fs.Arg(0)}); err != nil {
		return err
	}
	if g.json {
		return writeJSON(env.stdout, map[string]any{"name": fs.Arg(0), "deleted": true})
	}
	fmt.Fprintf(env.stdout, "deleted schedule %s (its scans stay)\n", fs.Arg(0))
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
