package raftfsm

import (
	"math"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func invalidWorker(reason string) error {
	return distributed.NewInvalidWorkerError(reason)
}

func basisPoints(v uint32) (uint16, bool) {
	if v > math.MaxUint16 {
		return 0, false
	}
	return uint16(v), true
}

// workerSpec converts a wire spec; values too wide for the core's types fail
// with the reason the core would give for the (necessarily invalid) value.
func workerSpec(s *pb.WorkerSpec) (distributed.WorkerSpec, error) {
	cpu, ok1 := basisPoints(s.GetCpuBasisPoints())
	mem, ok2 := basisPoints(s.GetMemoryBasisPoints())
	net, ok3 := basisPoints(s.GetNetworkBasisPoints())
	spec := distributed.WorkerSpec{WorkerID: s.GetWorkerId(), Capacity: s.GetCapacity(), CPUBasisPoints: cpu, MemoryBasisPoints: mem, NetworkBasisPoints: net}
	if !ok1 || !ok2 || !ok3 {
		return spec, invalidWorker("utilization exceeds 10000 basis points")
	}
	if len(s.GetTags()) > 64 {
		return spec, invalidWorker("too many tags")
	}
	for _, t := range s.GetTags() {
		if t > math.MaxUint8 {
			return spec, invalidWorker("tag is invalid")
		}
		spec.Tags = append(spec.Tags, distributed.WorkerTag(t))
	}
	return spec, nil
}

func observation(u *pb.UpdateWorker) (distributed.WorkerObservation, error) {
	if u.GetStatus() > math.MaxUint8 {
		return distributed.WorkerObservation{}, invalidWorker("worker status is invalid")
	}
	cpu, ok1 := basisPoints(u.GetCpuBasisPoints())
	mem, ok2 := basisPoints(u.GetMemoryBasisPoints())
	net, ok3 := basisPoints(u.GetNetworkBasisPoints())
	obs := distributed.WorkerObservation{Status: distributed.WorkerStatus(u.GetStatus()), CPUBasisPoints: cpu, MemoryBasisPoints: mem, NetworkBasisPoints: net}
	if !ok1 || !ok2 || !ok3 {
		return obs, invalidWorker("utilization exceeds 10000 basis points")
	}
	return obs, nil
}

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
