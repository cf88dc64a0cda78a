package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// MaxEnqueueBatch bounds the tasks EnqueueTargets sends in one request (the
// server's own bound is raftfsm.MaxEnqueueTasks, 4096).
const MaxEnqueueBatch = 4096

// ErrTargetMismatch is returned by EnqueueTargets when a task ID it would
// create already exists in the scan with a different target.
var ErrTargetMismatch = errors.New("client: task ID already exists in the scan with another target")

// Priorities returns the priorities Enqueue accepts, lowest first (a new
// slice on every call).
func Priorities() []string { return []string{"low", "normal", "high", "critical"} }

// ParsePriority checks a priority name; "" means "normal".
func ParsePriority(s string) (string, error) {
	if s == "" {
		return "normal", nil
	}
	for _, p := range Priorities() {
		if s == p {
			return s, nil
		}
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

// EnqueueOptions are the settings shared by every task of one
// EnqueueTargets call.
type EnqueueOptions struct {
	// ScanID groups the tasks; required.
	ScanID string
	// Priority is low, normal (default), high or critical.
	Priority string
	// Phases is the wire form of the phase list (see ParsePhases).
	Phases []byte
	// TaskIDs, when non-nil, gives one task ID per target; otherwise IDs
	// come from DeriveTaskID.
	TaskIDs []string
	// BatchSize bounds the tasks per request (default 1000, at most
	// MaxEnqueueBatch).
	BatchSize int
	// ProgressFunc, if set, is called after each admitted batch with the
	// number of tasks admitted so far.
	ProgressFunc func(done int)
	// Schedule holds scheduling fields for every task (schedule.go).
	Schedule Schedule
	// AttemptTimeoutSecs bounds each attempt of every task (0: none): the
	// agent stops the command after it and fails the attempt with reason
	// "timeout"; renewals past it are refused.
	AttemptTimeoutSecs uint64
}

// EnqueueResult reports what EnqueueTargets did.
type EnqueueResult struct {
	// TaskIDs are the tasks' IDs in target order.
	TaskIDs []string
	// Enqueued counts the tasks this call created.
	Enqueued int
	// Existing counts the tasks that already existed in the scan with the
	// same target (skipped, so re-running an enqueue is harmless).
	Existing int
}

// EnqueueTargets enqueues one task per target, in order, in batches. Each
// batch is all-or-nothing on the server. A batch rejected with
// task_already_exists (a re-run, or a retry whose first reply was lost) is
// resent without the tasks the scan already has with the same target; a
// task ID the scan holds for a different target is an error.
//
// Errors: *Error from the server (errors.Is against the core's sentinels),
// ErrTargetMismatch, or a plain error for invalid options.
func (c *Client) EnqueueTargets(ctx context.Context, opts EnqueueOptions, targets []string) (EnqueueResult, error) {
	var res EnqueueResult
	if !distributed.ValidIdentifier(opts.ScanID) {
		return res, errors.New("scan ID must be 1-256 letters, digits, '.', '_', ':' or '-'")
	}
	prio, err := ParsePriority(opts.Priority)
	if err != nil {
		return res, err
	}
	if opts.TaskIDs != nil && len(opts.TaskIDs) != len(targets) {
		return res, fmt.Errorf("got %d task IDs for %d targets", len(opts.TaskIDs), len(targets))
	}
	batch := opts.BatchSize
	if batch <= 0 {
		batch = 1000
	}
	batch = min(batch, MaxEnqueueBatch)
	res.TaskIDs = make([]string, len(targets))
	for i, t := range targets {
		if t == "" {
			return res, fmt.Errorf("target %d is empty", i+1)
		}
		if opts.TaskIDs != nil {
			res.TaskIDs[i] = opts.TaskIDs[i]
		} else {
			res.TaskIDs[i] = DeriveTaskID(opts.ScanID, t)
		}
	}
	var existing map[string]string // task ID -> target, loaded on first conflict
	for lo := 0; lo < len(targets); lo += batch {
		hi := min(lo+batch, len(targets))
		tasks := make([]*pb.NewTask, 0, hi-lo)
		for i := lo; i < hi; i++ {
			nt := &pb.NewTask{TaskId: res.TaskIDs[i], ScanId: opts.ScanID, TargetRef: targets[i], Phases: opts.Phases, Priority: prio}
			opts.Schedule.apply(nt)
			tasks = append(tasks, nt)
		}
		for len(tasks) > 0 {
			_, err := c.Enqueue(ctx, &pb.EnqueueRequest{Tasks: tasks, AttemptTimeoutSecs: opts.AttemptTimeoutSecs})
			if err == nil {
				res.Enqueued += len(tasks)
				break
			}
			if !errors.Is(err, distributed.ErrTaskAlreadyExists) {
				return res, err
			}
			if existing == nil {
				if existing, err = c.scanTargets(ctx, opts.ScanID); err != nil {
					return res, err
				}
			}
			kept := tasks[:0]
			for _, t := range tasks {
				target, ok := existing[t.GetTaskId()]
				switch {
				case !ok:
					kept = append(kept, t)
				case target == t.GetTargetRef():
					res.Existing++
				default:
					return res, fmt.Errorf("task %s: %w", t.GetTaskId(), ErrTargetMismatch)
				}
			}
			if len(kept) == len(tasks) {
				// The conflicting ID lives in another scan.
				return res, err
			}
			tasks = kept
		}
		if opts.ProgressFunc != nil {
			opts.ProgressFunc(hi)
		}
	}
	return res, nil
}

// scanTargets maps every task ID of a scan to its target.
func (c *Client) scanTargets(ctx context.Context, scanID string) (map[string]string, error) {
	m := make(map[string]string)
	err := c.EachTask(ctx, &pb.ListTasksRequest{ScanId: scanID}, func(t *pb.TaskInfo) error {
		m[t.GetTaskId()] = t.GetTargetRef()
		return nil
	})
	return m, err
}

// EachTask calls fn for every task that req selects, page by page
// (req.PageToken is the starting point; req.PageSize defaults to 1000).
func (c *Client) EachTask(ctx context.Context, req *pb.ListTasksRequest, fn func(*pb.TaskInfo) error) error {
	r := &pb.ListTasksRequest{ScanId: req.GetScanId(), Status: req.GetStatus(), PageSize: req.GetPageSize(), PageToken: req.GetPageToken()}
	if r.PageSize == 0 {
		r.PageSize = 1000
	}
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
	stream, err := c.producer.AggregateResults(ctx, connect.NewRequest(&pb.AggregateResultsRequest{ScanId: scanID}))
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
