// Tests for writing a snapshot's large parts without a copy
// (snapshot_stream.go, writePart). Goal: the bytes written are exactly the
// parts joined, in order, whatever mix of small and large parts; a part of
// directPartBytes or more reaches the writer as the part itself (no copy
// into the buffer), a smaller one does not; a write error stops the
// snapshot; and writing through raft's own file sink, which now receives
// the stored results themselves, leaves the stored results unchanged and
// the snapshot restorable. Method: a writer that records each slice it is
// given, and a real FSM with 64 KiB results persisted to
// raft.FileSnapshotStore.
package raftfsm

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/hashicorp/raft"
)

// recordingWriter keeps every slice Write is given (not a copy: the test
// compares where they point) and the bytes written.
type recordingWriter struct {
	calls [][]byte
	out   bytes.Buffer
	err   error
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.calls = append(w.calls, p)
	return w.out.Write(p)
}

func TestStateParts_WriteToHandsLargePartsOver(t *testing.T) {
	t.Parallel()
	s := &stateParts{}
	sizes := []int{10, 64 << 10, 5, directPartBytes - 1, directPartBytes, 3, 40 << 10, 40 << 10, 300 << 10, 7}
	for _, n := range sizes {
		s.add(randomBytes(t, n))
	}
	w := &recordingWriter{}
	if err := s.writeTo(w); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w.out.Bytes(), s.join()) {
		t.Fatalf("writeTo wrote %d bytes that differ from the %d bytes of the parts joined", w.out.Len(), s.size)
	}
	for i, p := range s.parts {
		handed := false
		for _, c := range w.calls {
			handed = handed || (len(c) == len(p) && &c[0] == &p[0])
		}
		if large := len(p) >= directPartBytes; handed != large {
			t.Errorf("part %d (%d bytes): handed to the writer as itself %v, want %v", i, len(p), handed, large)
		}
	}
}

func TestStateParts_WriteToStopsAtAWriteError(t *testing.T) {
	t.Parallel()
	for _, sizes := range [][]int{{10}, {64 << 10}, {10, 64 << 10}} {
		s := &stateParts{}
		for _, n := range sizes {
			s.add(randomBytes(t, n))
		}
		boom := errors.New("disk full")
		if err := s.writeTo(&recordingWriter{err: boom}); !errors.Is(err, boom) {
			t.Errorf("writeTo of parts %v to a failing writer = %v, want %v", sizes, err, boom)
		}
	}
}

// The stored results are now given to raft's sink themselves, not a copy
// of them in writeTo's buffer: the sink must neither change nor keep them.
// Persisting to raft's FileSnapshotStore, then overwriting and reusing
// every buffer the test can reach, leaves the FSM's state byte-for-byte
// what it was, and the snapshot restores to that state.
func TestFSM_PersistHandsStoredResultsToRaftsSinkUnchanged(t *testing.T) {
	t.Parallel()
	b, acq := twoRunning(t)
	for i, a := range acq {
		result := randomBytes(t, 64<<10+i)
		b.must(t, completeCmd("kw1", a.Lease, result))
		clear(result) // the command's buffer, reused by its caller
	}
	before, err := b.f.ExportState()
	if err != nil {
		t.Fatal(err)
	}
	store, err := raft.NewFileSnapshotStore(t.TempDir(), 1, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := store.Create(raft.SnapshotVersionMax, 10, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Persist(sink); err != nil {
		t.Fatal(err)
	}
	s.Release()
	after, err := b.f.ExportState()
	if err != nil || !bytes.Equal(after, before) {
		t.Fatalf("the state after Persist differs from before it (err %v)", err)
	}
	_, rc, err := store.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	written, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(written, before) {
		t.Fatalf("the snapshot file (%d bytes, err %v) differs from the state (%d bytes)", len(written), err, len(before))
	}
	restored := setup(t).f
	if err := restored.Restore(io.NopCloser(bytes.NewReader(written))); err != nil {
		t.Fatal(err)
	}
	clear(written) // Restore must have copied what it keeps
	got, err := restored.ExportState()
	if err != nil || !bytes.Equal(got, before) {
		t.Fatalf("the restored state differs from the persisted one (err %v)", err)
	}
}
