// Package backup is the file format of a cluster backup (`termivar-coord
// backup`, Cluster.Backup): the FSM's state at one applied index with a
// header and a SHA-256 trailer, so that a damaged or cut-short copy is
// refused before anything is built from it.
//
//	bytes 0-7     Magic "TVBACKUP"
//	bytes 8-11    FormatVersion, big endian
//	bytes 12-15   header length H, big endian (≤ MaxHeaderBytes)
//	H bytes       termivar.v1.BackupHeader (deterministic protobuf)
//	8 bytes       state length S, big endian (= header.state_bytes)
//	S bytes       the state: raftfsm.FSM.ExportState (termivar.v1.FSMState)
//	32 bytes      SHA-256 of every byte before it
//
// The checksum catches damage in storage or transit, not tampering: who
// can write the file can recompute it (the file holds key hashes and
// every task; keep it as private as a data dir).
package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Magic opens every backup file.
const Magic = "TVBACKUP"

// FormatVersion is the file format this package writes and reads.
const FormatVersion = 1

// MaxHeaderBytes bounds the encoded header.
const MaxHeaderBytes = 64 << 10

// MaxStateBytes bounds the state (raftfsm.MaxSnapshotBytes).
const MaxStateBytes = 8 << 30

// fixed is the length of everything but the header and the state.
const fixed = len(Magic) + 4 + 4 + 8 + sha256.Size

// ErrDamaged is returned (wrapped, with the reason) for bytes that are not
// an intact backup file of this format: truncated, altered, or not a
// backup at all.
var ErrDamaged = errors.New("backup: damaged or not a backup file")

func damaged(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrDamaged}, args...)...)
}

// Encode returns the backup file of state with header h; it sets
// h.FormatVersion and h.StateBytes.
func Encode(h *pb.BackupHeader, state []byte) ([]byte, error) {
	h.FormatVersion = FormatVersion
	h.StateBytes = uint64(len(state))
	hb, err := proto.MarshalOptions{Deterministic: true}.Marshal(h)
	if err != nil {
		return nil, err
	}
	if len(hb) > MaxHeaderBytes || len(state) > MaxStateBytes {
		return nil, errors.New("backup: header or state too large")
	}
	out := make([]byte, 0, fixed+len(hb)+len(state))
	out = append(out, Magic...)
	out = binary.BigEndian.AppendUint32(out, FormatVersion)
	out = binary.BigEndian.AppendUint32(out, uint32(len(hb)))
	out = append(out, hb...)
	out = binary.BigEndian.AppendUint64(out, uint64(len(state)))
	out = append(out, state...)
	sum := sha256.Sum256(out)
	return append(out, sum[:]...), nil
}

// Decode checks a backup file and returns its header and state (a slice
// of b). Every failure wraps ErrDamaged and says what is wrong: the
// checksum is verified first, so any changed or missing byte is refused
// before a length or the header is trusted.
func Decode(b []byte) (*pb.BackupHeader, []byte, error) {
	if len(b) < fixed || !bytes.Equal(b[:len(Magic)], []byte(Magic)) {
		if len(b) >= len(Magic) && !bytes.Equal(b[:len(Magic)], []byte(Magic)) {
			return nil, nil, damaged("the file does not start with %q", Magic)
		}
		return nil, nil, damaged("%d bytes, shorter than the smallest backup (%d)", len(b), fixed)
	}
	if v := binary.BigEndian.Uint32(b[8:12]); v != FormatVersion {
		return nil, nil, damaged("format version %d (this binary reads %d)", v, FormatVersion)
	}
	body, trailer := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], trailer) {
		return nil, nil, damaged("SHA-256 mismatch over %d bytes (stored %x…, computed %x…): the file is truncated or altered", len(body), trailer[:4], sum[:4])
	}
	hl := uint64(binary.BigEndian.Uint32(b[12:16]))
	if hl > MaxHeaderBytes || 16+hl+8 > uint64(len(body)) {
		return nil, nil, damaged("header length %d does not fit the file", hl)
	}
	var h pb.BackupHeader
	if err := proto.Unmarshal(body[16:16+hl], &h); err != nil {
		return nil, nil, damaged("header does not decode: %v", err)
	}
	rest := body[16+hl:]
	sl := binary.BigEndian.Uint64(rest[:8])
	if sl != uint64(len(rest)-8) || sl != h.GetStateBytes() || sl > MaxStateBytes {
		return nil, nil, damaged("state length %d, header says %d, %d bytes present", sl, h.GetStateBytes(), len(rest)-8)
	}
	if h.GetFormatVersion() != FormatVersion {
		return nil, nil, damaged("header format version %d", h.GetFormatVersion())
	}
	return &h, rest[8:], nil
}
