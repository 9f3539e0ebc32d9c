package telemetry

import (
	"context"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookstamp/hookstamp/internal/ingress"
)

// maxKeyAttr bounds the hookstamp.key span attribute at key.max_length's
// ceiling: the whole key, by which a trace is found.
const maxKeyAttr = 2048

// annotateSpan adds route, key and outcome to the request's server span
// (SPEC §7), and a shadowed repeat's hookstamp.would, and links a replay, or a mismatch, to the span of the original
// delivery whose record answered it.
func annotateSpan(ctx context.Context, ev *ingress.Event) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String("hookstamp.route", ev.Route),
		attribute.String("hookstamp.outcome", string(ev.Result.Outcome)),
	}
	if ev.Key != "" {
		attrs = append(attrs, attribute.String("hookstamp.key", truncateUTF8(ev.Key, maxKeyAttr)))
	}
	r := ev.Result
	if r.Would != "" {
		attrs = append(attrs, attribute.String("hookstamp.would", string(r.Would)))
	}
	if r.OriginalTraceID != "" {
		attrs = append(attrs, attribute.String("hookstamp.original_trace_id", r.OriginalTraceID))
		tid, terr := trace.TraceIDFromHex(r.OriginalTraceID)
		sid, serr := trace.SpanIDFromHex(r.OriginalSpanID)
		if terr == nil && serr == nil {
			span.AddLink(trace.Link{
				SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, Remote: true}),
				Attributes:  []attribute.KeyValue{attribute.String("hookstamp.link", "original_delivery")},
			})
		}
	}
	span.SetAttributes(attrs...)
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
