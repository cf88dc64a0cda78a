package raftfsm

import (
	"math"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Scheduling commands and fields (contract Part F; the core's
// schedule.go). Everything here is a pure function of the command and its
// stamped time, so every replica computes the same not-before time.

// taskScheduling converts a log TaskSpec's scheduling fields. A delay is
// relative to the stamped time now; the later of it and not_before_secs
// wins (saturating). A tag value above 255 is refused here, smaller
// undeclared ones by the core.
func taskScheduling(s *pb.TaskSpec, now uint64) (distributed.TaskScheduling, error) {
	out := distributed.TaskScheduling{
		NotBeforeSecs:   s.GetNotBeforeSecs(),
		BackoffBaseSecs: s.GetBackoffBaseSecs(),
		BackoffCapSecs:  s.GetBackoffCapSecs(),
	}
	if d := s.GetDelaySecs(); d > 0 {
		at := uint64(math.MaxUint64)
		if now <= math.MaxUint64-d {
			at = now + d
		}
		out.NotBeforeSecs = max(out.NotBeforeSecs, at)
	}
	if len(s.GetRequiredTags()) > distributed.MaxWorkerTags {
		return distributed.TaskScheduling{}, distributed.NewInvalidTaskError("too many required tags")
	}
	for _, tag := range s.GetRequiredTags() {
		if tag > math.MaxUint8 {
			return distributed.TaskScheduling{}, distributed.NewInvalidTaskError("required tag is invalid")
		}
		out.RequiredTags = append(out.RequiredTags, distributed.WorkerTag(tag))
	}
	return out, nil
}

// SchedulingFromProto converts scheduling options (nil: none).
func SchedulingFromProto(o *pb.SchedulingOptions) distributed.SchedulingOptions {
	return distributed.SchedulingOptions{
		BackoffBaseSecs: o.GetBackoffBaseSecs(),
		BackoffCapSecs:  o.GetBackoffCapSecs(),
		FairScans:       o.GetFairScans(),
	}
}

// SchedulingToProto converts scheduling options.
func SchedulingToProto(o distributed.SchedulingOptions) *pb.SchedulingOptions {
	return &pb.SchedulingOptions{BackoffBaseSecs: o.BackoffBaseSecs, BackoffCapSecs: o.BackoffCapSecs, FairScans: o.FairScans}
}

func (f *FSM) applySetScheduling(c tenantCall) Response {
	o := SchedulingFromProto(c.cmd.GetSetSchedulingOptions().GetOptions())
	return resp(c.t.pool.SetSchedulingOptions(c.rev, c.now, o))
}

func (f *FSM) applyUpdateScan(c tenantCall) Response {
	u := c.cmd.GetUpdateScan()
	su := distributed.ScanUpdate{ScanID: u.GetScanId()}
	if u.MaxInFlight != nil {
		su.SetMaxInFlight, su.MaxInFlight = true, u.GetMaxInFlight()
	}
	if u.Paused != nil {
		su.SetPaused, su.Paused = true, u.GetPaused()
	}
	return resp(c.t.pool.UpdateScan(c.rev, c.now, su))
}

func (f *FSM) applyAdvanceTime(c tenantCall) Response {
	return resp(c.t.pool.AdvanceTime(c.rev, c.now))
}

// ScanState returns a scan's settings and counts (contract Part F).
func (v TenantView) ScanState(scanID string) (distributed.ScanState, error) {
	return v.t.pool.ScanState(scanID)
}

// ScanSettings returns a scan's settings, O(1).
func (v TenantView) ScanSettings(scanID string) (distributed.ScanSettings, error) {
	return v.t.pool.ScanSettings(scanID)
}

// SchedulingOptions returns the tenant's scheduling options.
func (v TenantView) SchedulingOptions() distributed.SchedulingOptions {
	return v.t.pool.SchedulingOptions()
}

// HasLeasable reports whether some queued task may be leased now (due,
// its scan neither paused nor at its limit; tags not considered), so an
// Acquire long-poll proposes only when it may succeed.
func (v TenantView) HasLeasable() bool {
	_, ok := v.t.pool.PeekNext()
	return ok
}

// LogicalTime returns the tenant's logical time (what "scheduled" is
// measured against).
func (v TenantView) LogicalTime() uint64 { return v.t.pool.Snapshot().LogicalTime }
