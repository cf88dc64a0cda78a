package audit

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// OverflowSource is the source under which failures are counted once the
// per-window table of a FailureAggregator is full.
const OverflowSource = "other"

// FailureConfig configures a FailureAggregator.
type FailureConfig struct {
	// Window is the aggregation interval: at most one line per source per
	// window (default 1 minute).
	Window time.Duration
	// MaxSources bounds the per-window table (default 4096); failures of
	// further sources are counted under OverflowSource, so memory and lines
	// per window stay bounded whatever the number of sources.
	MaxSources int
}

// Default aggregation bounds.
const (
	DefaultFailureWindow     = time.Minute
	DefaultFailureMaxSources = 4096
)

// FailureAggregator audits failed authentications in aggregated form: per
// window, one line per source with the number of failed and of throttled
// (rejected unchecked) requests, so a flood cannot fill the disk. A line
// never holds the presented key; it has the fields time, event
// ("auth_failures"), source, failures, throttled and since (window start).
//
// Lines of a window are written lazily: by the first Add or Tick after the
// window ends, or by Flush. It is safe for concurrent use.
type FailureAggregator struct {
	l   *Logger
	cfg FailureConfig

	mu    sync.Mutex
	start time.Time // current window's start; zero while the table is empty
	// Invariant: len(counts) <= cfg.MaxSources + 1 (the overflow entry).
	counts map[string]*failureCount
}

type failureCount struct{ failures, throttled uint64 }

// NewFailureAggregator writes to l (nil: discarded). Zero fields of cfg take
// their defaults.
func NewFailureAggregator(l *Logger, cfg FailureConfig) *FailureAggregator {
	cfg.Window = cmp.Or(max(cfg.Window, 0), DefaultFailureWindow)
	cfg.MaxSources = cmp.Or(max(cfg.MaxSources, 0), DefaultFailureMaxSources)
	return &FailureAggregator{l: l, cfg: cfg, counts: map[string]*failureCount{}}
}

// Add counts one failed (throttled=false) or throttled request of source at
// now, first writing the previous window's lines if it has ended.
func (a *FailureAggregator) Add(now time.Time, source string, throttled bool) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rollLocked(now)
	if a.start.IsZero() {
		a.start = now
	}
	c, ok := a.counts[source]
	if !ok {
		if len(a.counts) >= a.cfg.MaxSources {
			source = OverflowSource
		}
		if c, ok = a.counts[source]; !ok {
			c = &failureCount{}
			a.counts[source] = c
		}
	}
	if throttled {
		c.throttled++
	} else {
		c.failures++
	}
}

// Tick writes the lines of a window that has ended by now. The server calls
// it on every request, so lines appear at most one request late.
func (a *FailureAggregator) Tick(now time.Time) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rollLocked(now)
}

// Flush writes the current window's lines now (at shutdown).
func (a *FailureAggregator) Flush(now time.Time) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.writeLocked(now)
}

// Sources returns the number of sources in the current window's table.
func (a *FailureAggregator) Sources() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.counts)
}

func (a *FailureAggregator) rollLocked(now time.Time) {
	if !a.start.IsZero() && !now.Before(a.start.Add(a.cfg.Window)) {
		a.writeLocked(now)
	}
}

// writeLocked writes one line per source (sorted, for stable output) and
// empties the table.
func (a *FailureAggregator) writeLocked(now time.Time) {
	if len(a.counts) == 0 {
		return
	}
	for _, s := range slices.Sorted(maps.Keys(a.counts)) {
		c := a.counts[s]
		a.l.logFailures(now, a.start, s, c.failures, c.throttled)
	}
	clear(a.counts)
	a.start = time.Time{}
}

func (l *Logger) logFailures(now, since time.Time, source string, failures, throttled uint64) {
	if l == nil {
		return
	}
	r := slog.NewRecord(now, slog.LevelInfo, "audit", 0)
	r.AddAttrs(
		slog.String("event", "auth_failures"),
		slog.String("source", source),
		slog.Uint64("failures", failures),
		slog.Uint64("throttled", throttled),
		slog.Time("since", since),
	)
	_ = l.log.Handler().Handle(context.Background(), r)
}
