// Package wire converts the core's limits to and from their wire
// messages: one mapping for the FSM (commands, snapshots), the server
// (tenant defaults), the node (the system tenant) and the CLI (tenants
// create), none of which needs another's package for it.
package wire

import (
	"math"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// LimitsFromProto converts and validates wire limits; nil means
// distributed.DefaultLimits().
func LimitsFromProto(l *pb.CoreLimits) (distributed.Limits, error) {
	if l == nil {
		return distributed.DefaultLimits(), nil
	}
	lim := distributed.Limits{
		MaxTaskRecords:       int(l.GetMaxTaskRecords()),
		MaxActiveTasks:       int(l.GetMaxActiveTasks()),
		MaxQueuedTasks:       int(l.GetMaxQueuedTasks()),
		MaxTerminalTasks:     int(l.GetMaxTerminalTasks()),
		MaxWorkers:           int(l.GetMaxWorkers()),
		MaxRetries:           l.GetMaxRetries(),
		MaxLeaseTTLSecs:      l.GetMaxLeaseTtlSecs(),
		MaxTaskTTLSecs:       l.GetMaxTaskTtlSecs(),
		HeartbeatTimeoutSecs: l.GetHeartbeatTimeoutSecs(),
	}
	return lim, lim.Validate()
}

// LimitsToProto is the inverse of LimitsFromProto.
func LimitsToProto(l distributed.Limits) *pb.CoreLimits {
	return &pb.CoreLimits{
		MaxTaskRecords:       uint32(l.MaxTaskRecords),
		MaxActiveTasks:       uint32(l.MaxActiveTasks),
		MaxQueuedTasks:       uint32(l.MaxQueuedTasks),
		MaxTerminalTasks:     uint32(l.MaxTerminalTasks),
		MaxWorkers:           uint32(l.MaxWorkers),
		MaxRetries:           l.MaxRetries,
		MaxLeaseTtlSecs:      l.MaxLeaseTTLSecs,
		MaxTaskTtlSecs:       l.MaxTaskTTLSecs,
		HeartbeatTimeoutSecs: l.HeartbeatTimeoutSecs,
	}
}

// ResultLimitsFromProto converts and validates wire result limits; nil means
// distributed.DefaultResultLimits().
func ResultLimitsFromProto(l *pb.ResultLimits) (distributed.ResultLimits, error) {
	if l == nil {
		return distributed.DefaultResultLimits(), nil
	}
	clamp := func(v uint64) int {
		if v > math.MaxInt32 {
			return math.MaxInt32
		}
		return int(v)
	}
	rl := distributed.ResultLimits{
		MaxResults:        clamp(l.GetMaxResults()),
		MaxResultBytes:    clamp(l.GetMaxResultBytes()),
		MaxTotalBytes:     clamp(l.GetMaxTotalBytes()),
		MaxAggregateItems: clamp(l.GetMaxAggregateItems()),
		MaxAggregateBytes: clamp(l.GetMaxAggregateBytes()),
	}
	return rl, rl.Validate()
}

// ResultLimitsToProto is the inverse of ResultLimitsFromProto.
func ResultLimitsToProto(l distributed.ResultLimits) *pb.ResultLimits {
	return &pb.ResultLimits{
		MaxResults:        uint64(l.MaxResults),
		MaxResultBytes:    uint64(l.MaxResultBytes),
		MaxTotalBytes:     uint64(l.MaxTotalBytes),
		MaxAggregateItems: uint64(l.MaxAggregateItems),
		MaxAggregateBytes: uint64(l.MaxAggregateBytes),
	}
}
