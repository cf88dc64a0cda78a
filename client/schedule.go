package client

import (
	"context"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Scheduling (contract Part F): pause, resume and in-flight limits of a
// scan, and a tenant's backoff and fairness options. The enqueue fields
// are in EnqueueOptions.Schedule.

// Schedule are the scheduling fields EnqueueTargets gives every task.
type Schedule struct {
	// DelaySecs makes the tasks leasable this long after the enqueue is
	// applied; NotBeforeSecs (Unix seconds, the leader's clock) from then
	// on. The later of the two wins.
	DelaySecs, NotBeforeSecs uint64
	// RequiredTags are worker tags (linux, windows, gpu, internal,
	// external) a worker must all have declared to lease the tasks.
	RequiredTags []string
	// BackoffBaseSecs and BackoffCapSecs override the tenant's retry
	// backoff for these tasks.
	BackoffBaseSecs, BackoffCapSecs uint64
}

// IsZero reports whether no scheduling field is set.
func (s Schedule) IsZero() bool {
	return s.DelaySecs == 0 && s.NotBeforeSecs == 0 && len(s.RequiredTags) == 0 && s.BackoffBaseSecs == 0 && s.BackoffCapSecs == 0
}

// apply copies the fields into a NewTask.
func (s Schedule) apply(t *pb.NewTask) {
	t.DelaySecs, t.NotBeforeSecs = s.DelaySecs, s.NotBeforeSecs
	t.RequiredTags = s.RequiredTags
	t.BackoffBaseSecs, t.BackoffCapSecs = s.BackoffBaseSecs, s.BackoffCapSecs
}

// UpdateScan pauses, resumes or limits a scan (unset fields stay).
func (c *Client) UpdateScan(ctx context.Context, req *pb.UpdateScanRequest) (*pb.UpdateScanResponse, error) {
	return call(ctx, c, "Producer.UpdateScan", req, c.producerSvc().UpdateScan)
}

// PauseScan stops new leases of the scan's tasks; running tasks finish.
func (c *Client) PauseScan(ctx context.Context, scanID string) (*pb.UpdateScanResponse, error) {
	paused := true
	return c.UpdateScan(ctx, &pb.UpdateScanRequest{ScanId: scanID, Paused: &paused})
}

// ResumeScan lets the scan's tasks be leased again.
func (c *Client) ResumeScan(ctx context.Context, scanID string) (*pb.UpdateScanResponse, error) {
	paused := false
	return c.UpdateScan(ctx, &pb.UpdateScanRequest{ScanId: scanID, Paused: &paused})
}

// SetSchedulingOptions replaces the caller's tenant's scheduling options
// (admin keys).
func (c *Client) SetSchedulingOptions(ctx context.Context, req *pb.SetSchedulingOptionsRequest) (*pb.SetSchedulingOptionsResponse, error) {
	return call(ctx, c, "Admin.SetSchedulingOptions", req, c.adminSvc().SetSchedulingOptions)
}

// CreateSchedule creates a recurring scan: the leader enqueues the targets
// as scan "<scan_prefix>-<tick>" at every tick, once per tick.
func (c *Client) CreateSchedule(ctx context.Context, req *pb.CreateScheduleRequest) (*pb.CreateScheduleResponse, error) {
	return call(ctx, c, "Producer.CreateSchedule", req, c.producerSvc().CreateSchedule)
}

// ListSchedules returns the tenant's schedules.
func (c *Client) ListSchedules(ctx context.Context, req *pb.ListSchedulesRequest) (*pb.ListSchedulesResponse, error) {
	return call(ctx, c, "Producer.ListSchedules", req, c.producerSvc().ListSchedules)
}

// DeleteSchedule removes a schedule; the scans it enqueued stay.
func (c *Client) DeleteSchedule(ctx context.Context, req *pb.DeleteScheduleRequest) (*pb.DeleteScheduleResponse, error) {
	return call(ctx, c, "Producer.DeleteSchedule", req, c.producerSvc().DeleteSchedule)
}
