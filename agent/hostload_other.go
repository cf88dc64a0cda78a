//go:build !linux

package agent

// cpuSampler reports 0 where /proc is not available.
type cpuSampler struct{}

func (s *cpuSampler) sample() uint32 { return 0 }

func memoryBasisPoints() uint32 { return 0 }
