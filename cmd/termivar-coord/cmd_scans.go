package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// This file holds the scans command: every scan of the tenant with its
// state, counts, times and result size.

// scanJSON is one line of scans --json. Times are the node's logical
// seconds (Unix time of the leader's clock); finished_at is absent while
// the scan runs (or when the node did not record it).
type scanJSON struct {
	ScanID      string `json:"scan_id"`
	State       string `json:"state"`
	CreatedAt   uint64 `json:"created_at,omitempty"`
	FinishedAt  uint64 `json:"finished_at,omitempty"`
	Admitted    uint32 `json:"admitted"`
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
		Admitted: s.GetAdmitted(), Queued: s.GetQueued(), Leased: s.GetLeased(), Running: s.GetRunning(), Completed: s.GetCompleted(),
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

func runScans(ctx context.Context, env *cliEnv, args []string) error {
	var g globalFlags
	fs := newFlagSet(env, clientCommandNamed("scans"), &g, true)
	limit := fs.Int("limit", 0, "print at most N scans (0 = all)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("scans takes no arguments")
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

// writeScansTable prints the scans as a table. The RETENTION column (when
// the scan's records may be deleted) is printed only when a scan has a
// retention deadline.
func writeScansTable(w io.Writer, rows []*pb.ScanInfo) error {
	retention := slices.ContainsFunc(rows, func(s *pb.ScanInfo) bool { return s.RetentionDeadline != nil })
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "SCAN\tSTATE\tCREATED\tFINISHED\tADMITTED\tQUEUED\tRUNNING\tCOMPLETED\tFAILED\tCANCELLED\tEXPIRED\tRESULTS\tRESULT SIZE"
	if retention {
		head += "\tRETENTION"
	}
	fmt.Fprintln(tw, head)
	for _, s := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s", s.GetScanId(), scanStateLabel(s.GetState()),
			logicalTime(s.GetCreatedAt()), logicalTime(s.GetFinishedAt()), s.GetAdmitted(), s.GetQueued(), s.GetLeased()+s.GetRunning(),
			s.GetCompleted(), s.GetFailed(), s.GetCancelled(), s.GetExpired(), s.GetResults(), byteSize(s.GetResultBytes()))
		if retention {
			fmt.Fprintf(tw, "\t%s", logicalTime(s.GetRetentionDeadline()))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}
