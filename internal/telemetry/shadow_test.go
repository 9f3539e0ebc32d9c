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

// A repeat shadow mode forwards says what enforce mode would have answered
// it — replayed, mismatch, conflict (in flight) or held — on its log line
// (would), its server span (hookstamp.would) and in
// hookstamp_shadow_total{route,would}, whose series start at zero.
func TestShadowedRepeatsSayWhatEnforceWouldAnswer(t *testing.T) {
	up := newUpstream(t)
	arrived := make(chan struct{}, 4)
	gate := make(chan struct{})
	up.reply = func(w http.ResponseWriter, r *http.Request, n int) {
		switch r.Header.Get("Idempotency-Key") {
		case "evt_slow":
			if n == 1 {
				arrived <- struct{}{}
				<-gate
			}
		case "evt_hang":
			if n == 1 {
				time.Sleep(time.Second)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}
	exp, o := spanRecorder()
	var buf testenv.Buffer
	o.Logger = telemetry.NewLogger(config.Log{Level: "info", Format: "json"}, &buf)
	routes := `
  - name: shadow
    path: /shadow
    mode: shadow
    upstream: {url: "%[1]s/shadow", timeout: 300ms}
    key: {sources: [{header: X-Event-Id}]}
    record: {ambiguous: hold}
`
	cfg := gatewayConfig(t, up.URL, routes, "")
	g := startGateway(t, cfg, o)
	h := g.Telemetry().MetricsHandler()

	fams := scrape(t, h)
	for _, w := range []string{"replayed", "mismatch", "conflict", "held"} {
		if got := value(fams, "hookstamp_shadow_total", "route", "shadow", "would", w); got != 0 {
			t.Errorf("before any delivery: hookstamp_shadow_total{would=%q} = %v, want 0", w, got)
		}
	}

	wantOutcome(t, send(t, g, "/shadow", `{"v":1}`, "X-Event-Id", "evt_a"), 200, "forwarded")
	wantOutcome(t, send(t, g, "/shadow", `{"v":1}`, "X-Event-Id", "evt_a"), 200, "shadowed")
	wantOutcome(t, send(t, g, "/shadow", `{"v":2}`, "X-Event-Id", "evt_a"), 200, "shadowed")
	wantOutcome(t, send(t, g, "/shadow", `{"v":1}`, "X-Event-Id", "evt_hang"), 504, "held")
	wantOutcome(t, send(t, g, "/shadow", `{"v":1}`, "X-Event-Id", "evt_hang"), 200, "shadowed")
	first := make(chan reply, 1)
	go func() { first <- send(t, g, "/shadow", `{"v":1}`, "X-Event-Id", "evt_slow") }()
	<-arrived
	wantOutcome(t, send(t, g, "/shadow", `{"v":1}`, "X-Event-Id", "evt_slow"), 200, "shadowed")
	close(gate)
	wantOutcome(t, <-first, 200, "forwarded")

	want := map[string]int{"replayed": 1, "mismatch": 1, "held": 1, "conflict": 1}
	fams = scrape(t, h)
	for w, n := range want {
		if got := value(fams, "hookstamp_shadow_total", "route", "shadow", "would", w); got != float64(n) {
			t.Errorf("hookstamp_shadow_total{would=%q} = %v, want %d", w, got, n)
		}
	}
	testenv.Eventually(t, 5*time.Second, "four shadowed server spans", func() bool {
		return len(serverSpans(exp, "shadowed")) == 4
	})
	spans := map[string]int{}
	for _, s := range serverSpans(exp, "shadowed") {
		spans[attr(s.Attributes, "hookstamp.would")]++
	}
	logs := map[string]int{}
	for l := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["outcome"] == "shadowed" {
			w, _ := m["would"].(string)
			logs[w]++
		}
	}
	for w, n := range want {
		if spans[w] != n {
			t.Errorf("%d shadowed spans with hookstamp.would=%q, want %d (all: %v)", spans[w], w, n, spans)
		}
		if logs[w] != n {
			t.Errorf("%d shadowed log lines with would=%q, want %d (all: %v)", logs[w], w, n, logs)
		}
	}
}
