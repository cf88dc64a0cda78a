// Tests for size-based rotation of the audit log: write past the limit
// many times over, then check that the live file and the kept rotated
// files are each within the limit, hold only whole JSON lines, and
// together hold the newest records in order with none missing between
// them; and that an invalid Rotation is refused before any file exists.
package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestOpenRotating_RotatesWithoutLosingOrSplitting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	const maxBytes, keep, records = 2048, 3, 400
	l, err := OpenRotating(path, nil, Rotation{MaxBytes: maxBytes, Keep: keep})
	if err != nil {
		t.Fatal(err)
	}
	for i := range records {
		l.Record(context.Background(), Entry{KeyID: "k1", Tenant: "default", Method: "Producer.Enqueue", Outcome: OutcomeOK, Revision: uint64(i + 1)})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Oldest kept file first: FileName.keep … FileName.1, FileName.
	var revs []uint64
	for i := keep; i >= 0; i-- {
		name := path
		if i > 0 {
			name = fmt.Sprintf("%s.%d", path, i)
		}
		revs = append(revs, readRevisions(t, name, maxBytes)...)
	}
	if _, err := os.Stat(fmt.Sprintf("%s.%d", path, keep+1)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s.%d exists (err %v); want at most %d rotated files", FileName, keep+1, err, keep)
	}
	if len(revs) == 0 || revs[len(revs)-1] != records {
		t.Fatalf("newest revision = %v, want %d", revs[len(revs)-1:], records)
	}
	for i := 1; i < len(revs); i++ {
		if revs[i] != revs[i-1]+1 {
			t.Fatalf("revision %d follows %d: a record was lost or reordered across a rotation", revs[i], revs[i-1])
		}
	}
	if len(revs) >= records {
		t.Fatalf("%d records kept of %d: nothing was rotated away", len(revs), records)
	}
}

// readRevisions parses every line of name as one whole record and checks
// the file is within maxBytes.
func readRevisions(t *testing.T, name string, maxBytes int64) []uint64 {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatalf("open %s: %v", filepath.Base(name), err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() > maxBytes || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: size %d mode %v (%v), want <= %d bytes, 0600", filepath.Base(name), st.Size(), st.Mode().Perm(), err, maxBytes)
	}
	var revs []uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m struct {
			Revision uint64 `json:"revision"`
			Method   string `json:"method"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m.Method == "" {
			t.Fatalf("%s: line %q is not a whole record: %v", filepath.Base(name), sc.Text(), err)
		}
		revs = append(revs, m.Revision)
	}
	return revs
}

func TestOpenRotating_ReopenCountsExistingBytes(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), FileName)
	rot := Rotation{MaxBytes: 1024, Keep: 1}
	for round := range 2 {
		l, err := OpenRotating(path, nil, rot)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 6 {
			l.Record(context.Background(), Entry{KeyID: "k1", Tenant: "default", Method: "Worker.Complete", Outcome: OutcomeOK, Revision: uint64(100*round + i)})
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// 12 lines of ≈ 100 bytes do not fit in 1 KiB: the second open must
	// have counted the first one's bytes and rotated.
	live, rotated := readRevisions(t, path, rot.MaxBytes), readRevisions(t, path+".1", rot.MaxBytes)
	if len(live)+len(rotated) != 12 || live[len(live)-1] != 105 {
		t.Fatalf("live %v rotated %v, want 12 records ending at 105", live, rotated)
	}
}

func TestOpenRotating_InvalidRefused(t *testing.T) {
	t.Parallel()
	for _, rot := range []Rotation{{MaxBytes: -1, Keep: 1}, {MaxBytes: 10, Keep: 0}, {MaxBytes: 10, Keep: MaxKeep + 1}} {
		path := filepath.Join(t.TempDir(), FileName)
		if _, err := OpenRotating(path, nil, rot); !errors.Is(err, ErrRotation) {
			t.Errorf("OpenRotating(%+v) = %v, want ErrRotation", rot, err)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("OpenRotating(%+v) created the file (%v)", rot, err)
		}
	}
}
