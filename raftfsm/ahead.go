package raftfsm

import (
	"github.com/hashicorp/raft"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

// Decoded is one command entry's decode: DecodeEntry's command and error.
type Decoded struct {
	Cmd *pb.Command
	Err error
}

// aheadEntries is how many decoded entries DecodeAhead may hold that the
// caller has not taken yet: it bounds the memory of the look-ahead to a
// few entries (each at most MaxEntryBytes plus its last proposal).
const aheadEntries = 2

// DecodeAhead decodes the command entries of logs (raft.LogCommand; the
// others are skipped) in order, in a goroutine, and returns them in that
// order on the channel, which it closes after the last: the caller applies
// one while the next decodes. A replay after a restart applies hundreds of
// large entries one after another on raft's FSM goroutine, and their
// decode was a third of that serial work (docs/benchmarks.md, "Restart of
// a 1 M-task node"). With fewer than two command entries it decodes in
// the caller's goroutine. The caller must take every command entry's
// result; the goroutine ends after the last.
func DecodeAhead(logs []*raft.Log) <-chan Decoded {
	n := 0
	for _, l := range logs {
		if l.Type == raft.LogCommand {
			n++
		}
	}
	ch := make(chan Decoded, min(n, aheadEntries))
	if n < 2 {
		decodeAll(logs, ch)
		return ch
	}
	go decodeAll(logs, ch)
	return ch
}

// decodeAll sends the decode of every command entry of logs to ch, then
// closes it.
func decodeAll(logs []*raft.Log, ch chan<- Decoded) {
	defer close(ch)
	for _, l := range logs {
		if l.Type == raft.LogCommand {
			cmd, err := DecodeEntry(l.Index, l.Data)
			ch <- Decoded{Cmd: cmd, Err: err}
		}
	}
}
