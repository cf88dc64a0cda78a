// Tests for OwnEntries (own.go). Goal: Apply leaves out the checksum only
// for the exact buffer the proposer recorded — never for an equal copy,
// a part of it, or an entry applied a second time — and checks every other
// entry in full, in Apply and in DecodeAhead alike. Method: an entry whose
// stored checksum is wrong, so that a computed checksum shows as a fatal
// corrupt-entry error and a skipped one as an applied command.
//
// Mutants these tests kill (scripts/mutants.txt): raftfsm/own-entry-any-buffer
// (take accepts any slice), raftfsm/own-entry-checksummed-again (decode
// always computes the checksum).
package raftfsm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hashicorp/raft"

	distributed "github.com/termivar/distributed"
)

// applyLogs applies logs through Apply, or through DecodeAhead and
// ApplyDecoded as the node's batching FSM does.
func applyLogs(t *testing.T, f *FSM, ahead bool, logs ...*raft.Log) {
	t.Helper()
	if !ahead {
		for _, l := range logs {
			f.Apply(l)
		}
		return
	}
	ch := f.DecodeAhead(logs)
	for _, l := range logs {
		f.ApplyDecoded(l, <-ch)
	}
}

func TestOwnEntries_TakesOnlyTheRecordedBuffer(t *testing.T) {
	t.Parallel()
	var nilSet *OwnEntries
	nilSet.Add([]byte{1})
	nilSet.Forget([]byte{1})
	if nilSet.take([]byte{1}) || nilSet.Len() != 0 || nilSet.Taken() != 0 {
		t.Fatal("a nil OwnEntries must hold nothing")
	}
	o := &OwnEntries{}
	data := randomBytes(t, 64)
	o.Add(data)
	o.Add(nil)
	for name, other := range map[string][]byte{"an equal copy": bytes.Clone(data), "a prefix": data[:63], "a suffix": data[1:], "empty": nil} {
		if o.take(other) {
			t.Errorf("take(%s) = true, want false", name)
		}
	}
	if o.Len() != 1 || !o.take(data) || o.take(data) || o.Len() != 0 || o.Taken() != 1 {
		t.Fatalf("the recorded entry: Len %d, Taken %d; want it taken exactly once", o.Len(), o.Taken())
	}
	o.Add(data)
	o.Forget(data)
	if o.take(data) || o.Len() != 0 || o.Taken() != 1 {
		t.Fatal("a forgotten entry must not be taken")
	}
}

// badSumEntry is a framed completion with a 64 KiB result whose stored
// checksum is wrong.
func badSumEntry(t *testing.T, b *testBundle, lease distributed.TaskLease) []byte {
	t.Helper()
	cmd := completeCmd("kw1", lease, randomBytes(t, 64<<10))
	cmd.Version, cmd.NowSecs, cmd.Tenant = CommandVersion, b.now, "acme"
	data, err := MarshalEntry(cmd)
	if err != nil {
		t.Fatal(err)
	}
	data[1] ^= 0xff
	return data
}

func TestFSM_OwnEntryIsChecksummedOnce(t *testing.T) {
	t.Parallel()
	for _, ahead := range []bool{false, true} {
		own := &OwnEntries{}
		b, acq := twoRunning(t)
		b.f.opts.OwnEntries = own
		data := badSumEntry(t, b, acq[0].Lease)
		own.Add(data)
		// The recorded buffer: applied (its checksum is not computed again).
		applyLogs(t, b.f, ahead, &raft.Log{Index: 100, Type: raft.LogCommand, Data: data})
		if b.f.Fatal() != nil || own.Len() != 0 || own.Taken() != 1 {
			t.Fatalf("ahead %v: the own entry: fatal %v, Len %d; want applied and taken", ahead, b.f.Fatal(), own.Len())
		}
		if got := b.f.StoredResultBytes(); got != 64<<10 {
			t.Fatalf("ahead %v: StoredResultBytes = %d after the own entry, want %d", ahead, got, 64<<10)
		}
		// The same bytes in another buffer (as read from the log store):
		// checked, and refused.
		other := badSumEntry(t, b, acq[1].Lease)
		own.Add(bytes.Clone(other))
		applyLogs(t, b.f, ahead, &raft.Log{Index: 101, Type: raft.LogCommand, Data: other})
		if err := b.f.Fatal(); !errors.Is(err, ErrCorruptEntry) {
			t.Fatalf("ahead %v: an entry that is not the recorded buffer: fatal %v, want ErrCorruptEntry", ahead, err)
		}
	}
}
