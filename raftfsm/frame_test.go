// Tests of the log entry frame. Goal: every damaged entry (any bit flipped,
// any truncation, an unframed legacy entry, a frame whose payload does not
// decode) is refused with its index named, and the FSM never applies it:
// it records one fatal error, applies nothing after it and takes no
// snapshot. Method: frame real commands, damage them exhaustively, and
// drive Apply with raft.Log values.
package raftfsm

import (
	"bytes"
	"crypto/rand"
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

// TestMarshalEntry_EqualsFramedEncoding pins that MarshalEntry, which
// marshals into the frame, writes exactly FrameEntry of the deterministic
// encoding (the frame the startup verification and Apply check), for a
// single command and a batch carrying a 64 KiB result.
func TestMarshalEntry_EqualsFramedEncoding(t *testing.T) {
	result := make([]byte, 64<<10)
	if _, err := rand.Read(result); err != nil {
		t.Fatal(err)
	}
	one := enqueueCmd("kprod", "a", "b")
	one.Version = CommandVersion
	complete := &pb.Command{Version: CommandVersion, Tenant: "acme", Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: []byte("lease"), Result: result}}}
	batch := &pb.Command{Version: CommandVersion, NowSecs: 9, Op: &pb.Command_Batch{Batch: &pb.Batch{Commands: []*pb.Command{one, complete}}}}
	for _, cmd := range []*pb.Command{one, complete, batch} {
		payload, err := proto.MarshalOptions{Deterministic: true}.Marshal(cmd)
		if err != nil {
			t.Fatal(err)
		}
		got, err := MarshalEntry(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if want := FrameEntry(payload); !bytes.Equal(got, want) || cap(got) != len(got) {
			t.Fatalf("MarshalEntry(%T) = %d bytes (cap %d), want FrameEntry's %d", cmd.GetOp(), len(got), cap(got), len(want))
		}
	}
}
