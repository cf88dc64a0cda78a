package raftfsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Every command log entry is framed (I-log-1 in docs/node.md, "Log
// integrity"):
//
//	byte 0     FrameVersion (1)
//	bytes 1-4  CRC-32C (Castagnoli) of the payload, big endian
//	bytes 5-   payload: a deterministic protobuf termivar.v1.Command
//
// The proposer writes the frame (node/propose.go); Apply and the node's
// startup verification check it before anything is decoded. A checksum is
// enough: the log is not a security boundary (raft peers are trusted), the
// frame only has to catch storage damage that raft-wal's own checks miss
// (it verifies checksums of the tail batch only).
//
// Entries written before framing existed (a bare protobuf Command, whose
// first byte is a field tag, never 0x01) are refused like a damaged entry:
// the project had no deployed data dirs, so there is no legacy decode path.

// FrameVersion is the first byte of every framed log entry.
const FrameVersion = 1

// FrameHeaderBytes is the length of the frame before the payload.
const FrameHeaderBytes = 5

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorruptEntry is returned (wrapped in an *EntryError) for a committed
// log entry that fails its integrity check or does not decode.
var ErrCorruptEntry = errors.New("raftfsm: corrupt log entry")

// EntryError names the raft index of a committed entry the FSM must not
// apply and why: it is corrupt, or (Unsupported) it needs a newer binary
// (version.go).
type EntryError struct {
	Index  uint64
	Reason string
	// Unsupported marks an intact entry this binary does not understand.
	Unsupported bool
}

// Error implements error.
func (e *EntryError) Error() string {
	if e.Unsupported {
		return fmt.Sprintf("raftfsm: log entry %d needs a newer binary: it holds %s; upgrade this node", e.Index, e.Reason)
	}
	return fmt.Sprintf("raftfsm: log entry %d is corrupt: %s", e.Index, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCorruptEntry) true, or
// errors.Is(err, ErrUnsupportedVersion) for an Unsupported entry.
func (e *EntryError) Unwrap() error {
	if e.Unsupported {
		return ErrUnsupportedVersion
	}
	return ErrCorruptEntry
}

// FrameEntry returns payload framed with its version and checksum.
func FrameEntry(payload []byte) []byte {
	out := make([]byte, FrameHeaderBytes+len(payload))
	out[0] = FrameVersion
	binary.BigEndian.PutUint32(out[1:FrameHeaderBytes], crc32.Checksum(payload, castagnoli))
	copy(out[FrameHeaderBytes:], payload)
	return out
}

// MarshalEntry encodes cmd deterministically and frames it: the bytes a
// proposer hands to raft, exactly FrameEntry of the deterministic
// encoding. The command is marshalled straight into the frame (one buffer
// of the final size, the header written after), not marshalled and then
// copied behind a header: with 64 KiB results that copy was one of the
// entry's needless copies (docs/benchmarks.md, issue 15).
func MarshalEntry(cmd *pb.Command) ([]byte, error) {
	size := proto.Size(cmd)
	out := make([]byte, FrameHeaderBytes, FrameHeaderBytes+size)
	out, err := proto.MarshalOptions{Deterministic: true, UseCachedSize: true}.MarshalAppend(out, cmd)
	if err != nil {
		return nil, err
	}
	out[0] = FrameVersion
	binary.BigEndian.PutUint32(out[1:FrameHeaderBytes], crc32.Checksum(out[FrameHeaderBytes:], castagnoli))
	return out, nil
}

// UnframeEntry checks data's frame and returns the payload; the reason
// says what is wrong otherwise.
func UnframeEntry(data []byte) (payload []byte, reason string) {
	return unframe(data, true)
}

// unframe is UnframeEntry; with sum false it checks the version and the
// length but not the checksum (an OwnEntries entry, whose checksum
// MarshalEntry computed over these very bytes).
func unframe(data []byte, sum bool) (payload []byte, reason string) {
	if len(data) < FrameHeaderBytes {
		return nil, fmt.Sprintf("%d bytes, shorter than the %d-byte frame header", len(data), FrameHeaderBytes)
	}
	if data[0] != FrameVersion {
		return nil, fmt.Sprintf("unknown frame version %d (entries written before integrity frames are not accepted)", data[0])
	}
	payload = data[FrameHeaderBytes:]
	if !sum {
		return payload, ""
	}
	if got, want := crc32.Checksum(payload, castagnoli), binary.BigEndian.Uint32(data[1:FrameHeaderBytes]); got != want {
		return nil, fmt.Sprintf("checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	return payload, ""
}

// DecodeEntry checks the frame of the command entry at index and decodes
// it; any failure is an *EntryError. The command's results alias data
// (frame_results.go): data must not be modified while the command or a
// result stored from it is in use.
func DecodeEntry(index uint64, data []byte) (*pb.Command, error) {
	return decodeEntry(index, data, true)
}

// decodeEntry is DecodeEntry; sum false skips the checksum (unframe).
func decodeEntry(index uint64, data []byte, sum bool) (*pb.Command, error) {
	payload, reason := unframe(data, sum)
	if reason != "" {
		return nil, &EntryError{Index: index, Reason: reason}
	}
	cmd, err := decodeCommand(payload) // results alias data (frame_results.go)
	if err != nil {
		return nil, &EntryError{Index: index, Reason: "checksum matches but the command does not decode: " + err.Error()}
	}
	return cmd, nil
}
