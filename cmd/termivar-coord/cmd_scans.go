package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// scansUsage lists the scans subcommands.
const scansUsage = `usage: termivar-coord scans delete SCAN [--force] [--json]

  delete SCAN   purge a scan's tasks and their results (every task must be
                completed, failed, cancelled or expired); --force cancels
                its queued, leased and running tasks first`

// runScans dispatches the scans subcommands (contract Part F,
// docs/adr/0002-purge.md).
func runScans(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) == 0 {
		return usageError{scansUsage}
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(env.stderr, scansUsage)
		return flag.ErrHelp
	case "delete":
		return runScansDelete(ctx, env, args[1:])
	}
	return usagef("unknown subcommand %q\n%s", args[0], scansUsage)
}

// runScansDelete deletes one scan: DeleteScan, with --force cancelling its
// live tasks in the same command.
func runScansDelete(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommand{name: "scans delete"}, &g, true)
	fs.Usage = func() { fmt.Fprintln(env.stderr, scansUsage) }
	force := fs.Bool("force", false, "cancel the scan's queued, leased and running tasks first")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("usage: termivar-coord scans delete SCAN [--force]")
	}
	scan := pos[0]
	if err := distributed.CheckTaskCommandID(scan); err != nil {
		return usagef("scan ID is invalid (1-256 letters, digits, '.', '_', ':', '-')")
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	resp, err := c.DeleteScan(ctx, &pb.DeleteScanRequest{ScanId: scan, Force: *force})
	switch {
	case errors.Is(err, distributed.ErrInvalidTransition):
		return rejectedError{fmt.Sprintf("scan %s still has queued, leased or running tasks; wait for them, or delete with --force to cancel them first", scan)}
	case isKind(err, "scan_not_found"):
		return rejectedError{fmt.Sprintf("scan %s has no tasks (never enqueued, or already deleted)", scan)}
	case err != nil:
		return err
	}
	if g.json {
		return writeJSON(env.stdout, map[string]any{"scan_id": scan, "purged": resp.GetPurged(),
			"cancelled": resp.GetCancelled(), "revision": resp.GetRevision()})
	}
	if resp.GetCancelled() > 0 {
		fmt.Fprintf(env.stdout, "cancelled %d tasks of scan %s\n", resp.GetCancelled(), scan)
	}
	fmt.Fprintf(env.stdout, "deleted scan %s: %d tasks and their results\n", scan, resp.GetPurged())
	return nil
}

// isKind reports whether err is a client error of the registry kind.
func isKind(err error, kind string) bool {
	var ce *client.Error
	return errors.As(err, &ce) && ce.Kind == kind
}
