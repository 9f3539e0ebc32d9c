package telemetry

import (
	"context"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// With traces.exporter none nothing ever reads a span's name, attributes,
// events or timing, yet its ids still matter: logs carry them, ledger rows
// keep them for the span links of replays, and the upstream's traceparent
// continues the trace (with the sampling decision the configured sampler
// makes, so that an upstream that samples by its parent keeps doing so).
// The SDK's recording spans cost several microseconds and half a dozen
// allocations each, for a dozen spans per delivery; idProvider makes spans
// that are only ids: one small allocation each, nothing recorded.

// idProvider is the TracerProvider used when no exporter consumes spans.
type idProvider struct {
	embedded.TracerProvider
	sampler sdktrace.Sampler
}

func newIDProvider(sampler sdktrace.Sampler) *idProvider {
	return &idProvider{sampler: sampler}
}

func (p *idProvider) Tracer(string, ...trace.TracerOption) trace.Tracer {
	return &idTracer{p: p}
}

type idTracer struct {
	embedded.Tracer
	p *idProvider
}

// Start makes a span with a fresh span id, the parent's trace id (or a new
// one), and the sampler's decision in its flags. Start options are ignored:
// nothing would read them.
func (t *idTracer) Start(ctx context.Context, name string, _ ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanContextFromContext(ctx)
	cfg := trace.SpanContextConfig{SpanID: newSpanID()}
	if parent.IsValid() {
		cfg.TraceID = parent.TraceID()
	} else {
		cfg.TraceID = newTraceID()
	}
	res := t.p.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: cfg.TraceID, Name: name})
	if res.Decision == sdktrace.RecordAndSample {
		cfg.TraceFlags = trace.FlagsSampled
	}
	cfg.TraceState = res.Tracestate
	s := &idSpan{sc: trace.NewSpanContext(cfg), p: t.p}
	return trace.ContextWithSpan(ctx, s), s
}

// idSpan is a span that is only its ids: every other method is the no-op
// span's.
type idSpan struct {
	noop.Span
	sc trace.SpanContext
	p  *idProvider
}

func (s *idSpan) SpanContext() trace.SpanContext { return s.sc }

func (s *idSpan) IsRecording() bool { return false }

// TracerProvider is the provider that made the span, as instrumentations
// that start children from a context's span expect.
func (s *idSpan) TracerProvider() trace.TracerProvider { return s.p }

// newTraceID and newSpanID use the runtime's per-thread ChaCha8 generator:
// random as W3C Trace Context asks, without the SDK generator's mutex.
func newTraceID() trace.TraceID {
	var id trace.TraceID
	for {
		a, b := rand.Uint64(), rand.Uint64()
		for i := range 8 {
			id[i] = byte(a >> (8 * i))
			id[8+i] = byte(b >> (8 * i))
		}
		if id.IsValid() {
			return id
		}
	}
}

func newSpanID() trace.SpanID {
	var id trace.SpanID
	for {
		a := rand.Uint64()
		for i := range 8 {
			id[i] = byte(a >> (8 * i))
		}
		if id.IsValid() {
			return id
		}
	}
}
