// Tests for token sealing and opening. Goal: every forged, altered,
// truncated, cross-tenant, cross-cluster or wrong-kind token is rejected with
// ErrInvalidToken, and genuine tokens round-trip. Method: tokens are built
// from proofs encoded in the core's binary form (no core state needed) and
// mutated byte by byte.
package token

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	distributed "github.com/termivar/distributed"
)

var (
	testSecret = bytes.Repeat([]byte{7}, 32)
	testEpoch  = bytes.Repeat([]byte{1}, 16)
)

// frame builds a core proof frame: magic | version 1 | body | CRC-32C.
func frame(magic string, fields ...any) []byte {
	b := append([]byte(magic), 1)
	for _, f := range fields {
		switch v := f.(type) {
		case string:
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		case int:
			b = binary.AppendUvarint(b, uint64(v))
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

func testLease(t testing.TB) distributed.TaskLease {
	var l distributed.TaskLease
	if err := l.UnmarshalBinary(frame("TVL", "t1", "w1", 1, 0, 1, 7, 100, 160)); err != nil {
		t.Fatalf("lease: %v", err)
	}
	return l
}

func testFence(t testing.TB) distributed.QueuedTaskFence {
	var f distributed.QueuedTaskFence
	if err := f.UnmarshalBinary(frame("TVF", "t1", 0, 1)); err != nil {
		t.Fatalf("fence: %v", err)
	}
	return f
}

func testReceipt(t testing.TB) distributed.CompletionReceipt {
	var r distributed.CompletionReceipt
	if err := r.UnmarshalBinary(frame("TVR", "t1", 0, 1, 7, "w1", 1, 4)); err != nil {
		t.Fatalf("receipt: %v", err)
	}
	return r
}

func newCodec(t testing.TB, secret, epoch []byte) *Codec {
	c, err := NewCodec(secret, epoch)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCodec_RoundTrip(t *testing.T) {
	t.Parallel()
	c := newCodec(t, testSecret, testEpoch)
	l, f, r := testLease(t), testFence(t), testReceipt(t)

	got, err := c.OpenLease("acme", c.SealLease("acme", l))
	if err != nil || got != l {
		t.Fatalf("OpenLease = %v, %v, want %v", got, err, l)
	}
	gf, err := c.OpenFence("acme", c.SealFence("acme", f))
	if err != nil || gf != f {
		t.Fatalf("OpenFence = %v, %v", gf, err)
	}
	gr, err := c.OpenReceipt("acme", c.SealReceipt("acme", r))
	if err != nil || gr != r {
		t.Fatalf("OpenReceipt = %v, %v", gr, err)
	}
	own, err := c.OpenOwnership("acme", c.SealFence("acme", f))
	if fe, ok := own.Fence(); err != nil || !ok || fe != f {
		t.Fatalf("OpenOwnership(fence) = %v, %v", own, err)
	}
	own, err = c.OpenOwnership("acme", c.SealLease("acme", l))
	if le, ok := own.Lease(); err != nil || !ok || le != l {
		t.Fatalf("OpenOwnership(lease) = %v, %v", own, err)
	}
}

func TestCodec_Rejects(t *testing.T) {
	t.Parallel()
	c := newCodec(t, testSecret, testEpoch)
	other := newCodec(t, bytes.Repeat([]byte{8}, 32), testEpoch)
	otherEpoch := newCodec(t, testSecret, bytes.Repeat([]byte{2}, 16))
	l := testLease(t)
	good := c.SealLease("acme", l)

	cases := []struct {
		name   string
		tenant string
		tok    []byte
		reason string
	}{
		{"empty", "acme", nil, ReasonMalformed},
		{"truncated", "acme", good[:len(good)-1], ReasonMAC},
		{"short", "acme", good[:10], ReasonMalformed},
		{"version", "acme", append([]byte{9}, good[1:]...), reasonVersion},
		{"forged secret", "acme", other.SealLease("acme", l), ReasonMAC},
		{"cross tenant", "other", good, ReasonWrongTenant},
		{"cross cluster", "acme", otherEpoch.SealLease("acme", l), ReasonWrongCluster},
		{"oversize", "acme", make([]byte, MaxTokenBytes+1), reasonTooLarge},
		{"bad proof", "acme", c.Seal("acme", KindLease, []byte("TVLjunk")), ReasonInvalidProof},
		{"fence as lease", "acme", c.SealFence("acme", testFence(t)), ReasonWrongKind},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := c.OpenLease(tc.tenant, tc.tok)
			var te *Error
			if !errors.Is(err, ErrInvalidToken) || !errors.As(err, &te) || te.Reason != tc.reason {
				t.Fatalf("OpenLease(%s) = %v, want reason %q", tc.name, err, tc.reason)
			}
		})
	}
	if _, err := c.OpenOwnership("acme", c.SealReceipt("acme", testReceipt(t))); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("OpenOwnership(receipt) = %v, want ErrInvalidToken", err)
	}
}

// TestCodec_EveryBitFlipRejected flips each bit of a genuine token.
func TestCodec_EveryBitFlipRejected(t *testing.T) {
	t.Parallel()
	c := newCodec(t, testSecret, testEpoch)
	good := c.SealLease("acme", testLease(t))
	for i := range len(good) * 8 {
		tok := bytes.Clone(good)
		tok[i/8] ^= 1 << (i % 8)
		if _, err := c.OpenLease("acme", tok); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("bit %d flipped: OpenLease = %v, want ErrInvalidToken", i, err)
		}
	}
	for n := range len(good) {
		if _, err := c.OpenLease("acme", good[:n]); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("truncated to %d: OpenLease = %v, want ErrInvalidToken", n, err)
		}
	}
}

func TestNewCodec_Validates(t *testing.T) {
	t.Parallel()
	if _, err := NewCodec(make([]byte, 31), testEpoch); err == nil {
		t.Fatal("NewCodec(short secret) = nil error")
	}
	if _, err := NewCodec(testSecret, make([]byte, 15)); err == nil {
		t.Fatal("NewCodec(short epoch) = nil error")
	}
}

func TestError_NeverEchoesToken(t *testing.T) {
	t.Parallel()
	c := newCodec(t, testSecret, testEpoch)
	tok := c.SealLease("acme", testLease(t))
	_, err := c.OpenLease("secret-tenant-name", tok)
	if err == nil || bytes.Contains([]byte(err.Error()), []byte("acme")) || bytes.Contains([]byte(err.Error()), []byte("secret-tenant")) {
		t.Fatalf("error %q leaks token or tenant", err)
	}
}

// FuzzOpen feeds arbitrary bytes to the decoder: it must never panic, and any
// token it accepts must re-seal to exactly the same bytes.
func FuzzOpen(f *testing.F) {
	c := newCodec(f, testSecret, testEpoch)
	f.Add(c.SealLease("acme", testLease(f)))
	f.Add(c.SealFence("acme", testFence(f)))
	f.Add(c.SealReceipt("acme", testReceipt(f)))
	f.Add([]byte{})
	f.Add([]byte{1, 4, 'a', 'c', 'm', 'e'})
	f.Fuzz(func(t *testing.T, tok []byte) {
		kind, proof, err := c.Open("acme", tok)
		if err != nil {
			if !errors.Is(err, ErrInvalidToken) {
				t.Fatalf("Open error %v does not match ErrInvalidToken", err)
			}
			return
		}
		if !bytes.Equal(c.Seal("acme", kind, proof), tok) {
			t.Fatal("accepted token does not re-seal to itself")
		}
		_, _ = c.OpenLease("acme", tok)
		_, _ = c.OpenOwnership("acme", tok)
		_, _ = c.OpenReceipt("acme", tok)
	})
}

func BenchmarkCodec_OpenLease(b *testing.B) {
	c := newCodec(b, testSecret, testEpoch)
	tok := c.SealLease("acme", testLease(b))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.OpenLease("acme", tok); err != nil {
			b.Fatal(err)
		}
	}
}
