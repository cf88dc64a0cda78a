// Benchmark of decoding a 1 MiB entry of 64 KiB results with and without
// its checksum (own.go). Goal: what the leader saves per entry by not
// computing again the CRC-32C MarshalEntry computed. Method: one framed
// Batch of 16 completions with a 64 KiB result each; "checksummed" is
// DecodeEntry (a follower's or a replay's entry), "own" is the FSM's
// decode of an entry recorded in OwnEntries just before, as the proposer
// records it.
package raftfsm

import (
	"testing"

	"github.com/hashicorp/raft"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func BenchmarkFSM_DecodeEntry64K(b *testing.B) {
	batch := &pb.Batch{}
	for range 16 {
		result := make([]byte, 64<<10)
		for i := range result {
			result[i] = byte(i * 7)
		}
		batch.Commands = append(batch.Commands, &pb.Command{Tenant: "acme", Principal: "kw1",
			Op: &pb.Command_CompleteTask{CompleteTask: &pb.CompleteTask{Lease: make([]byte, 96), Result: result}}})
	}
	data, err := MarshalEntry(&pb.Command{Version: CommandVersion, NowSecs: 9, Op: &pb.Command_Batch{Batch: batch}})
	if err != nil {
		b.Fatal(err)
	}
	l := &raft.Log{Index: 100, Type: raft.LogCommand, Data: data}
	b.Run("checksummed", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeEntry(l.Index, l.Data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("own", func(b *testing.B) {
		f := New(Options{OwnEntries: &OwnEntries{}})
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			f.opts.OwnEntries.Add(l.Data)
			if _, err := f.decode(l); err != nil {
				b.Fatal(err)
			}
		}
	})
}
