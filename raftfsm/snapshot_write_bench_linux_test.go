// Benchmark of writing a snapshot of 64 KiB results the way raft's file
// sink writes it (snapshot_stream.go, writeTo). Goal: decide whether the
// copy of every stored result into writeTo's 256 KiB buffer is needless —
// the results could be handed to the sink as they are. Method: 1 024
// parts of 64 KiB, each after a small part as a result store's export is,
// written by writeTo ("buffered") and by a writer that hands every part
// of 32 KiB or more over as it is ("direct"), through what
// raft.FileSnapshotSink puts in front of its file — a 4 KiB bufio.Writer
// over the file and a CRC-64 — into a file in b.TempDir(), not synced
// (the fsync is the same for both and would hide the difference).
// Reported: cpu-ns/op, the process's user and system CPU per op
// (getrusage: the write calls' kernel time counts, the wait for writeback
// does not; wall time on a shared disk mostly measures the disk). On the
// 2-core VM (session 7) "direct" took 10–15 % more CPU: each 64 KiB part
// is then one write call, and the calls cost more than the copy.
package raftfsm

import (
	"bufio"
	"crypto/rand"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// processCPU is the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// directWriteTo is writeTo with the parts of 32 KiB and more written to
// w as they are, after what the buffer holds.
func directWriteTo(s *stateParts, w io.Writer) error {
	bw := bufio.NewWriterSize(w, snapshotBufferBytes)
	for _, p := range s.parts {
		if len(p) < 32<<10 {
			if _, err := bw.Write(p); err != nil {
				return err
			}
			continue
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func BenchmarkStateParts_WriteToFile(b *testing.B) {
	s := &stateParts{}
	for range 1024 {
		result := make([]byte, 64<<10)
		if _, err := rand.Read(result); err != nil {
			b.Fatal(err)
		}
		s.add(make([]byte, 24))
		s.add(result)
	}
	for _, c := range []struct {
		name  string
		write func(*stateParts, io.Writer) error
	}{{"buffered", (*stateParts).writeTo}, {"direct", directWriteTo}} {
		b.Run(c.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "state.bin")
			b.SetBytes(int64(s.size))
			start := processCPU(b)
			for b.Loop() {
				f, err := os.Create(path)
				if err != nil {
					b.Fatal(err)
				}
				sink := bufio.NewWriter(io.MultiWriter(f, crc64.New(crc64.MakeTable(crc64.ECMA))))
				if err := c.write(s, sink); err != nil {
					b.Fatal(err)
				}
				if err := sink.Flush(); err != nil {
					b.Fatal(err)
				}
				if err := f.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
		})
	}
}
