package distributed

import (
	"bytes"
	"math"
	"slices"
)

// Exported result aggregator state (contract A.13), framed by the shared codec:
//
//	"TVRA" | version 1 | body | CRC-32C
//	body = limits (MaxResults, MaxResultBytes, MaxTotalBytes,
//	               MaxAggregateItems, MaxAggregateBytes as uvarints)
//	       revision (uvarint)
//	       count (uvarint)
//	       count × (receipt, result bytes), strictly ascending by task ID
//	receipt = taskID str | taskGeneration | attempt | leaseID |
//	          workerID str | workerGeneration | recordVersion
//
// The encoding is canonical: equal states give equal bytes, and Restore
// accepts only the exact bytes Export would produce for the decoded state.
const (
	resultAggregatorMagic   = "TVRA"
	resultAggregatorVersion = 1

	// resultEntryMinBytes is the smallest encoded entry: two one-byte
	// identifiers with their length prefixes (4), five one-byte uvarints (5)
	// and an empty result's length prefix (1). Restore rejects a count the
	// remaining input could not hold at this size, before allocating.
	resultEntryMinBytes = 10

	// resultEntryOverheadBytes estimates an entry's encoded size beyond its
	// identifiers and result bytes, to size the export buffer once.
	resultEntryOverheadBytes = 40
)

// ExportState returns a deterministic, versioned encoding of the complete
// state: limits, revision and every (receipt, result) pair in task-ID order.
// Equal states give equal bytes. The error is always nil today; it is part
// of the signature so that hosts handle future failure modes.
func (a *ResultAggregator) ExportState() ([]byte, error) {
	if a == nil {
		return nil, errNilResultAggregator()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.initLocked()
	return a.exportLocked(), nil
}

func (a *ResultAggregator) exportLocked() []byte {
	ids := make([]string, 0, len(a.results))
	size := 64 + a.totalBytes
	for id, r := range a.results {
		ids = append(ids, id)
		size += len(id) + len(r.receipt.workerID) + resultEntryOverheadBytes
	}
	slices.Sort(ids)

	e := newEncoder(resultAggregatorMagic, resultAggregatorVersion)
	e.buf = slices.Grow(e.buf, size)
	a.encodeHeaderLocked(e, len(ids))
	for _, id := range ids {
		r := a.results[id]
		r.receipt.encode(e)
		e.bytes(r.data)
	}
	return e.finish()
}

// encodeHeaderLocked encodes the limits, the revision and the result
// count n. The caller holds a.mu.
func (a *ResultAggregator) encodeHeaderLocked(e *encoder, n int) {
	l := a.limits
	e.uvarint(uint64(l.MaxResults))
	e.uvarint(uint64(l.MaxResultBytes))
	e.uvarint(uint64(l.MaxTotalBytes))
	e.uvarint(uint64(l.MaxAggregateItems))
	e.uvarint(uint64(l.MaxAggregateBytes))
	e.uvarint(a.revision)
	e.uvarint(uint64(n))
}

func invalidResultState(reason string) *Error {
	return &Error{Kind: KindInvalidState, Reason: "result aggregator state: " + reason}
}

// RestoreResultAggregator rebuilds an aggregator from ExportState bytes. It
// validates everything — framing, version and checksum, limits, counts and
// sizes within the limits, identifiers, strictly ascending task IDs, no
// trailing bytes, revision not below the result count, canonical encoding —
// and returns ErrInvalidState on any corrupt, truncated or hostile input. It
// never panics and never allocates more than the input's length justifies.
func RestoreResultAggregator(data []byte) (*ResultAggregator, error) {
	d, ok := newDecoder(data, resultAggregatorMagic, resultAggregatorVersion)
	if !ok {
		return nil, invalidResultState("framing, version or checksum is invalid")
	}
	var l ResultLimits
	for _, f := range [...]*int{&l.MaxResults, &l.MaxResultBytes, &l.MaxTotalBytes, &l.MaxAggregateItems, &l.MaxAggregateBytes} {
		*f = int(d.bounded(math.MaxInt32))
	}
	revision := d.uvarint()
	if d.failed {
		return nil, invalidResultState("header is truncated or malformed")
	}
	if l.Validate() != nil {
		return nil, invalidResultState("limits are invalid")
	}
	n := d.count(uint64(l.MaxResults), resultEntryMinBytes)
	if d.failed {
		return nil, invalidResultState("result count is out of range or truncated")
	}
	if revision < uint64(n) {
		return nil, invalidResultState("revision is smaller than the result count")
	}

	entries := make([]storedResult, n)
	results := make(map[string]*storedResult, n)
	total := 0
	prev := ""
	for i := range entries {
		receipt := decodeReceipt(d)
		raw := d.rawBytes(uint64(l.MaxResultBytes))
		switch {
		case d.failed:
			return nil, invalidResultState("result entry is truncated or malformed")
		case !ValidIdentifier(receipt.taskID):
			return nil, invalidResultState("result entry has an invalid task ID")
		case !ValidIdentifier(receipt.workerID):
			return nil, invalidResultState("result entry has an invalid worker ID")
		case i > 0 && receipt.taskID <= prev:
			return nil, invalidResultState("task IDs are not strictly ascending")
		}
		total += len(raw)
		if total > l.MaxTotalBytes {
			return nil, invalidResultState("total result bytes exceed max_total_bytes")
		}
		// NB: bytes.Clone appends to an empty slice, not into make(0, len):
		// the runtime then skips zeroing memory that the copy overwrites.
		// raw is not nil (the decoder did not fail), so an empty result
		// restores as an empty, non-nil one.
		entries[i] = storedResult{receipt: receipt, data: bytes.Clone(raw)}
		results[receipt.taskID] = &entries[i]
		prev = receipt.taskID
	}
	if !d.done() {
		return nil, invalidResultState("trailing bytes after the last entry")
	}

	a := &ResultAggregator{limits: l, revision: revision, totalBytes: total, results: results}
	// NB: the decoder accepts non-minimal varints; re-encoding rejects them,
	// so one state has exactly one accepted encoding.
	// NB: the body alone: newDecoder checked that data's trailing
	// checksum is that of data's body, so an equal body has an equal
	// checksum, and computing it again would be a second pass over every
	// result.
	if !equalParts(a.exportPartsLocked(false), data[:len(data)-checksumBytes]) {
		return nil, invalidResultState("encoding is not canonical")
	}
	return a, nil
}
