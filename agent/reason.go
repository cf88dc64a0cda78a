package agent

import (
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	distributed "github.com/termivar/distributed"
)

// Failure reasons (docs/contract.md Part F): the agent tells the server why
// an attempt failed — the exit code or signal, a timeout, an oversized
// output — followed by the tail of the command's stderr, bounded to
// distributed.MaxFailureReasonBytes of valid UTF-8.

// maxStderrTail is how much of the end of stderr an attempt keeps.
const maxStderrTail = distributed.MaxFailureReasonBytes

// maxAttemptTimeoutSecs caps a timeout the agent arms a timer for (the
// core's ceiling, distributed.MaxTaskTTLSecs).
const maxAttemptTimeoutSecs = distributed.MaxTaskTTLSecs

// tailBuffer keeps the last maxStderrTail bytes written to it.
type tailBuffer struct {
	buf []byte
}

func (t *tailBuffer) Write(p []byte) {
	p = p[max(0, len(p)-maxStderrTail):]
	if over := len(t.buf) + len(p) - maxStderrTail; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
}

func (t *tailBuffer) String() string { return string(t.buf) }

// exitReason names how the command ended: "exit status N" or
// "signal: killed" (exec.ExitError's own words), or the Handler's error.
func exitReason(err error, handler bool) string {
	var ee *exec.ExitError
	switch {
	case handler:
		return "handler error: " + err.Error()
	case errors.As(err, &ee):
		return ee.Error()
	}
	return "command did not run: " + err.Error()
}

func outputTooLarge(maxBytes int64) string {
	return "output exceeds the result limit of " + strconv.FormatInt(maxBytes, 10) + " bytes"
}

// failureReason joins what and the end of detail into one reason of at
// most distributed.MaxFailureReasonBytes valid UTF-8 bytes: what is kept
// whole (cut only if it alone is too long), detail loses its beginning.
func failureReason(what, detail string) string {
	what = clean(what)
	detail = strings.TrimSpace(clean(detail))
	if detail == "" {
		return cutEnd(what, distributed.MaxFailureReasonBytes)
	}
	const sep = "; stderr: "
	room := distributed.MaxFailureReasonBytes - len(what) - len(sep)
	if room <= 0 {
		return cutEnd(what, distributed.MaxFailureReasonBytes)
	}
	return what + sep + cutStart(detail, room)
}

// clean makes s valid UTF-8 without control characters other than
// newline and tab.
func clean(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f {
			return -1
		}
		return r
	}, s)
}

// cutEnd keeps at most n bytes of s from the start, on a rune boundary.
func cutEnd(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// cutStart keeps at most n bytes of s from the end, on a rune boundary.
func cutStart(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// attemptTimer returns a timer that fires after d, or never for d = 0.
func attemptTimer(d time.Duration) *time.Timer {
	if d <= 0 {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return t
	}
	return time.NewTimer(d)
}
