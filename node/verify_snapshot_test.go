// Test of the startup check's split at the newest snapshot (verify.go,
// checkEntriesAfter). Goal: every retained command entry's frame is
// checked, and the protobuf decode runs exactly for the entries after the
// snapshot (the ones raft replays). Method: an in-memory log of three
// command entries — intact, damaged under its checksum, or intact-framed
// but not a protobuf Command — checked with the snapshot below, at and
// above the odd entry.
package node

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/termivar/distributed/raftfsm"
)

func TestCheckEntriesAfter_DecodesOnlyAfterSnapshot(t *testing.T) {
	t.Parallel()
	good, err := raftfsm.MarshalEntry(enqueue(raftfsm.SystemTenant, "a"))
	if err != nil {
		t.Fatal(err)
	}
	damaged := append([]byte(nil), good...)
	damaged[len(damaged)-1] ^= 0x01                 // under the checksum
	undecodable := framed([]byte{0xff, 0xff, 0xff}) // field 0: never a Command
	if _, reason := raftfsm.UnframeEntry(undecodable); reason != "" {
		t.Fatalf("the test's frame is refused: %s", reason)
	}
	for _, c := range []struct {
		name      string
		odd       []byte // entry 2
		snapIndex uint64
		wantErr   string // "" for accepted
	}{
		{"damaged, no snapshot", damaged, 0, "log entry 2 is corrupt: checksum mismatch"},
		{"damaged, below the snapshot", damaged, 3, "log entry 2 is corrupt: checksum mismatch"},
		{"damaged, at the snapshot", damaged, 2, "log entry 2 is corrupt: checksum mismatch"},
		{"undecodable, no snapshot", undecodable, 0, "log entry 2 is corrupt: checksum matches but the command does not decode"},
		{"undecodable, after the snapshot", undecodable, 1, "log entry 2 is corrupt: checksum matches but the command does not decode"},
		{"undecodable, at the snapshot", undecodable, 2, ""},
		{"intact", good, 0, ""},
	} {
		logs := raft.NewInmemStore()
		for i, data := range [][]byte{good, c.odd, good} {
			if err := logs.StoreLog(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data}); err != nil {
				t.Fatal(err)
			}
		}
		err := checkEntriesAfter("wal", logs, 1, 3, c.snapIndex)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("%s: checkEntriesAfter = %v, want nil", c.name, err)
		case c.wantErr != "" && (!errors.Is(err, ErrDamagedDataDir) || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: checkEntriesAfter = %v, want a damaged data dir naming %q", c.name, err, c.wantErr)
		}
	}
}

// framed frames payload as the proposer does (raftfsm.MarshalEntry).
func framed(payload []byte) []byte {
	out := make([]byte, raftfsm.FrameHeaderBytes, raftfsm.FrameHeaderBytes+len(payload))
	out[0] = raftfsm.FrameVersion
	binary.BigEndian.PutUint32(out[1:], crc32.Checksum(payload, crc32.MakeTable(crc32.Castagnoli)))
	return append(out, payload...)
}
