package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	distributed "github.com/termivar/distributed"
	"github.com/termivar/distributed/client"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// This file holds the scans command: every scan of the tenant with its
// state, counts, times, result size and retention deadline; scans delete
// purges one.

// scanJSON is one line of scans --json. Times are the node's logical
// seconds (Unix time of the leader's clock); finished_at is absent while
// the scan runs (or when the node did not record it). declared_total is
// the producer's declared number of targets and pending the part of it
// not admitted yet (both absent when none was declared).
type scanJSON struct {
	ScanID      string `json:"scan_id"`
	State       string `json:"state"`
	CreatedAt   uint64 `json:"created_at,omitempty"`
	FinishedAt  uint64 `json:"finished_at,omitempty"`
	Admitted    uint32 `json:"admitted"`
	Declared    uint64 `json:"declared_total,omitempty"`
	Pending     uint64 `json:"pending,omitempty"`
	Queued      uint32 `json:"queued"`
	Leased      uint32 `json:"leased"`
	Running     uint32 `json:"running"`
	Completed   uint32 `json:"completed"`
	Failed      uint32 `json:"failed"`
	Cancelled   uint32 `json:"cancelled"`
	Expired     uint32 `json:"expired"`
	Results     uint32 `json:"results"`
	ResultBytes uint64 `json:"result_bytes"`
	// RetentionDeadline is absent when no retention policy applies.
	RetentionDeadline *uint64 `json:"retention_deadline,omitempty"`
}

func toScanJSON(s *pb.ScanInfo) scanJSON {
	return scanJSON{ScanID: s.GetScanId(), State: s.GetState(), CreatedAt: s.GetCreatedAt(), FinishedAt: s.GetFinishedAt(),
		Admitted: s.GetAdmitted(), Declared: s.GetDeclaredTotal(), Pending: s.GetPending(), Queued: s.GetQueued(), Leased: s.GetLeased(), Running: s.GetRunning(), Completed: s.GetCompleted(),
		Failed: s.GetFailed(), Cancelled: s.GetCancelled(), Expired: s.GetExpired(), Results: s.GetResults(), ResultBytes: s.GetResultBytes(),
		RetentionDeadline: s.RetentionDeadline}
}

// scanStateLabel is the table's word for a ScanInfo.state.
func scanStateLabel(state string) string {
	if state == "done_with_failures" {
		return "done with failures"
	}
	return state
}

// logicalTime formats a node time (Unix seconds) for a table; 0 is "-".
func logicalTime(secs uint64) string {
	if secs == 0 {
		return "-"
	}
	return time.Unix(int64(secs), 0).Format(time.DateTime)
}

// byteSize formats a byte count with a binary unit.
func byteSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	d, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		d *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(d), "KMGTP"[exp])
}

// runScansList lists the tenant's scans (ListScans).
func runScansList(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommandNamed("scans"), &g, true)
	limit := fs.Int("limit", 0, "print at most N scans (0 = all)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unknown subcommand %q\n%s", fs.Arg(0), scansUsage)
	}
	if *limit < 0 {
		return usagef("--limit must not be negative")
	}
	c, err := newClient(&g)
	if err != nil {
		return err
	}
	var rows []*pb.ScanInfo
	n := 0
	errStop := errors.New("limit reached")
	err = c.EachScan(ctx, 0, func(s *pb.ScanInfo) error {
		if *limit > 0 && n >= *limit {
			return errStop
		}
		n++
		if g.json {
			return writeJSON(env.stdout, toScanJSON(s))
		}
		rows = append(rows, s)
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return err
	}
	if g.json {
		return nil
	}
	return writeScansTable(env.stdout, rows)
}

// writeScansTable prints the scans as a table. The DECLARED and PENDING
// columns (the producer's declared total and the part of it not admitted
// yet) are printed only when a scan has a declared total, the RETENTION
// column (when the scan's records may be deleted) only when a scan has a
// retention deadline.
func writeScansTable(w io.Writer, rows []*pb.ScanInfo) error {
	declared := slices.ContainsFunc(rows, func(s *pb.ScanInfo) bool { return s.GetDeclaredTotal() != 0 })
	retention := slices.ContainsFunc(rows, func(s *pb.ScanInfo) bool { return s.RetentionDeadline != nil })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "SCAN\tSTATE\tCREATED\tFINISHED\tADMITTED"
	if declared {
		head += "\tDECLARED\tPENDING"
	}
	head += "\tQUEUED\tRUNNING\tCOMPLETED\tFAILED\tCANCELLED\tEXPIRED\tRESULTS\tRESULT SIZE"
	if retention {
		head += "\tRETENTION"
	}
	fmt.Fprintln(tw, head)
	for _, s := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d", s.GetScanId(), scanStateLabel(s.GetState()),
			logicalTime(s.GetCreatedAt()), logicalTime(s.GetFinishedAt()), s.GetAdmitted())
		if declared {
			fmt.Fprintf(tw, "\t%s", declaredCells(s))
		}
		fmt.Fprintf(tw, "\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s", s.GetQueued(), s.GetLeased()+s.GetRunning(),
			s.GetCompleted(), s.GetFailed(), s.GetCancelled(), s.GetExpired(), s.GetResults(), byteSize(s.GetResultBytes()))
		if retention {
			fmt.Fprintf(tw, "\t%s", logicalTime(s.GetRetentionDeadline()))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// declaredCells are the DECLARED and PENDING cells; "-" for a scan
// without a declared total.
func declaredCells(s *pb.ScanInfo) string {
	if s.GetDeclaredTotal() == 0 {
		return "-\t-"
	}
	return fmt.Sprintf("%d\t%d", s.GetDeclaredTotal(), s.GetPending())
}

// scansUsage lists the scans subcommands.
const scansUsage = `usage: termivar-coord scans [--limit N] [--json]
       termivar-coord scans delete SCAN [--force] [--json]

  (none)        list the tenant's scans: state, times, counts per status,
                result size and retention deadline
  delete SCAN   purge a scan's tasks and their results (every task must be
                completed, failed, cancelled or expired); --force cancels
                its queued, leased and running tasks first`

// runScans lists the scans, or dispatches the delete subcommand (contract
// Part F, docs/adr/0002-purge.md).
func runScans(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) == 0 {
		return runScansList(ctx, env, args)
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(env.stderr, scansUsage)
		return flag.ErrHelp
	case "delete":
		return runScansDelete(ctx, env, args[1:])
	}
	return runScansList(ctx, env, args)
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
	case client.KindOf(err) == "scan_not_found":
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
