package telemetry_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/gateway"
)

// upstream is a test upstream that records, per request, the Idempotency-Key
// and the traceparent it received, and answers as reply says.
type upstream struct {
	*httptest.Server
	mu           sync.Mutex
	keys         []string
	traceparents []string
	// reply answers the n-th (1-based) request of a key; nil = 200 JSON.
	reply func(w http.ResponseWriter, r *http.Request, n int)
}

func newUpstream(tb testing.TB) *upstream {
	tb.Helper()
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		key := r.Header.Get("Idempotency-Key")
		u.mu.Lock()
		u.keys = append(u.keys, key)
		u.traceparents = append(u.traceparents, r.Header.Get("Traceparent"))
		n := 0
		for _, k := range u.keys {
			if k == key {
				n++
			}
		}
		reply := u.reply
		u.mu.Unlock()
		if reply != nil {
			reply(w, r, n)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"key":%q,"n":%d}`, key, n)
	}))
	tb.Cleanup(u.Close)
	return u
}

func (u *upstream) received() (keys, traceparents []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.keys), slices.Clone(u.traceparents)
}

// gatewayConfig is a gateway on 127.0.0.1:0 with SQLite in a temporary
// directory and the memory screen; routes is the YAML of the routes list
// (%[1]s in it is the upstream's URL), extra whole top-level sections.
func gatewayConfig(tb testing.TB, upstreamURL, routes, extra string) *config.Config {
	tb.Helper()
	y := fmt.Sprintf(`
server:
  listen: "127.0.0.1:0"
  shutdown_timeout: 5s
admin:
  listen: ""
store:
  driver: sqlite
  dsn: %q
  sweep_interval: 1h
screen:
  driver: memory
%s
routes:
%s
`, filepath.Join(tb.TempDir(), "ledger.db"), extra, fmt.Sprintf(routes, upstreamURL))
	cfg, err := config.LoadFromBytes([]byte(y), nil)
	if err != nil {
		tb.Fatalf("config: %v\n%s", err, y)
	}
	return cfg
}

// oneRoute is route "hooks" on /hooks, keyed on X-Event-Id.
const oneRoute = `
  - name: hooks
    path: /hooks
    upstream: {url: "%[1]s/up", timeout: 2s}
    key: {sources: [{header: X-Event-Id}]}
`

// startGateway starts a gateway; it is shut down when the test ends.
func startGateway(tb testing.TB, cfg *config.Config, o gateway.Options) *gateway.Gateway {
	tb.Helper()
	if o.Logger == nil {
		o.Logger = testLogger(tb)
	}
	o.Version = "v-test"
	g, err := gateway.New(context.Background(), cfg, o)
	if err != nil {
		tb.Fatalf("gateway.New: %v", err)
	}
	if err := g.Start(); err != nil {
		tb.Fatalf("gateway.Start: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
	})
	return g
}

func testLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var client = &http.Client{Timeout: 30 * time.Second}

// reply is what the provider got back.
type reply struct {
	status  int
	outcome string
	header  http.Header
	body    string
}

// send POSTs body to path with headers given as name, value pairs.
func send(tb testing.TB, g *gateway.Gateway, path, body string, hdr ...string) reply {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, g.URL()+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatalf("send: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("read reply: %v", err)
	}
	return reply{status: resp.StatusCode, outcome: resp.Header.Get("Hookstamp-Outcome"), header: resp.Header, body: string(b)}
}

func wantOutcome(tb testing.TB, r reply, status int, outcome string) {
	tb.Helper()
	if r.status != status || r.outcome != outcome {
		tb.Fatalf("got %d %q, want %d %q; body %s", r.status, r.outcome, status, outcome, r.body)
	}
}

// scrape reads h's Prometheus text exposition.
func scrape(tb testing.TB, h http.Handler) map[string]*dto.MetricFamily {
	tb.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		tb.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		tb.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// series finds the series of family name with exactly these labels
// (name=value pairs); nil when there is none.
func series(fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
next:
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
				continue next
			}
		}
		return m
	}
	return nil
}

// value is the value of a counter or gauge series, or a histogram's count;
// -1 when the series does not exist.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	m := series(fams, name, labels...)
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

// spanRecorder is an in-memory span exporter.
func spanRecorder() (*tracetest.InMemoryExporter, gateway.Options) {
	exp := tracetest.NewInMemoryExporter()
	var o gateway.Options
	o.Telemetry.SpanExporter = exp
	return exp, o
}

// attr is the string value of attribute key, "" when absent.
func attr(attrs []attribute.KeyValue, key string) string {
	for _, a := range attrs {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

// serverSpans are the server spans exported so far with hookstamp.outcome o.
func serverSpans(exp *tracetest.InMemoryExporter, outcome string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.SpanKind == trace.SpanKindServer && attr(s.Attributes, "hookstamp.outcome") == outcome {
			out = append(out, s)
		}
	}
	return out
}

// children are the spans whose parent is span.
func children(exp *tracetest.InMemoryExporter, parent tracetest.SpanStub) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Parent.SpanID() == parent.SpanContext.SpanID() && s.Parent.TraceID() == parent.SpanContext.TraceID() {
			out = append(out, s)
		}
	}
	return out
}

func names(spans []tracetest.SpanStub) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
