package telemetry_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A body that stalls past server.read_timeout is answered 408 and is no
// delivery (SPEC §2): no Hookstamp-Outcome, no outcome on its span. Its
// server span is named after the route, with status code 408, so that an
// operator finds a route's timeouts in the traces.
func TestReadTimeoutShowsOnTheRoutesSpan(t *testing.T) {
	up := newUpstream(t)
	exp, o := spanRecorder()
	cfg := gatewayConfig(t, up.URL, oneRoute, "")
	cfg.Server.ReadTimeout = 300 * time.Millisecond
	g := startGateway(t, cfg, o)

	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(g.URL(), "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	// More than fasthttp prefetches (8 KiB), less than declared.
	fmt.Fprintf(conn, "POST /hooks HTTP/1.1\r\nHost: x\r\nX-Event-Id: evt_stall\r\nContent-Length: %d\r\n\r\n%s", 64<<10, strings.Repeat("s", 16<<10))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("Hookstamp-Outcome") != "" {
		t.Fatalf("got %d outcome %q, want 408 without an outcome", resp.StatusCode, resp.Header.Get("Hookstamp-Outcome"))
	}
	var srv []string
	testenv.Eventually(t, 5*time.Second, "the server span", func() bool {
		srv = nil
		for _, s := range exp.GetSpans() {
			if s.SpanKind == trace.SpanKindServer {
				srv = append(srv, fmt.Sprintf("%s %s outcome=%q", s.Name, attr(s.Attributes, "http.response.status_code"), attr(s.Attributes, "hookstamp.outcome")))
			}
		}
		return len(srv) == 1
	})
	if want := `POST /hooks 408 outcome=""`; srv[0] != want {
		t.Errorf("server span %q, want %q", srv[0], want)
	}
}
