package distributed

// Goal: Restore's audit (auditRestored) skips only checks that hold by
// construction, so it accepts nothing the full audit refuses. Method:
// every byte of the bodies of real states (with leases, proofs, receipts,
// histories, retries, scheduling) is changed in several ways behind a
// valid frame; whenever RestoreWorkerPool accepts the result, the full
// audit must pass on the restored pool and the state must re-export to
// its input. The test fails if a skipped check could have refused it.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"
)

// scheduledBusyPool is busyPool with scheduling options, a fair-scan
// setting and a delayed task: a version 3 state.
func scheduledBusyPool(t testing.TB) *harness {
	h := busyPool(t)
	h.ok("options", func(rev, now uint64) error {
		_, err := h.p.SetSchedulingOptions(rev, now, SchedulingOptions{BackoffBaseSecs: 10, BackoffCapSecs: 100, FairScans: true})
		return err
	})
	h.enqueueSched("delayed", "s3", PriorityHigh, TaskScheduling{NotBeforeSecs: h.now + 50})
	h.enqueueSched("due", "s3", PriorityNormal, TaskScheduling{})
	h.ok("scan", func(rev, now uint64) error {
		_, err := h.p.UpdateScan(rev, now, ScanUpdate{ScanID: "s3", MaxInFlight: 2, SetMaxInFlight: true})
		return err
	})
	return h
}

func TestRestoreWorkerPool_AcceptsOnlyWhatTheFullAuditAccepts(t *testing.T) {
	for name, state := range map[string][]byte{
		"busy":      busyPool(t).export(),
		"scheduled": scheduledBusyPool(t).export(),
	} {
		head, tail := len(poolMagic)+1, len(state)-4
		accepted, refused := 0, 0
		for i := head; i < tail; i++ {
			for _, change := range []func(byte) byte{
				func(b byte) byte { return b ^ 0x01 },
				func(b byte) byte { return b ^ 0x40 },
				func(b byte) byte { return b + 1 },
				func(b byte) byte { return b - 1 },
				func(byte) byte { return 0 },
			} {
				data := bytes.Clone(state[:tail])
				data[i] = change(data[i])
				if bytes.Equal(data, state[:tail]) {
					continue
				}
				data = binary.BigEndian.AppendUint32(data, crc32.Checksum(data, castagnoli))
				p, err := RestoreWorkerPool(data)
				if err != nil {
					refused++
					continue
				}
				accepted++
				if err := p.c.checkInvariants(); err != nil {
					t.Fatalf("%s: byte %d changed: Restore accepted a state the full audit refuses: %v", name, i, err)
				}
				if re, _ := p.ExportState(); !bytes.Equal(re, data) {
					t.Fatalf("%s: byte %d changed: the accepted state does not re-export to its input", name, i)
				}
			}
		}
		if accepted == 0 || refused == 0 {
			t.Fatalf("%s: %d changes accepted, %d refused: the test checks nothing", name, accepted, refused)
		}
		t.Logf("%s: %d changes accepted (each passes the full audit), %d refused", name, accepted, refused)
	}
}

// Goal: a worker's tags are a set in the record (tagBits), so Restore
// must refuse what the export never writes — tags out of order, repeated
// or unknown — rather than fold them into a set that re-exports to other
// bytes. Method: export a worker with tags Linux and GPU, change the two
// tag bytes behind a valid frame, restore.
func TestRestoreWorkerPool_RefusesTagsNotSortedDistinctValid(t *testing.T) {
	h := newHarness(t, DefaultLimits())
	h.ok("register", func(rev, now uint64) error {
		_, err := h.p.RegisterWorker(rev, now, WorkerSpec{WorkerID: "tagged", Capacity: 3, Tags: []WorkerTag{TagGPU, TagLinux, TagGPU}})
		return err
	})
	if got := h.worker("tagged").Tags(); len(got) != 2 || got[0] != TagLinux || got[1] != TagGPU {
		t.Fatalf("Tags() = %v, want [Linux GPU]", got)
	}
	state := h.export()
	body := state[:len(state)-4]
	// cpu, mem and net are 0, then the tag count and the tags.
	pattern := []byte{0, 0, 0, 2, byte(TagLinux), byte(TagGPU)}
	if bytes.Count(body, pattern) != 1 {
		t.Fatalf("the worker's tag bytes are not found once in the export")
	}
	at := bytes.Index(body, pattern) + 4
	if _, err := RestoreWorkerPool(state); err != nil {
		t.Fatalf("unchanged state: %v", err)
	}
	for name, tags := range map[string][2]byte{
		"out of order": {byte(TagGPU), byte(TagLinux)},
		"repeated":     {byte(TagGPU), byte(TagGPU)},
		"unknown":      {byte(TagLinux), byte(TagExternal + 1)},
	} {
		data := bytes.Clone(body)
		data[at], data[at+1] = tags[0], tags[1]
		data = binary.BigEndian.AppendUint32(data, crc32.Checksum(data, castagnoli))
		// The reason names the tags, not a truncation or another check.
		if _, err := RestoreWorkerPool(data); !errors.Is(err, ErrInvalidState) || !strings.Contains(err.Error(), "tags are not sorted, distinct and valid") {
			t.Errorf("%s tags: RestoreWorkerPool = %v, want ErrInvalidState for the tags", name, err)
		}
	}
}
