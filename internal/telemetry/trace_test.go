package telemetry_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/gateway"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/telemetry"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A forwarded delivery is one server span with the hookstamp attributes and
// the state machine's steps as its children, in order; the upstream is
// called with the forward span as parent, and the ledger row keeps the
// server span's ids (which replays link to).
func TestForwardedDeliverySpanTree(t *testing.T) {
	up := newUpstream(t)
	exp, o := spanRecorder()
	g := startGateway(t, gatewayConfig(t, up.URL, oneRoute, ""), o)

	wantOutcome(t, send(t, g, "/hooks", `{"n":1}`, "X-Event-Id", "evt_1"), 200, "forwarded")

	srv := oneServerSpan(t, exp, "forwarded")
	if srv.Name != "POST /hooks" {
		t.Errorf("server span name %q, want %q", srv.Name, "POST /hooks")
	}
	for k, want := range map[string]string{"hookstamp.route": "hooks", "hookstamp.key": "evt_1", "hookstamp.outcome": "forwarded"} {
		if got := attr(srv.Attributes, k); got != want {
			t.Errorf("server span %s = %q, want %q", k, got, want)
		}
	}
	if got := attr(srv.Attributes, "http.url"); got != "/hooks" {
		t.Errorf("http.url = %q, want the path without query", got)
	}

	kids := children(exp, srv)
	slices.SortFunc(kids, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	want := []string{"hookstamp.claim", "hookstamp.confirm", "hookstamp.forward", "hookstamp.commit"}
	if got := names(kids); !slices.Equal(got, want) {
		t.Fatalf("children of the server span: %q, want %q", got, want)
	}
	fwd := kids[2]
	if fwd.SpanKind != trace.SpanKindClient {
		t.Errorf("forward span kind %v, want client", fwd.SpanKind)
	}

	_, tps := up.received()
	wantTP := fmt.Sprintf("00-%s-%s-01", srv.SpanContext.TraceID(), fwd.SpanContext.SpanID())
	if len(tps) != 1 || tps[0] != wantTP {
		t.Errorf("upstream got traceparent %q, want [%s] (the forward span as parent)", tps, wantTP)
	}

	rec, err := g.Ledger().Lookup(context.Background(), idempotency.Ref{Route: "hooks", Key: "evt_1"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.TraceID != srv.SpanContext.TraceID().String() || rec.SpanID != srv.SpanContext.SpanID().String() {
		t.Errorf("ledger row trace %s span %s, want the server span's %s %s",
			rec.TraceID, rec.SpanID, srv.SpanContext.TraceID(), srv.SpanContext.SpanID())
	}

	// The GORM spans are under confirm, without arguments. (Commits may be
	// grouped by sqlledger and run outside the delivery's trace.)
	for _, step := range []tracetest.SpanStub{kids[1]} {
		db := children(exp, step)
		if len(db) == 0 {
			t.Fatalf("no SQL span under %s", step.Name)
		}
		for _, s := range db {
			if s.SpanKind != trace.SpanKindClient || attr(s.Attributes, "db.system.name") != "sqlite" {
				t.Errorf("SQL span %q under %s: kind %v, db.system.name %q", s.Name, step.Name, s.SpanKind, attr(s.Attributes, "db.system.name"))
			}
			if q := attr(s.Attributes, "db.query.text"); q == "" || strings.Contains(q, "evt_1") {
				t.Errorf("SQL span %q db.query.text %q: want the statement without its arguments", s.Name, q)
			}
		}
	}
}

// A sender's W3C trace context is continued: the server span is its child
// and the upstream sees the same trace. The answer carries no trace headers
// (nor the sender's baggage echoed back).
func TestIncomingTraceContextIsContinued(t *testing.T) {
	up := newUpstream(t)
	exp, o := spanRecorder()
	g := startGateway(t, gatewayConfig(t, up.URL, oneRoute, ""), o)

	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	r := send(t, g, "/hooks", `{}`, "X-Event-Id", "evt_tp", "Traceparent", "00-"+tid+"-"+sid+"-01",
		"Tracestate", "vendor=x", "Baggage", "tenant=acme")
	wantOutcome(t, r, 200, "forwarded")
	for _, h := range []string{"Traceparent", "Tracestate", "Baggage"} {
		if v := r.header.Get(h); v != "" {
			t.Errorf("answer has %s: %q", h, v)
		}
	}

	srv := oneServerSpan(t, exp, "forwarded")
	if srv.SpanContext.TraceID().String() != tid || srv.Parent.SpanID().String() != sid || !srv.Parent.IsRemote() {
		t.Errorf("server span trace %s parent %s (remote %v), want trace %s parent %s (remote)",
			srv.SpanContext.TraceID(), srv.Parent.SpanID(), srv.Parent.IsRemote(), tid, sid)
	}
	_, tps := up.received()
	if len(tps) != 1 || !strings.HasPrefix(tps[0], "00-"+tid+"-") || strings.Contains(tps[0], sid) {
		t.Errorf("upstream traceparent %q: want trace %s with hookstamp's forward span as parent", tps, tid)
	}
}

// A traceparent that cannot be parsed starts a new trace, and the
// sender's tracestate, which belongs to the trace it named, is not sent on.
func TestUnreadTraceStateIsNotSentOn(t *testing.T) {
	up := newUpstream(t)
	var mu sync.Mutex
	var state []string
	up.reply = func(w http.ResponseWriter, r *http.Request, n int) {
		mu.Lock()
		state = append(state, r.Header.Get("Tracestate"))
		mu.Unlock()
	}
	g := startGateway(t, gatewayConfig(t, up.URL, oneRoute, ""), gateway.Options{})
	wantOutcome(t, send(t, g, "/hooks", `{}`, "X-Event-Id", "evt_garbage", "Traceparent", "garbage", "Tracestate", "vendor=attacker"), 200, "forwarded")
	mu.Lock()
	defer mu.Unlock()
	if len(state) != 1 || state[0] != "" {
		t.Errorf("the upstream got Tracestate %q under a trace the sender did not name, want none", state)
	}
}

// A replay, and a mismatch, answered from a record carry a span link to
// the original delivery's server span, whichever store the record came
// from (the trace and span ids survive each), and are not forwarded.
func TestRepeatsLinkToTheOriginalDelivery(t *testing.T) {
	tests := []struct {
		name, screen string
		localCache   config.Size
	}{
		{"in-process cache", "memory", 1 << 20},
		{"memory screen", "memory", 0},
		{"ledger", "none", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := newUpstream(t)
			exp, o := spanRecorder()
			cfg := gatewayConfig(t, up.URL, oneRoute, "")
			cfg.Screen.Driver, cfg.Screen.LocalCache = tt.screen, tt.localCache
			g := startGateway(t, cfg, o)

			wantOutcome(t, send(t, g, "/hooks", `{"amount":10}`, "X-Event-Id", "evt_r"), 200, "forwarded")
			orig := oneServerSpan(t, exp, "forwarded")
			wantOutcome(t, send(t, g, "/hooks", `{"amount":10}`, "X-Event-Id", "evt_r"), 200, "replayed")
			wantOutcome(t, send(t, g, "/hooks", `{"amount":99}`, "X-Event-Id", "evt_r"), 422, "mismatch")

			for _, outcome := range []string{"replayed", "mismatch"} {
				s := oneServerSpan(t, exp, outcome)
				if s.SpanContext.TraceID() == orig.SpanContext.TraceID() {
					t.Errorf("%s: same trace as the original; want a trace of its own, linked", outcome)
				}
				if len(s.Links) != 1 {
					t.Fatalf("%s: %d span links, want 1", outcome, len(s.Links))
				}
				l := s.Links[0].SpanContext
				if l.TraceID() != orig.SpanContext.TraceID() || l.SpanID() != orig.SpanContext.SpanID() {
					t.Errorf("%s: link to %s/%s, want the original's server span %s/%s", outcome,
						l.TraceID(), l.SpanID(), orig.SpanContext.TraceID(), orig.SpanContext.SpanID())
				}
				if got := attr(s.Attributes, "hookstamp.original_trace_id"); got != orig.SpanContext.TraceID().String() {
					t.Errorf("%s: hookstamp.original_trace_id %q, want %s", outcome, got, orig.SpanContext.TraceID())
				}
				if kids := names(children(exp, s)); slices.Contains(kids, "hookstamp.forward") {
					t.Errorf("%s: children %q, want no forward", outcome, kids)
				}
			}
			if keys, _ := up.received(); len(keys) != 1 {
				t.Errorf("upstream received %d requests, want 1", len(keys))
			}
		})
	}
}

// Log lines of a request carry its trace id: the gateway's line for a
// non-routine outcome names the server span's trace.
func TestLogLinesCarryTheTraceID(t *testing.T) {
	up := newUpstream(t)
	exp, o := spanRecorder()
	var buf testenv.Buffer
	o.Logger = telemetry.NewLogger(config.Log{Level: "info", Format: "json"}, &buf)
	g := startGateway(t, gatewayConfig(t, up.URL, oneRoute, ""), o)

	wantOutcome(t, send(t, g, "/hooks", `{}`), 400, "missing_key")
	srv := oneServerSpan(t, exp, "missing_key")

	var line map[string]any
	for l := range strings.SplitSeq(buf.String(), "\n") {
		if strings.Contains(l, `"outcome":"missing_key"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line == nil {
		t.Fatalf("no log line for the missing_key delivery:\n%s", buf.String())
	}
	if line["trace_id"] != srv.SpanContext.TraceID().String() || line["span_id"] != srv.SpanContext.SpanID().String() {
		t.Errorf("log line trace_id %v span_id %v, want the server span's %s %s", line["trace_id"], line["span_id"],
			srv.SpanContext.TraceID(), srv.SpanContext.SpanID())
	}
}

// With exporter otlp, spans reach an OTLP/HTTP receiver (protobuf) at the
// address of OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, at the latest when the
// gateway shuts down.
func TestOTLPExporterEndToEnd(t *testing.T) {
	recv := newOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", recv.URL+"/v1/traces")
	up := newUpstream(t)
	cfg := gatewayConfig(t, up.URL, oneRoute, "telemetry: {service_name: hookstamp-e2e, traces: {exporter: otlp}}")
	g, err := gateway.New(context.Background(), cfg, gateway.Options{Logger: testLogger(t), Version: "v-test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, send(t, g, "/hooks", `{}`, "X-Event-Id", "evt_otlp"), 200, "forwarded")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	rs := recv.resourceSpans()
	var server, forward *tracepb.Span
	var resource map[string]string
	for _, r := range rs {
		for _, ss := range r.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				switch {
				case s.GetName() == "POST /hooks" && s.GetKind() == tracepb.Span_SPAN_KIND_SERVER &&
					pbAttr(s.GetAttributes(), "hookstamp.key") == "evt_otlp":
					server, resource = s, pbAttrs(r.GetResource().GetAttributes())
				case s.GetName() == "hookstamp.forward":
					forward = s
				}
			}
		}
	}
	if server == nil || forward == nil {
		t.Fatalf("the receiver did not get the server and forward spans; got %d resource spans", len(rs))
	}
	if got := pbAttr(server.GetAttributes(), "hookstamp.outcome"); got != "forwarded" {
		t.Errorf("server span hookstamp.outcome %q", got)
	}
	if !bytes.Equal(forward.GetParentSpanId(), server.GetSpanId()) || forward.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("forward span parent %x kind %v, want parent %x, client", forward.GetParentSpanId(), forward.GetKind(), server.GetSpanId())
	}
	if resource["service.name"] != "hookstamp-e2e" || resource["service.version"] != "v-test" {
		t.Errorf("resource %v, want service.name hookstamp-e2e and service.version v-test", resource)
	}
	_, tps := up.received()
	if len(tps) != 1 || !strings.Contains(tps[0], hex.EncodeToString(server.GetTraceId())) {
		t.Errorf("upstream traceparent %q, want trace %x", tps, server.GetTraceId())
	}
}

// oneServerSpan waits for the only server span with outcome o.
// hookstamp.key is the whole key, however long key.max_length lets it be:
// traces are found by the key they carry (it was cut to 256 bytes).
func TestSpanKeyIsTheWholeKey(t *testing.T) {
	up := newUpstream(t)
	exp, o := spanRecorder()
	route := strings.Replace(oneRoute, "key: {sources: [{header: X-Event-Id}]}", "key: {sources: [{header: X-Event-Id}], max_length: 2048}", 1)
	g := startGateway(t, gatewayConfig(t, up.URL, route, ""), o)
	long := strings.Repeat("k", 2000)
	wantOutcome(t, send(t, g, "/hooks", `{}`, "X-Event-Id", long), 200, "forwarded")
	if got := attr(oneServerSpan(t, exp, "forwarded").Attributes, "hookstamp.key"); got != long {
		t.Errorf("hookstamp.key of a 2000-byte key has %d bytes, want all of them", len(got))
	}
}

// A passthrough (here: an optional key absent) is a forward like any other
// (SPEC §7): a hookstamp.forward client span under the server span, whose
// context the upstream gets. It had neither.
func TestPassthroughForwardHasForwardSpan(t *testing.T) {
	up := newUpstream(t)
	exp, o := spanRecorder()
	route := strings.Replace(oneRoute, "key: {sources: [{header: X-Event-Id}]}", "key: {sources: [{header: X-Event-Id}], required: false}", 1)
	g := startGateway(t, gatewayConfig(t, up.URL, route, ""), o)

	wantOutcome(t, send(t, g, "/hooks", `{}`), 200, "passthrough")
	srv := oneServerSpan(t, exp, "passthrough")
	kids := children(exp, srv)
	if got := names(kids); !slices.Equal(got, []string{"hookstamp.forward"}) {
		t.Fatalf("children of the passthrough server span: %q, want the forward span", got)
	}
	want := fmt.Sprintf("00-%s-%s-01", srv.SpanContext.TraceID(), kids[0].SpanContext.SpanID())
	if _, tps := up.received(); len(tps) != 1 || tps[0] != want {
		t.Errorf("upstream traceparent %q, want %q", tps, want)
	}
}

func oneServerSpan(tb testing.TB, exp *tracetest.InMemoryExporter, o string) tracetest.SpanStub {
	tb.Helper()
	testenv.Eventually(tb, 5*time.Second, "the "+o+" server span", func() bool { return len(serverSpans(exp, o)) > 0 })
	s := serverSpans(exp, o)
	if len(s) != 1 {
		tb.Fatalf("%d server spans with outcome %s, want 1", len(s), o)
	}
	return s[0]
}

// otlpReceiver is an OTLP/HTTP trace receiver (protobuf encoding).
type otlpReceiver struct {
	*httptest.Server
	mu  sync.Mutex
	got []*tracepb.ResourceSpans
}

func newOTLPReceiver(tb testing.TB) *otlpReceiver {
	tb.Helper()
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want protobuf on /v1/traces", http.StatusUnsupportedMediaType)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var msg coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &msg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.got = append(r.got, msg.GetResourceSpans()...)
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	tb.Cleanup(r.Close)
	return r
}

func (r *otlpReceiver) resourceSpans() []*tracepb.ResourceSpans {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func pbAttrs(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		out[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	return out
}

func pbAttr(kvs []*commonpb.KeyValue, key string) string { return pbAttrs(kvs)[key] }

// With Redis and PostgreSQL, their client spans are under the state
// machine's: Redis commands under claim (without their arguments), SQL under
// confirm.
func TestStoreSpansUnderTheStateMachine(t *testing.T) {
	up := newUpstream(t)
	exp, o := spanRecorder()
	addr, prefix := testenv.RedisPrefix(t)
	cfg := gatewayConfig(t, up.URL, oneRoute, "")
	cfg.Store.Driver, cfg.Store.DSN = "postgres", testenv.Postgres(t)
	cfg.Screen.Driver, cfg.Screen.Redis.Addrs, cfg.Screen.Prefix = "redis", []string{addr}, prefix
	g := startGateway(t, cfg, o)

	wantOutcome(t, send(t, g, "/hooks", `{}`, "X-Event-Id", "evt_stores"), 200, "forwarded")
	srv := oneServerSpan(t, exp, "forwarded")
	steps := map[string]tracetest.SpanStub{}
	for _, s := range children(exp, srv) {
		steps[s.Name] = s
	}
	tests := []struct {
		step, system, systemKey, argsKey string
	}{
		{"hookstamp.claim", "redis", "db.system", "db.statement"},
		{"hookstamp.confirm", "postgresql", "db.system.name", ""},
	}
	for _, tt := range tests {
		step, ok := steps[tt.step]
		if !ok {
			t.Fatalf("no %s span under the server span; got %q", tt.step, names(children(exp, srv)))
		}
		kids := children(exp, step)
		if len(kids) == 0 {
			t.Errorf("no client span under %s", tt.step)
		}
		for _, k := range kids {
			if k.SpanKind != trace.SpanKindClient || attr(k.Attributes, tt.systemKey) != tt.system {
				t.Errorf("%s: child %q kind %v %s=%q, want a %s client span", tt.step, k.Name, k.SpanKind,
					tt.systemKey, attr(k.Attributes, tt.systemKey), tt.system)
			}
			if tt.argsKey != "" && attr(k.Attributes, tt.argsKey) != "" {
				t.Errorf("%s: child %q records its arguments in %s", tt.step, k.Name, tt.argsKey)
			}
		}
	}
}

// A body over server.body_limit is refused while fasthttp reads it, before
// any middleware runs: it still gets its server span (SPEC §7), named after
// its route and carrying route and outcome.
func TestOversizedBodyHasAServerSpan(t *testing.T) {
	up := newUpstream(t)
	exp, o := spanRecorder()
	cfg := gatewayConfig(t, up.URL, oneRoute, "")
	cfg.Server.BodyLimit = 1024
	g := startGateway(t, cfg, o)

	r := send(t, g, "/hooks", strings.Repeat("x", 4096), "X-Event-Id", "evt_big")
	wantOutcome(t, r, 413, "too_large")
	srv := oneServerSpan(t, exp, "too_large")
	if srv.Name != "POST /hooks" || attr(srv.Attributes, "hookstamp.route") != "hooks" {
		t.Fatalf("server span %q, route %q; want POST /hooks, hooks", srv.Name, attr(srv.Attributes, "hookstamp.route"))
	}
	if got := attr(srv.Attributes, "http.response.status_code"); got != "413" {
		t.Errorf("status code attribute %q, want 413", got)
	}
	if keys, _ := up.received(); len(keys) != 0 {
		t.Fatalf("upstream received %q", keys)
	}
	// Counted; with no duration, since when it began is unknown (not the
	// 292 years that time.Since of a zero start gives).
	fams := scrape(t, g.Telemetry().MetricsHandler())
	if got := value(fams, "hookstamp_requests_total", "route", "hooks", "outcome", "too_large"); got != 1 {
		t.Errorf("hookstamp_requests_total{outcome=too_large} = %v, want 1", got)
	}
	if m := series(fams, "hookstamp_request_duration_seconds", "route", "hooks", "outcome", "too_large"); m != nil && m.Histogram.GetSampleSum() > 60 {
		t.Errorf("too_large duration sum %vs: a refused body's duration is not known", m.Histogram.GetSampleSum())
	}
}

// grpcTraceReceiver is an OTLP/gRPC trace receiver (a collector's :4317).
type grpcTraceReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names []string
}

func (r *grpcTraceReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.names = append(r.names, s.GetName())
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// OTEL_EXPORTER_OTLP_PROTOCOL=grpc (SPEC §3: OTEL_EXPORTER_OTLP_* honoured)
// sends spans over OTLP/gRPC; the exporter used to speak OTLP/HTTP
// whatever it said. A protocol no exporter speaks is a start-up error.
func TestOTLPExporterProtocol(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recv := &grpcTraceReceiver{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, recv)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	forwardOneThroughOTLP(t, "evt_grpc")
	recv.mu.Lock()
	names := slices.Clone(recv.names)
	recv.mu.Unlock()
	if !slices.Contains(names, "POST /hooks") || !slices.Contains(names, "hookstamp.forward") {
		t.Fatalf("the gRPC receiver got spans %q, want the server and forward spans", names)
	}

	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	_, err = gateway.New(context.Background(), gatewayConfig(t, "http://127.0.0.1:9", oneRoute, "telemetry: {traces: {exporter: otlp}}"),
		gateway.Options{Logger: testLogger(t)})
	// The words of gateway check's error (config.OTLPProtocol).
	if want := `telemetry: OTLP protocol "http/json" is not supported (want http/protobuf or grpc; from OTEL_EXPORTER_OTLP_PROTOCOL)`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("OTEL_EXPORTER_OTLP_PROTOCOL=http/json: %v, want a start-up error %q", err, want)
	}
}

// A span outlives its request: the exporter reads it after the connection
// has carried other requests. Its method must not be read from the
// request's buffer, which fasthttp reuses for the next request on the
// connection (it read "GETT" for a POST followed by a GET).
func TestSpanMethodSurvivesTheNextRequest(t *testing.T) {
	up := newUpstream(t)
	exp, o := spanRecorder()
	g := startGateway(t, gatewayConfig(t, up.URL, oneRoute, ""), o)
	wantOutcome(t, send(t, g, "/hooks", `{}`, "X-Event-Id", "evt_m1"), 200, "forwarded")
	// The same keep-alive connection (client reuses it): a GET no route
	// serves, then a POST again.
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		req, err := http.NewRequest(m, g.URL()+"/nowhere", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s /nowhere: %v", m, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	var got []string
	for _, s := range exp.GetSpans() {
		if s.SpanKind == trace.SpanKindServer {
			got = append(got, s.Name+" / "+attr(s.Attributes, "http.request.method"))
		}
	}
	want := []string{"POST /hooks / POST", "GET / GET", "POST / POST"}
	if !slices.Equal(got, want) {
		t.Errorf("server spans (name / http.request.method) %q, want %q", got, want)
	}
}

// forwardOneThroughOTLP runs a gateway exporting traces over OTLP (as the
// OTEL_EXPORTER_OTLP_* environment says), forwards one delivery with key
// through it and shuts it down, which flushes the exporter.
func forwardOneThroughOTLP(t *testing.T, key string) {
	t.Helper()
	up := newUpstream(t)
	cfg := gatewayConfig(t, up.URL, oneRoute, "telemetry: {traces: {exporter: otlp}}")
	g, err := gateway.New(context.Background(), cfg, gateway.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, send(t, g, "/hooks", `{}`, "X-Event-Id", key), 200, "forwarded")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
