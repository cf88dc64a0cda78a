package client

import (
	"cmp"
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// ListScans returns one page of the tenant's scans, sorted by scan ID.
func (c *Client) ListScans(ctx context.Context, req *pb.ListScansRequest) (*pb.ListScansResponse, error) {
	return call(ctx, c, "Producer.ListScans", req, c.producerSvc().ListScans)
}

// EachScan calls fn for every scan of the tenant, page by page (pageSize 0
// means the server's default).
func (c *Client) EachScan(ctx context.Context, pageSize uint32, fn func(*pb.ScanInfo) error) error {
	req := &pb.ListScansRequest{PageSize: pageSize}
	for {
		resp, err := c.ListScans(ctx, req)
		if err != nil {
			return err
		}
		for _, s := range resp.GetScans() {
			if err := fn(s); err != nil {
				return err
			}
		}
		if resp.GetNextPageToken() == "" || len(resp.GetScans()) == 0 {
			return nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

// FollowResults returns the results of a scan after req.Cursor, waiting up
// to req.WaitSecs for one (a long-poll). It is a read: a try that gets no
// answer within req.WaitSecs plus Config.AttemptTimeout is re-issued on
// the next node with the same cursor.
func (c *Client) FollowResults(ctx context.Context, req *pb.FollowResultsRequest) (*pb.FollowResultsResponse, error) {
	wait := time.Duration(req.GetWaitSecs()) * time.Second
	return invoke(ctx, c, "Producer.FollowResults", wait, req, c.producerSvc().FollowResults)
}

// Result is one result of a scan.
type Result struct {
	TaskID, TargetRef string
	Result            []byte
	// Cursor resumes a Follow after this result ("" from Results).
	Cursor string
}

// FollowOptions select what Follow reads.
type FollowOptions struct {
	ScanID string
	// Cursor resumes after the result that carried it ("" from the start).
	Cursor string
	// CompletionOrder follows results in completion order instead of
	// enqueue order; a cursor belongs to one order.
	CompletionOrder bool
	// WaitSecs bounds each long-poll (default 30, at most 60).
	WaitSecs uint32
	// DeleteAfterRead purges results once they are acknowledged: each
	// call's cursor acknowledges the results fn returned for before it,
	// and the node purges their tasks (FollowResultsRequest.delete_after_read).
	// After the last page Follow sends one more call to acknowledge it.
	DeleteAfterRead bool
	// AckFunc, if set, runs before every call whose cursor acknowledges
	// results fn got since the last call (with DeleteAfterRead: before
	// they are purged), e.g. to sync the file fn writes to; its error
	// ends Follow with nothing acknowledged.
	AckFunc func() error
}

// followWaitSecs is FollowOptions.WaitSecs' default.
const followWaitSecs = 30

// Follow calls fn once per result of the scan as its tasks finish, from
// opts.Cursor on, and returns when the scan is terminal and every result
// was passed to fn (nil), or on fn's error, the context's end or an error
// of the node. Each call of fn gets the cursor after its result: a Follow
// started again from the last cursor fn saw continues with the next
// result, so a caller that records it gets every result exactly once.
func (c *Client) Follow(ctx context.Context, opts FollowOptions, fn func(Result) error) error {
	wait := cmp.Or(opts.WaitSecs, followWaitSecs)
	req := &pb.FollowResultsRequest{ScanId: opts.ScanID, Cursor: opts.Cursor, CompletionOrder: opts.CompletionOrder,
		WaitSecs: wait, DeleteAfterRead: opts.DeleteAfterRead}
	unacked := false
	for {
		if err := followAck(opts, unacked); err != nil {
			return err
		}
		resp, err := c.FollowResults(ctx, req)
		if err != nil {
			return err
		}
		for _, r := range resp.GetResults() {
			if err := fn(Result{TaskID: r.GetTaskId(), TargetRef: r.GetTargetRef(), Result: r.GetResult(), Cursor: r.GetCursor()}); err != nil {
				return err
			}
		}
		unacked = len(resp.GetResults()) > 0
		req.Cursor = resp.GetNextCursor()
		if resp.GetDone() {
			return c.followLastAck(ctx, opts, req, unacked)
		}
	}
}

// followAck runs opts.AckFunc before a call that acknowledges results.
func followAck(opts FollowOptions, unacked bool) error {
	if !unacked || opts.AckFunc == nil {
		return nil
	}
	return opts.AckFunc()
}

// followLastAck acknowledges the last page of a DeleteAfterRead Follow:
// one call with the final cursor, which purges it and answers done at
// once.
func (c *Client) followLastAck(ctx context.Context, opts FollowOptions, req *pb.FollowResultsRequest, unacked bool) error {
	if !opts.DeleteAfterRead || !unacked {
		return nil
	}
	if err := followAck(opts, unacked); err != nil {
		return err
	}
	req.WaitSecs = 0
	_, err := c.FollowResults(ctx, req)
	return err
}

// EachResult calls fn for every stored result of a scan in enqueue order,
// with its target, once per task (Results without targets).
func (c *Client) EachResult(ctx context.Context, scanID string, fn func(Result) error) error {
	const op = "Producer.AggregateResults"
	var lastErr error
	budget := c.newRetryBudget()
	for attempt := 1; ; attempt++ {
		got, err := c.resultsOnce(ctx, scanID, fn)
		if err == nil {
			return nil
		}
		lastErr = err
		if got > 0 || !retryable(err, true, false) || budget.spent(attempt) || ctx.Err() != nil {
			break
		}
		if Sleep(ctx, budget.backoff(attempt)) != nil {
			break
		}
	}
	if _, ok := errors.AsType[*connect.Error](lastErr); ok || connect.CodeOf(lastErr) != connect.CodeUnknown {
		return wrapErr(op, lastErr)
	}
	return lastErr // fn's own error
}
