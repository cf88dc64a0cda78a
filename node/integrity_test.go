// Tests of the data dir's integrity. Goal: a damaged WAL, a lost snapshot
// or lost segments make Open refuse with an error naming the file and the
// index, never a panic, a hang or a silently different state; a corrupt
// committed entry stops a running node; a failing log store either heals
// or fails the node, losing nothing acknowledged.
// Method: a real node writes a data dir; copies of it are damaged byte by
// byte and run through the node's own open/verify/replay steps
// (scanWALSegments, raft-wal, verifyStores, a snapshot restore and
// raftfsm.Apply of every entry, which is what raft does at startup); a
// sample also runs through a full Open.
package node

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"

	"github.com/termivar/distributed/raftfsm"
)

// buildDataDir writes a data dir through a real node: bootstrap plus
// commands entries, each its own log entry; snapshotAtEnd forces a
// snapshot at the last index.
// It checks that replaying an undamaged copy gives the node's own state.
func buildDataDir(t *testing.T, commands int, snapshotAtEnd bool) string {
	t.Helper()
	dir := t.TempDir()
	n := openNode(t, dir, nil)
	for i := range commands {
		ids := []string{fmt.Sprintf("task-%03d", i)}
		for j := range i % 3 {
			ids = append(ids, fmt.Sprintf("task-%03d-%d", i, j))
		}
		mustPropose(t, n, enqueue(raftfsm.SystemTenant, ids...))
	}
	if snapshotAtEnd {
		if err := n.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	live, err := n.FSM().ExportState()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	replayed, err := replayDataDir(copyDataDir(t, dir))
	if err != nil || !bytes.Equal(replayed, live) {
		t.Fatalf("replaying the undamaged data dir: err %v, same state %v", err, bytes.Equal(replayed, live))
	}
	return dir
}

// replayDataDir runs the node's startup steps on dir without raft's
// transport and election: the byte scan, raft-wal, verifyStores, then what
// raft.NewRaft does for a single node (restore the newest snapshot, apply
// every later entry through the FSM). It returns the FSM state.
func replayDataDir(dir string) ([]byte, error) { return replay(dir, true, 0) }

// replay is replayDataDir; scan false leaves out the byte scan, to measure
// what raft-wal and the entry checks alone would let through; upTo > 0
// stops applying after that index.
func replay(dir string, scan bool, upTo uint64) ([]byte, error) {
	walDir := filepath.Join(dir, raftDir, "wal")
	if scan {
		if err := scanWALSegments(walDir); err != nil {
			return nil, err
		}
	}
	meta := &metadb.BoltMetaDB{}
	defer meta.Close()
	w, err := wal.Open(walDir, wal.WithMetaStore(meta))
	if err != nil {
		return nil, fmt.Errorf("raft-wal: %w", err)
	}
	defer w.Close()
	hl := hclog.New(&hclog.LoggerOptions{Output: io.Discard})
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(dir, raftDir), 2, hl)
	if err != nil {
		return nil, err
	}
	if err := verifyStores(walDir, filepath.Join(dir, raftDir, "snapshots"), w, w, snaps); err != nil {
		return nil, err
	}
	fsm := raftfsm.New(raftfsm.Options{})
	from, err := restoreNewest(fsm, snaps)
	if err != nil {
		return nil, err
	}
	last, _ := w.LastIndex()
	if upTo > 0 {
		last = min(last, upTo)
	}
	for i := from + 1; i <= last; i++ {
		var l raft.Log
		if err := w.GetLog(i, &l); err != nil {
			return nil, err
		}
		if l.Type == raft.LogCommand {
			fsm.Apply(&l)
		}
	}
	if err := fsm.Fatal(); err != nil {
		return nil, err
	}
	return fsm.ExportState()
}

func restoreNewest(fsm *raftfsm.FSM, snaps raft.SnapshotStore) (uint64, error) {
	metas, err := snaps.List()
	if err != nil || len(metas) == 0 {
		return 0, err
	}
	_, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		return 0, err
	}
	return metas[0].Index, fsm.Restore(rc)
}

// copyDataDir copies src to a new temp dir; segment files are copied
// sparsely (their written prefix, then extended to their size), which
// keeps a hundreds-of-copies test cheap.
func copyDataDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		return copySparse(p, target)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func copySparse(src, dst string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	b, err := readWritten(f, fi.Size())
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := out.Write(b); err != nil {
		out.Close()
		return err
	}
	if err := out.Truncate(fi.Size()); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// segmentPath returns the data dir's only segment file.
func segmentPath(t *testing.T, dir string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, raftDir, "wal", "*.wal"))
	if err != nil || len(m) != 1 {
		t.Fatalf("segment files: %v %v, want exactly one", m, err)
	}
	return m[0]
}

// frame is one frame of a segment: its offset, end and type.
type frame struct {
	off, end int64
	typ      byte
}

// listFrames lists the frames of a clean segment's written bytes.
func listFrames(b []byte) []frame {
	var out []frame
	for off := int64(walFileHeaderBytes); off+walFrameHeaderBytes <= int64(len(b)) && b[off] != 0; {
		n := int64(binary.LittleEndian.Uint32(b[off+4 : off+8]))
		end := off + frameSize(n)
		if b[off] == walFrameCommit {
			end = off + walFrameHeaderBytes
		}
		out = append(out, frame{off: off, end: end, typ: b[off]})
		off = end
	}
	return out
}

// outcomes counts how damaged copies ended.
type outcomes struct{ refused, identical int }

// judge checks one damaged copy: it is refused with an error that names
// the file and an index, or its state equals want.
func (o *outcomes) judge(t *testing.T, what string, got []byte, err error, want []byte) {
	t.Helper()
	switch {
	case err != nil:
		var de *DataDirError
		if !errors.As(err, &de) || !strings.Contains(err.Error(), "index") || !strings.Contains(de.Path, filepath.Join(raftDir)) {
			t.Errorf("%s: refused without naming the file and index: %v", what, err)
		}
		o.refused++
	case bytes.Equal(got, want):
		o.identical++
	default:
		t.Errorf("%s: opened with a state that differs from the undamaged data dir", what)
	}
}

// openState runs a full Open on dir and returns its FSM state, or the
// refusal; it fails the test if Open hangs.
func openState(t *testing.T, dir string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := Open(ctx, Config{DataDir: dir, RaftAddr: "127.0.0.1:0", TickInterval: -1})
	if ctx.Err() != nil {
		t.Fatalf("Open hung: %v", err)
	}
	if err != nil {
		return nil, err
	}
	defer n.Close()
	return n.FSM().ExportState()
}

func readSegment(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	b, err := readWritten(f, fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func patchFile(t *testing.T, path string, off int64, fn func(byte) byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] = fn(b[0])
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrity_FlippedBytes flips every 64th byte of a real segment's
// written bytes (and the preallocated zeros after them), and every byte of
// one record in the middle: each copy is refused, naming the file and an
// index, or replays to the undamaged state; never anything else.
func TestIntegrity_FlippedBytes(t *testing.T) {
	t.Parallel()
	src := buildDataDir(t, 24, false)
	want, err := replayDataDir(copyDataDir(t, src))
	if err != nil {
		t.Fatalf("undamaged data dir: %v", err)
	}
	seg := readSegment(t, segmentPath(t, src))
	frames := listFrames(seg)
	mid := frames[len(frames)/2]
	if mid.typ != walFrameEntry {
		mid = frames[len(frames)/2+1]
	}
	var offsets []int64
	for off := int64(0); off < int64(len(seg))+4096; off += 64 {
		offsets = append(offsets, off)
	}
	for off := mid.off; off < mid.end; off++ {
		offsets = append(offsets, off)
	}
	var o outcomes
	var unscanned [3]int // without the byte scan: refused, identical, different
	for _, off := range offsets {
		dir := copyDataDir(t, src)
		patchFile(t, segmentPath(t, dir), off, func(b byte) byte { return b ^ 0xff })
		bare, full := copyDataDir(t, dir), copyDataDir(t, dir)
		got, err := replayDataDir(dir)
		fullGot, fullErr := openState(t, full)
		o.judge(t, fmt.Sprintf("Open, byte %d flipped", off), fullGot, fullErr, want)
		if o.refused == 0 && err != nil {
			t.Logf("first refusal: %v", err)
		}
		o.judge(t, fmt.Sprintf("byte %d flipped", off), got, err, want)
		switch got, err := replay(bare, false, 0); {
		case err != nil:
			unscanned[0]++
		case bytes.Equal(got, want):
			unscanned[1]++
		default:
			unscanned[2]++
		}
	}
	t.Logf("%d flips over %d written bytes (record %d..%d flipped byte by byte), each replayed and opened (two runs per copy): %d runs refused, %d identical",
		len(offsets), len(seg), mid.off, mid.end, o.refused, o.identical)
	t.Logf("for comparison, without the byte scan: %d refused, %d identical, %d opened with a different state",
		unscanned[0], unscanned[1], unscanned[2])
}

// TestIntegrity_TruncatedLastRecord truncates the segment at every offset
// of its last record (the last entry frame and its commit frame): each
// copy is refused or replays to the undamaged state.
func TestIntegrity_TruncatedLastRecord(t *testing.T) {
	t.Parallel()
	src := buildDataDir(t, 8, false)
	want, err := replayDataDir(copyDataDir(t, src))
	if err != nil {
		t.Fatalf("undamaged data dir: %v", err)
	}
	seg := readSegment(t, segmentPath(t, src))
	frames := listFrames(seg)
	last := frames[len(frames)-2] // the last entry frame; its commit frame follows
	var o outcomes
	for off := last.off; off < int64(len(seg)); off++ {
		dir := copyDataDir(t, src)
		if err := os.Truncate(segmentPath(t, dir), off); err != nil {
			t.Fatal(err)
		}
		full := copyDataDir(t, dir)
		got, err := replayDataDir(dir)
		o.judge(t, fmt.Sprintf("truncated at %d", off), got, err, want)
		got, err = openState(t, full)
		o.judge(t, fmt.Sprintf("Open, truncated at %d", off), got, err, want)
	}
	t.Logf("truncated at %d offsets (%d..%d), each replayed and opened (two runs per copy): %d runs refused, %d identical", int64(len(seg))-last.off, last.off, len(seg)-1, o.refused, o.identical)
}

// TestIntegrity_ZeroedTail zeroes the segment from every 8-byte-aligned
// offset of the last record on: what a write cut short by a crash looks
// like in a preallocated file. That cannot be told apart from a crash
// before the last batch was fsynced (and acknowledged), so it is accepted
// with the state before the last batch, and its leftovers are zeroed; with
// a snapshot at the last index the loss shows, and Open refuses.
func TestIntegrity_ZeroedTail(t *testing.T) {
	t.Parallel()
	for _, snap := range []bool{false, true} {
		src := buildDataDir(t, 8, snap)
		seg := readSegment(t, segmentPath(t, src))
		frames := listFrames(seg)
		last := frames[len(frames)-2]
		// The state before the last batch: the undamaged data dir replayed
		// up to the index before it.
		lastIndex, _ := binary.Uvarint(seg[last.off+walFrameHeaderBytes:])
		wantBefore, err := replay(copyDataDir(t, src), true, lastIndex-1)
		if err != nil {
			t.Fatal(err)
		}
		var o outcomes
		for off := last.off; off < int64(len(seg)); off += 8 {
			dir := copyDataDir(t, src)
			zeroFrom(t, segmentPath(t, dir), off, int64(len(seg)))
			got, err := replayDataDir(dir)
			if snap {
				if err == nil || !strings.Contains(err.Error(), "lost its last records") {
					t.Errorf("snapshot at the end, zeroed from %d: err %v, want the lost records named", off, err)
				}
				o.refused++
				continue
			}
			o.judge(t, fmt.Sprintf("zeroed from %d", off), got, err, wantBefore)
			if off%64 == last.off%64 { // a sample through a full Open
				zeroed := copyDataDir(t, src)
				zeroFrom(t, segmentPath(t, zeroed), off, int64(len(seg)))
				got, err = openState(t, zeroed)
				o.judge(t, fmt.Sprintf("Open, zeroed from %d", off), got, err, wantBefore)
			}
			if err == nil && len(readSegment(t, segmentPath(t, dir))) != int(last.off) {
				t.Errorf("zeroed from %d: the cut-short write was not cleared", off)
			}
		}
		t.Logf("snapshot at end %v: zeroed from %d offsets: %d refused, %d replayed to the state before the last batch", snap, (int64(len(seg))-last.off+7)/8, o.refused, o.identical)
	}
}

func zeroFrom(t *testing.T, path string, from, to int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, to-from), from); err != nil {
		t.Fatal(err)
	}
}

// openErr opens dir expecting a refusal, within a bound (no hang).
func openErr(t *testing.T, dir string, mut func(*Config)) error {
	t.Helper()
	cfg := Config{DataDir: dir, RaftAddr: "127.0.0.1:0", TickInterval: -1}
	if mut != nil {
		mut(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := Open(ctx, cfg)
	if err == nil {
		n.Close()
		t.Fatal("Open succeeded on a damaged data dir")
	}
	if ctx.Err() != nil {
		t.Fatalf("Open hung until its deadline: %v", err)
	}
	return err
}

// wantRefusal checks a refusal: ErrDamagedDataDir, naming the file (a path
// ending in suffix) and containing every phrase.
func wantRefusal(t *testing.T, err error, suffix string, phrases ...string) {
	t.Helper()
	var de *DataDirError
	if !errors.As(err, &de) || !errors.Is(err, ErrDamagedDataDir) {
		t.Fatalf("err = %v, want a *DataDirError", err)
	}
	if !strings.HasSuffix(de.Path, suffix) {
		t.Errorf("error names %s, want a path ending in %s", de.Path, suffix)
	}
	for _, p := range phrases {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
	t.Logf("refused: %v", err)
}

// TestOpen_SnapshotsDeletedAfterCompaction: the log was compacted behind a
// snapshot, then raft/snapshots was emptied. raft.NewRaft panicked on this;
// Open refuses, naming the snapshot directory and the missing indexes.
func TestOpen_SnapshotsDeletedAfterCompaction(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := openNode(t, dir, func(c *Config) { c.trailingLogs = 2 })
	for i := range 10 {
		mustPropose(t, n, enqueue(raftfsm.SystemTenant, fmt.Sprintf("t%d", i)))
	}
	if err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	n.Close()
	if err := os.RemoveAll(filepath.Join(dir, raftDir, "snapshots")); err != nil {
		t.Fatal(err)
	}
	err := openErr(t, dir, nil)
	wantRefusal(t, err, filepath.Join(raftDir, "snapshots"), "holds no snapshot", "log starts at index", "restore the raft/snapshots directory")
}

// TestOpen_LastRecordDamagedWithSnapshot: a snapshot at the last index and
// the last record truncated, flipped or zeroed. raft looped on
// "non-monotonic log entries" with the API port open; Open refuses.
func TestOpen_LastRecordDamagedWithSnapshot(t *testing.T) {
	t.Parallel()
	src := buildDataDir(t, 4, true)
	seg := readSegment(t, segmentPath(t, src))
	frames := listFrames(seg)
	last := frames[len(frames)-2]
	cases := []struct {
		name    string
		damage  func(path string)
		phrases []string
	}{
		{"truncated", func(p string) {
			if err := os.Truncate(p, last.off+10); err != nil {
				t.Fatal(err)
			}
		}, []string{"shorter than", "truncated"}},
		{"flipped", func(p string) { patchFile(t, p, last.off+12, func(b byte) byte { return b ^ 0x01 }) },
			[]string{"checksum of the batch"}},
		{"zeroed", func(p string) { zeroFrom(t, p, last.off+16, int64(len(seg))) },
			[]string{"lost its last records"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDataDir(t, src)
			c.damage(segmentPath(t, dir))
			wantRefusal(t, openErr(t, dir, nil), "", append(c.phrases, filepath.Join(raftDir, "wal"))...)
		})
	}
}

// TestOpen_SegmentsDeletedMetaKept: the segment files were deleted but
// raft-wal's meta DB kept. raft looped on "no known peers"; Open refuses,
// naming the missing segment.
func TestOpen_SegmentsDeletedMetaKept(t *testing.T) {
	t.Parallel()
	dir := buildDataDir(t, 3, false)
	if err := os.Remove(segmentPath(t, dir)); err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, openErr(t, dir, nil), ".wal", "is missing but raft-wal's wal-meta.db lists it")
}

// TestNode_CorruptCommittedEntryStopsNode: an entry that reaches raft
// without a valid frame (here proposed around the proposer) is never
// applied: the FSM stops, the node fails with an error naming the index,
// /readyz's CommitHealth reports it, no snapshot covers it, and the next
// Open refuses the data dir naming the same index.
func TestNode_CorruptCommittedEntryStopsNode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := openNode(t, dir, nil)
	mustPropose(t, n, enqueue(raftfsm.SystemTenant, "a"))
	before, _ := n.FSM().ExportState()
	payload, _ := raftfsm.MarshalEntry(enqueue(raftfsm.SystemTenant, "b"))
	payload[len(payload)-1] ^= 0x01 // a damaged byte under the checksum
	f := n.raft.Apply(payload, time.Second)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	resp, _ := f.Response().(raftfsm.Response)
	if !errors.Is(resp.Err, raftfsm.ErrCorruptEntry) {
		t.Fatalf("apply response = %v, want ErrCorruptEntry", resp.Err)
	}
	index := f.Index()
	select {
	case <-n.Failed():
	case <-time.After(10 * time.Second):
		t.Fatal("the node did not fail")
	}
	wantIndex := fmt.Sprintf("log entry %d is corrupt", index)
	if err := n.Err(); !errors.Is(err, ErrDamagedDataDir) || !strings.Contains(err.Error(), wantIndex) {
		t.Fatalf("Err = %v, want %q", err, wantIndex)
	}
	if n.CommitHealth() == nil {
		t.Error("CommitHealth is nil on a failed node")
	}
	after, _ := n.FSM().ExportState()
	if !bytes.Equal(before, after) {
		t.Error("the corrupt entry changed the state")
	}
	if _, err := n.Propose(context.Background(), enqueue(raftfsm.SystemTenant, "c")); !errors.Is(err, ErrDamagedDataDir) {
		t.Errorf("Propose after the failure: err %v, want the node's failure", err)
	}
	if err := n.Snapshot(); err == nil {
		t.Error("a snapshot was taken past the corrupt entry")
	}
	n.Close()
	wantRefusal(t, openErr(t, dir, nil), "wal", wantIndex)
}

// TestIntegrity_SealedSegments uses 4 KiB segments so that the log spans
// sealed segments (with index blocks) and a tail: the undamaged data dir
// opens with the node's state, and a flipped byte in every 97th position
// of every sealed segment is refused naming that segment.
func TestIntegrity_SealedSegments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := openNode(t, dir, func(c *Config) { c.walSegmentBytes = 4 << 10 })
	for i := range 150 {
		mustPropose(t, n, enqueue(raftfsm.SystemTenant, fmt.Sprintf("t%03d", i), fmt.Sprintf("u%03d", i)))
	}
	want, _ := n.FSM().ExportState()
	n.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, raftDir, "wal", "*.wal"))
	if len(segs) < 3 {
		t.Fatalf("%d segments, want several", len(segs))
	}
	got, err := replayDataDir(copyDataDir(t, dir))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("undamaged: err %v, same state %v", err, bytes.Equal(got, want))
	}
	got, err = openState(t, copyDataDir(t, dir))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("undamaged, Open: err %v, same state %v", err, bytes.Equal(got, want))
	}
	var o outcomes
	for _, seg := range segs[:len(segs)-1] {
		b := readSegment(t, seg)
		for off := int64(0); off < int64(len(b)); off += 97 {
			cp := copyDataDir(t, dir)
			p := filepath.Join(cp, raftDir, "wal", filepath.Base(seg))
			patchFile(t, p, off, func(b byte) byte { return b ^ 0xff })
			got, err := replayDataDir(cp)
			o.judge(t, fmt.Sprintf("%s byte %d flipped", filepath.Base(seg), off), got, err, want)
			if err != nil && !strings.Contains(err.Error(), filepath.Base(seg)) {
				t.Errorf("%s byte %d: the error does not name the segment: %v", filepath.Base(seg), off, err)
			}
		}
	}
	t.Logf("%d segments; flips in the sealed ones: %d refused, %d identical", len(segs), o.refused, o.identical)
}
