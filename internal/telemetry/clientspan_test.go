package telemetry_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hookstamp/hookstamp/internal/gateway"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// startAsyncGateway starts a gateway whose route hooks (oneRoute) is
// async, retried within milliseconds, its queue polled every 20 ms.
func startAsyncGateway(tb testing.TB, up *upstream, o gateway.Options) *gateway.Gateway {
	tb.Helper()
	o.QueuePollInterval, o.RescueMargin = 20*time.Millisecond, time.Second
	route := strings.TrimRight(oneRoute, "\n") + `
    delivery: async
    async: {max_attempts: 5, backoff: {initial: 5ms, max: 50ms}}
`
	return startGateway(tb, gatewayConfig(tb, up.URL, route, ""), o)
}

// spansNamed are the exported spans named name, in the order they ended.
func spansNamed(exp *tracetest.InMemoryExporter, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// A forward's client span (hookstamp.forward) is Error when the upstream
// answers 4xx or 5xx, with error.type the status code, as OpenTelemetry's
// HTTP conventions have it for client spans; a 2xx leaves it Unset.
func TestForwardSpanStatusFollowsTheUpstreamAnswer(t *testing.T) {
	up := newUpstream(t)
	up.reply = func(w http.ResponseWriter, r *http.Request, n int) {
		switch r.Header.Get("Idempotency-Key") {
		case "evt_500":
			w.WriteHeader(500)
		case "evt_404":
			w.WriteHeader(404)
		}
	}
	exp, o := spanRecorder()
	g := startGateway(t, gatewayConfig(t, up.URL, oneRoute, ""), o)
	want := map[string]struct {
		status int
		code   codes.Code
		errTyp string
	}{
		"evt_ok":  {200, codes.Unset, ""},
		"evt_404": {404, codes.Error, "404"},
		"evt_500": {500, codes.Error, "500"},
	}
	for key, w := range want {
		r := send(t, g, "/hooks", `{}`, "X-Event-Id", key)
		if r.status != w.status {
			t.Fatalf("%s: got %d, want %d", key, r.status, w.status)
		}
	}
	testenv.Eventually(t, 5*time.Second, "three forward spans", func() bool {
		return len(spansNamed(exp, "hookstamp.forward")) == 3
	})
	for _, srv := range exp.GetSpans() {
		key := attr(srv.Attributes, "hookstamp.key")
		w, ok := want[key]
		if !ok || attr(srv.Attributes, "hookstamp.outcome") == "" {
			continue
		}
		for _, s := range children(exp, srv) {
			if s.Name != "hookstamp.forward" {
				continue
			}
			if s.Status.Code != w.code || attr(s.Attributes, "error.type") != w.errTyp {
				t.Errorf("%s: forward span status %v error.type %q, want %v %q", key, s.Status.Code, attr(s.Attributes, "error.type"), w.code, w.errTyp)
			}
			if s.Status.Description != "" {
				t.Errorf("%s: status description %q, want none (the code says it)", key, s.Status.Description)
			}
		}
	}
}

// An async delivery's attempt spans (hookstamp.attempt) carry the
// upstream's status code, are Error on a 5xx answer, and say what became
// of the attempt in hookstamp.attempt.result (retried, delivered).
func TestAttemptSpanSaysStatusAndResult(t *testing.T) {
	up := newUpstream(t)
	up.reply = func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(200)
	}
	exp, o := spanRecorder()
	g := startAsyncGateway(t, up, o)
	wantOutcome(t, send(t, g, "/hooks", `{}`, "X-Event-Id", "evt_q"), 202, "accepted")
	testenv.Eventually(t, 20*time.Second, "two attempt spans", func() bool {
		return len(spansNamed(exp, "hookstamp.attempt")) == 2
	})
	type got struct {
		status, result string
		code           codes.Code
	}
	var spans []got
	for _, s := range spansNamed(exp, "hookstamp.attempt") {
		spans = append(spans, got{attr(s.Attributes, "http.response.status_code"), attr(s.Attributes, "hookstamp.attempt.result"), s.Status.Code})
	}
	want := []got{{"503", "retried", codes.Error}, {"200", "delivered", codes.Unset}}
	if len(spans) != 2 || spans[0] != want[0] || spans[1] != want[1] {
		t.Errorf("attempt spans %+v, want %+v", spans, want)
	}
}
