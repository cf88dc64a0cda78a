//go:build !unix

package node

// LockFile is the data dir's lock file (not taken on this platform).
const LockFile = "LOCK"

type dirLock struct{}

// lockDataDir does nothing where flock is not available: raft-wal's meta
// DB lock still keeps a second process out, by blocking.
func lockDataDir(string) (*dirLock, error) { return &dirLock{}, nil }

func (*dirLock) unlock() {}
