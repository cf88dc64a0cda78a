package audit

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"sync"
)

// Rotation bounds the audit log on disk: once the live file would grow
// past MaxBytes it is renamed to FileName.1 (FileName.1 to .2, and so on;
// the oldest, FileName.<Keep>, is removed) and a new live file is started.
// A record is never split across files: the check happens before each
// line is written, and a line is always written whole to one file. The
// zero Rotation never rotates.
type Rotation struct {
	// MaxBytes is the live file's size limit; 0 turns rotation off. A
	// single record larger than MaxBytes still goes whole into a file of
	// its own.
	MaxBytes int64
	// Keep is how many rotated files are kept (FileName.1..Keep); at
	// least 1 when MaxBytes > 0.
	Keep int
}

// Defaults and bounds of Rotation (serve's --audit-max-bytes and
// --audit-keep).
const (
	DefaultMaxBytes = 64 << 20
	DefaultKeep     = 4
	MaxKeep         = 100
)

// ErrRotation is returned by Validate for an out-of-range Rotation.
var ErrRotation = errors.New("audit: invalid rotation")

// Validate reports an out-of-range field (errors.Is ErrRotation).
func (r Rotation) Validate() error {
	switch {
	case r.MaxBytes < 0:
		return fmt.Errorf("%w: max bytes %d is negative", ErrRotation, r.MaxBytes)
	case r.MaxBytes > 0 && (r.Keep < 1 || r.Keep > MaxKeep):
		return fmt.Errorf("%w: keep %d is outside 1..%d", ErrRotation, r.Keep, MaxKeep)
	}
	return nil
}

// rotatingFile is an append-only file that rotates by size. Write is
// called once per record (slog's handler writes a line with one Write),
// so rotating between two Writes never splits a record.
type rotatingFile struct {
	mu   sync.Mutex
	path string
	rot  Rotation
	f    *os.File
	size int64 // bytes in f; Invariant: size <= rot.MaxBytes unless f holds one oversized record or a rotation failed
	// rotateErr is the first failed rotation, returned by Close.
	rotateErr error
}

// openRotating opens (appends to) path with mode 0600.
func openRotating(path string, rot Rotation) (*rotatingFile, error) {
	if err := rot.Validate(); err != nil {
		return nil, err
	}
	r := &rotatingFile{path: path, rot: rot}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *rotatingFile) open() error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err != nil {
		f.Close()
		return err
	}
	r.f, r.size = f, st.Size()
	return nil
}

// Write appends p (one record), rotating first when p would take the
// live file past MaxBytes.
func (r *rotatingFile) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return 0, os.ErrClosed
	}
	if r.rot.MaxBytes > 0 && r.size > 0 && r.size+int64(len(p)) > r.rot.MaxBytes {
		// NB: a failed rotation keeps the record in the file still open:
		// losing no record matters more than the bound. Close reports it.
		r.rotateErr = cmp.Or(r.rotateErr, r.rotate())
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

// rotate shifts FileName.i to .i+1 (dropping .Keep), renames the live
// file to .1 and opens a new live file. On an error r.f is the file
// still open (the live one, or the one just renamed to .1).
func (r *rotatingFile) rotate() error {
	if err := os.Remove(r.name(r.rot.Keep)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for i := r.rot.Keep - 1; i >= 1; i-- {
		if err := os.Rename(r.name(i), r.name(i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := os.Rename(r.path, r.name(1)); err != nil {
		return err
	}
	old := r.f
	if err := r.open(); err != nil {
		return err
	}
	return old.Close()
}

// name is the i-th rotated file.
func (r *rotatingFile) name(i int) string { return fmt.Sprintf("%s.%d", r.path, i) }

// Close closes the live file.
func (r *rotatingFile) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return cmp.Or(r.rotateErr, err)
}
