package telemetry_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/telemetry"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// surveyRoutes: plain (inflight reject), signed (hmac), shadow, held
// (ambiguous hold, short timeout), opt (key optional).
const surveyRoutes = `
  - name: plain
    path: /plain
    inflight: reject
    upstream: {url: "%[1]s/plain", timeout: 2s}
    key: {sources: [{header: X-Event-Id}, {json: id}]}
  - name: signed
    path: /signed
    upstream: {url: "%[1]s/signed", timeout: 2s}
    key: {sources: [{header: X-Event-Id}]}
    verify: {scheme: hmac, secrets: ["SECRETMARKER-s3cr3t"], header: X-Signature}
  - name: shadow
    path: /shadow
    mode: shadow
    upstream: {url: "%[1]s/shadow", timeout: 2s}
    key: {sources: [{header: X-Event-Id}]}
  - name: held
    path: /held
    upstream: {url: "%[1]s/held", timeout: 200ms}
    key: {sources: [{header: X-Event-Id}]}
    record: {ambiguous: hold}
  - name: opt
    path: /opt
    upstream: {url: "%[1]s/opt", timeout: 2s}
    key: {sources: [{header: X-Event-Id}], required: false}
`

// Every outcome of SPEC §2 is one server span with route and outcome (and
// the key, where there is one), and every outcome but forwarded and
// replayed is one log line carrying the span's trace id, the key where
// there is one, and never a body or a secret.
func TestEveryOutcomeSpanAndLogLine(t *testing.T) {
	up := newUpstream(t)
	arrived := make(chan struct{}, 8)
	gate := make(chan struct{})
	up.reply = func(w http.ResponseWriter, r *http.Request, n int) {
		switch r.Header.Get("Idempotency-Key") {
		case "evt_slow":
			arrived <- struct{}{}
			<-gate
		case "evt_fail":
			w.WriteHeader(500)
			return
		case "evt_hang":
			time.Sleep(time.Second)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}
	exp, o := spanRecorder()
	var buf testenv.Buffer
	o.Logger = telemetry.NewLogger(config.Log{Level: "info", Format: "json"}, &buf)
	cfg := gatewayConfig(t, up.URL, surveyRoutes, "")
	cfg.Server.BodyLimit = 4096
	g := startGateway(t, cfg, o)

	const body = `{"marker":"BODYMARKER"}`
	type step struct {
		path, body, key string
		status          int
		outcome         string
		hdr             []string
	}
	steps := []step{
		{"/plain", body, "evt_a", 200, "forwarded", nil},
		{"/plain", body, "evt_a", 200, "replayed", nil},
		{"/plain", `{"marker":"BODYMARKER2"}`, "evt_a", 422, "mismatch", nil},
		{"/plain", body, "evt_fail", 500, "released", nil},
		{"/plain", body, "", 400, "missing_key", nil},
		{"/plain", `{"id":"bad\u001b[31mkey\r\nforged=1","marker":"BODYMARKER"}`, "", 400, "invalid_key", nil},
		{"/plain", strings.Repeat("BODYMARKER", 1000), "evt_big", 413, "too_large", nil},
		{"/signed", body, "evt_s", 401, "unverified", []string{"X-Signature", "deadbeef"}},
		{"/shadow", body, "evt_sh", 200, "forwarded", nil},
		{"/shadow", body, "evt_sh", 200, "shadowed", nil},
		{"/held", body, "evt_hang", 504, "held", nil},
		{"/held", body, "evt_hang", 409, "held", nil},
		{"/opt", body, "", 200, "passthrough", nil},
	}
	for _, s := range steps {
		hdr := s.hdr
		if s.key != "" {
			hdr = append(hdr, "X-Event-Id", s.key)
		}
		r := send(t, g, s.path, s.body, hdr...)
		wantOutcome(t, r, s.status, s.outcome)
	}
	// conflict: a repeat while the first is in flight.
	first := make(chan reply, 1)
	go func() { first <- send(t, g, "/plain", body, "X-Event-Id", "evt_slow") }()
	<-arrived
	wantOutcome(t, send(t, g, "/plain", body, "X-Event-Id", "evt_slow"), 409, "conflict")
	close(gate)
	wantOutcome(t, <-first, 200, "forwarded")
	steps = append(steps, step{"/plain", body, "evt_slow", 409, "conflict", nil}, step{"/plain", body, "evt_slow", 200, "forwarded", nil})

	// Spans: a server span ends after its answer was written.
	testenv.Eventually(t, 5*time.Second, "every server span ended", func() bool {
		n := 0
		for _, s := range exp.GetSpans() {
			if s.SpanKind == trace.SpanKindServer {
				n++
			}
		}
		return n >= len(steps)
	})
	var srv []int
	spans := exp.GetSpans()
	for i, s := range spans {
		if s.SpanKind == trace.SpanKindServer {
			srv = append(srv, i)
		}
	}
	if len(srv) != len(steps) {
		t.Errorf("%d server spans, want %d", len(srv), len(steps))
	}
	count := map[string]int{}
	for _, s := range steps {
		count[s.outcome]++
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	for outcome, n := range count {
		ss := serverSpans(exp, outcome)
		if len(ss) != n {
			t.Errorf("%s: %d server spans, want %d", outcome, len(ss), n)
		}
		for _, s := range ss {
			if attr(s.Attributes, "hookstamp.route") == "" {
				t.Errorf("%s: no hookstamp.route", outcome)
			}
			t.Logf("%s span %s key=%q kids=%q links=%d", outcome, s.Name, attr(s.Attributes, "hookstamp.key"), names(children(exp, s)), len(s.Links))
			if outcome == "forwarded" || outcome == "replayed" {
				continue
			}
			tid := s.SpanContext.TraceID().String()
			found := 0
			for _, l := range lines {
				var m map[string]any
				if json.Unmarshal([]byte(l), &m) != nil {
					t.Errorf("log line not JSON: %q", l)
					continue
				}
				if m["trace_id"] == tid && m["outcome"] == outcome {
					found++
					t.Logf("  log: %s", l)
				}
			}
			if found != 1 {
				t.Errorf("%s: %d log lines with its trace id, want 1", outcome, found)
			}
		}
	}
	all := buf.String()
	for _, secret := range []string{"BODYMARKER", "SECRETMARKER", "s3cr3t"} {
		if strings.Contains(all, secret) {
			t.Errorf("logs contain %q", secret)
		}
	}
}

// A replay after a restart links to the original delivery's server span,
// whichever store answers it.
func TestReplayLinkAfterRestart(t *testing.T) {
	for _, tt := range []string{"sqlite-memory", "postgres-redis", "postgres-none", "sqlite-none"} {
		t.Run(tt, func(t *testing.T) {
			up := newUpstream(t)
			cfg := gatewayConfig(t, up.URL, oneRoute, "")
			useStores(t, cfg, tt)
			exp1, o1 := spanRecorder()
			g1 := startGateway(t, cfg, o1)
			wantOutcome(t, send(t, g1, "/hooks", `{"a":1}`, "X-Event-Id", "evt_restart"), 200, "forwarded")
			orig := oneServerSpan(t, exp1, "forwarded")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := g1.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			exp2, o2 := spanRecorder()
			g2 := startGateway(t, cfg, o2)
			for i := range 2 {
				wantOutcome(t, send(t, g2, "/hooks", `{"a":1}`, "X-Event-Id", "evt_restart"), 200, "replayed")
				testenv.Eventually(t, 5*time.Second, "replay span", func() bool { return len(serverSpans(exp2, "replayed")) == i+1 })
				s := serverSpans(exp2, "replayed")[i]
				if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != orig.SpanContext.SpanID() ||
					s.Links[0].SpanContext.TraceID() != orig.SpanContext.TraceID() {
					t.Errorf("replay %d links %+v, want the original %s/%s", i, s.Links, orig.SpanContext.TraceID(), orig.SpanContext.SpanID())
				}
			}
		})
	}
}

// sample_ratio does not change what the ledger records: an unsampled
// delivery still keeps its trace and span ids, which its upstream got too,
// and a sampled replay links to them.
func TestUnsampledDeliveryKeepsTraceIDs(t *testing.T) {
	for _, exporter := range []string{"memory", "none"} {
		t.Run(exporter, func(t *testing.T) {
			up := newUpstream(t)
			exp, o := spanRecorder()
			if exporter == "none" {
				o.Telemetry.SpanExporter = nil
			}
			cfg := gatewayConfig(t, up.URL, oneRoute, "telemetry: {traces: {sample_ratio: 0}}")
			g := startGateway(t, cfg, o)
			wantOutcome(t, send(t, g, "/hooks", `{"a":1}`, "X-Event-Id", "evt_unsampled"), 200, "forwarded")
			rec, err := g.Ledger().Lookup(context.Background(), idempotency.Ref{Route: "hooks", Key: "evt_unsampled"})
			if err != nil {
				t.Fatal(err)
			}
			_, tps := up.received()
			if rec.TraceID == "" || rec.SpanID == "" || len(tps) != 1 || !strings.HasPrefix(tps[0], "00-"+rec.TraceID+"-") || !strings.HasSuffix(tps[0], "-00") {
				t.Fatalf("ledger trace %q span %q, upstream traceparent %q", rec.TraceID, rec.SpanID, tps)
			}
			if exporter == "none" {
				return
			}
			if n := len(exp.GetSpans()); n != 0 {
				t.Errorf("%d spans exported at sample_ratio 0", n)
			}
			const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			wantOutcome(t, send(t, g, "/hooks", `{"a":1}`, "X-Event-Id", "evt_unsampled", "Traceparent", "00-"+tid+"-"+sid+"-01"), 200, "replayed")
			s := oneServerSpan(t, exp, "replayed")
			if s.SpanContext.TraceID().String() != tid || len(s.Links) != 1 || s.Links[0].SpanContext.TraceID().String() != rec.TraceID ||
				s.Links[0].SpanContext.SpanID().String() != rec.SpanID {
				t.Errorf("replay span trace %s links %+v, want trace %s linked to %s/%s", s.SpanContext.TraceID(), s.Links, tid, rec.TraceID, rec.SpanID)
			}
		})
	}
}

// OTEL_EXPORTER_OTLP_ENDPOINT (the base URL: /v1/traces is appended),
// _HEADERS and _COMPRESSION reach the OTLP/HTTP exporter; a traces-specific
// protocol wins over the general one.
func TestOTLPGeneralEnvVars(t *testing.T) {
	recv := newOTLPReceiver(t)
	var auth testenv.Buffer
	inner := recv.Config.Handler
	recv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = auth.Write([]byte(r.Header.Get("Authorization") + "|" + r.Header.Get("Content-Encoding") + "\n"))
		inner.ServeHTTP(w, r)
	})
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20tok")
	t.Setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
	forwardOneThroughOTLP(t, "evt_env")
	if len(recv.resourceSpans()) == 0 {
		t.Fatalf("no spans received")
	}
	if got := auth.String(); !strings.HasPrefix(got, "Bearer tok|gzip") {
		t.Errorf("receiver saw %q", got)
	}
}

// An invalid_key delivery's log line and span name the key that was
// refused (SPEC §7: keys logged; the span carries hookstamp.key), escaped:
// a key with CR/LF or ANSI escapes cannot forge a line of the text log,
// and one that is not UTF-8 cannot break the span's export.
func TestInvalidKeyIsLoggedEscaped(t *testing.T) {
	const key = "bad\x1b[31mkey\r\nlevel=ERROR msg=forged"
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			up := newUpstream(t)
			exp, o := spanRecorder()
			var buf testenv.Buffer
			o.Logger = telemetry.NewLogger(config.Log{Level: "info", Format: format}, &buf)
			route := strings.Replace(oneRoute, "{header: X-Event-Id}", "{header: X-Event-Id}, {json: id}, {query: id}", 1)
			g := startGateway(t, gatewayConfig(t, up.URL, route, ""), o)
			body, _ := json.Marshal(map[string]string{"id": key})
			wantOutcome(t, send(t, g, "/hooks", string(body)), 400, "invalid_key")
			wantOutcome(t, send(t, g, "/hooks?id=n%FF%FEx", `{}`), 400, "invalid_key")

			spans := serverSpans(exp, "invalid_key")
			if len(spans) != 2 {
				t.Fatalf("%d invalid_key spans, want 2", len(spans))
			}
			for i, want := range []string{key, "n\uFFFDx"} {
				if got := attr(spans[i].Attributes, "hookstamp.key"); got != want {
					t.Errorf("span %d hookstamp.key %q, want %q", i, got, want)
				}
			}
			var lines []string
			for l := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
				if strings.Contains(l, "invalid_key") {
					lines = append(lines, l)
				}
				if strings.Contains(l, "forged") && !strings.Contains(l, "invalid_key") {
					t.Errorf("a key forged a log line: %q", l)
				}
			}
			if len(lines) != 2 {
				t.Fatalf("%d invalid_key log lines, want 2:\n%s", len(lines), buf.String())
			}
			if format == "json" {
				var m map[string]any
				if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
					t.Fatal(err)
				}
				if m["key"] != key {
					t.Errorf("log line key %q, want %q: %s", m["key"], key, lines[0])
				}
			} else if !strings.Contains(lines[0], `key="bad\x1b[31mkey\r\nlevel=ERROR msg=forged"`) {
				t.Errorf("text log line does not carry the key quoted: %s", lines[0])
			}
		})
	}
}

// A repeat that waited for the first delivery in flight and got its
// recorded answer is a replay like any other: linked to the original.
func TestWaitedReplayLinks(t *testing.T) {
	for _, tt := range []string{"sqlite-memory", "postgres-redis", "postgres-none"} {
		t.Run(tt, func(t *testing.T) {
			up := newUpstream(t)
			arrived, gate := make(chan struct{}, 1), make(chan struct{})
			up.reply = func(w http.ResponseWriter, r *http.Request, n int) {
				arrived <- struct{}{}
				<-gate
				_, _ = w.Write([]byte(`ok`))
			}
			cfg := gatewayConfig(t, up.URL, oneRoute, "")
			useStores(t, cfg, tt)
			exp, o := spanRecorder()
			g := startGateway(t, cfg, o)
			first := make(chan reply, 1)
			go func() { first <- send(t, g, "/hooks", `{}`, "X-Event-Id", "evt_w") }()
			<-arrived
			second := make(chan reply, 1)
			go func() { second <- send(t, g, "/hooks", `{}`, "X-Event-Id", "evt_w") }()
			time.Sleep(300 * time.Millisecond)
			close(gate)
			wantOutcome(t, <-first, 200, "forwarded")
			wantOutcome(t, <-second, 200, "replayed")
			orig := oneServerSpan(t, exp, "forwarded")
			s := oneServerSpan(t, exp, "replayed")
			if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != orig.SpanContext.SpanID() {
				t.Errorf("waited replay links %+v, want the original's span %s", s.Links, orig.SpanContext.SpanID())
			}
		})
	}
}

// No span carries a body (or its response) in any attribute or event.
func TestSpansCarryNoBodies(t *testing.T) {
	for _, tt := range []string{"sqlite-none", "postgres-none", "postgres-redis", "sqlite-memory"} {
		t.Run(tt, func(t *testing.T) {
			up := newUpstream(t)
			up.reply = func(w http.ResponseWriter, r *http.Request, n int) { _, _ = w.Write([]byte(`RESPMARKER`)) }
			cfg := gatewayConfig(t, up.URL, oneRoute, "")
			useStores(t, cfg, tt)
			exp, o := spanRecorder()
			g := startGateway(t, cfg, o)
			wantOutcome(t, send(t, g, "/hooks?tok=QUERYMARKER", `{"m":"BODYMARKER"}`, "X-Event-Id", "evt_b"), 200, "forwarded")
			wantOutcome(t, send(t, g, "/hooks", `{"m":"BODYMARKER"}`, "X-Event-Id", "evt_b"), 200, "replayed")
			wantOutcome(t, send(t, g, "/hooks", `{"m":"BODYMARKER2"}`, "X-Event-Id", "evt_b"), 422, "mismatch")
			testenv.Eventually(t, 5*time.Second, "the three server spans ended", func() bool {
				n := 0
				for _, s := range exp.GetSpans() {
					if s.SpanKind == trace.SpanKindServer {
						n++
					}
				}
				return n >= 3
			})
			for _, s := range exp.GetSpans() {
				var all []string
				for _, a := range s.Attributes {
					all = append(all, string(a.Key)+"="+a.Value.String())
				}
				for _, e := range s.Events {
					for _, a := range e.Attributes {
						all = append(all, e.Name+":"+string(a.Key)+"="+a.Value.String())
					}
				}
				all = append(all, s.Name, s.Status.Description)
				for _, v := range all {
					for _, m := range []string{"BODYMARKER", "RESPMARKER", "QUERYMARKER"} {
						if strings.Contains(v, m) {
							t.Errorf("span %q carries %s: %s", s.Name, m, v)
						}
					}
				}
			}
		})
	}
}

// A sender's trace context and baggage sent on several header lines (one
// list, RFC 9110 §5.3; W3C Baggage and Trace Context allow it) reach the
// upstream whole: the gateway continues the trace and rewrites these
// headers, and kept only the first line's members.
func TestMultiLineBaggageAndTracestateReachUpstream(t *testing.T) {
	var mu sync.Mutex
	var got http.Header
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		_, _ = w.Write([]byte(`ok`))
	}))
	t.Cleanup(up.Close)
	exp, o := spanRecorder()
	g := startGateway(t, gatewayConfig(t, up.URL, oneRoute, ""), o)

	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, err := http.NewRequest(http.MethodPost, g.URL()+"/hooks", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Event-Id", "evt_bag")
	req.Header.Set("Traceparent", "00-"+tid+"-"+sid+"-01")
	req.Header.Add("Tracestate", "rojo=00f067aa0ba902b7")
	req.Header.Add("Tracestate", "congo=t61rcWkgMzE")
	req.Header.Add("Baggage", "tenant=acme")
	req.Header.Add("Baggage", "region=eu")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	oneServerSpan(t, exp, "forwarded")
	mu.Lock()
	defer mu.Unlock()
	for name, want := range map[string][]string{"Baggage": {"tenant=acme", "region=eu"}, "Tracestate": {"rojo=00f067aa0ba902b7", "congo=t61rcWkgMzE"}} {
		all := strings.Join(got.Values(name), ",")
		for _, w := range want {
			if !strings.Contains(all, w) {
				t.Errorf("upstream %s %q: %s is lost", name, got.Values(name), w)
			}
		}
	}
	if tp := got.Get("Traceparent"); !strings.HasPrefix(tp, "00-"+tid+"-") {
		t.Errorf("upstream traceparent %q, want trace %s", tp, tid)
	}
}

// An unverified delivery's log line and span name the key it carries (SPEC
// §7: keys logged, hookstamp.key on the span): with a wrong secret
// configured, the operator learns which events to have the provider resend.
// The key is only named: the genuine delivery that follows is forwarded.
func TestUnverifiedDeliveryNamesItsKey(t *testing.T) {
	up := newUpstream(t)
	exp, o := spanRecorder()
	var buf testenv.Buffer
	o.Logger = telemetry.NewLogger(config.Log{Level: "info", Format: "json"}, &buf)
	route := strings.Replace(oneRoute, "key: {sources: [{header: X-Event-Id}]}",
		`key: {sources: [{json: id}]}
    verify: {scheme: hmac, secrets: ["SECRETMARKER"], header: X-Signature}`, 1)
	g := startGateway(t, gatewayConfig(t, up.URL, route, ""), o)

	const body = `{"id":"evt_forged","marker":"BODYMARKER"}`
	wantOutcome(t, send(t, g, "/hooks", body, "X-Signature", "deadbeef"), 401, "unverified")
	s := oneServerSpan(t, exp, "unverified")
	if got := attr(s.Attributes, "hookstamp.key"); got != "evt_forged" {
		t.Errorf("unverified span hookstamp.key %q, want evt_forged", got)
	}
	var line map[string]any
	for l := range strings.SplitSeq(buf.String(), "\n") {
		if strings.Contains(l, `"outcome":"unverified"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line == nil || line["key"] != "evt_forged" || line["trace_id"] != s.SpanContext.TraceID().String() {
		t.Errorf("unverified log line %v, want key evt_forged and the span's trace id", line)
	}
	if strings.Contains(buf.String(), "BODYMARKER") || strings.Contains(buf.String(), "SECRETMARKER") {
		t.Errorf("logs carry the body or the secret:\n%s", buf.String())
	}

	mac := hmac.New(sha256.New, []byte("SECRETMARKER"))
	mac.Write([]byte(body))
	wantOutcome(t, send(t, g, "/hooks", body, "X-Signature", hex.EncodeToString(mac.Sum(nil))), 200, "forwarded")
}

// A body over server.body_limit is refused unread, but the key its headers
// name is logged and on the span (SPEC §7), so that the event can be resent
// once the limit is raised; a key read from the body is not guessed.
func TestTooLargeDeliveryNamesItsKey(t *testing.T) {
	up := newUpstream(t)
	exp, o := spanRecorder()
	var buf testenv.Buffer
	o.Logger = telemetry.NewLogger(config.Log{Level: "info", Format: "json"}, &buf)
	route := strings.Replace(oneRoute, "{header: X-Event-Id}", "{json: id}, {header: X-Event-Id}, {body_hash: sha256}", 1)
	cfg := gatewayConfig(t, up.URL, route, "")
	cfg.Server.BodyLimit = 1024
	g := startGateway(t, cfg, o)

	big := `{"id":"evt_in_body","pad":"` + strings.Repeat("x", 4096) + `"}`
	wantOutcome(t, send(t, g, "/hooks", big, "X-Event-Id", "evt_big"), 413, "too_large")
	wantOutcome(t, send(t, g, "/hooks", big), 413, "too_large")
	spans := serverSpans(exp, "too_large")
	if len(spans) != 2 {
		t.Fatalf("%d too_large spans, want 2", len(spans))
	}
	if got := attr(spans[0].Attributes, "hookstamp.key"); got != "evt_big" {
		t.Errorf("too_large span hookstamp.key %q, want evt_big", got)
	}
	if got := attr(spans[1].Attributes, "hookstamp.key"); got != "" {
		t.Errorf("too_large span without a key header: hookstamp.key %q, want none", got)
	}
	n := 0
	for l := range strings.SplitSeq(buf.String(), "\n") {
		if strings.Contains(l, `"outcome":"too_large"`) && strings.Contains(l, `"key":"evt_big"`) &&
			strings.Contains(l, spans[0].SpanContext.TraceID().String()) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("no too_large log line naming evt_big with its trace id:\n%s", buf.String())
	}
}

// useStores points cfg at the stores a "ledger-screen" case names
// ("postgres-redis", "sqlite-none"), each the test's own.
func useStores(t *testing.T, cfg *config.Config, tt string) {
	t.Helper()
	store, screen, _ := strings.Cut(tt, "-")
	if store == "postgres" {
		cfg.Store.Driver, cfg.Store.DSN = "postgres", testenv.Postgres(t)
	}
	cfg.Screen.Driver = screen
	if screen == "redis" {
		addr, prefix := testenv.RedisPrefix(t)
		cfg.Screen.Redis.Addrs, cfg.Screen.Prefix = []string{addr}, prefix
	}
}
