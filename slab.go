package distributed

import "strings"

// restoreSlab hands out the task records of a restore and the strings
// holding their IDs and targets from chunks, not one allocation each: a
// 1 M-task restore made 2 M small allocations, and allocating them was a
// fifth of its CPU with the collector's share on top (docs/benchmarks.md,
// "Restart of a 1 M-task node").
//
// NB: the trade-off is memory held after a purge: a chunk is freed only
// when none of its records (or strings) is referenced any more, so a
// surviving record can keep up to slabRecords records' bytes
// (slabRecords × 216 B = 13.5 KiB; the record size is pinned by
// TestTaskRec_AssignmentFieldsFirst) and its ID up to slabStringBytes alive.
// Records decoded together are neighbours in task-ID order, which purge by
// scan or finish time usually removes together; records made after the
// restore are allocated one by one as before.
type restoreSlab struct {
	recs []taskRec // the unused rest of the current chunk
	left int       // records still to decode
	strs strings.Builder
}

const (
	slabRecords     = 64
	slabStringBytes = 8 << 10
)

func newRestoreSlab(n int) *restoreSlab { return &restoreSlab{left: n} }

// record returns a zero record from the current chunk.
func (s *restoreSlab) record() *taskRec {
	if len(s.recs) == 0 {
		s.recs = make([]taskRec, max(1, min(s.left, slabRecords)))
	}
	t := &s.recs[0]
	s.recs = s.recs[1:]
	s.left--
	return t
}

// idTarget returns one string holding id then target, from the current
// string chunk. strings.Builder never writes over bytes it has written, so
// a string taken from it stays valid while later ones are appended; a new
// chunk is sized for the records left when that is less. A string longer
// than an eighth of a chunk gets its own allocation.
func (s *restoreSlab) idTarget(id, target []byte) string {
	need := len(id) + len(target)
	b := &s.strs
	if need > slabStringBytes/8 {
		b = &strings.Builder{}
		b.Grow(need)
	} else if b.Cap()-b.Len() < need {
		b.Reset()
		b.Grow(min(slabStringBytes, max(1, s.left)*need))
	}
	start := b.Len()
	b.Write(id)
	b.Write(target)
	return b.String()[start:]
}
