package node

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// This file checks raft-wal's segment files byte by byte before raft-wal
// opens them. raft-wal (v0.4.1, pinned in go.mod) verifies the checksum of
// the tail batch only, and on recovery silently drops whatever follows the
// first frame it cannot read, so a damaged byte in the middle of a segment
// would otherwise lose or change committed entries without a word.
//
// The on-disk format (raft-wal segment/format.go): a 32-byte file header
// (magic, version, base index, segment ID, codec), then 8-byte-aligned
// frames, each an 8-byte header (type; 3 zero bytes; payload length, or for
// a commit frame the CRC-32C of every byte since the previous commit frame,
// the file header included for the first) and the payload. Entry payloads
// are raft-wal's BinaryCodec encoding of a raft.Log. Every StoreLogs call
// writes its entries and one commit frame in one write, then fsyncs.
//
// What is accepted: well-formed frames whose commit checksums all match,
// followed by zeros (segment files are preallocated), except that after
// the last commit frame of the tail segment a prefix of one batch may
// remain (a write cut short by kill -9: whole entry frames with the next
// indexes, the last one possibly cut off, never a commit frame). Anything
// else is damage and Open refuses, naming the file and the index. After a
// successful scan the leftovers of a cut-short write are zeroed, so that a
// later scan never mistakes them for damage once raft-wal has written a
// shorter batch over them.

const (
	walFileHeaderBytes  = 32
	walFrameHeaderBytes = 8
	walMagic            = 0x58eb6b0d
	walFrameEntry       = 1
	walFrameIndex       = 2
	walFrameCommit      = 3
)

var walCastagnoli = crc32.MakeTable(crc32.Castagnoli)

// segmentDamage is what scanSegment found wrong, if anything.
type segmentDamage struct {
	offset int64
	index  uint64 // first raft index that cannot be trusted
	reason string
}

// segmentScan is the result of walking one segment file.
type segmentScan struct {
	lastCommitEnd int64  // offset just after the last good commit frame
	dataEnd       int64  // offset just after the last non-zero byte
	lastCommitted uint64 // last index covered by a good commit (base-1: none)
	damage        *segmentDamage
}

// loadWALMeta reads raft-wal's segment list, and whether raft ever
// stored a term, without opening the WAL. A new data dir has neither.
func loadWALMeta(walDir string) (types.PersistentState, bool, error) {
	if _, err := os.Stat(filepath.Join(walDir, "wal-meta.db")); errors.Is(err, os.ErrNotExist) {
		return types.PersistentState{}, false, nil
	}
	db := &metadb.BoltMetaDB{}
	defer db.Close()
	st, err := db.Load(walDir)
	if err != nil {
		return st, false, err
	}
	term, err := db.GetStable([]byte("CurrentTerm"))
	return st, len(term) > 0, err
}

// scanWALSegments checks every segment listed in raft-wal's meta DB and
// zeroes a cut-short write after the tail's last commit. It returns a
// *DataDirError naming the file for any damage.
func scanWALSegments(walDir string) error {
	meta, hasTerm, err := loadWALMeta(walDir)
	if err != nil {
		return dataDirErr(filepath.Join(walDir, "wal-meta.db"), "cannot be read: "+err.Error(), remedyCorruptLog)
	}
	for i, si := range meta.Segments {
		tail := i == len(meta.Segments)-1 && si.SealTime.IsZero()
		// NB: raft-wal commits a new tail to its meta DB before it creates
		// the file, so a crash, or ENOSPC while preallocating, leaves a tail
		// file that is missing or short, and empty: legitimate right after
		// a rotation (a sealed segment precedes it) or in a data dir that
		// never stored a raft term. Anywhere else it means deleted data.
		mayBeEmpty := tail && ((i > 0 && !meta.Segments[i-1].SealTime.IsZero()) || !hasTerm)
		if err := scanWALSegment(walDir, si, tail, mayBeEmpty); err != nil {
			return err
		}
	}
	return nil
}

func scanWALSegment(walDir string, si types.SegmentInfo, tail, mayBeEmpty bool) error {
	path := filepath.Join(walDir, segment.FileName(si))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		if mayBeEmpty {
			return nil
		}
		return dataDirErr(path, fmt.Sprintf("is missing but raft-wal's wal-meta.db lists it (entries from index %d)", si.BaseIndex), remedyCorruptLog)
	}
	if err != nil {
		return dataDirErr(path, "cannot be opened: "+err.Error(), remedyCorruptLog)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	b, err := readWritten(f, fi.Size())
	if err != nil {
		return dataDirErr(path, "cannot be read: "+err.Error(), remedyCorruptLog)
	}
	sc := walkSegment(b, si, tail)
	if fi.Size() < int64(si.SizeLimit) && !(mayBeEmpty && len(b) == 0) {
		return dataDirErr(path, fmt.Sprintf("is %d bytes, shorter than the %d bytes raft-wal preallocates: the file was truncated "+
			"(log entries from index %d may be lost)", fi.Size(), si.SizeLimit, sc.lastCommitted+1), remedyCorruptLog)
	}
	if d := sc.damage; d != nil {
		return dataDirErr(path, fmt.Sprintf("is damaged at byte %d: %s (log entries from index %d cannot be trusted)", d.offset, d.reason, d.index), remedyCorruptLog)
	}
	if tail && sc.dataEnd > sc.lastCommitEnd {
		return zeroRange(f, sc.lastCommitEnd, sc.dataEnd)
	}
	return nil
}

// readWritten reads the file up to its last data extent (holes and
// unwritten preallocated extents read as zeros, so stopping there loses
// nothing) and trims trailing zeros.
func readWritten(f *os.File, size int64) ([]byte, error) {
	end := lastDataExtentEnd(f, size)
	b := make([]byte, end)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	n := len(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	return b[:n], nil
}

// lastDataExtentEnd uses lseek SEEK_DATA/SEEK_HOLE (Linux, most file
// systems) to find where the file's last data extent ends; where that is
// not supported it returns size.
func lastDataExtentEnd(f *os.File, size int64) int64 {
	const seekData, seekHole = 3, 4
	end, off := int64(0), int64(0)
	for off < size {
		d, err := f.Seek(off, seekData)
		if err != nil {
			break // ENXIO: no data after off (or not supported, handled below)
		}
		h, err := f.Seek(d, seekHole)
		if err != nil {
			return size
		}
		end, off = h, h
	}
	if end == 0 {
		// Either all holes or SEEK_DATA unsupported: only the latter can
		// hide data, and reading the whole file is always correct.
		if _, err := f.Seek(0, seekHole); err != nil {
			return size
		}
	}
	return min(end, size)
}

// zeroRange zeroes [from, to) in page-aligned chunks from the back, so
// that a crash part-way leaves a shorter prefix of the same cut-short
// write, which the next scan accepts again.
func zeroRange(f *os.File, from, to int64) error {
	const page = 4096
	zeros := make([]byte, page)
	for end := to; end > from; {
		start := max(from, (end-1)/page*page)
		if _, err := f.WriteAt(zeros[:end-start], start); err != nil {
			return err
		}
		end = start
	}
	return f.Sync()
}

// walkSegment walks b (the segment's bytes up to its last non-zero byte).
func walkSegment(b []byte, si types.SegmentInfo, tail bool) segmentScan {
	sc := segmentScan{dataEnd: int64(len(b)), lastCommitted: si.BaseIndex - 1}
	if len(b) == 0 {
		return sc // nothing was ever committed to this segment
	}
	if reason := checkFileHeader(b, si); reason != "" {
		sc.damage = &segmentDamage{offset: 0, index: si.BaseIndex, reason: reason}
		return sc
	}
	w := walker{b: b, sc: &sc, next: si.BaseIndex, off: walFileHeaderBytes}
	w.run()
	if sc.damage == nil && !tail && sc.lastCommitEnd < sc.dataEnd {
		sc.damage = &segmentDamage{offset: sc.lastCommitEnd, index: sc.lastCommitted + 1, reason: "a sealed segment has data after its last commit frame"}
	}
	return sc
}

func checkFileHeader(b []byte, si types.SegmentInfo) string {
	if len(b) < walFileHeaderBytes {
		return "the file header is cut short"
	}
	var want [walFileHeaderBytes]byte
	binary.LittleEndian.PutUint32(want[0:4], walMagic)
	binary.LittleEndian.PutUint64(want[8:16], si.BaseIndex)
	binary.LittleEndian.PutUint64(want[16:24], si.ID)
	binary.LittleEndian.PutUint64(want[24:32], si.Codec)
	if !bytes.Equal(b[:walFileHeaderBytes], want[:]) {
		return "the file header does not match wal-meta.db (magic, version, base index, ID or codec)"
	}
	return ""
}

// walker walks the frames of one segment.
type walker struct {
	b        []byte
	sc       *segmentScan
	off      int64
	crcStart int64
	next     uint64 // index the next entry frame must hold
}

func (w *walker) damage(reason string) {
	w.sc.damage = &segmentDamage{offset: w.off, index: w.sc.lastCommitted + 1, reason: reason}
}

// run walks frame by frame until the zeros after the data. It stops at the
// first damage; a frame cut off by the end of the data ends the walk and is
// judged by the caller (it must lie after the last commit).
func (w *walker) run() {
	end := int64(len(w.b))
	for w.off < end && w.sc.damage == nil {
		// NB: b stops at the last non-zero byte; the file is zero after it.
		var h [walFrameHeaderBytes]byte
		copy(h[:], w.b[w.off:])
		if h[1] != 0 || h[2] != 0 || h[3] != 0 {
			w.damage("a frame header has non-zero reserved bytes")
			return
		}
		n := int64(binary.LittleEndian.Uint32(h[4:8]))
		switch h[0] {
		case walFrameEntry:
			if !w.entry(n) {
				return
			}
		case walFrameIndex:
			if w.off+walFrameHeaderBytes+n > end {
				w.damage("an index frame runs past the end of the data")
				return
			}
			w.off += frameSize(n)
		case walFrameCommit:
			w.commit(uint32(n))
		case 0:
			// Zeros where a frame belongs, yet non-zero bytes further on (the
			// walk only runs up to the last non-zero byte).
			w.damage("non-zero bytes follow the end of the log")
		default:
			w.damage(fmt.Sprintf("a frame header has unknown type %d", h[0]))
		}
	}
}

// entry checks one entry frame of payload length n; it reports whether the
// walk goes on. An entry cut off by the end of the data is accepted only
// after the last commit (a write cut short), where it ends the walk.
func (w *walker) entry(n int64) bool {
	start := w.off + walFrameHeaderBytes
	if n > segment.MaxEntrySize {
		w.damage("an entry frame claims more than raft-wal's maximum entry size")
		return false
	}
	if start+n > int64(len(w.b)) {
		return w.cutEntry(start, n)
	}
	if reason := checkEncodedLog(w.b[start:start+n], w.next); reason != "" {
		w.damage(reason)
		return false
	}
	w.next++
	w.off += frameSize(n)
	return true
}

// cutEntry judges an entry frame that runs past the end of the data: the
// last frame of a write cut short, or a damaged length field. Only in the
// first case does the whole encoded entry fail to fit in the data.
func (w *walker) cutEntry(start, n int64) bool {
	if l, ok := encodedLogLen(w.b[min(start, int64(len(w.b))):]); ok && l < n {
		w.damage(fmt.Sprintf("an entry frame claims %d bytes but its entry ends after %d", n, l))
		return false
	}
	w.off = int64(len(w.b)) // the rest is the cut-off frame
	return false
}

func (w *walker) commit(crc uint32) {
	if got := crc32.Checksum(w.b[w.crcStart:w.off], walCastagnoli); got != crc {
		w.damage(fmt.Sprintf("the checksum of the batch of entries %d..%d does not match its commit frame", w.sc.lastCommitted+1, w.next-1))
		return
	}
	w.off += walFrameHeaderBytes
	w.crcStart = w.off
	w.sc.lastCommitEnd = w.off
	w.sc.lastCommitted = w.next - 1
}

func frameSize(n int64) int64 {
	return walFrameHeaderBytes + n + (walFrameHeaderBytes-n%walFrameHeaderBytes)%walFrameHeaderBytes
}

// checkEncodedLog checks that p is exactly one BinaryCodec-encoded
// raft.Log holding index want.
func checkEncodedLog(p []byte, want uint64) string {
	l, ok := encodedLogLen(p)
	switch {
	case !ok:
		return "an entry frame does not hold a whole encoded entry"
	case int64(len(p)) != l:
		return fmt.Sprintf("an entry frame is %d bytes but its entry %d", len(p), l)
	}
	if idx, _ := binary.Uvarint(p); idx != want {
		return fmt.Sprintf("an entry frame holds index %d where %d belongs", idx, want)
	}
	return ""
}

// encodedLogLen returns the length of the BinaryCodec encoding at the
// start of p (index, term, type varints; data and extensions with varint
// lengths; AppendedAt as time.MarshalBinary), if p holds all of it.
func encodedLogLen(p []byte) (int64, bool) {
	off := 0
	for range 3 {
		_, n := binary.Uvarint(p[off:])
		if n <= 0 {
			return 0, false
		}
		off += n
	}
	for range 2 {
		v, n := binary.Uvarint(p[off:])
		if n <= 0 || v > uint64(len(p)-off-n) {
			return 0, false
		}
		off += n + int(v)
	}
	// time.MarshalBinary: version byte, then 14 bytes (version 1) or 15
	// (version 2, a zone offset with seconds).
	if off >= len(p) {
		return 0, false
	}
	tl := 15
	if p[off] == 2 {
		tl = 16
	}
	if off+tl > len(p) {
		return 0, false
	}
	var t time.Time
	if err := t.UnmarshalBinary(p[off : off+tl]); err != nil {
		return 0, false
	}
	return int64(off + tl), true
}
