package raftfsm

// Goal: DecodeAhead gives, for every command entry of a batch and in
// order, exactly DecodeEntry's result — damaged entries included — and
// skips the other entry types. Method: real framed entries, one of them
// with a flipped payload byte, mixed with configuration and no-op
// entries; batches of every length from 0 to all of them. Once the FSM is
// fatal it decodes nothing, as Apply, and still gives one (zero) result
// per command entry.

import (
	"errors"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func aheadLogs(t *testing.T) []*raft.Log {
	t.Helper()
	var logs []*raft.Log
	for i, id := range []string{"a", "b", "c", "d"} {
		data, err := MarshalEntry(&pb.Command{Tenant: "acme", Op: &pb.Command_Enqueue{Enqueue: &pb.EnqueueTasks{
			Tasks: []*pb.TaskSpec{{TaskId: id, ScanId: "s", TargetRef: []byte("x"), Priority: 1}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			data[len(data)-1] ^= 0x40 // the CRC-32C no longer matches
		}
		logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Type: raft.LogCommand, Data: data})
		if i == 1 {
			logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Type: raft.LogConfiguration, Data: []byte("not a command")})
		}
	}
	return append(logs, &raft.Log{Index: uint64(len(logs) + 1), Type: raft.LogNoop})
}

// checkAhead runs f.DecodeAhead on every prefix of all and requires one
// result per command entry, in order, each passing check, and nothing after
// the last.
func checkAhead(t *testing.T, f *FSM, all []*raft.Log, check func(n int, l *raft.Log, got Decoded)) {
	t.Helper()
	for n := range len(all) + 1 {
		logs := all[:n]
		ch := f.DecodeAhead(logs)
		for _, l := range logs {
			if l.Type != raft.LogCommand {
				continue
			}
			got, ok := <-ch
			if !ok {
				t.Fatalf("%d entries: the channel closed before entry %d", n, l.Index)
			}
			check(n, l, got)
		}
		if extra, ok := <-ch; ok {
			t.Fatalf("%d entries: an extra result %+v after the last command entry", n, extra)
		}
	}
}

func TestDecodeAhead_AgreesWithDecodeEntry(t *testing.T) {
	checkAhead(t, New(Options{}), aheadLogs(t), func(n int, l *raft.Log, got Decoded) {
		cmd, err := DecodeEntry(l.Index, l.Data)
		var ee *EntryError
		if (err == nil) != (got.Err == nil) || (err != nil && (!errors.As(got.Err, &ee) || ee.Index != l.Index || got.Err.Error() != err.Error())) {
			t.Fatalf("%d entries: entry %d error = %v, DecodeEntry says %v", n, l.Index, got.Err, err)
		}
		if !reflect.DeepEqual(got.Cmd, cmd) {
			t.Fatalf("%d entries: entry %d command differs from DecodeEntry's", n, l.Index)
		}
	})
}

func TestDecodeAhead_DecodesNothingOnceFatal(t *testing.T) {
	f := New(Options{})
	f.setFatal(&EntryError{Index: 1, Reason: "test"})
	checkAhead(t, f, aheadLogs(t), func(n int, l *raft.Log, got Decoded) {
		if got != (Decoded{}) {
			t.Fatalf("%d entries: entry %d decoded (%+v) although the FSM is fatal", n, l.Index, got)
		}
		if r, _ := f.ApplyDecoded(l, got).(Response); !errors.Is(r.Err, f.Fatal()) {
			t.Fatalf("%d entries: entry %d answered %v, want the fatal error", n, l.Index, r.Err)
		}
	})
}

// ApplyDecoded given nothing decoded by an FSM that is not fatal is a
// caller's bug: it must not mark the entry applied without applying it.
func TestApplyDecoded_NothingDecodedPanicsUnlessFatal(t *testing.T) {
	f := New(Options{})
	l := aheadLogs(t)[0]
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("ApplyDecoded of the zero Decoded on an FSM that is not fatal did not panic")
			}
		}()
		f.ApplyDecoded(l, Decoded{})
	}()
	if got := f.AppliedIndex(); got != 0 {
		t.Fatalf("applied index %d after the refused call, want 0", got)
	}
}
