package telemetry_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/telemetry"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// deliveryLines are the "delivery" log lines in buf with outcome o.
func deliveryLines(tb testing.TB, buf *testenv.Buffer, o string) []map[string]any {
	tb.Helper()
	var out []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "delivery" && m["outcome"] == o {
			out = append(out, m)
		}
	}
	return out
}

// A delivery's log line names its sender whatever its outcome — refused
// unread (too_large) or passed through (a method not deduplicated) too —
// and an accepted one the status its provider got (the route's ack).
func TestDeliveryLinesNameSourceAndStatus(t *testing.T) {
	up := newUpstream(t)
	var buf testenv.Buffer
	_, o := spanRecorder()
	o.Logger = telemetry.NewLogger(config.Log{Level: "info", Format: "json"}, &buf)
	cfg := gatewayConfig(t, up.URL, oneRoute, "")
	cfg.Server.BodyLimit = 1024
	g := startGateway(t, cfg, o)
	wantOutcome(t, send(t, g, "/hooks", strings.Repeat("x", 4096), "X-Event-Id", "evt_big"), 413, "too_large")
	resp, err := client.Get(g.URL() + "/hooks")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Hookstamp-Outcome"); resp.StatusCode != http.StatusOK || got != "passthrough" {
		t.Fatalf("GET: %d %q, want 200 passthrough", resp.StatusCode, got)
	}

	var async testenv.Buffer
	o.Logger = telemetry.NewLogger(config.Log{Level: "info", Format: "json"}, &async)
	ag := startAsyncGateway(t, up, o)
	wantOutcome(t, send(t, ag, "/hooks", `{}`, "X-Event-Id", "evt_acc"), 202, "accepted")

	testenv.Eventually(t, 5*time.Second, "the three delivery lines", func() bool {
		return len(deliveryLines(t, &buf, "too_large")) == 1 && len(deliveryLines(t, &buf, "passthrough")) == 1 &&
			len(deliveryLines(t, &async, "accepted")) == 1
	})
	for _, l := range append(deliveryLines(t, &buf, "too_large"), deliveryLines(t, &buf, "passthrough")...) {
		if l["source"] != "127.0.0.1" {
			t.Errorf("%s line: source %q, want 127.0.0.1 (the sender)", l["outcome"], l["source"])
		}
	}
	if l := deliveryLines(t, &async, "accepted")[0]; l["status"] != float64(202) {
		t.Errorf("accepted line: status %v, want 202 (the ack)", l["status"])
	}
}
