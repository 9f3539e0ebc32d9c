package telemetry_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/gateway"
	"github.com/hookstamp/hookstamp/internal/telemetry"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// setup is telemetry.SetupWith, shut down when the test ends.
func setup(tb testing.TB, cfg config.Telemetry, o ...telemetry.Overrides) *telemetry.Telemetry {
	tb.Helper()
	var ov telemetry.Overrides
	if len(o) > 0 {
		ov = o[0]
	}
	tel, err := telemetry.SetupWith(context.Background(), cfg, "v-test", testLogger(tb), ov)
	if err != nil {
		tb.Fatalf("telemetry.Setup: %v", err)
	}
	tb.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return tel
}

// noTraces are gateway options with the configured (no-op) exporter.
func noTraces() gateway.Options { return gateway.Options{} }

// sampledParent is a context whose remote parent span is sampled (or not).
func sampledParent(sampled bool) context.Context {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	var flags trace.TraceFlags
	if sampled {
		flags = trace.FlagsSampled
	}
	return trace.ContextWithRemoteSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, Remote: true}))
}

// sample_ratio samples new traces; a sender's sampling decision is kept.
func TestSampler(t *testing.T) {
	tests := []struct {
		name  string
		ratio float64
		ctx   context.Context
		want  bool
	}{
		{"ratio 1, new trace", 1, context.Background(), true},
		{"ratio 0, new trace", 0, context.Background(), false},
		{"ratio 0, sampled parent", 0, sampledParent(true), true},
		{"ratio 1, unsampled parent", 1, sampledParent(false), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			cfg := config.Default().Telemetry
			cfg.Traces.SampleRatio = tt.ratio
			tel := setup(t, cfg, telemetry.Overrides{SpanExporter: exp})
			_, span := tel.Tracer().Start(tt.ctx, "s")
			span.End()
			if got := len(exp.GetSpans()) == 1; got != tt.want {
				t.Errorf("exported %d spans, want sampled = %v", len(exp.GetSpans()), tt.want)
			}
		})
	}
}

// The stdout exporter writes spans as JSON, flushed at Shutdown.
func TestStdoutExporter(t *testing.T) {
	var out testenv.Buffer
	cfg := config.Default().Telemetry
	cfg.Traces.Exporter = config.ExporterStdout
	tel, err := telemetry.SetupWith(context.Background(), cfg, "v-test", testLogger(t), telemetry.Overrides{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tel.Tracer().Start(context.Background(), "hookstamp.test")
	span.End()
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got struct{ Name string }
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil || got.Name != "hookstamp.test" {
		t.Errorf("stdout exporter wrote %q (%v), want the span hookstamp.test as JSON", out.String(), err)
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
}

// InjectTrace writes the W3C traceparent of the context's span.
func TestInjectTrace(t *testing.T) {
	tel := setup(t, config.Default().Telemetry)
	ctx, span := tel.Tracer().Start(context.Background(), "forward")
	defer span.End()
	h := http.Header{}
	tel.InjectTrace(ctx, h)
	sc := span.SpanContext()
	if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; h.Get("Traceparent") != want {
		t.Errorf("traceparent %q, want %q", h.Get("Traceparent"), want)
	}
}

// Loggers write at the configured level and format, with the trace and
// span ids of the context's span.
func TestLogger(t *testing.T) {
	tel := setup(t, config.Default().Telemetry)
	ctx, span := tel.Tracer().Start(context.Background(), "request")
	defer span.End()
	sc := span.SpanContext()
	tests := []struct {
		name    string
		cfg     config.Log
		want    []string
		notWant []string
	}{
		{"json", config.Log{Level: "info", Format: "json"},
			[]string{`"msg":"shown"`, `"trace_id":"` + sc.TraceID().String() + `"`, `"span_id":"` + sc.SpanID().String() + `"`, `"key":"evt_1"`},
			[]string{"hidden"}},
		{"text", config.Log{Level: "warn", Format: "text"},
			[]string{"msg=shown", "trace_id=" + sc.TraceID().String(), "component=x"},
			[]string{"hidden"}},
		{"debug", config.Log{Level: "debug", Format: "json"},
			[]string{`"msg":"hidden"`, `"msg":"shown"`},
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out testenv.Buffer
			log := telemetry.NewLogger(tt.cfg, &out).With("component", "x")
			log.DebugContext(ctx, "hidden")
			log.WarnContext(ctx, "shown", "key", "evt_1")
			log.Warn("no context")
			got := out.String()
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("log output lacks %s:\n%s", w, got)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(got, w) {
					t.Errorf("log output has %s:\n%s", w, got)
				}
			}
			last := got[strings.LastIndex(strings.TrimRight(got, "\n"), "\n")+1:]
			if strings.Contains(last, "trace_id") {
				t.Errorf("a line logged without context has a trace id: %s", last)
			}
		})
	}
	if l := telemetry.NewLogger(config.Log{}, &testenv.Buffer{}); telemetry.WithTraceContext(l) != l {
		t.Errorf("WithTraceContext wrapped a logger that already adds trace ids")
	}
}

// With exporter none, spans are ids only: nothing is recorded, yet each
// span has its own id, continues its parent's trace, and carries the
// sampling decision the configured sampler makes (so that an upstream
// sampling by its parent keeps doing so).
func TestNoExporterSpansAreIDsOnly(t *testing.T) {
	tests := []struct {
		name        string
		ratio       float64
		ctx         context.Context
		wantSampled bool
	}{
		{"ratio 1, new trace", 1, context.Background(), true},
		{"ratio 0, new trace", 0, context.Background(), false},
		{"ratio 0, sampled parent", 0, sampledParent(true), true},
		{"ratio 1, unsampled parent", 1, sampledParent(false), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default().Telemetry
			cfg.Traces.SampleRatio = tt.ratio
			tel := setup(t, cfg)
			ctx, span := tel.Tracer().Start(tt.ctx, "s")
			defer span.End()
			sc, parent := span.SpanContext(), trace.SpanContextFromContext(tt.ctx)
			switch {
			case span.IsRecording():
				t.Error("span records with no exporter")
			case !sc.IsValid() || sc.SpanID() == parent.SpanID():
				t.Errorf("span context %v: want valid ids of its own", sc)
			case parent.IsValid() && sc.TraceID() != parent.TraceID():
				t.Errorf("trace %s, want the parent's %s", sc.TraceID(), parent.TraceID())
			case sc.IsSampled() != tt.wantSampled:
				t.Errorf("sampled = %v, want %v", sc.IsSampled(), tt.wantSampled)
			}
			_, child := tel.Tracer().Start(ctx, "child")
			if child.SpanContext().TraceID() != sc.TraceID() || child.SpanContext().SpanID() == sc.SpanID() {
				t.Errorf("child %v of %v: want the same trace, a span id of its own", child.SpanContext(), sc)
			}
			child.End()
		})
	}
}
