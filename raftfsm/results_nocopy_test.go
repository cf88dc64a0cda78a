// Tests for storing results without a copy (issue 15). Goal: a result
// applied from a log entry is stored without another copy, yet the stored
// bytes never share memory with anything a caller or raft still holds:
// not the entry (Apply's decode copied the result out of it) and not a
// command passed to ApplyCommand (which copies). Method: apply a
// completion both ways, then overwrite the entry or the command's result
// and read the stored result back.
package raftfsm

import (
	"bytes"
	"crypto/rand"
	"testing"

	"github.com/hashicorp/raft"
)

func TestFSM_StoredResultSharesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.must(t, registerCmd("kw1", "w1"))
	b.must(t, enqueueCmd("kprod", "t1", "t2"))
	acq := valueOf[[]Acquired](t, b.must(t, acquireCmd("kw1", "w1", 2)))
	want := make([]byte, 64<<10)
	if _, err := rand.Read(want); err != nil {
		t.Fatal(err)
	}

	// Through Apply: the framed entry is overwritten afterwards.
	cmd := completeCmd("kw1", acq[0].Lease, bytes.Clone(want))
	cmd.Version, cmd.NowSecs, cmd.Tenant = CommandVersion, b.now, "acme"
	data, err := MarshalEntry(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := b.f.Apply(&raft.Log{Index: 100, Type: raft.LogCommand, Data: data}).(Response); !ok || r.Err != nil {
		t.Fatalf("Apply(complete) = %v", r.Err)
	}
	clear(data)

	// Through ApplyCommand: the command's result is overwritten afterwards.
	direct := bytes.Clone(want)
	b.must(t, completeCmd("kw1", acq[1].Lease, direct))
	clear(direct)

	tv, _ := b.f.Tenant("acme")
	for _, id := range []string{acq[0].Lease.TaskID(), acq[1].Lease.TaskID()} {
		got, ok, err := tv.GetResult(id)
		if err != nil || !ok || !bytes.Equal(got, want) {
			t.Fatalf("stored result of %s changed with its source (ok %v, err %v)", id, ok, err)
		}
	}
}
