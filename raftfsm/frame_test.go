// Tests of the log entry frame. Goal: every damaged entry (any bit flipped,
// any truncation, an unframed legacy entry, a frame whose payload does not
// decode) is refused with its index named, and the FSM never applies it:
// it records one fatal error, applies nothing after it and takes no
// snapshot. Method: frame real commands, damage them exhaustively, and
// drive Apply with raft.Log values.
package raftfsm

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func TestFrame_RoundTrip(t *testing.T) {
	cmd := enqueueCmd("kprod", "a", "b")
	cmd.Tenant, cmd.Version = "acme", CommandVersion
	data, err := MarshalEntry(cmd)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeEntry(7, data)
	if err != nil || !proto.Equal(got, cmd) {
		t.Fatalf("DecodeEntry = %v, %v; want the command back", got, err)
	}
}

func TestFrame_EveryBitFlipAndTruncationRefused(t *testing.T) {
	cmd := enqueueCmd("kprod", "a")
	data, err := MarshalEntry(cmd)
	if err != nil {
		t.Fatal(err)
	}
	for i := range len(data) * 8 {
		d := bytes.Clone(data)
		d[i/8] ^= 1 << (i % 8)
		if _, err := DecodeEntry(42, d); !errors.Is(err, ErrCorruptEntry) || !strings.Contains(err.Error(), "entry 42") {
			t.Fatalf("bit %d flipped: err %v, want ErrCorruptEntry naming entry 42", i, err)
		}
	}
	for n := range len(data) {
		if _, err := DecodeEntry(42, data[:n]); !errors.Is(err, ErrCorruptEntry) {
			t.Fatalf("truncated to %d bytes: err %v, want ErrCorruptEntry", n, err)
		}
	}
}

func TestFrame_LegacyAndUndecodableRefused(t *testing.T) {
	bare, _ := proto.Marshal(enqueueCmd("kprod", "a"))
	if _, err := DecodeEntry(3, bare); err == nil || !strings.Contains(err.Error(), "unknown frame version") {
		t.Fatalf("unframed entry: err %v, want unknown frame version", err)
	}
	garbage := FrameEntry([]byte{0xff, 0xff, 0xff})
	if _, err := DecodeEntry(3, garbage); err == nil || !strings.Contains(err.Error(), "does not decode") {
		t.Fatalf("framed garbage: err %v, want does not decode", err)
	}
}

func TestFSM_CorruptEntryIsFatal(t *testing.T) {
	var calls []error
	b := setup(t)
	b.f.opts.FatalFunc = func(err error) { calls = append(calls, err) }
	before, _ := b.f.ExportState()
	good, _ := MarshalEntry(&pb.Command{Version: CommandVersion, Tenant: "acme", Principal: "kprod", NowSecs: 200,
		Op: &pb.Command_Enqueue{Enqueue: &pb.EnqueueTasks{Tasks: []*pb.TaskSpec{{TaskId: "z", ScanId: "s", TargetRef: []byte("x")}}}}})
	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 0x10
	r, _ := b.f.Apply(&raft.Log{Index: 50, Type: raft.LogCommand, Data: bad}).(Response)
	if !errors.Is(r.Err, ErrCorruptEntry) || !strings.Contains(r.Err.Error(), "entry 50") {
		t.Fatalf("Apply(corrupt) = %v, want ErrCorruptEntry naming entry 50", r.Err)
	}
	// A later good entry is not applied either.
	r, _ = b.f.Apply(&raft.Log{Index: 51, Type: raft.LogCommand, Data: good}).(Response)
	if !errors.Is(r.Err, ErrCorruptEntry) {
		t.Fatalf("Apply after the failure = %v, want the fatal error", r.Err)
	}
	after, _ := b.f.ExportState()
	if !bytes.Equal(before, after) {
		t.Fatal("state changed")
	}
	if len(calls) != 1 || b.f.Fatal() == nil {
		t.Fatalf("FatalFunc called %d times, Fatal() = %v; want once and set", len(calls), b.f.Fatal())
	}
	if _, err := b.f.Snapshot(); err == nil {
		t.Fatal("Snapshot succeeded on a fatal FSM")
	}
}
