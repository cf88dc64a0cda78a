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
//
// Once f is fatal it decodes nothing and gives the zero Decoded: Apply
// decodes nothing then either, and ApplyDecoded answers the fatal error
// whatever it is given (fatal.go: set once, never cleared), so a batch
// after a corrupt entry, or the rest of the batch holding it, is not
// decoded for nothing.
func (f *FSM) DecodeAhead(logs []*raft.Log) <-chan Decoded {
	n := 0
	for _, l := range logs {
		if l.Type == raft.LogCommand {
			n++
		}
	}
	ch := make(chan Decoded, min(n, aheadEntries))
	if n < 2 {
		f.decodeAll(logs, ch)
		return ch
	}
	go f.decodeAll(logs, ch)
	return ch
}

// decodeAll sends the decode of every command entry of logs to ch (the
// zero Decoded once f is fatal), then closes it.
func (f *FSM) decodeAll(logs []*raft.Log, ch chan<- Decoded) {
	defer close(ch)
	for _, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		var d Decoded
		if f.Fatal() == nil {
			d.Cmd, d.Err = f.decode(l)
		}
		ch <- d
	}
}
