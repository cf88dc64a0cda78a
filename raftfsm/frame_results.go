package raftfsm

import (
	"bytes"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Decoding results without copying them (issue 15). protobuf-go copies
// every bytes field it decodes, so a 64 KiB result was copied out of its
// log entry and then kept. decodeCommand cuts the result values out of the
// payload first — of the command's CompleteTask and of each CompleteTask
// directly in its Batch — unmarshals the rest and points each decoded
// result into the payload. The payload is the entry's Data, which nothing
// writes after it is proposed: the proposer's fresh frame on the leader,
// a fresh slice from the transport on a follower, and raft-wal's GetLog
// copies every entry it reads (so a stored result keeps its entry alive,
// no more; ownResult copies results that are a small part of their entry). Only the shapes a proposer writes take this path: each
// command with at most one op and each CompleteTask with at most one
// result, every one as a length-delimited field; anything else — repeated
// or switched oneof fields, odd wire types, a payload that does not decode
// — is decoded by proto.Unmarshal as before, so both paths accept exactly
// the same payloads and give equal commands
// (TestDecodeCommand_AgreesWithProto).

// Command field numbers (proto/termivar/v1/command.proto).
const (
	fieldCommandBatch    = 10
	fieldCommandComplete = 24
	fieldBatchCommands   = 1
	fieldCompleteResult  = 2
	maxResultCutDepth    = 1 // the command and the commands of its Batch
)

// commandOps is the set of Command's op oneof field numbers.
var commandOps = func() map[protowire.Number]bool {
	out := map[protowire.Number]bool{}
	fields := (&pb.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("op").Fields()
	for i := range fields.Len() {
		out[fields.Get(i).Number()] = true
	}
	return out
}()

// cutCommand is one command's payload with its results cut out.
type cutCommand struct {
	rest      []byte
	result    []byte // the CompleteTask's result, aliasing the payload
	hasResult bool
	batch     []cutResult // per Batch element, in order
}

type cutResult struct {
	result    []byte
	hasResult bool
}

// decodeCommand is proto.Unmarshal(payload) with results aliasing payload.
func decodeCommand(payload []byte) (*pb.Command, error) {
	var cmd pb.Command
	c, ok := cutResults(payload, 0)
	if !ok || proto.Unmarshal(c.rest, &cmd) != nil {
		cmd.Reset()
		return &cmd, proto.Unmarshal(payload, &cmd) // NB: its own error
	}
	own := ownResult(c, len(payload))
	if c.hasResult {
		cmd.GetCompleteTask().Result = own(c.result)
	}
	elems := cmd.GetBatch().GetCommands()
	for i, r := range c.batch {
		if r.hasResult && i < len(elems) {
			elems[i].GetCompleteTask().Result = own(r.result)
		}
	}
	return &cmd, nil
}

// AppliedResultBytes is the sum of the result bytes of the commands Apply
// decoded since the FSM was made (a restore does not reset it): the part of
// the applied log that is results to store, which the node's snapshot
// trigger counts apart from the rest (node/snapbytes.go). Safe to call from
// any goroutine; after Apply returns on the FSM goroutine it includes that
// entry.
func (f *FSM) AppliedResultBytes() int64 { return f.appliedResultBytes.Load() }

// StoredResultBytes is the sum of the result bytes every tenant's result
// store holds. The node's snapshot trigger reads it right after a snapshot
// captures the state and after a restore (from the FSM goroutine, so it is
// the captured or restored state's): it lets a log of results grow in
// proportion to the results a snapshot rewrites (node/snapbytes.go).
func (f *FSM) StoredResultBytes() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var n int64
	for _, t := range f.tenants {
		n += int64(t.results.TotalBytes())
	}
	return n
}

// resultBytes sums the results a command carries: its CompleteTask's and
// those of the CompleteTasks directly in its Batch (the shapes a proposer
// writes, frame_results.go).
func resultBytes(cmd *pb.Command) int64 {
	n := int64(len(cmd.GetCompleteTask().GetResult()))
	for _, c := range cmd.GetBatch().GetCommands() {
		n += int64(len(c.GetCompleteTask().GetResult()))
	}
	return n
}

// ownResult returns how the cut results are kept: as slices of the payload
// when they are at least half of it, copied otherwise. A stored result that
// aliases the entry keeps the whole entry alive, so a small result in an
// entry of enqueues (the proposer coalesces both into one Batch) would
// retain kilobytes of specs for as long as the result is kept; with the
// rule, the entry's retained bytes are at most twice its results'.
func ownResult(c cutCommand, payload int) func([]byte) []byte {
	total := len(c.result)
	for _, r := range c.batch {
		total += len(r.result)
	}
	if 2*total >= payload {
		return func(b []byte) []byte { return b }
	}
	return bytes.Clone
}

// splice is src with some fields replaced, copied lazily: a command with
// no result to cut (most of them) is unmarshalled from its payload as it
// is, without a copy of it (or two, for a Batch).
type splice struct {
	src, out []byte
	cut      bool
}

// begin starts the copy at the field at offset pos of src, the first one
// cut; the fields before it are kept. NB: out grows by append from what is
// kept so far, not from len(src): what is kept is the command without its
// results, a few hundred bytes per command, and src is the whole entry.
// Sized from src, a Batch of 1 024 completions with 64 KiB results
// allocated its 64 MiB three times over to keep ≈ 150 KB (issue 15).
func (s *splice) begin(pos int) {
	if !s.cut {
		s.out = append([]byte(nil), s.src[:pos]...)
		s.cut = true
	}
}

// keep keeps one field of src as it is.
func (s *splice) keep(field []byte) {
	if s.cut {
		s.out = append(s.out, field...)
	}
}

// replace puts the length-delimited field num with value v in place of the
// field at offset pos of src.
func (s *splice) replace(pos int, num protowire.Number, v []byte) {
	s.begin(pos)
	s.out = protowire.AppendBytes(protowire.AppendTag(s.out, num, protowire.BytesType), v)
}

// bytes is src with the cuts made.
func (s *splice) bytes() []byte {
	if s.cut {
		return s.out
	}
	return s.src
}

// cutResults walks one Command; false asks for the plain decode.
func cutResults(b []byte, depth int) (cutCommand, bool) {
	var c cutCommand
	s := splice{src: b}
	opSeen := false
	for len(b) > 0 {
		pos := len(s.src) - len(b)
		num, typ, v, n := nextField(b)
		if n < 0 {
			return c, false
		}
		if commandOps[num] {
			if opSeen || typ != protowire.BytesType {
				return c, false
			}
			opSeen = true
		}
		var inner []byte
		ok, cut := true, false
		switch {
		case num == fieldCommandComplete && commandOps[num]:
			inner, c.result, c.hasResult, ok = cutComplete(v)
			cut = c.hasResult
		case num == fieldCommandBatch && depth < maxResultCutDepth:
			inner, c.batch, ok = cutBatch(v, depth+1)
			cut = slices.ContainsFunc(c.batch, func(r cutResult) bool { return r.hasResult })
		}
		if !ok {
			return c, false
		}
		if cut {
			s.replace(pos, num, inner)
		} else {
			s.keep(b[:n])
		}
		b = b[n:]
	}
	c.rest = s.bytes()
	return c, true
}

// cutComplete cuts the result out of a CompleteTask.
func cutComplete(b []byte) (rest, result []byte, has, ok bool) {
	s := splice{src: b}
	for len(b) > 0 {
		pos := len(s.src) - len(b)
		num, typ, v, n := nextField(b)
		if n < 0 {
			return nil, nil, false, false
		}
		if num == fieldCompleteResult {
			if has || typ != protowire.BytesType {
				return nil, nil, false, false
			}
			result, has = v, true
			s.begin(pos) // the result field is left out
		} else {
			s.keep(b[:n])
		}
		b = b[n:]
	}
	return s.bytes(), result, has, true
}

// cutBatch cuts the results out of a Batch's commands.
func cutBatch(b []byte, depth int) (rest []byte, elems []cutResult, ok bool) {
	s := splice{src: b}
	for len(b) > 0 {
		pos := len(s.src) - len(b)
		num, typ, v, n := nextField(b)
		if n < 0 {
			return nil, nil, false
		}
		if num != fieldBatchCommands {
			s.keep(b[:n])
			b = b[n:]
			continue
		}
		if typ != protowire.BytesType {
			return nil, nil, false
		}
		c, ok := cutResults(v, depth)
		if !ok {
			return nil, nil, false
		}
		if c.hasResult {
			s.replace(pos, num, c.rest)
		} else {
			s.keep(b[:n])
		}
		elems = append(elems, cutResult{result: c.result, hasResult: c.hasResult})
		b = b[n:]
	}
	return s.bytes(), elems, true
}

// nextField reads one field: its number, type, value (for a
// length-delimited field, its contents) and encoded length (negative when
// malformed).
func nextField(b []byte) (protowire.Number, protowire.Type, []byte, int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, n
	}
	m := protowire.ConsumeFieldValue(num, typ, b[n:])
	if m < 0 {
		return 0, 0, nil, m
	}
	var v []byte
	if typ == protowire.BytesType {
		v, _ = protowire.ConsumeBytes(b[n:])
	}
	return num, typ, v, n + m
}
