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
	"sync"
	"time"
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
	log      *slog.Logger
	failures *FailureAggregator // attached by Failures; flushed by Close
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
	w = cmp.Or(w, io.Discard)
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			// NB: the constant message and level carry nothing; drop them so
			// a line is exactly the documented fields.
			if len(groups) == 0 && (a.Key == slog.MessageKey || a.Key == slog.LevelKey) {
				return slog.Attr{}
			}
			return a
		},
	})
	return &Logger{log: slog.New(h)}
}

// Record appends one entry.
func (l *Logger) Record(ctx context.Context, e Entry) {
	if l == nil {
		return
	}
	attrs := []slog.Attr{
		slog.String("key_id", e.KeyID),
		slog.String("tenant", e.Tenant),
		slog.String("method", e.Method),
		slog.String("outcome", e.Outcome),
		slog.Uint64("revision", e.Revision),
	}
	if e.Subject != "" {
		attrs = append(attrs, slog.String("subject_key_id", e.Subject))
	}
	l.log.LogAttrs(ctx, slog.LevelInfo, "audit", attrs...)
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
