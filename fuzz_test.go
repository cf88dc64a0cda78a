package distributed

// Goal: no input makes a decoder panic, allocate without bound, or accept a
// state that breaks an invariant. Each accepted input re-encodes to itself.
// `go test` runs the committed seed corpora in testdata/fuzz; `make fuzz`
// explores further. Set TERMIVAR_WRITE_CORPUS=1 to regenerate the seeds.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func seedStates(t testing.TB) [][]byte {
	empty, _ := NewWorkerPool().ExportState()
	h := busyPool(t)
	busy := h.export()
	return [][]byte{empty, busy, busy[:len(busy)/2]}
}

func FuzzRestoreWorkerPool(f *testing.F) {
	for _, s := range seedStates(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := RestoreWorkerPool(data)
		if err != nil {
			if p != nil {
				t.Fatal("pool returned with an error")
			}
			if e, ok := err.(*Error); !ok || e.Kind != KindInvalidState {
				t.Fatalf("error %v is not InvalidState", err)
			}
			return
		}
		if err := p.CheckInvariants(); err != nil {
			t.Fatalf("accepted state breaks invariants: %v", err)
		}
		re, _ := p.ExportState()
		if len(data) > len(poolMagic) && data[len(poolMagic)] == poolVersionV1 {
			// A version 1 state is upgraded: it re-exports as version 2,
			// which must itself round-trip.
			p2, err := RestoreWorkerPool(re)
			if err != nil || p2.Snapshot() != p.Snapshot() {
				t.Fatalf("upgraded version 1 state does not restore: %v", err)
			}
			data = re
		}
		if !bytes.Equal(re, data) {
			t.Fatal("accepted state does not re-export to its input")
		}
	})
}

// FuzzRestoreWorkerPoolBody fuzzes the body behind a valid frame, so that the
// checksum does not hide the semantic validation from the fuzzer.
func FuzzRestoreWorkerPoolBody(f *testing.F) {
	for _, s := range seedStates(f) {
		if len(s) > len(poolMagic)+5 {
			f.Add(s[len(poolMagic)+1 : len(s)-4])
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		data := framePool(poolMagic, body)
		p, err := RestoreWorkerPool(data)
		if err != nil {
			if e, ok := err.(*Error); !ok || e.Kind != KindInvalidState || p != nil {
				t.Fatalf("RestoreWorkerPool = %v, %v", p, err)
			}
			return
		}
		if err := p.CheckInvariants(); err != nil {
			t.Fatalf("accepted state breaks invariants: %v", err)
		}
		if re, _ := p.ExportState(); !bytes.Equal(re, data) {
			t.Fatal("accepted state does not re-export to its input")
		}
	})
}

// proofSeeds returns a real lease, receipt, fence and ownership, encoded.
func proofSeeds(t testing.TB) [][]byte {
	h := newHarness(t, DefaultLimits())
	h.register("w", 1)
	lease := h.running("t", "w", 10)
	var receipt CompletionReceipt
	h.ok("complete", func(rev, now uint64) error {
		tr, err := h.p.CompleteTask(rev, now, lease)
		receipt = tr.Value.Receipt
		return err
	})
	lb, _ := lease.MarshalBinary()
	rb, _ := receipt.MarshalBinary()
	fb, _ := QueuedTaskFence{taskID: "t", recordVersion: 1}.MarshalBinary()
	ob, _ := OwnershipFromLease(lease).MarshalBinary()
	return [][]byte{lb, rb, fb, ob}
}

func FuzzProofs(f *testing.F) {
	for _, s := range proofSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var l TaskLease
		if l.UnmarshalBinary(data) == nil {
			if re, _ := l.MarshalBinary(); !bytes.Equal(re, data) {
				t.Fatal("lease does not re-encode to its input")
			}
		}
		var r CompletionReceipt
		if r.UnmarshalBinary(data) == nil {
			if re, _ := r.MarshalBinary(); !bytes.Equal(re, data) {
				t.Fatal("receipt does not re-encode to its input")
			}
		}
		var fe QueuedTaskFence
		if fe.UnmarshalBinary(data) == nil {
			if re, _ := fe.MarshalBinary(); !bytes.Equal(re, data) {
				t.Fatal("fence does not re-encode to its input")
			}
		}
		var o TaskOwnership
		if o.UnmarshalBinary(data) == nil {
			if re, _ := o.MarshalBinary(); !bytes.Equal(re, data) {
				t.Fatal("ownership does not re-encode to its input")
			}
		}
	})
}

func TestProofs_RoundTripAndRejection(t *testing.T) {
	seeds := proofSeeds(t)
	var l TaskLease
	if err := l.UnmarshalBinary(seeds[0]); err != nil || l.LeaseID() != 1 || l.TaskID() != "t" {
		t.Fatalf("lease round trip: %v %+v", err, l)
	}
	before := l
	for i := range seeds[0] {
		bad := bytes.Clone(seeds[0])
		bad[i] ^= 0x10
		if err := l.UnmarshalBinary(bad); err == nil {
			t.Fatalf("flipped byte %d accepted", i)
		}
		if l != before {
			t.Fatal("failed decode changed the lease")
		}
	}
	var r CompletionReceipt
	if err := r.UnmarshalBinary(seeds[0]); err == nil {
		t.Fatal("a lease decoded as a receipt")
	}
	var o TaskOwnership
	if err := o.UnmarshalBinary(seeds[3]); err != nil {
		t.Fatal(err)
	}
	if got, ok := o.Lease(); !ok || got != before {
		t.Fatal("ownership round trip lost the lease")
	}
}

// TestWriteFuzzCorpus regenerates testdata/fuzz seed files when
// TERMIVAR_WRITE_CORPUS=1; otherwise it checks they exist.
func TestWriteFuzzCorpus(t *testing.T) {
	corpora := map[string][][]byte{
		"FuzzRestoreWorkerPool": seedStates(t),
		"FuzzProofs":            proofSeeds(t),
		"FuzzRestoreWorkerPoolBody": func() (out [][]byte) {
			for _, s := range seedStates(t) {
				if len(s) > len(poolMagic)+5 {
					out = append(out, s[len(poolMagic)+1:len(s)-4])
				}
			}
			return out
		}(),
	}
	for name, seeds := range corpora {
		dir := filepath.Join("testdata", "fuzz", name)
		if os.Getenv("TERMIVAR_WRITE_CORPUS") == "1" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for i, s := range seeds {
				body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%d", i)), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		// NB: every committed seed must be exactly what the builders make
		// today (not merely present), so a corpus cannot go stale unseen.
		for i, s := range seeds {
			want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
			got, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("seed-%d", i)))
			if err != nil || string(got) != want {
				t.Fatalf("corpus %s seed-%d is missing or stale (%v); regenerate with TERMIVAR_WRITE_CORPUS=1", name, i, err)
			}
		}
	}
}
