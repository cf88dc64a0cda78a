package agent

// Goal: failureReason always yields what the server accepts (at most
// distributed.MaxFailureReasonBytes of valid UTF-8), keeps the cause whole
// and the end of stderr, and tailBuffer keeps the last bytes written.

import (
	"strings"
	"testing"
	"unicode/utf8"

	distributed "github.com/termivar/distributed"
)

func TestFailureReason_Bounds(t *testing.T) {
	long := strings.Repeat("é", 400) + "END" // 803 bytes, multi-byte runes
	cases := []struct {
		name, what, detail string
		prefix, suffix     string
	}{
		{"plain", "exit status 3", "oops\n", "exit status 3; stderr: oops", "oops"},
		{"no detail", "timeout: killed after 1s", "  \n", "timeout: killed after 1s", "1s"},
		{"long detail keeps its end", "exit status 1", long, "exit status 1; stderr: ", "END"},
		{"invalid utf-8 and controls", "signal: killed", "a\xffb\x00c\x1b[31m", "signal: killed; stderr: a\uFFFDbc[31m", "[31m"},
		{"cause alone too long", strings.Repeat("x", 600), "tail", strings.Repeat("x", 100), "x"},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			r := failureReason(tt.what, tt.detail)
			if len(r) > distributed.MaxFailureReasonBytes || !utf8.ValidString(r) || distributed.ValidateFailureReason(r) != nil {
				t.Fatalf("failureReason = %q (%d bytes): not acceptable", r, len(r))
			}
			if !strings.HasPrefix(r, tt.prefix) || !strings.HasSuffix(r, tt.suffix) {
				t.Fatalf("failureReason = %q, want prefix %q and suffix %q", r, tt.prefix, tt.suffix)
			}
		})
	}
}

func TestTailBuffer_KeepsTheEnd(t *testing.T) {
	var tb tailBuffer
	for i := range 1000 {
		tb.Write([]byte{byte('a' + i%26)})
	}
	if len(tb.buf) != maxStderrTail || tb.buf[len(tb.buf)-1] != byte('a'+999%26) {
		t.Fatalf("tail = %d bytes ending %q", len(tb.buf), tb.buf[len(tb.buf)-1])
	}
	tb.Write([]byte(strings.Repeat("z", 2*maxStderrTail)))
	if tb.String() != strings.Repeat("z", maxStderrTail) {
		t.Fatal("a large write does not replace the tail")
	}
}
