// Tests for WriteFileAtomic (atomicfile.go). Goal: after a crash at any
// point of the write, the file holds either its old content or the whole
// new content, and once the write returned, the new content survives a
// crash. Method: writeFileAtomic runs against crashFS, a file system that
// keeps what a POSIX system guarantees after power loss and nothing more
// (file data only once the file is fsynced, a directory entry only once
// its directory is fsynced); the crash is injected after every operation
// in turn, then the durable state is compared.
//
// Mutants these tests kill (scripts/mutants.txt):
//   - node/atomic-write-skips-file-sync: the temporary file is renamed
//     without its fsync: the renamed name survives with no data.
//   - node/atomic-write-skips-dir-sync: the directory is not fsynced
//     after the rename: the old content comes back after the write
//     returned.
package node

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var errCrashed = errors.New("crashfs: crashed")

// inode is a file's content as the running system sees it (data) and as
// the disk holds it (synced).
type inode struct{ data, synced string }

// crashFS is a fileSystem whose operations fail with errCrashed once
// budget operations have run (budget < 0: never).
type crashFS struct {
	live    map[string]*inode // directory entries seen by the running system
	durable map[string]*inode // directory entries on disk
	budget  int
}

func newCrashFS(files map[string]string, budget int) *crashFS {
	fs := &crashFS{live: map[string]*inode{}, durable: map[string]*inode{}, budget: budget}
	for name, data := range files {
		ino := &inode{data: data, synced: data}
		fs.live[name], fs.durable[name] = ino, ino
	}
	return fs
}

// step spends one operation of the budget.
func (fs *crashFS) step() error {
	if fs.budget == 0 {
		return errCrashed
	}
	fs.budget--
	return nil
}

// afterCrash is what a restart finds: the durable entries with their
// synced data.
func (fs *crashFS) afterCrash() map[string]string {
	out := map[string]string{}
	for name, ino := range fs.durable {
		out[name] = ino.synced
	}
	return out
}

func (fs *crashFS) OpenFile(name string, flag int, _ os.FileMode) (syncFile, error) {
	if err := fs.step(); err != nil {
		return nil, err
	}
	ino, ok := fs.live[name]
	switch {
	case !ok && flag&os.O_CREATE == 0:
		return nil, os.ErrNotExist
	case !ok:
		ino = &inode{}
		fs.live[name] = ino
	case flag&os.O_TRUNC != 0:
		ino.data = ""
	}
	return &crashFile{fs: fs, ino: ino}, nil
}

func (fs *crashFS) OpenDir(name string) (syncFile, error) {
	if err := fs.step(); err != nil {
		return nil, err
	}
	return &crashFile{fs: fs, dir: name}, nil
}

func (fs *crashFS) Rename(oldpath, newpath string) error {
	if err := fs.step(); err != nil {
		return err
	}
	ino, ok := fs.live[oldpath]
	if !ok {
		return os.ErrNotExist
	}
	fs.live[newpath] = ino
	delete(fs.live, oldpath)
	return nil
}

// crashFile is an open file (ino) or directory (dir).
type crashFile struct {
	fs  *crashFS
	ino *inode
	dir string
}

func (f *crashFile) Write(b []byte) (int, error) {
	if err := f.fs.step(); err != nil {
		return 0, err
	}
	f.ino.data += string(b)
	return len(b), nil
}

// Sync makes a file's data durable, or a directory's entries.
func (f *crashFile) Sync() error {
	if err := f.fs.step(); err != nil {
		return err
	}
	if f.ino != nil {
		f.ino.synced = f.ino.data
		return nil
	}
	for name := range f.fs.durable {
		if filepath.Dir(name) == f.dir {
			delete(f.fs.durable, name)
		}
	}
	for name, ino := range f.fs.live {
		if filepath.Dir(name) == f.dir {
			f.fs.durable[name] = ino
		}
	}
	return nil
}

func (f *crashFile) Close() error { return f.fs.step() }

// TestWriteFileAtomic_CrashAtEveryStep crashes the write after each of its
// operations in turn, for a file that exists and one that does not.
func TestWriteFileAtomic_CrashAtEveryStep(t *testing.T) {
	t.Parallel()
	const path, newData = "d/secret", "new content"
	for _, old := range []struct {
		name  string
		files map[string]string
	}{
		{"replaces", map[string]string{path: "old content"}},
		{"creates", map[string]string{}},
	} {
		t.Run(old.name, func(t *testing.T) {
			t.Parallel()
			oldData, existed := old.files[path]
			for budget := 0; ; budget++ {
				fs := newCrashFS(old.files, budget)
				err := writeFileAtomic(fs, path, []byte(newData), 0o600)
				if err != nil && !errors.Is(err, errCrashed) {
					t.Fatalf("budget %d: %v", budget, err)
				}
				got, ok := fs.afterCrash()[path]
				switch {
				case err == nil && (!ok || got != newData):
					t.Fatalf("the write returned, then a crash left %q (present %v), want %q", got, ok, newData)
				case ok && got != newData && (!existed || got != oldData):
					t.Fatalf("crash after %d operations left %q, want %q or the old file", budget, got, newData)
				case !ok && existed:
					t.Fatalf("crash after %d operations lost the old file", budget)
				}
				if err == nil {
					return
				}
			}
		})
	}
}

// TestWriteFileAtomic_OS writes through the real file system.
func TestWriteFileAtomic_OS(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "f")
	for _, data := range []string{"first", strings.Repeat("second", 100)} {
		if err := WriteFileAtomic(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != data {
			t.Fatalf("ReadFile = %q, %v; want %q", got, err, data)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, want 0600", st.Mode().Perm())
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left behind: %v", err)
	}
}
