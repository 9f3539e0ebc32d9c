package telemetry

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/hookstamp/hookstamp/internal/config"
)

// NewLogger returns the logger telemetry.log describes: its level (debug,
// info, warn, error; info when unknown) and format (json, or text), writing
// to w. Every line logged with a context that carries a span gets its
// trace_id and span_id (use the *Context methods).
func NewLogger(cfg config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.Level)); err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if cfg.Format == "text" {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(traceHandler{h})
}

// WithTraceContext returns log with trace_id and span_id added to the lines
// logged with a context that carries a span. A logger from NewLogger (or
// WithTraceContext) is returned as it is.
func WithTraceContext(log *slog.Logger) *slog.Logger {
	if _, ok := log.Handler().(traceHandler); ok {
		return log
	}
	return slog.New(traceHandler{log.Handler()})
}

// traceHandler adds the trace and span ids of the record's context. Inside
// a group (WithGroup), they land in the group like any other attribute.
type traceHandler struct {
	slog.Handler
}

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(attrs)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}

// RedisLogger adapts go-redis's process-wide printf logger to slog, at warn
// level (it only speaks of connection trouble), so that reconnect messages
// land in the structured log rather than on raw stderr. main installs it
// once with redis.SetLogger: it is process-wide, like LogErrors.
func RedisLogger(l *slog.Logger) interface {
	Printf(ctx context.Context, format string, v ...any)
} {
	return redisLogger{l}
}

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}
