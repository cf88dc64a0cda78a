// Package logging builds the node's one log/slog logger from the serve
// flags (--log-format text|json, --log-level) and routes hashicorp/raft's
// hclog output into it, so every line of a node has one format
// (docs/observability.md). Nothing here logs a target, a result, a token
// or a key: callers log IDs, counts and kinds only (ARCHITECTURE.md, redaction).
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// formats and levels accepted by New.
var (
	formats = []string{"text", "json"}
	levels  = []string{"debug", "info", "warn", "error"}
)

// ParseLevel maps debug, info, warn or error to its slog level.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown log level %q (want %s)", s, strings.Join(levels, ", "))
}

// New returns a logger writing format ("text" or "json") lines at level
// and above to w.
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	lv, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("unknown log format %q (want %s)", format, strings.Join(formats, " or "))
}

// HCLog returns an hclog.Logger named name whose every line goes to l
// (hclog's interception: the hclog logger itself writes nothing, a sink
// forwards each line to slog with its level, its logger name as
// "component", and its key/value pairs as attributes). Its level is l's
// lowest enabled level, so raft skips the work for lines l would drop.
func HCLog(l *slog.Logger, name string) hclog.Logger {
	il := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: name, Output: io.Discard, Level: hclogLevel(l)})
	il.RegisterSink(sink{l})
	return il
}

func hclogLevel(l *slog.Logger) hclog.Level {
	ctx := context.Background()
	switch {
	case l.Enabled(ctx, slog.LevelDebug):
		return hclog.Debug
	case l.Enabled(ctx, slog.LevelInfo):
		return hclog.Info
	case l.Enabled(ctx, slog.LevelWarn):
		return hclog.Warn
	}
	return hclog.Error
}

// sink forwards hclog lines to a slog logger.
type sink struct{ l *slog.Logger }

// Accept implements hclog.SinkAdapter.
func (s sink) Accept(name string, level hclog.Level, msg string, args ...any) {
	lv := slogLevel(level)
	ctx := context.Background()
	if !s.l.Enabled(ctx, lv) {
		return
	}
	attrs := make([]slog.Attr, 0, 1+len(args)/2)
	attrs = append(attrs, slog.String("component", name))
	for i := 0; i+1 < len(args); i += 2 {
		attrs = append(attrs, slog.Any(fmt.Sprint(args[i]), hclogValue(args[i+1])))
	}
	s.l.LogAttrs(ctx, lv, msg, attrs...)
}

// hclogValue turns values slog's JSON handler cannot encode (errors,
// Stringers) into strings.
func hclogValue(v any) any {
	switch x := v.(type) {
	case hclog.Format:
		if len(x) > 0 {
			if f, ok := x[0].(string); ok {
				return fmt.Sprintf(f, x[1:]...)
			}
		}
		return fmt.Sprint(x...)
	case error:
		return x.Error()
	case fmt.Stringer:
		return x.String()
	}
	return v
}

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4 // below debug: never shown by --log-level
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Info, hclog.NoLevel, hclog.DefaultLevel:
		return slog.LevelInfo
	case hclog.Warn:
		return slog.LevelWarn
	}
	return slog.LevelError
}
