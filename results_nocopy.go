package distributed

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"slices"
)

// ResultSize returns the length in bytes of the task's stored result and
// true, or 0 and false if the task has no result, without copying the
// result (GetResult copies it: a restore that only sums result sizes
// would copy every stored result once more). An invalid task ID fails
// with ErrInvalidTask.
func (a *ResultAggregator) ResultSize(taskID string) (int, bool, error) {
	if a == nil {
		return 0, false, errNilResultAggregator()
	}
	if !ValidIdentifier(taskID) {
		return 0, false, invalidTaskID()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.initLocked()
	r, ok := a.results[taskID]
	if !ok {
		return 0, false, nil
	}
	return len(r.data), true, nil
}

// StoreResultOwned is StoreResult for a result the caller hands over: on
// Stored the aggregator keeps result itself, not a copy (results of up to
// 32 bytes are still copied into their entry's allocation), so the caller
// must never modify it afterwards (the FSM passes the result as a slice of
// its log entry, which nothing writes; copying it again was one of a
// 64 KiB result's needless copies). Checks, errors and outcomes are
// exactly StoreResult's. Stored results are never modified in place, so a
// result kept this way stays as stored.
func (a *ResultAggregator) StoreResultOwned(expectedRevision uint64, receipt CompletionReceipt, result []byte) (Transition[StoreResultOutcome], error) {
	return a.storeResult(expectedRevision, receipt, result, true)
}

// exportPartMinBytes is the smallest result ExportStateParts hands out as
// a part of its own; smaller ones are copied into the surrounding part.
const exportPartMinBytes = 1024

// ExportStateParts returns ExportState's encoding as consecutive parts —
// their concatenation is exactly ExportState's bytes — in which every
// stored result of at least 1 KiB is the stored slice itself, not a copy.
// Stored results are never modified in place (a result is replaced or
// purged only by dropping its slice), so the parts stay valid and
// unchanged whatever the aggregator does next; the caller must not modify
// them. A snapshot of a large result store then costs the small parts (an
// entry's receipt and length) instead of a second copy of every result
// (docs/benchmarks.md, issue 15). The error is ExportState's.
func (a *ResultAggregator) ExportStateParts() ([][]byte, error) {
	if a == nil {
		return nil, errNilResultAggregator()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.initLocked()
	return a.exportPartsLocked(true), nil
}

// exportPartsLocked is ExportStateParts' encoding; without checksum, the
// same parts without the trailing checksum (not computed). The caller
// holds a.mu (or owns a, as RestoreResultAggregator does).
func (a *ResultAggregator) exportPartsLocked(checksum bool) [][]byte {
	ids := make([]string, 0, len(a.results))
	size := 64 // NB: what e.buf holds: all but the results of their own
	for id, r := range a.results {
		ids = append(ids, id)
		size += len(id) + len(r.receipt.workerID) + resultEntryOverheadBytes
		if len(r.data) < exportPartMinBytes {
			size += len(r.data)
		}
	}
	slices.Sort(ids)
	e := newEncoder(resultAggregatorMagic, resultAggregatorVersion)
	e.buf = slices.Grow(e.buf, size)
	a.encodeHeaderLocked(e, len(ids))
	var parts [][]byte
	var sum uint32
	start := 0
	// NB: the small parts are consecutive pieces of e.buf; appending after
	// a piece never writes inside it (it ends at its capacity), and a
	// reallocation leaves it on the old array.
	update := func(p []byte) {
		if checksum {
			sum = crc32.Update(sum, castagnoli, p)
		}
	}
	flush := func() {
		p := e.buf[start:len(e.buf):len(e.buf)]
		update(p)
		parts = append(parts, p)
		start = len(e.buf)
	}
	for _, id := range ids {
		r := a.results[id]
		r.receipt.encode(e)
		if len(r.data) < exportPartMinBytes {
			e.bytes(r.data)
			continue
		}
		e.uvarint(uint64(len(r.data)))
		flush()
		update(r.data)
		parts = append(parts, r.data[:len(r.data):len(r.data)])
	}
	flush()
	if !checksum {
		return parts
	}
	return append(parts, binary.BigEndian.AppendUint32(nil, sum))
}

// equalParts reports whether the concatenation of parts is exactly data,
// without making it: RestoreResultAggregator's canonical check compares
// its re-export with its input this way instead of encoding a second copy
// of every result (docs/benchmarks.md, issue 15).
func equalParts(parts [][]byte, data []byte) bool {
	for _, p := range parts {
		if len(p) > len(data) || !bytes.Equal(p, data[:len(p)]) {
			return false
		}
		data = data[len(p):]
	}
	return len(data) == 0
}
