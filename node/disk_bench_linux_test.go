// Benchmark of the disk's synchronous write rate in the WAL's pattern
// (issue 15: 64 KiB results are bounded by it; docs/benchmarks.md, "64 KiB
// results, session 7"). Goal: tell what raft-wal's appends get from the
// disk from what the disk gives the same bytes written other ways, with
// random data (`dd if=/dev/zero` writes zeros, which this VM's disk wrote
// up to 2× faster than random bytes in some minutes). Method: ops of
// one 2 MiB entry of random bytes each, as the proposer's entries of large
// results are: "raft-wal" is WAL.StoreLogs (its pwrite and fsync into
// segment files it preallocates), "append" is pwrite and fsync at the end
// of a plain file, "preallocated" the same into a file fallocate'd ahead, a
// segment's size (64 MiB) at a time, as raft-wal's segments are. Run with -benchtime 128x (256 MiB).
package node

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
)

func BenchmarkDisk_SyncedAppend2MiB(b *testing.B) {
	data := make([]byte, 2<<20)
	if _, err := rand.Read(data); err != nil {
		b.Fatal(err)
	}
	b.Run("raft-wal", func(b *testing.B) {
		w, err := wal.Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		b.SetBytes(int64(len(data)))
		index := uint64(0)
		for b.Loop() {
			index++
			if err := w.StoreLogs([]*raft.Log{{Index: index, Term: 1, Type: raft.LogCommand, Data: data}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, prealloc := range []bool{false, true} {
		name := map[bool]string{false: "append", true: "preallocated"}[prealloc]
		b.Run(name, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "file"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			b.SetBytes(int64(len(data)))
			off, allocated := int64(0), int64(0)
			segmentBytes := int64(wal.DefaultSegmentSize)
			for b.Loop() {
				// NB: not b.N before the loop: with b.Loop it is 1 there, so
				// a file sized from it held one entry. Extents are added
				// outside the timed part, a segment's size at a time, as
				// raft-wal preallocates each segment file.
				if prealloc && off+int64(len(data)) > allocated {
					b.StopTimer()
					if err := syscall.Fallocate(int(f.Fd()), 0, allocated, segmentBytes); err != nil {
						b.Fatal(err)
					}
					allocated += segmentBytes
					b.StartTimer()
				}
				if _, err := f.WriteAt(data, off); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
				off += int64(len(data))
			}
		})
	}
}
