// Goal: let the fuzzer search the command space for a core/model divergence
// or a broken invariant, and attack RestoreWorkerPool with mutations of rich,
// realistic exported states. Method: FuzzCommands decodes the input bytes into
// choices of the simulator's generator (profile, then one op per step, until
// the bytes run out) and applies them through the harness, then replays the
// accepted log; FuzzRestoreSimState mutates states exported by simulator runs.
// Seed corpora: f.Add below plus testdata/fuzz.
package sim

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"

	distributed "github.com/termivar/distributed"
)

// maxFuzzSteps bounds one input's work.
const maxFuzzSteps = 400

func FuzzCommands(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte("\x00\x10\x20\x30\x40\x50\x60\x70\x80\x90\xa0\xb0\xc0\xd0\xe0\xf0"))
	f.Add(bytes.Repeat([]byte{1, 7, 42, 99, 3}, 40))
	f.Add(bytes.Repeat([]byte{255, 0, 128}, 60))
	f.Fuzz(func(t *testing.T, data []byte) {
		src := NewByteSource(data)
		p := AllProfiles()[src.Intn(len(AllProfiles()))]
		h, err := NewHarnessFor(p)
		if err != nil {
			t.Fatal(err)
		}
		g := NewGenerator(src, p, h.Model)
		for i := 0; i < maxFuzzSteps && !src.Exhausted(); i++ {
			c := g.Next()
			r, out, err := h.Step(c)
			if err != nil {
				t.Fatalf("profile %s step %d %s: %v", p.Name, i, r, err)
			}
			g.Observe(c, out)
		}
		if err := h.ReplayLog(); err != nil {
			t.Fatalf("determinism: %v", err)
		}
	})
}

// simStates returns ExportState bytes of a few simulator runs.
func simStates(tb testing.TB) [][]byte {
	var out [][]byte
	for seed := uint64(1); seed <= 6; seed++ {
		p := ProfileFor(seed)
		h, err := NewHarnessFor(p)
		if err != nil {
			tb.Fatal(err)
		}
		g := NewGenerator(NewRandSource(seed), p, h.Model)
		for range 150 {
			c := g.Next()
			_, o, err := h.Step(c)
			if err != nil {
				tb.Fatal(err)
			}
			g.Observe(c, o)
		}
		b, err := h.Core.ExportState()
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func FuzzRestoreSimState(f *testing.F) {
	for _, b := range simStates(f) {
		f.Add(b, uint16(0), byte(0))
		f.Add(b, uint16(len(b)/2), byte(1))
		f.Add(b, uint16(7), byte(0x80))
	}
	f.Fuzz(func(t *testing.T, data []byte, at uint16, x byte) {
		if len(data) > 4 {
			// Mutate one byte of the body and re-seal the frame so that the
			// decoder itself (not only the checksum) is exercised.
			data = bytes.Clone(data)
			data[int(at)%(len(data)-4)] ^= x
			data = binary.BigEndian.AppendUint32(data[:len(data)-4], crc32.Checksum(data[:len(data)-4], castagnoli))
		}
		p, err := distributed.RestoreWorkerPool(data)
		if err != nil {
			if !bytesIsInvalidState(err) {
				t.Fatalf("RestoreWorkerPool error %v is not InvalidState", err)
			}
			return
		}
		if err := p.CheckInvariants(); err != nil {
			t.Fatalf("restored pool fails CheckInvariants: %v", err)
		}
		again, err := p.ExportState()
		if err != nil {
			t.Fatal(err)
		}
		if data[4] == 1 {
			// A mutation that turned the version into 1 was read as a
			// pre-purge state and re-exports upgraded (version 2).
			return
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("accepted state does not re-export to the same bytes")
		}
	})
}

func bytesIsInvalidState(err error) bool {
	de, ok := err.(*distributed.Error)
	return ok && de.Kind == distributed.KindInvalidState
}
