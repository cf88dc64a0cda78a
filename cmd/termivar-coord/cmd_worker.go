package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/termivar/distributed/agent"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func runWorker(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommandNamed("worker"), &g, false)
	host, _ := os.Hostname()
	id := fs.String("id", defaultWorkerID(host), "worker ID (one process per ID)")
	capacity := fs.Int("capacity", 1, "tasks run at once (1-256)")
	var tags stringList
	fs.Var(&tags, "tag", "worker tag (repeatable)")
	leaseTTL := fs.Duration("lease-ttl", 30*time.Second, "lease length asked for (renewed every third of it)")
	heartbeat := fs.Duration("heartbeat", 10*time.Second, "heartbeat interval")
	pollWait := fs.Duration("poll-wait", 20*time.Second, "Acquire long-poll bound (at most 60s)")
	grace := fs.Duration("grace", 30*time.Second, "on SIGTERM/SIGINT, how long running tasks may finish before they are killed and failed")
	maxResult := fs.Int("max-result-bytes", 0, "largest stdout stored as a result (0: the tenant's result limit, which the server reports); larger output fails the attempt")
	adaptive := fs.Bool("adaptive-capacity", false, "report the host's CPU and memory use; the node then scales --capacity down by the higher of them (default: the worker gets the capacity it declares)")
	verbose := fs.Bool("v", false, "log debug messages")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return usagef("missing CMD: termivar-coord worker [flags] -- CMD ARGS...")
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: level}))
	a, err := agent.New(agent.Config{
		Client: c, WorkerID: *id, Capacity: *capacity, Tags: tags, Command: argv,
		LeaseTTL: *leaseTTL, HeartbeatInterval: *heartbeat, PollWait: *pollWait, Grace: *grace,
		MaxResultBytes: *maxResult, Logger: log, AdaptiveCapacity: *adaptive,
	})
	if err != nil {
		return usageError{err.Error()}
	}
	if err := a.Run(ctx); err != nil {
		return err
	}
	s := a.Stats()
	log.Info("worker stopped", slog.Int64("completed", s.Completed), slog.Int64("failed", s.Failed), slog.Int64("abandoned", s.Abandoned))
	return nil
}

// defaultWorkerID is "HOST-PID" reduced to identifier characters.
func defaultWorkerID(host string) string {
	id := []byte(fmt.Sprintf("%s-%d", host, os.Getpid()))
	for i, b := range id {
		ok := b == '.' || b == '_' || b == ':' || b == '-' || (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z')
		if !ok {
			id[i] = '-'
		}
	}
	return string(id)
}
