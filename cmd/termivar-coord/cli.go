// This file holds the command table of the client-side commands (worker,
// enqueue, status, tasks, workers, cancel, watch, results, demo, cluster),
// their shared flags (--server, --key, --json, and the TLS options
// --ca-file, --cert-file, --key-file of client.go) and the exit-code mapping
// of the stable CLI surface (contract Part D): 0 ok, 1 usage error, 2
// rejected request,
// 3 server unreachable; watch adds 4, the scan ended with failed or expired
// tasks.

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/termivar/distributed/client"
)

// clientCommand is one client subcommand: a row of clientCommands.
type clientCommand struct {
	name    string
	usage   string // one line: the arguments after the name
	summary string
	// run executes the command. It returns a usageError for bad arguments.
	run func(ctx context.Context, env *cliEnv, args []string) error
}

// clientCommands is the table of every client subcommand, in the order the
// top-level help lists them: try it, run workers, feed them, look, steer,
// follow a scan, administer the cluster. Each command's runner lives in its
// cmd_*.go file. (serve, keys, tenants and bench are node commands with
// their own flags: main.go's commands.)
func clientCommands() []clientCommand {
	return []clientCommand{
		{name: "demo", usage: "[--targets N] [--keep]",
			summary: "run an embedded node, three workers and a scan with a worker crash, then print the results summary",
			run:     runDemo},
		{name: "worker", usage: "[--id ID] [--capacity N] [--adaptive-capacity] [--tag T ...] -- CMD ARGS...",
			summary: "run a worker agent that runs CMD once per leased task",
			run:     runWorker},
		{name: "enqueue", usage: "--scan S [--priority low|normal|high|critical] [--phases 1,2] [--timeout D] [--no-wait] [--retry-for D] [--delay D | --at TIME] [--require-tag T ...] [--max-in-flight N] TARGET... | --file F | -",
			summary: "enqueue one task per target, waiting for room in the tenant's queue (task IDs derived from scan and target unless --task-id is given, so a re-run stores only what is missing); exit 0 only when every target is stored",
			run:     runEnqueue},
		{name: "status", usage: "[--json]", summary: "show the node's and your tenant's status", run: runStatus},
		{name: "scans", usage: "[--limit N] [--json] | delete SCAN [--force]",
			summary: "list scans: state, counts per status, times, result size, retention (JSON: one object per line); delete purges a finished scan",
			run:     runScans},
		{name: "tasks", usage: "[--scan S] [--status X] [--limit N] [--json]", summary: "list tasks with their targets and last failure reason (JSON: one object per line)", run: runTasks},
		{name: "task", usage: "[--json] TASK", summary: "show one task and its attempt history (worker, lease, times, outcome, reason)", run: runTask},
		{name: "workers", usage: "[--json]", summary: "list workers (JSON: one object per line)", run: runWorkers},
		{name: "cancel", usage: "[--json] TASK", summary: "cancel a queued, leased or running task", run: runCancel},
		{name: "retry", usage: "--scan S [--status failed,expired,cancelled] [--json] [TASK...]",
			summary: "re-run a scan's failed, expired or cancelled tasks (or the named ones) as new attempts",
			run:     runRetry},
		{name: "pause", usage: "[--json] SCAN", summary: "stop leasing a scan's tasks (queued tasks stay queued, running ones finish)", run: runPause},
		{name: "resume", usage: "[--json] SCAN", summary: "lease a paused scan's tasks again", run: runResume},
		{name: "limit", usage: "--max-in-flight N [--json] SCAN", summary: "run at most N of a scan's tasks at once (0: no limit)", run: runLimit},
		{name: "scheduling", usage: "[--backoff-base D] [--backoff-cap D] [--fair-scans] [--json]",
			summary: "set your tenant's retry backoff and fairness between scans (admin key)", run: runScheduling},
		{name: "schedules", usage: schedulesUsage,
			summary: "recurring scans: the leader enqueues the targets as a new scan at every tick, once", run: runSchedules},
		{name: "watch", usage: "--scan S [--interval D] [--stall-after D] [--json]",
			summary: "show a live progress bar for a scan until every task is terminal; explain a stall; exit 4 if tasks failed or expired",
			run:     runWatch},
		{name: "results", usage: strings.TrimPrefix(resultsUsage, "results "),
			summary: "print a scan's results in enqueue order (raw, or JSON lines); --follow streams them as tasks finish",
			run:     runResults},
		{name: "cluster", usage: "members|add|remove|transfer-leadership [args] (cluster --help)",
			summary: "raft membership: members, add, remove, transfer-leadership (admin key)",
			run:     runCluster},
	}
}

// lookupCommand returns the client command called name.
func lookupCommand(name string) (clientCommand, bool) {
	for _, c := range clientCommands() {
		if c.name == name {
			return c, true
		}
	}
	return clientCommand{}, false
}

// clientCommandNamed returns the table row of a runner's own command; a runner asking
// for a name the table lacks is a programmer error.
func clientCommandNamed(name string) clientCommand {
	c, ok := lookupCommand(name)
	if !ok {
		panic("termivar-coord: no client command " + name + " in clientCommands")
	}
	return c
}

// cliEnv is what a command gets besides its arguments.
type cliEnv struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// server, key and json are the global options given before the command
	// name; each command's own flags may override them.
	server, key string
	json        bool
	tls         tlsFlags // --ca-file, --cert-file, --key-file (client.go)
	// retry is --retry-timeout given before the command name, else
	// $TERMIVAR_RETRY_TIMEOUT (set false: neither; client.go).
	retry retryFlag
}

// usageError is a bad invocation (exit code 1).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// rejectedError is a request the CLI itself refuses on the server's
// answer (exit code 2, like a rejection by the server).
type rejectedError struct{ msg string }

func (e rejectedError) Error() string { return e.msg }

// exitCode maps an error to the CLI's exit code.
func exitCode(err error) int {
	var ce *client.Error
	var re rejectedError
	switch {
	case err == nil:
		return exitOK
	case client.IsUnreachable(err):
		return exitUnreachable
	case errors.As(err, &ce), errors.As(err, &re):
		return exitRejected
	case errors.As(err, new(scanFailedError)):
		return exitScanFailed
	}
	return exitUsage
}

// runRegistered runs a command of clientCommands; ok is false if name is
// not one.
func runRegistered(name string, args []string, env *cliEnv) (code int, ok bool) {
	c, ok := lookupCommand(name)
	if !ok {
		return 0, false
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runCommand(ctx, c, args, env), true
}

// runCommand runs c until it returns or ctx (SIGINT/SIGTERM in
// runRegistered) ends, prints its error and returns its exit code.
func runCommand(ctx context.Context, c clientCommand, args []string, env *cliEnv) int {
	name := c.name
	err := c.run(ctx, env, args)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// Interrupted (SIGINT/SIGTERM) while waiting: the shell convention.
		fmt.Fprintln(env.stderr)
		return exitInterrupted
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(env.stderr, "termivar-coord %s: %v\n", name, err)
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	return exitCode(err)
}

// registeredUsage lists the client commands for the top-level help.
func registeredUsage() string {
	var b strings.Builder
	for _, c := range clientCommands() {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
	}
	return b.String()
}

// globalFlags are the options every client command accepts.
type globalFlags struct {
	server, key  string
	json         bool
	tls          tlsFlags
	retryTimeout time.Duration
}

// newFlagSet returns a flag set with the global options bound to g, whose
// defaults come from env (already resolved global flags).
func newFlagSet(env *cliEnv, c clientCommand, g *globalFlags, withJSON bool) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.StringVar(&g.server, "server", env.server, "node URL (env "+client.EnvServer+", default "+client.DefaultServerURL+")")
	fs.StringVar(&g.key, "key", env.key, "API key (env "+client.EnvKey+", default the key in ./"+client.DefaultKeyFile+")")
	g.tls.register(fs, env.tls)
	registerRetryTimeout(fs, &g.retryTimeout, env.retry)
	if withJSON {
		fs.BoolVar(&g.json, "json", env.json, "print JSON instead of a table")
	}
	fs.Usage = func() {
		fmt.Fprintf(env.stderr, "usage: termivar-coord %s %s\n\n%s\n\nflags:\n", c.name, c.usage, c.summary)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, turning flag errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	return nil
}

// newClient resolves the server and key (flag, then environment, then the
// default key file) and returns a client.
func newClient(g *globalFlags) (*client.Client, error) {
	server := cmp.Or(g.server, os.Getenv(client.EnvServer))
	key := cmp.Or(g.key, os.Getenv(client.EnvKey))
	if key == "" {
		k, err := client.LoadKey(client.DefaultKeyFile)
		if err != nil {
			return nil, usageError{"no API key: pass --key, set " + client.EnvKey + ", or run where ./" + client.DefaultKeyFile + " exists"}
		}
		key = k
	}
	hc, err := g.tls.orEnv().httpClient(server)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	cfg, err := withRetryTimeout(client.Config{ServerURL: server, Key: key, HTTPClient: hc}, g.retryTimeout)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	c, err := client.New(cfg)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	return c, nil
}

// parseGlobal consumes the global options that precede the command name.
// It returns the remaining arguments.
func parseGlobal(args []string, env *cliEnv) ([]string, error) {
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		name, val, hasVal := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		switch name {
		case "json":
			env.json = !hasVal || val == "true"
			args = args[1:]
			continue
		case "server", "key", "ca-file", "cert-file", "key-file", "retry-timeout":
		default:
			return args, nil
		}
		if !hasVal {
			if len(args) < 2 {
				return nil, usagef("flag --%s needs a value", name)
			}
			val, args = args[1], args[1:]
		}
		args = args[1:]
		switch name {
		case "server":
			env.server = val
		case "key":
			env.key = val
		case "retry-timeout":
			if err := env.retry.Set(val); err != nil {
				return nil, usagef("flag --retry-timeout: %v", err)
			}
		default:
			env.tls.set(name, val)
		}
	}
	return args, nil
}

// writeJSON prints v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// dispatchRegistered is the one hook main needs: it parses the global
// options before the command name and runs the command if clientCommands
// lists it. ok is false when the command is not one of ours (main handles
// it).
func dispatchRegistered(args []string) (code int, ok bool) {
	env := &cliEnv{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}
	err := env.retry.fromEnv()
	var rest []string
	if err == nil {
		rest, err = parseGlobal(args, env)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "termivar-coord:", err)
		return exitUsage, true
	}
	if len(rest) == 0 {
		return 0, false
	}
	return runRegistered(rest[0], rest[1:], env)
}
