package telemetry_test

import (
	"bufio"
	"context"
	"maps"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/hookstamp/hookstamp/internal/gateway"
)

// OTLP cannot carry a string that is not UTF-8: the exporter drops the
// whole batch it is in. Requests whose bytes are not UTF-8 — in the path,
// a routed path's rest, the key, the trace context — must not cost the
// collector the spans exported with theirs.
func TestInvalidUTF8RequestsDoNotDropTheBatch(t *testing.T) {
	recv := newOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", recv.URL+"/v1/traces")
	up := newUpstream(t)
	cfg := gatewayConfig(t, up.URL, oneRoute+`
  - name: files
    path: /in/*
    upstream: {url: "%[1]s/files", timeout: 2s}
    key: {sources: [{header: X-Event-Id}]}
`, "telemetry: {traces: {exporter: otlp}}")
	g, err := gateway.New(context.Background(), cfg, gateway.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name, request string
		status        int
	}{
		{"no route", "POST /nope\xff\xfe HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n", http.StatusNotFound},
		{"prefix route's rest", "POST /in/a\xff HTTP/1.1\r\nHost: gw\r\nX-Event-Id: evt_rest\r\nContent-Length: 0\r\n\r\n", http.StatusOK},
		{"key", "POST /hooks HTTP/1.1\r\nHost: gw\r\nX-Event-Id: evt\xff\r\nContent-Length: 0\r\n\r\n", http.StatusBadRequest},
		{"trace state", "POST /hooks HTTP/1.1\r\nHost: gw\r\nX-Event-Id: evt_state\r\n" +
			"Traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nTracestate: k=v\xff\r\n" +
			"Content-Length: 0\r\n\r\n", http.StatusOK},
		{"refused by the parser", "POST /x\xff HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n", http.StatusBadRequest},
	} {
		if got := rawStatus(t, g.Addr(), c.request); got != c.status {
			t.Errorf("%s: got %d, want %d", c.name, got, c.status)
		}
	}
	wantOutcome(t, send(t, g, "/hooks", `{}`, "X-Event-Id", "evt_good"), 200, "forwarded")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	good := false
	paths := map[string]bool{}
	for _, r := range recv.resourceSpans() {
		for _, ss := range r.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				attrs := pbAttrs(s.GetAttributes())
				if attrs["hookstamp.key"] == "evt_good" {
					good = true
				}
				if s.GetKind() == tracepb.Span_SPAN_KIND_SERVER && attrs["http.target"] == attrs["url.path"] && attrs["http.url"] == attrs["url.path"] {
					paths[attrs["url.path"]] = true
				}
			}
		}
	}
	if !good {
		t.Fatal("the receiver did not get the normal delivery's span: its batch was dropped")
	}
	for _, p := range []string{"/nope\uFFFD", "/in/a\uFFFD"} {
		if !paths[p] {
			t.Errorf("no server span with url.path, http.target and http.url %q (invalid bytes replaced); got %q", p, slices.Collect(maps.Keys(paths)))
		}
	}
}

// rawStatus sends request as written on a connection of its own and
// returns the answer's status.
func rawStatus(tb testing.TB, addr, request string) int {
	tb.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(request)); err != nil {
		tb.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		tb.Fatalf("read the answer to %q: %v", request, err)
	}
	defer resp.Body.Close()
	return resp.StatusCode
}
