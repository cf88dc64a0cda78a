package client

import (
	"context"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Retry re-runs a scan's failed, expired or cancelled tasks (req.Statuses
// selects which; empty: all three), or only req.TaskIds of the scan, as new
// generations with a fresh retry budget. Tasks already queued, leased,
// running or completed are left as they are (RetryResponse.Unchanged), so
// a repeated Retry is harmless. Leases and fences of the earlier
// generations stay stale. Errors: invalid_task (a status other than failed,
// expired or cancelled, a task of another scan), task_not_found (an unknown
// scan or task), queued or active task capacity.
func (c *Client) Retry(ctx context.Context, req *pb.RetryRequest) (*pb.RetryResponse, error) {
	return call(ctx, c, "Producer.Retry", req, c.producerSvc().Retry)
}
