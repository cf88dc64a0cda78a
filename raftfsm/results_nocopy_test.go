// Tests for decoding and storing results without a copy (issue 15). Goal:
// Apply decodes a result as a slice of its entry and the store keeps it;
// a command given to ApplyCommand (whose caller may reuse its bytes) is
// still copied; and the aliasing decode accepts exactly what
// proto.Unmarshal accepts and gives an equal command, so the log's
// integrity checks are as strong as before. Method: apply completions
// both ways; compare both decoders on valid entries, on every truncation
// and byte flip of one, and on crafted shapes that take the plain path.
package raftfsm

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"runtime"
	"testing"
	"unsafe"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// within reports whether s lies inside buf's memory.
func within(s, buf []byte) bool {
	if len(s) == 0 || len(buf) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(&s[0])), uintptr(unsafe.Pointer(&buf[0]))
	return p >= lo && p+uintptr(len(s)) <= lo+uintptr(len(buf))
}

// twoRunning is a test FSM whose worker w1 (key kw1) runs tasks t1 and
// t2 of tenant acme.
func twoRunning(t *testing.T) (*testBundle, []Acquired) {
	b := setup(t)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, enqueueCmd("kprod", "t1", "t2"))
	return b, valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", 2)))
}

func TestFSM_ApplyStoresResultsWithoutCopies(t *testing.T) {
	t.Parallel()
	b, acq := twoRunning(t)
	want := randomBytes(t, 64<<10)

	// Through Apply: the decoded result is a slice of the entry.
	cmd := completeCmd("kw1", acq[0].Lease, bytes.Clone(want))
	cmd.Version, cmd.NowSecs, cmd.Tenant = CommandVersion, b.now, "acme"
	data, err := MarshalEntry(cmd)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := DecodeEntry(100, data)
	if err != nil || !within(dec.GetCompleteTask().GetResult(), data) {
		t.Fatalf("DecodeEntry: err %v; the result must alias the entry", err)
	}
	if r, ok := b.f.Apply(&raft.Log{Index: 100, Type: raft.LogCommand, Data: data}).(Response); !ok || r.Err != nil {
		t.Fatalf("Apply(complete) = %v", r.Err)
	}

	// Through ApplyCommand: the command's result is overwritten afterwards.
	direct := bytes.Clone(want)
	b.must(t, completeCmd("kw1", acq[1].Lease, direct))
	clear(direct)

	tv, _ := b.f.Tenant("acme")
	for _, id := range []string{acq[0].Lease.TaskID(), acq[1].Lease.TaskID()} {
		got, ok, err := tv.GetResult(id)
		if err != nil || !ok || !bytes.Equal(got, want) {
			t.Fatalf("stored result of %s differs (ok %v, err %v)", id, ok, err)
		}
	}
}

func TestDecodeCommand_AgreesWithProto(t *testing.T) {
	t.Parallel()
	complete := func(result []byte) *pb.Command {
		return &pb.Command{Version: CommandVersion, Tenant: "acme", Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: []byte("lease"), Result: result}}}
	}
	batch := &pb.Command{Version: CommandVersion, NowSecs: 9, Op: &pb.Command_Batch{Batch: &pb.Batch{Commands: []*pb.Command{
		complete(randomBytes(t, 300)), enqueueCmd("kprod", "a"), complete(nil), complete([]byte{}), complete(randomBytes(t, 2)),
	}}}}
	check := func(what string, in []byte) {
		t.Helper()
		var want pb.Command
		werr := proto.Unmarshal(in, &want)
		got, gerr := decodeCommand(in)
		if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
			t.Fatalf("%s: proto.Unmarshal = %v, decodeCommand = %v", what, werr, gerr)
		}
		if werr == nil && !proto.Equal(&want, got) {
			t.Fatalf("%s: the decoded commands differ", what)
		}
	}
	for _, cmd := range []*pb.Command{complete(randomBytes(t, 1000)), batch, enqueueCmd("kprod", "x")} {
		enc, err := proto.MarshalOptions{Deterministic: true}.Marshal(cmd)
		if err != nil {
			t.Fatal(err)
		}
		check("whole", enc)
		for i := range enc {
			check("truncated", enc[:i])
			flipped := bytes.Clone(enc)
			flipped[i] ^= 0x5a
			check("flipped", flipped)
		}
	}
	// Shapes a proposer never writes take proto.Unmarshal's path.
	tag := func(b []byte, num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
	}
	twoResults := tag(tag(nil, fieldCompleteResult, []byte("first")), fieldCompleteResult, []byte("second"))
	switched := tag(tag(tag(nil, fieldCommandComplete, tag(nil, fieldCompleteResult, []byte("r"))), 14, nil), fieldCommandComplete, nil)
	nested, _ := proto.Marshal(&pb.Command{Op: &pb.Command_Batch{Batch: &pb.Batch{Commands: []*pb.Command{batch}}}})
	varintResult := protowire.AppendVarint(protowire.AppendTag(nil, fieldCompleteResult, protowire.VarintType), 3)
	for what, in := range map[string][]byte{
		"a CompleteTask with two results":      tag(nil, fieldCommandComplete, twoResults),
		"a CompleteTask twice (merged)":        tag(tag(nil, fieldCommandComplete, tag(nil, fieldCompleteResult, []byte("r"))), fieldCommandComplete, tag(nil, 1, []byte("lease"))),
		"an op switched away and back":         switched,
		"a batch in a batch":                   nested,
		"a result of another wire type":        tag(nil, fieldCommandComplete, varintResult),
		"a batch twice":                        tag(tag(nil, fieldCommandBatch, tag(nil, fieldBatchCommands, nil)), fieldCommandBatch, nil),
		"a batch element of another wire type": tag(nil, fieldCommandBatch, protowire.AppendVarint(protowire.AppendTag(nil, fieldBatchCommands, protowire.VarintType), 1)),
		"an op of another wire type":           protowire.AppendVarint(protowire.AppendTag(nil, fieldCommandComplete, protowire.VarintType), 1),
	} {
		check(what, in)
	}
}

// A result that is a small part of its entry is copied, not aliased: kept
// as a slice, it would keep the entry's other commands alive with it.
func TestDecodeCommand_CopiesResultsThatAreASmallPartOfTheEntry(t *testing.T) {
	t.Parallel()
	result := randomBytes(t, 100)
	var ids []string
	for i := range 200 {
		ids = append(ids, fmt.Sprintf("task-%03d", i))
	}
	complete := &pb.Command{Principal: "kw1", Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: []byte("lease"), Result: result}}}
	small := &pb.Command{Version: CommandVersion, Tenant: "acme", Op: &pb.Command_Batch{Batch: &pb.Batch{Commands: []*pb.Command{
		enqueueCmd("kprod", ids...), complete,
	}}}}
	data, err := MarshalEntry(small)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := DecodeEntry(100, data)
	if err != nil {
		t.Fatal(err)
	}
	got := dec.GetBatch().GetCommands()[1].GetCompleteTask().GetResult()
	if !bytes.Equal(got, result) || within(got, data) {
		t.Fatalf("the 100-byte result in a %d-byte entry: equal %v, aliases the entry %v; want an equal copy",
			len(data), bytes.Equal(got, result), within(got, data))
	}
}

// Decoding a Batch of large completions allocates the decoded command and
// little else: the results alias the entry, and what the cut keeps (the
// commands without their results) is built from its own size, not the
// entry's (splice.begin sized it from the entry: 3 MB per 1 MiB decoded).
// Not parallel: the bound reads the process's allocation counter.
func TestDecodeCommand_AllocatesLittleBesidesTheCommand(t *testing.T) {
	const n, resultBytes, runs = 16, 64 << 10, 20
	batch := &pb.Batch{}
	for range n {
		batch.Commands = append(batch.Commands, &pb.Command{Tenant: "acme", Principal: "kw1",
			Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: randomBytes(t, 96), Result: randomBytes(t, resultBytes)}}})
	}
	data, err := MarshalEntry(&pb.Command{Version: CommandVersion, NowSecs: 9, Op: &pb.Command_Batch{Batch: batch}})
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		dec, err := DecodeEntry(100, data)
		if err != nil || len(dec.GetBatch().GetCommands()) != n || !within(dec.GetBatch().GetCommands()[n-1].GetCompleteTask().GetResult(), data) {
			t.Fatalf("DecodeEntry: err %v; want %d completions with results aliasing the entry", err, n)
		}
	}
	runtime.ReadMemStats(&after)
	perDecode := (after.TotalAlloc - before.TotalAlloc) / runs
	if limit := uint64(len(data) / 16); perDecode > limit {
		t.Fatalf("decoding a %d-byte entry of %d completions allocated %d bytes; want at most %d (1/16 of the entry)", len(data), n, perDecode, limit)
	}
}

// TestFSM_AppliedResultBytesCountsTheLogsResults: the node's snapshot
// trigger (node/snapbytes.go) tells result bytes from the rest of the log
// by AppliedResultBytes, so it must grow by exactly the results of each
// entry Apply decodes, whether or not the command succeeds, and not at all
// for entries without results; StoredResultBytes is what the stores keep.
func TestFSM_AppliedResultBytesCountsTheLogsResults(t *testing.T) {
	t.Parallel()
	b, acq := twoRunning(t)
	index := uint64(100)
	apply := func(cmd *pb.Command) {
		t.Helper()
		cmd.Version, cmd.NowSecs, cmd.Tenant = CommandVersion, b.now, "acme"
		data, err := MarshalEntry(cmd)
		if err != nil {
			t.Fatal(err)
		}
		index++
		b.f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data})
	}
	step := func(what string, cmd *pb.Command, want int64) {
		t.Helper()
		before := b.f.AppliedResultBytes()
		apply(cmd)
		if got := b.f.AppliedResultBytes() - before; got != want {
			t.Fatalf("%s: AppliedResultBytes grew by %d, want %d", what, got, want)
		}
	}
	step("an enqueue", enqueueCmd("kprod", "t3"), 0)
	step("a completion", completeCmd("kw1", acq[0].Lease, randomBytes(t, 5000)), 5000)
	step("a completion the pool refuses", completeCmd("kw1", acq[0].Lease, randomBytes(t, 700)), 700)
	batch := &pb.Command{Op: &pb.Command_Batch{Batch: &pb.Batch{Commands: []*pb.Command{
		completeCmd("kw1", acq[1].Lease, randomBytes(t, 3000)), enqueueCmd("kprod", "t4"), completeCmd("kw1", acq[1].Lease, nil),
	}}}}
	for _, c := range batch.GetBatch().GetCommands() {
		c.Version, c.NowSecs, c.Tenant = CommandVersion, b.now, "acme"
	}
	step("a batch", batch, 3000)
	b.f.ApplyCommand(completeCmd("kw1", acq[1].Lease, randomBytes(t, 10)))
	if got := b.f.AppliedResultBytes(); got != 8700 {
		t.Fatalf("AppliedResultBytes = %d, want 8700 (ApplyCommand decodes nothing and is not counted)", got)
	}
	// Of them, the two fresh completions' results are stored.
	if got := b.f.StoredResultBytes(); got != 8000 {
		t.Fatalf("StoredResultBytes = %d, want 8000", got)
	}
}
