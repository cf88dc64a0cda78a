package node

import (
	"os"
	"path/filepath"
)

// fileSystem is the seam of WriteFileAtomic: the calls it makes, so that
// atomicfile_test.go can check, through a file system that forgets every
// write not made durable, that a crash at any point leaves either the old
// file or the whole new one. osFS implements it in production. Methods
// behave as their os namesakes; an implementation is used by one
// goroutine at a time.
type fileSystem interface {
	// OpenFile opens name for writing (os.OpenFile).
	OpenFile(name string, flag int, perm os.FileMode) (syncFile, error)
	// OpenDir opens a directory so that its entries can be fsynced.
	OpenDir(name string) (syncFile, error)
	// Rename renames oldpath to newpath (os.Rename).
	Rename(oldpath, newpath string) error
}

// syncFile is an open file or directory: Sync makes its data (a file) or
// its entries (a directory) durable.
type syncFile interface {
	Write(b []byte) (int, error)
	Sync() error
	Close() error
}

// osFS is the operating system's file system.
type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (syncFile, error) {
	return os.OpenFile(name, flag, perm)
}

func (osFS) OpenDir(name string) (syncFile, error) { return os.Open(name) }

func (osFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// writeFileAtomic writes data to path.tmp, fsyncs it, renames it over
// path and fsyncs the directory: the fsync before the rename makes the
// new name point at complete data, the one after makes the rename itself
// durable. A crash leaves the old file or the new one, never a torn one.
func writeFileAtomic(fsys fileSystem, path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(fsys, filepath.Dir(path))
}

// syncDir fsyncs a directory's entries.
func syncDir(fsys fileSystem, dir string) error {
	d, err := fsys.OpenDir(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
