// Package audit writes the node's audit log: one JSON line per mutating
// request of an authenticated caller, accepted or rejected, with the time,
// the principal's key ID, the tenant, the method, the outcome ("ok" or the
// error kind) and the revision, plus, for key management (revoke, rotate),
// the ID of the key acted on (an ID names a key; it is not a secret); and,
// aggregated per source and window, the failed authentications
// (FailureAggregator). By construction an Entry has no field for targets,
// results, tokens or keys,
// so none can be logged.
package audit

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// FileName is the audit log's name inside the data directory.
const FileName = "audit.log"

// Entry is one audited request.
type Entry struct {
	KeyID    string // principal; empty when the key was not recognised
	Tenant   string
	Method   string // e.g. "Worker.Complete"
	Outcome  string // "ok", or the error kind (e.g. "stale_ownership")
	Revision uint64 // tenant revision after the request; 0 when unknown
	// Subject is the key ID a key-management request acted on (e.g. the
	// revoked key); empty, and then not written, for other requests.
	Subject string
}

// OutcomeOK is the outcome of an accepted request.
const OutcomeOK = "ok"

// Logger appends entries as JSON lines. It is safe for concurrent use; each
// entry is written with one Write call.
type Logger struct {
	mu       sync.Mutex
	closer   io.Closer
	log      *slog.Logger // the failure lines (failures.go)
	out      *lockedWriter
	failures *FailureAggregator // attached by Failures; flushed by Close
	now      func() time.Time
}

// lockedWriter serialises the Logger's writes: Record's lines and the
// slog handler's failure lines, one Write call each.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (lw *lockedWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.Write(p)
}

// Open appends to path (created with mode 0600), never rotating. When tee
// is non-nil every line is also written there (e.g. os.Stderr).
func Open(path string, tee io.Writer) (*Logger, error) {
	return OpenRotating(path, tee, Rotation{})
}

// OpenRotating is Open with the file rotated by size (Rotation); rot is
// validated first (errors.Is ErrRotation). Each line is written whole to
// one file.
func OpenRotating(path string, tee io.Writer, rot Rotation) (*Logger, error) {
	f, err := openRotating(path, rot)
	if err != nil {
		return nil, err
	}
	var w io.Writer = f
	if tee != nil {
		w = io.MultiWriter(f, tee)
	}
	l := New(w)
	l.closer = f
	return l, nil
}

// New writes entries to w. A nil w discards them.
func New(w io.Writer) *Logger {
	lw := &lockedWriter{w: cmp.Or(w, io.Discard)}
	h := slog.NewJSONHandler(lw, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			// NB: the constant message and level carry nothing; drop them so
			// a line is exactly the documented fields.
			if len(groups) == 0 && (a.Key == slog.MessageKey || a.Key == slog.LevelKey) {
				return slog.Attr{}
			}
			return a
		},
	})
	return &Logger{log: slog.New(h), out: lw, now: time.Now}
}

// Record appends one entry. NB: it formats the line itself (appendEntry)
// rather than through slog, byte for byte what slog's JSON handler wrote
// (TestAppendEntry_MatchesSlog): on the per-call path of every mutating
// request, slog's record, attributes and handler lock cost allocations
// and a lock held while formatting (docs/benchmarks.md, issue 15).
func (l *Logger) Record(_ context.Context, e Entry) {
	if l == nil {
		return
	}
	bp := linePool.Get().(*[]byte)
	*bp = appendEntry((*bp)[:0], l.now(), e)
	_, _ = l.out.Write(*bp)
	if cap(*bp) <= maxPooledLine {
		linePool.Put(bp)
	}
}

// maxPooledLine bounds the line buffers kept for reuse.
const maxPooledLine = 1 << 10

var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// appendEntry appends e's JSON line, stamped t, to buf: the fields and
// their order as slog's JSON handler writes them (time, key_id, tenant,
// method, outcome, revision, then subject_key_id when set).
func appendEntry(buf []byte, t time.Time, e Entry) []byte {
	buf = append(buf, `{"time":"`...)
	buf = t.AppendFormat(buf, time.RFC3339Nano)
	buf = appendField(buf, `","key_id":`, e.KeyID)
	buf = appendField(buf, `,"tenant":`, e.Tenant)
	buf = appendField(buf, `,"method":`, e.Method)
	buf = appendField(buf, `,"outcome":`, e.Outcome)
	buf = append(buf, `,"revision":`...)
	buf = strconv.AppendUint(buf, e.Revision, 10)
	if e.Subject != "" {
		buf = appendField(buf, `,"subject_key_id":`, e.Subject)
	}
	return append(buf, "}\n"...)
}

// appendField appends key (with its separators) and s as a JSON string.
func appendField(buf []byte, key, s string) []byte {
	buf = append(buf, key...)
	buf = append(buf, '"')
	buf = appendJSONString(buf, s)
	return append(buf, '"')
}

// appendJSONString escapes s as slog's JSON handler does: quote,
// backslash and control bytes escaped, invalid UTF-8 as U+FFFD, U+2028
// and U+2029 escaped, everything else verbatim.
func appendJSONString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			switch {
			case b >= 0x20 && b != '"' && b != '\\':
				buf = append(buf, b)
			case b == '"' || b == '\\':
				buf = append(buf, '\\', b)
			case b == '\n':
				buf = append(buf, '\\', 'n')
			case b == '\r':
				buf = append(buf, '\\', 'r')
			case b == '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			buf = append(buf, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			buf = append(buf, `\u202`...)
			buf = append(buf, hex[c&0xF])
		default:
			buf = append(buf, s[i:i+size]...)
		}
		i += size
	}
	return buf
}

// Failures returns the logger's failed-authentication aggregator, creating
// it with cfg on the first call (later calls ignore cfg). Close flushes it.
// A nil Logger returns a nil aggregator, whose methods do nothing.
func (l *Logger) Failures(cfg FailureConfig) *FailureAggregator {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failures == nil {
		l.failures = NewFailureAggregator(l, cfg)
	}
	return l.failures
}

// Close writes the pending failed-authentication lines, then closes the
// underlying file, if Open created one.
func (l *Logger) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failures != nil {
		l.failures.Flush(time.Now())
	}
	if l.closer == nil {
		return nil
	}
	err := l.closer.Close()
	l.closer = nil
	return err
}
