// Tests of the backup file format. Goal: a file round-trips, and every
// truncation and every single-byte change of a file is refused with
// ErrDamaged (never a panic, never a different state). Method: encode a
// small state, then cut it at every length and flip every byte.
package backup

import (
	"bytes"
	"crypto/rand"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/termivar/distributed/gen/termivar/v1"
)

func sample(t *testing.T) (*pb.BackupHeader, []byte, []byte) {
	t.Helper()
	state := make([]byte, 300)
	if _, err := rand.Read(state); err != nil {
		t.Fatal(err)
	}
	epoch := make([]byte, 16)
	if _, err := rand.Read(epoch); err != nil {
		t.Fatal(err)
	}
	h := &pb.BackupHeader{EpochId: epoch, AppliedIndex: 42, StateVersion: 1, ClusterVersion: 1, NodeId: "n1", CreatedUnixSecs: 1700000000}
	b, err := Encode(h, state)
	if err != nil {
		t.Fatal(err)
	}
	return h, state, b
}

func TestBackup_RoundTrip(t *testing.T) {
	h, state, b := sample(t)
	gh, gs, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(gh, h) || !bytes.Equal(gs, state) {
		t.Fatalf("Decode(Encode(h, s)) = %v, %d bytes; want %v, %d bytes", gh, len(gs), h, len(state))
	}
}

func TestBackup_EveryTruncationRefused(t *testing.T) {
	_, _, b := sample(t)
	for n := range len(b) {
		if _, _, err := Decode(b[:n]); !errors.Is(err, ErrDamaged) {
			t.Fatalf("Decode(first %d of %d bytes) = %v, want ErrDamaged", n, len(b), err)
		}
	}
	if _, _, err := Decode(append(bytes.Clone(b), 0)); !errors.Is(err, ErrDamaged) {
		t.Fatalf("Decode(one byte appended) = %v, want ErrDamaged", err)
	}
}

func TestBackup_EveryByteFlipRefused(t *testing.T) {
	_, _, b := sample(t)
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		if _, _, err := Decode(c); !errors.Is(err, ErrDamaged) {
			t.Fatalf("Decode(byte %d flipped) = %v, want ErrDamaged", i, err)
		}
	}
}
