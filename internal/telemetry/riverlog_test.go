package telemetry_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/telemetry"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// River's INFO lines ("River client started", "Producer job counts" every
// 5 s per queue) do not reach a log at level info: only River's WARN and
// above do, with component river; hookstamp's own INFO lines still do.
// At level debug River's lines are there, at DEBUG.
func TestRiverLogsOnlyWarnings(t *testing.T) {
	up := newUpstream(t)
	var buf testenv.Buffer
	_, o := spanRecorder()
	o.Logger = telemetry.NewLogger(config.Log{Level: "info", Format: "json"}, &buf)
	g := startAsyncGateway(t, up, o)
	wantOutcome(t, send(t, g, "/hooks", `{}`, "X-Event-Id", "evt_r"), 202, "accepted")
	testenv.Eventually(t, 10*time.Second, "the delivery reached the upstream", func() bool {
		keys, _ := up.received()
		return len(keys) == 1
	})
	var info int
	for l := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil {
			continue
		}
		if m["component"] == "river" && m["level"] != "WARN" && m["level"] != "ERROR" {
			t.Errorf("River line below WARN: %s", l)
		}
		if m["level"] == "INFO" && m["component"] == nil {
			info++
		}
	}
	if info == 0 {
		t.Errorf("no INFO line of hookstamp's own: the log level was raised for everything:\n%s", buf.String())
	}

	var debug testenv.Buffer
	o.Logger = telemetry.NewLogger(config.Log{Level: "debug", Format: "json"}, &debug)
	startAsyncGateway(t, up, o)
	testenv.Eventually(t, 10*time.Second, "River's client started, at DEBUG", func() bool {
		for l := range strings.SplitSeq(debug.String(), "\n") {
			if strings.Contains(l, `"component":"river"`) && strings.Contains(l, "River client started") {
				return strings.Contains(l, `"level":"DEBUG"`)
			}
		}
		return false
	})
}
