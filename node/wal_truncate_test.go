// Regression test of hashicorp/raft-wal issue #31 (fixed by its PR #33,
// released in v0.4.1, which go.mod pins). Goal: a log whose uncommitted
// tail was cleared, as raft does on a deposed leader ("clearing log
// suffix": DeleteRange(first conflicting index, last index), then StoreLogs
// of the new leader's entries), reopens and reads back every entry as
// written. Method: drive raft-wal directly on a temp dir with 4 KiB
// segments, append across at least one segment rotation, truncate the tail,
// append again with a higher term, close, reopen, compare every entry with
// a model; append once more after the restart and reopen again.
//
// Observed (go test ./node -run TestWAL_): with raft-wal v0.4.0 (go get
// github.com/hashicorp/raft-wal@v0.4.0) the two cases whose truncation
// starts inside the open tail segment fail on the first reopen with
// "after restart: GetLog(35): sealed segment has no index block" (v0.4.0
// marks the truncated tail sealed without writing its index block; raft,
// which cannot read its own log, then panics on every start); the case that
// truncates into an already sealed segment passes on both versions. With
// v0.4.1 all three pass.
package node

import (
	"bytes"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
)

// walSegmentBytes is small enough that a few dozen entries rotate segments.
const walSegmentBytes = 4096

// walLog is an open raft-wal with the meta DB the test owns (WAL.Close does
// not close it, see openRaft).
type walLog struct {
	w    *wal.WAL
	meta *metadb.BoltMetaDB
}

func openWALLog(t *testing.T, dir string) walLog {
	t.Helper()
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(dir, wal.WithMetaStore(meta), wal.WithSegmentSize(walSegmentBytes))
	if err != nil {
		meta.Close()
		t.Fatalf("wal.Open: %v", err)
	}
	return walLog{w: w, meta: meta}
}

func (l walLog) close(t *testing.T) {
	t.Helper()
	if err := l.w.Close(); err != nil {
		t.Fatalf("WAL.Close: %v", err)
	}
	if err := l.meta.Close(); err != nil {
		t.Fatalf("meta.Close: %v", err)
	}
}

// walModel is what the log must hold: entry i at want[i-1].
type walModel struct{ want []raft.Log }

// entry builds a command entry of about 200 bytes whose data names its
// index and term, so a stale or shifted entry cannot pass for another.
func entry(idx, term uint64) raft.Log {
	data := fmt.Sprintf("idx=%d term=%d ", idx, term)
	data += strings.Repeat("x", 200-len(data))
	return raft.Log{Index: idx, Term: term, Type: raft.LogCommand, Data: []byte(data)}
}

// appendEntries stores n entries of term after the last one, one StoreLogs
// per entry (a rotation is then never hidden inside one batch).
func (m *walModel) appendEntries(t *testing.T, l walLog, n int, term uint64) {
	t.Helper()
	for range n {
		e := entry(uint64(len(m.want))+1, term)
		if err := l.w.StoreLogs([]*raft.Log{&e}); err != nil {
			t.Fatalf("StoreLogs(%d): %v", e.Index, err)
		}
		m.want = append(m.want, e)
	}
}

// truncateFrom clears the suffix from index from on, as raft does when a
// new leader's entry conflicts with the local one at from.
func (m *walModel) truncateFrom(t *testing.T, l walLog, from uint64) {
	t.Helper()
	last := uint64(len(m.want))
	if from < 2 || from > last {
		t.Fatalf("truncateFrom(%d) outside (1, %d]", from, last)
	}
	if err := l.w.DeleteRange(from, last); err != nil {
		t.Fatalf("DeleteRange(%d, %d): %v", from, last, err)
	}
	m.want = m.want[:from-1]
}

// check reads every entry back and compares it with the model.
func (m *walModel) check(t *testing.T, l walLog, when string) {
	t.Helper()
	first, err := l.w.FirstIndex()
	if err != nil || first != 1 {
		t.Fatalf("%s: FirstIndex = %d, %v; want 1", when, first, err)
	}
	last, err := l.w.LastIndex()
	if err != nil || last != uint64(len(m.want)) {
		t.Fatalf("%s: LastIndex = %d, %v; want %d", when, last, err, len(m.want))
	}
	for i, want := range m.want {
		var got raft.Log
		if err := l.w.GetLog(uint64(i)+1, &got); err != nil {
			t.Fatalf("%s: GetLog(%d): %v", when, i+1, err)
		}
		if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type || !bytes.Equal(got.Data, want.Data) {
			t.Fatalf("%s: entry %d = {index %d, term %d, %q}, want {index %d, term %d, %q}",
				when, i+1, got.Index, got.Term, got.Data, want.Index, want.Term, want.Data)
		}
	}
}

// segmentBases lists the base indexes of the segment files in dir, sorted.
func segmentBases(t *testing.T, dir string) []uint64 {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	bases := make([]uint64, 0, len(names))
	for _, name := range names {
		base, _, ok := strings.Cut(filepath.Base(name), "-")
		v, err := strconv.ParseUint(base, 10, 64)
		if !ok || err != nil {
			t.Fatalf("segment file name %q", name)
		}
		bases = append(bases, v)
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	return bases
}

func TestWAL_TailTruncationRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// fromTail is where the cleared suffix starts, relative to the base
		// index of the open tail segment (negative: inside a sealed one).
		fromTail []int
	}{
		{"within the open tail", []int{3}},
		{"into a sealed segment", []int{-3}},
		{"twice within the open tail", []int{3, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			l := openWALLog(t, dir)
			m := &walModel{}
			term := uint64(1)
			m.appendEntries(t, l, 50, term)
			for _, rel := range tc.fromTail {
				bases := segmentBases(t, dir)
				if len(bases) < 2 {
					t.Fatalf("no segment rotation after %d entries: segments %v", len(m.want), bases)
				}
				tail := bases[len(bases)-1]
				if uint64(len(m.want)) < tail+uint64(max(rel, 0)) {
					t.Fatalf("open tail at %d holds too few entries (last %d)", tail, len(m.want))
				}
				// A deposed leader's suffix is replaced by the new leader's
				// entries of a higher term.
				term++
				m.truncateFrom(t, l, uint64(int(tail)+rel))
				m.appendEntries(t, l, 5, term)
			}
			m.check(t, l, "before restart")
			l.close(t)

			l = openWALLog(t, dir)
			m.check(t, l, "after restart")
			m.appendEntries(t, l, 30, term)
			l.close(t)

			l = openWALLog(t, dir)
			defer l.close(t)
			m.check(t, l, "after second restart")
		})
	}
}
