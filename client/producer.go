package client

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Priorities returns the priorities Enqueue accepts, lowest first (a new
// slice on every call).
func Priorities() []string { return []string{"low", "normal", "high", "critical"} }

// ParsePriority checks a priority name; "" means "normal".
func ParsePriority(s string) (string, error) {
	if s == "" {
		return "normal", nil
	}
	if slices.Contains(Priorities(), s) {
		return s, nil
	}
	return "", fmt.Errorf("priority must be one of %s", strings.Join(Priorities(), ", "))
}

// ParsePhases parses a comma-separated phase list such as "1,2" into the
// wire form (one byte per phase, each 0–255). "" yields nil.
func ParsePhases(s string) ([]byte, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]byte, 0, len(parts))
	for _, p := range parts {
		n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 8)
		if err != nil {
			return nil, errors.New("phases must be comma-separated numbers 0-255")
		}
		out = append(out, byte(n))
	}
	return out, nil
}

// FormatPhases is the inverse of ParsePhases ("1,2").
func FormatPhases(b []byte) string {
	parts := make([]string, len(b))
	for i, p := range b {
		parts[i] = strconv.Itoa(int(p))
	}
	return strings.Join(parts, ",")
}

// DeriveTaskID returns the task ID EnqueueTargets uses for a target of a
// scan that has none given: "t-" and the first 24 hex digits of
// SHA-256(scanID NUL target). The same scan and target always give the same
// ID, so enqueueing a list twice does not duplicate work, and the ID reveals
// nothing of the target.
func DeriveTaskID(scanID, target string) string {
	h := sha256.New()
	h.Write([]byte(scanID))
	h.Write([]byte{0})
	h.Write([]byte(target))
	return "t-" + hex.EncodeToString(h.Sum(nil))[:24]
}

// EachTask calls fn for every task that req selects, page by page
// (req.PageToken is the starting point; req.PageSize defaults to 1000).
func (c *Client) EachTask(ctx context.Context, req *pb.ListTasksRequest, fn func(*pb.TaskInfo) error) error {
	r := &pb.ListTasksRequest{ScanId: req.GetScanId(), Status: req.GetStatus(), PageSize: req.GetPageSize(), PageToken: req.GetPageToken()}
	r.PageSize = cmp.Or(r.PageSize, 1000)
	for {
		resp, err := c.ListTasks(ctx, r)
		if err != nil {
			return err
		}
		for _, t := range resp.GetTasks() {
			if err := fn(t); err != nil {
				return err
			}
		}
		if resp.GetNextPageToken() == "" || len(resp.GetTasks()) == 0 {
			return nil
		}
		r.PageToken = resp.GetNextPageToken()
	}
}

// Results streams a scan's results in enqueue order, calling fn once per
// task. It retries the stream on Unavailable only until the first result
// arrived (a later break is returned, so fn never sees a result twice).
func (c *Client) Results(ctx context.Context, scanID string, fn func(taskID string, result []byte) error) error {
	return c.EachResult(ctx, scanID, func(r Result) error { return fn(r.TaskID, r.Result) })
}

func (c *Client) resultsOnce(ctx context.Context, scanID string, fn func(Result) error) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.producerSvc().AggregateResults(ctx, connect.NewRequest(&pb.AggregateResultsRequest{ScanId: scanID}))
	if err != nil {
		return 0, err
	}
	defer stream.Close()
	n := 0
	for stream.Receive() {
		m := stream.Msg()
		n++
		if err := fn(Result{TaskID: m.GetTaskId(), TargetRef: m.GetTargetRef(), Result: m.GetResult()}); err != nil {
			return n, err
		}
	}
	return n, stream.Err()
}
