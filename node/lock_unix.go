//go:build unix

package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockFile is the data dir's lock: held (flock, exclusive) by the process
// that serves it, and holding that process's PID for the message a second
// process prints.
const LockFile = "LOCK"

// dirLock is a held data dir lock.
type dirLock struct{ f *os.File }

// lockDataDir takes the data dir's lock without waiting: a second serve on
// the same data dir fails at once with "data dir in use by PID N" instead
// of waiting (raft-wal's meta DB would otherwise block on its own lock).
func lockDataDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b := make([]byte, 32)
		k, _ := f.ReadAt(b, 0)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid := strings.TrimSpace(string(b[:k]))
			if _, perr := strconv.Atoi(pid); perr != nil {
				pid = "unknown"
			}
			return nil, dataDirError("data dir %s in use by PID %s", dir, pid)
		}
		return nil, fmt.Errorf("node: lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		_ = f.Sync()
	}
	return &dirLock{f: f}, nil
}

// unlock releases the lock (closing the file drops the flock).
func (l *dirLock) unlock() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
