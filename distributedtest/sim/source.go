package sim

import "math/rand/v2"

// Source supplies the generator's choices. The simulator uses a seeded PRNG,
// FuzzCommands reads the fuzzer's bytes and the rapid test draws from rapid,
// so all three explore the same command space.
type Source interface {
	// Intn returns a choice in [0, n); n > 0.
	Intn(n int) int
}

// RandSource is a Source over math/rand/v2 seeded with one uint64.
type RandSource struct{ r *rand.Rand }

// NewRandSource returns a PCG source seeded from seed.
func NewRandSource(seed uint64) *RandSource {
	return &RandSource{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Intn implements Source.
func (s *RandSource) Intn(n int) int { return s.r.IntN(n) }

// ByteSource reads choices from a byte string; when the bytes run out every
// choice is 0 and Exhausted reports true.
type ByteSource struct {
	data []byte
	pos  int
}

// NewByteSource returns a source over data.
func NewByteSource(data []byte) *ByteSource { return &ByteSource{data: data} }

// Exhausted reports whether every byte was consumed.
func (s *ByteSource) Exhausted() bool { return s.pos >= len(s.data) }

// Intn implements Source: one byte for n ≤ 256, two bytes above.
func (s *ByteSource) Intn(n int) int {
	if n <= 1 {
		return 0
	}
	v := 0
	width := 1
	if n > 256 {
		width = 2
	}
	for range width {
		v <<= 8
		if s.pos < len(s.data) {
			v |= int(s.data[s.pos])
			s.pos++
		}
	}
	return v % n
}
