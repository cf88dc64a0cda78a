package distributed

import (
	"encoding/binary"
	"hash/crc32"
)

// The core's binary encodings (exported state, leases, fences, receipts) share
// one primitive codec: unsigned varints and length-prefixed byte strings,
// framed as magic | version | body | CRC-32C(magic|version|body). Decoding
// never allocates more than the remaining input can justify and never panics.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type encoder struct {
	buf []byte
}

func newEncoder(magic string, version uint8) *encoder {
	e := &encoder{buf: make([]byte, 0, 256)}
	e.buf = append(e.buf, magic...)
	e.buf = append(e.buf, version)
	return e
}

func (e *encoder) uvarint(v uint64) { e.buf = binary.AppendUvarint(e.buf, v) }

func (e *encoder) boolean(b bool) {
	if b {
		e.buf = append(e.buf, 1)
	} else {
		e.buf = append(e.buf, 0)
	}
}

func (e *encoder) bytes(b []byte) {
	e.uvarint(uint64(len(b)))
	e.buf = append(e.buf, b...)
}

func (e *encoder) str(s string) {
	e.uvarint(uint64(len(s)))
	e.buf = append(e.buf, s...)
}

// finish appends the checksum and returns the frame.
func (e *encoder) finish() []byte {
	return binary.BigEndian.AppendUint32(e.buf, crc32.Checksum(e.buf, castagnoli))
}

// decoder reads a frame written by encoder. The first failure sticks: later
// reads return zero values and ok() reports false.
type decoder struct {
	// buf is the whole body and off the read position: reads advance an
	// integer, not the slice (a slice store is a pointer write, which takes
	// a write barrier while the collector marks — millions of them in a
	// large restore).
	buf    []byte
	off    int
	failed bool
	// ids, when set (RestoreWorkerPool), shares the identifiers that the
	// proofs of a pool state repeat (idTable); nil reads each afresh.
	ids *idTable
}

// idTable shares identifiers while a pool state is decoded: a proof names
// its record's own task ID (task), and a worker's ID repeats in the leases
// and receipts of its tasks, as does the stub a lease holds until
// rebuildIndexes links it (compact.go). Sharing never changes a value.
type idTable struct {
	task    string
	workers map[string]string
	stubs   map[string]*workerRec
}

// stub returns the shared unlinked worker record named id.
func (t *idTable) stub(id string) *workerRec {
	w := t.stubs[id]
	if w == nil {
		if t.stubs == nil {
			t.stubs = map[string]*workerRec{}
		}
		w = &workerRec{id: id}
		t.stubs[id] = w
	}
	return w
}

// id reads an identifier (at most MaxIdentifierBytes), shared through
// d.ids when set. The table holds at most MaxWorkers strings.
func (d *decoder) id() string {
	b := d.rawBytes(MaxIdentifierBytes)
	t := d.ids
	switch {
	case t == nil:
		return string(b)
	case string(b) == t.task:
		return t.task
	}
	if s, ok := t.workers[string(b)]; ok {
		return s
	}
	s := string(b)
	if t.workers == nil {
		t.workers = map[string]string{}
	}
	if len(t.workers) < MaxWorkers {
		t.workers[s] = s
	}
	return s
}

// checksumBytes is the length of the CRC-32C that ends every encoding.
const checksumBytes = 4

// newDecoder checks framing (magic, version, checksum) and returns a decoder
// over the body.
func newDecoder(data []byte, magic string, version uint8) (*decoder, bool) {
	head := len(magic) + 1
	if len(data) < head+checksumBytes {
		return nil, false
	}
	if string(data[:len(magic)]) != magic || data[len(magic)] != version {
		return nil, false
	}
	body, sum := data[:len(data)-checksumBytes], binary.BigEndian.Uint32(data[len(data)-checksumBytes:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, false
	}
	return &decoder{buf: body[head:]}, true
}

func (d *decoder) fail() { d.failed = true; d.off = len(d.buf) }

// remaining is how many bytes are left to read (0 once failed).
func (d *decoder) remaining() int { return len(d.buf) - d.off }

func (d *decoder) uvarint() uint64 {
	if d.off < len(d.buf) && d.buf[d.off] < 0x80 { // one byte: most fields (a failed decoder has none left)
		v := uint64(d.buf[d.off])
		d.off++
		return v
	}
	if d.failed {
		return 0
	}
	rest := d.buf[d.off:]
	v, n := binary.Uvarint(rest)
	// Only the minimal encoding is accepted (a multi-byte varint never ends
	// in a zero byte), so every accepted input has exactly one encoding and
	// re-encodes to itself.
	if n <= 0 || (n > 1 && rest[n-1] == 0) {
		d.fail()
		return 0
	}
	d.off += n
	return v
}

// bounded reads a uvarint and fails unless it is at most limit.
func (d *decoder) bounded(limit uint64) uint64 {
	v := d.uvarint()
	if v > limit {
		d.fail()
		return 0
	}
	return v
}

func (d *decoder) u32() uint32 { return uint32(d.bounded(1<<32 - 1)) }

func (d *decoder) u16() uint16 { return uint16(d.bounded(1<<16 - 1)) }

func (d *decoder) u8() uint8 { return uint8(d.bounded(1<<8 - 1)) }

func (d *decoder) boolean() bool {
	switch d.bounded(1) {
	case 1:
		return true
	default:
		return false
	}
}

// rawBytes reads a length-prefixed byte string of at most limit bytes. The
// result aliases the input.
func (d *decoder) rawBytes(limit uint64) []byte {
	n := d.bounded(limit)
	if d.failed {
		return nil
	}
	if uint64(d.remaining()) < n {
		d.fail()
		return nil
	}
	end := d.off + int(n)
	b := d.buf[d.off:end:end]
	d.off = end
	return b
}

func (d *decoder) str(limit uint64) string { return string(d.rawBytes(limit)) }

// count reads a collection length that must be at most limit and that the
// remaining input could hold at minBytes bytes per element.
func (d *decoder) count(limit uint64, minBytes int) int {
	n := d.bounded(limit)
	if d.failed {
		return 0
	}
	if minBytes > 0 && n > uint64(d.remaining()/minBytes) {
		d.fail()
		return 0
	}
	return int(n)
}

// done reports whether every read succeeded and the body is fully consumed.
func (d *decoder) done() bool { return !d.failed && d.remaining() == 0 }
