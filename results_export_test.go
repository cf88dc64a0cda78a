package distributed

// Goal: prove that ResultAggregator.ExportState is deterministic and
// canonical and that RestoreResultAggregator accepts exactly what
// ExportState produces and rejects every corrupt, truncated or hostile input
// with ErrInvalidState, without panicking and without allocating more than
// the input justifies.
//
// Method: round trips over varied states; a pinned golden encoding; every
// truncation and every bit flip of a valid export, with the original and with
// a recomputed checksum; hand-crafted hostile bodies with valid checksums
// (so that the decoder, not the CRC, has to reject them); and heap
// accounting around hostile length claims.

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

type craftedResult struct {
	receipt CompletionReceipt
	data    []byte
}

// craftResultBody encodes a body field by field, bypassing the aggregator's
// own checks, and returns the framed bytes with a valid checksum.
func craftResultState(l ResultLimits, revision, count uint64, entries []craftedResult, trailing ...byte) []byte {
	e := newEncoder(resultAggregatorMagic, resultAggregatorVersion)
	for _, v := range []int{l.MaxResults, l.MaxResultBytes, l.MaxTotalBytes, l.MaxAggregateItems, l.MaxAggregateBytes} {
		e.uvarint(uint64(v))
	}
	e.uvarint(revision)
	e.uvarint(count)
	for _, r := range entries {
		r.receipt.encode(e)
		e.bytes(r.data)
	}
	e.buf = append(e.buf, trailing...)
	return e.finish()
}

// reframe replaces data's checksum with a valid one for its (possibly
// modified) content, so that only the decoder can reject it.
func reframe(data []byte) []byte {
	e := &encoder{buf: append([]byte(nil), data...)}
	return e.finish()
}

// receiptPrefix returns an unframed body up to and including one entry's
// receipt (limits l, revision 1, count 1), for appending hostile result bytes.
func receiptPrefix(l ResultLimits, taskID string) []byte {
	e := newEncoder(resultAggregatorMagic, resultAggregatorVersion)
	for _, v := range []int{l.MaxResults, l.MaxResultBytes, l.MaxTotalBytes, l.MaxAggregateItems, l.MaxAggregateBytes, 1, 1} {
		e.uvarint(uint64(v))
	}
	testReceipt(taskID).encode(e)
	return e.buf
}

func exportOf(t testing.TB, a *ResultAggregator) []byte {
	t.Helper()
	b, err := a.ExportState()
	if err != nil {
		t.Fatalf("ExportState() = %v", err)
	}
	return b
}

func requireInvalidState(t testing.TB, what string, data []byte) {
	t.Helper()
	a, err := RestoreResultAggregator(data)
	var e *Error
	if !errors.Is(err, ErrInvalidState) || !errors.As(err, &e) || a != nil {
		t.Fatalf("RestoreResultAggregator(%s) = %v, %v; want nil, ErrInvalidState", what, a, err)
	}
	if !strings.HasPrefix(e.Reason, "result aggregator state: ") {
		t.Fatalf("RestoreResultAggregator(%s) reason = %q", what, e.Reason)
	}
}

// requireRoundTrip restores data and requires an equal, audited state whose
// export is byte-identical.
func requireRoundTrip(t testing.TB, src *ResultAggregator, data []byte) *ResultAggregator {
	t.Helper()
	got, err := RestoreResultAggregator(data)
	if err != nil {
		t.Fatalf("RestoreResultAggregator(export) = %v", err)
	}
	if err := got.CheckInvariants(); err != nil {
		t.Fatalf("restored CheckInvariants() = %v", err)
	}
	if again := exportOf(t, got); !bytes.Equal(again, data) {
		t.Fatalf("re-export differs:\n got %x\nwant %x", again, data)
	}
	if src != nil {
		if got.Limits() != src.Limits() || got.Revision() != src.Revision() ||
			got.ResultCount() != src.ResultCount() || got.TotalBytes() != src.TotalBytes() {
			t.Fatalf("restored %v limits %+v, source %v limits %+v", got, got.Limits(), src, src.Limits())
		}
		for id, r := range src.results {
			b, ok, err := got.GetResult(id)
			if err != nil || !ok || !bytes.Equal(b, r.data) || got.results[id].receipt != r.receipt {
				t.Fatalf("restored GetResult(%s) = %q, %v, %v; want %q", id, b, ok, err, r.data)
			}
		}
	}
	return got
}

func TestResultAggregator_ExportRestoreRoundTrip(t *testing.T) {
	long := strings.Repeat("L", MaxIdentifierBytes)
	tests := []struct {
		name   string
		limits ResultLimits
		fill   func(t testing.TB, a *ResultAggregator)
	}{
		{name: "empty default", limits: DefaultResultLimits()},
		{name: "empty maximum", limits: MaximumResultLimits()},
		{name: "empty ones", limits: ResultLimits{1, 1, 1, 1, 1}},
		{name: "small with empty results", limits: smallResultLimits, fill: func(t testing.TB, a *ResultAggregator) {
			mustStore(t, a, testReceipt("b"), []byte("12345678"))
			mustStore(t, a, testReceipt("a"), nil)
			mustStore(t, a, testReceipt("c"), []byte{0, 0xff, '\n'})
		}},
		{name: "long identifiers and big counters", limits: DefaultResultLimits(), fill: func(t testing.TB, a *ResultAggregator) {
			r := testReceipt(long)
			r.workerID = long
			r.taskGeneration, r.attempt, r.leaseID = math.MaxUint64, math.MaxUint32, math.MaxUint64
			r.workerGeneration, r.recordVersion = math.MaxUint64, math.MaxUint64
			mustStore(t, a, r, bytes.Repeat([]byte{0xA5}, 1000))
			mustStore(t, a, CompletionReceipt{taskID: "z", workerID: "w"}, []byte("zero counters"))
		}},
		{name: "revision at maximum", limits: smallResultLimits, fill: func(t testing.TB, a *ResultAggregator) {
			mustStore(t, a, testReceipt("t1"), []byte("x"))
			a.revision = math.MaxUint64
		}},
		{name: "200 results", limits: MaximumResultLimits(), fill: func(t testing.TB, a *ResultAggregator) {
			for i := range 200 {
				mustStore(t, a, testReceipt("task-"+strconv.Itoa(i)), []byte(strings.Repeat("r", i)))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newTestAggregator(t, tt.limits)
			if tt.fill != nil {
				tt.fill(t, a)
			}
			data := exportOf(t, a)
			if !bytes.Equal(exportOf(t, a), data) {
				t.Fatalf("two exports of one state differ")
			}
			if string(data[:4]) != "TVRA" || data[4] != 1 {
				t.Fatalf("export starts with %q %d, want TVRA 1", data[:4], data[4])
			}
			got := requireRoundTrip(t, a, data)
			// The restored aggregator keeps working from the restored revision.
			if got.Revision() < math.MaxUint64 && got.ResultCount() < got.Limits().MaxResults {
				mustStore(t, got, CompletionReceipt{taskID: "zz-new", workerID: "w"}, nil)
				if got.Revision() != a.Revision()+1 {
					t.Fatalf("restored revision did not continue: %d after %d", got.Revision(), a.Revision())
				}
			}
			// Restore copies: mutating the input afterwards changes nothing.
			before := observeResults(t, got, "a", "b", "c", "t1")
			for i := range data {
				data[i] ^= 0xff
			}
			requireUnchanged(t, before, observeResults(t, got, "a", "b", "c", "t1"))
		})
	}
}

func TestResultAggregator_ExportDeterministic(t *testing.T) {
	// The same results stored in different orders give the same state and so
	// the same bytes: map iteration order never leaks.
	rng := rand.New(rand.NewPCG(1, 2))
	ids := make([]string, 300)
	for i := range ids {
		ids[i] = "t-" + strconv.Itoa(i*7919%1000)
	}
	var first []byte
	for run := range 5 {
		a := newTestAggregator(t, MaximumResultLimits())
		order := rng.Perm(len(ids))
		for _, i := range order {
			mustStore(t, a, testReceipt(ids[i]), []byte(ids[i]))
		}
		data := exportOf(t, a)
		if run == 0 {
			first = data
			continue
		}
		if !bytes.Equal(data, first) {
			t.Fatalf("run %d: export differs for an equal state", run)
		}
	}
}

func TestResultAggregator_ExportGolden(t *testing.T) {
	// Pins the TVRA v1 layout; change resultAggregatorVersion if this moves.
	a := newTestAggregator(t, smallResultLimits)
	if got, want := hex.EncodeToString(exportOf(t, a)),
		"5456524101"+"03"+"08"+"14"+"04"+"0c"+"00"+"00"+"e5f4a1b4"; got != want {
		t.Fatalf("empty export = %s, want %s", got, want)
	}
	mustStore(t, a, CompletionReceipt{taskID: "t1", taskGeneration: 2, attempt: 3, leaseID: 300, workerID: "w", workerGeneration: 5, recordVersion: 9}, []byte("ok"))
	if got, want := hex.EncodeToString(exportOf(t, a)),
		"5456524101"+"03"+"08"+"14"+"04"+"0c"+"01"+"01"+ // limits, revision 1, count 1
			"027431"+"02"+"03"+"ac02"+"0177"+"05"+"09"+ // receipt: "t1", gen 2, attempt 3, lease 300, "w", wgen 5, version 9
			"026f6b"+ // "ok"
			"6cfe5c54"; got != want {
		t.Fatalf("one-result export = %s, want %s", got, want)
	}
}

func validResultExport(t testing.TB) (*ResultAggregator, []byte) {
	t.Helper()
	a := newTestAggregator(t, smallResultLimits)
	mustStore(t, a, testReceipt("t1"), []byte("one"))
	mustStore(t, a, testReceipt("t2"), nil)
	mustStore(t, a, testReceipt("t3"), []byte("three"))
	return a, exportOf(t, a)
}

func TestRestoreResultAggregator_Truncated(t *testing.T) {
	_, data := validResultExport(t)
	for n := range len(data) {
		requireInvalidState(t, "prefix "+strconv.Itoa(n), data[:n])
	}
	// Truncated bodies with a valid checksum: the decoder itself must notice.
	body := data[:len(data)-4]
	for n := 5; n < len(body); n++ {
		requireInvalidState(t, "reframed prefix "+strconv.Itoa(n), reframe(body[:n]))
	}
}

func TestRestoreResultAggregator_BitFlips(t *testing.T) {
	_, data := validResultExport(t)
	for i := range len(data) * 8 {
		flipped := append([]byte(nil), data...)
		flipped[i/8] ^= 1 << (i % 8)
		requireInvalidState(t, "bit flip "+strconv.Itoa(i), flipped)
	}
	// With a recomputed checksum a flip may yield another valid state; then
	// it must be a canonical, audited one. Otherwise it is ErrInvalidState.
	body := data[:len(data)-4]
	accepted := 0
	for i := 5 * 8; i < len(body)*8; i++ {
		flipped := append([]byte(nil), body...)
		flipped[i/8] ^= 1 << (i % 8)
		framed := reframe(flipped)
		got, err := RestoreResultAggregator(framed)
		if err != nil {
			requireInvalidState(t, "reframed bit flip "+strconv.Itoa(i), framed)
			continue
		}
		accepted++
		requireRoundTrip(t, nil, framed)
		_ = got
	}
	t.Logf("%d of %d reframed bit flips decode to another valid state", accepted, (len(body)-5)*8)
}

func TestRestoreResultAggregator_Garbage(t *testing.T) {
	_, data := validResultExport(t)
	rng := rand.New(rand.NewPCG(3, 4))
	inputs := map[string][]byte{
		"nil":         nil,
		"empty":       {},
		"magic only":  []byte("TVRA"),
		"header only": []byte("TVRA\x01"),
		"other magic": reframe(append([]byte("TVRB"), data[4:len(data)-4]...)),
		"receipt magic": func() []byte {
			b, _ := testReceipt("t1").MarshalBinary()
			return b
		}(),
		"version 0":       reframe(append([]byte("TVRA\x00"), data[5:len(data)-4]...)),
		"version 2":       reframe(append([]byte("TVRA\x02"), data[5:len(data)-4]...)),
		"doubled":         append(append([]byte(nil), data...), data...),
		"trailing zero":   append(append([]byte(nil), data...), 0),
		"all ones":        bytes.Repeat([]byte{0xff}, 64),
		"checksum zeroed": append(append([]byte(nil), data[:len(data)-4]...), 0, 0, 0, 0),
	}
	for i := range 200 {
		b := make([]byte, rng.IntN(80))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		if i%2 == 0 && len(b) > 5 {
			copy(b, "TVRA\x01")
			b = reframe(b)
		}
		inputs["random "+strconv.Itoa(i)] = b
	}
	for name, in := range inputs {
		requireInvalidState(t, name, in)
	}
}

func TestRestoreResultAggregator_Hostile(t *testing.T) {
	l := smallResultLimits
	entry := func(id string, data string) craftedResult {
		return craftedResult{receipt: testReceipt(id), data: []byte(data)}
	}
	withWorker := func(id, worker string) craftedResult {
		r := entry(id, "x")
		r.receipt.workerID = worker
		return r
	}
	ok := []craftedResult{entry("t1", "a"), entry("t2", "")}
	// The valid baseline proves the crafting helper itself is right.
	if _, err := RestoreResultAggregator(craftResultState(l, 2, 2, ok)); err != nil {
		t.Fatalf("crafted baseline: %v", err)
	}
	if _, err := RestoreResultAggregator(craftResultState(l, 7, 2, ok)); err != nil {
		t.Fatalf("crafted baseline with revision above count: %v", err)
	}
	body := func(fields ...uint64) []byte { // raw uvarint body after the header
		e := newEncoder(resultAggregatorMagic, resultAggregatorVersion)
		for _, f := range fields {
			e.uvarint(f)
		}
		return e.finish()
	}
	tests := map[string][]byte{
		"zero limit":                craftResultState(ResultLimits{0, 8, 20, 4, 12}, 0, 0, nil),
		"limit above ceiling":       craftResultState(ResultLimits{MaxResults + 1, 8, 20, 4, 12}, 0, 0, nil),
		"limit relationship":        craftResultState(ResultLimits{3, 21, 20, 4, 12}, 0, 0, nil),
		"limit above int32":         body(1<<40, 8, 20, 4, 12, 0, 0),
		"limit uvarint overflow":    reframe(append([]byte("TVRA\x01"), bytes.Repeat([]byte{0xff}, 11)...)),
		"missing count":             body(3, 8, 20, 4, 12, 0),
		"count above max_results":   craftResultState(l, 4, 4, []craftedResult{entry("t1", ""), entry("t2", ""), entry("t3", ""), entry("t4", "")}),
		"count claims maximum":      craftResultState(MaximumResultLimits(), MaxResults, MaxResults, []craftedResult{entry("t1", "")}),
		"count exceeds entries":     craftResultState(l, 3, 3, ok),
		"count below entries":       craftResultState(l, 2, 1, ok),
		"revision below count":      craftResultState(l, 1, 2, ok),
		"unsorted task IDs":         craftResultState(l, 2, 2, []craftedResult{entry("t2", ""), entry("t1", "")}),
		"duplicate task IDs":        craftResultState(l, 2, 2, []craftedResult{entry("t1", ""), entry("t1", "")}),
		"empty task ID":             craftResultState(l, 1, 1, []craftedResult{entry("", "")}),
		"unsafe task ID":            craftResultState(l, 1, 1, []craftedResult{entry("bad id", "")}),
		"task ID too long":          craftResultState(l, 1, 1, []craftedResult{entry(strings.Repeat("t", MaxIdentifierBytes+1), "")}),
		"empty worker ID":           craftResultState(l, 1, 1, []craftedResult{withWorker("t1", "")}),
		"unsafe worker ID":          craftResultState(l, 1, 1, []craftedResult{withWorker("t1", "w\n")}),
		"result above max":          craftResultState(l, 1, 1, []craftedResult{entry("t1", "123456789")}),
		"total above max":           craftResultState(l, 3, 3, []craftedResult{entry("t1", "12345678"), entry("t2", "12345678"), entry("t3", "12345")}),
		"result length claims 16M":  reframe(append(receiptPrefix(l, "t1"), 0x80, 0x80, 0x80, 0x08, 'x')),
		"trailing byte":             craftResultState(l, 2, 2, ok, 0),
		"trailing entry":            craftResultState(l, 1, 1, ok),
		"non-canonical revision":    reframe(append(append([]byte("TVRA\x01\x03\x08\x14\x04\x0c"), 0x80, 0x00), 0x00)),
		"non-canonical count":       reframe([]byte("TVRA\x01\x03\x08\x14\x04\x0c\x00\x80\x00")),
		"non-canonical limit":       reframe([]byte("TVRA\x01\x83\x00\x08\x14\x04\x0c\x00\x00")),
		"non-canonical result size": reframe(append(receiptPrefix(l, "t1"), 0x80, 0x00)),
	}
	// Attempt above uint32: encode a receipt by hand with attempt = 2^32.
	{
		e := newEncoder(resultAggregatorMagic, resultAggregatorVersion)
		for _, v := range []uint64{3, 8, 20, 4, 12, 1, 1} {
			e.uvarint(v)
		}
		e.str("t1")
		e.uvarint(1)
		e.uvarint(1 << 32)
		e.uvarint(1)
		e.str("w")
		e.uvarint(1)
		e.uvarint(1)
		e.bytes(nil)
		tests["attempt above uint32"] = e.finish()
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			requireInvalidState(t, name, data)
			_, err := RestoreResultAggregator(data)
			var e *Error
			if !errors.As(err, &e) || !strings.HasSuffix(e.Reason, hostileReasons[name]) || hostileReasons[name] == "" {
				t.Fatalf("RestoreResultAggregator(%s) reason = %v, want the %q check", name, err, hostileReasons[name])
			}
		})
	}
}

// hostileReasons names the check that must reject each hostile input, so that
// a case cannot pass by failing for an unrelated reason.
var hostileReasons = map[string]string{
	"zero limit":                "limits are invalid",
	"limit above ceiling":       "limits are invalid",
	"limit relationship":        "limits are invalid",
	"limit above int32":         "header is truncated or malformed",
	"limit uvarint overflow":    "header is truncated or malformed",
	"missing count":             "result count is out of range or truncated",
	"count above max_results":   "result count is out of range or truncated",
	"count claims maximum":      "result count is out of range or truncated",
	"count exceeds entries":     "result entry is truncated or malformed",
	"count below entries":       "trailing bytes after the last entry",
	"revision below count":      "revision is smaller than the result count",
	"unsorted task IDs":         "task IDs are not strictly ascending",
	"duplicate task IDs":        "task IDs are not strictly ascending",
	"empty task ID":             "result entry has an invalid task ID",
	"unsafe task ID":            "result entry has an invalid task ID",
	"task ID too long":          "result entry is truncated or malformed",
	"empty worker ID":           "result entry has an invalid worker ID",
	"unsafe worker ID":          "result entry has an invalid worker ID",
	"result above max":          "result entry is truncated or malformed",
	"total above max":           "total result bytes exceed max_total_bytes",
	"result length claims 16M":  "result entry is truncated or malformed",
	"trailing byte":             "trailing bytes after the last entry",
	"trailing entry":            "trailing bytes after the last entry",
	"attempt above uint32":      "result entry is truncated or malformed",
	"non-canonical revision":    "encoding is not canonical",
	"non-canonical count":       "encoding is not canonical",
	"non-canonical limit":       "encoding is not canonical",
	"non-canonical result size": "encoding is not canonical",
}

func TestRestoreResultAggregator_HostileAllocation(t *testing.T) {
	// A few bytes that claim a huge collection or a huge result must be
	// rejected before anything of that size is allocated.
	claims := map[string][]byte{
		"65536 entries": craftResultState(MaximumResultLimits(), MaxResults, MaxResults, nil),
		"16 MiB result": func() []byte {
			e := newEncoder(resultAggregatorMagic, resultAggregatorVersion)
			l := MaximumResultLimits()
			for _, v := range []uint64{uint64(l.MaxResults), uint64(l.MaxResultBytes), uint64(l.MaxTotalBytes), uint64(l.MaxAggregateItems), uint64(l.MaxAggregateBytes), 1, 1} {
				e.uvarint(v)
			}
			testReceipt("t1").encode(e)
			e.uvarint(MaxResultBytes)
			e.buf = append(e.buf, "short"...)
			return e.finish()
		}(),
	}
	for name, data := range claims {
		requireInvalidState(t, name, data) // warm up
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range 10 {
			_, _ = RestoreResultAggregator(data)
		}
		runtime.ReadMemStats(&after)
		if got := after.TotalAlloc - before.TotalAlloc; got > 64<<10 {
			t.Fatalf("%s: 10 restores of %d bytes allocated %d bytes", name, len(data), got)
		}
	}
}
