package raftfsm

import (
	"math"

	distributed "github.com/termivar/distributed"
	pb "github.com/termivar/distributed/gen/termivar/v1"
)

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
		return spec, distributed.NewInvalidWorkerError("utilization exceeds 10000 basis points")
	}
	if len(s.GetTags()) > 64 {
		return spec, distributed.NewInvalidWorkerError("too many tags")
	}
	for _, t := range s.GetTags() {
		if t > math.MaxUint8 {
			return spec, distributed.NewInvalidWorkerError("tag is invalid")
		}
		spec.Tags = append(spec.Tags, distributed.WorkerTag(t))
	}
	return spec, nil
}

func observation(u *pb.UpdateWorker) (distributed.WorkerObservation, error) {
	if u.GetStatus() > math.MaxUint8 {
		return distributed.WorkerObservation{}, distributed.NewInvalidWorkerError("worker status is invalid")
	}
	cpu, ok1 := basisPoints(u.GetCpuBasisPoints())
	mem, ok2 := basisPoints(u.GetMemoryBasisPoints())
	net, ok3 := basisPoints(u.GetNetworkBasisPoints())
	obs := distributed.WorkerObservation{Status: distributed.WorkerStatus(u.GetStatus()), CPUBasisPoints: cpu, MemoryBasisPoints: mem, NetworkBasisPoints: net}
	if !ok1 || !ok2 || !ok3 {
		return obs, distributed.NewInvalidWorkerError("utilization exceeds 10000 basis points")
	}
	return obs, nil
}
