package config

import (
	"strings"
	"testing"
	"time"
)

func TestAsyncRouteDefaultsAndPresetAck(t *testing.T) {
	c := mustLoad(t, `
routes:
  - name: a
    path: /a
    delivery: async
    upstream: {url: "http://127.0.0.1:9000/a"}
    key: {sources: [{header: X-Event-Id}]}
  - name: pay
    path: /pay
    preset: adyen
    delivery: async
    upstream: {url: "http://127.0.0.1:9000/pay"}
    verify: {secrets: ["00FF"]}
`)
	a := c.Routes[0]
	if !a.StoresRequests() || a.Async.Ack.Status != 202 || a.Async.Ack.Body != "" || a.Async.MaxAttempts != 25 ||
		a.Async.MaxAge != 72*time.Hour || a.Async.Backoff != (Backoff{Initial: time.Second, Max: time.Hour}) || a.Async.Concurrency != 8 ||
		a.Async.PollInterval != 250*time.Millisecond {
		t.Errorf("async defaults: stores=%v %+v", a.StoresRequests(), a.Async)
	}
	if ack := c.Routes[1].Async.Ack; ack.Status != 200 || ack.Body != "[accepted]" {
		t.Errorf("adyen ack = %+v, want 200 success", ack)
	}
}

// asyncDoc is a file of one async route.
const asyncDoc = `
routes:
  - name: a
    path: /a
    delivery: async
    upstream: {url: "http://127.0.0.1:9000/a"}
    key: {sources: [{header: X-Event-Id}]}
`

func TestAsyncRouteRefusals(t *testing.T) {
	const stores = "    delivery: sync\n    record: {request: true}\n"
	tests := []struct{ extra, path, want string }{
		{"    mode: shadow\n", "routes[0].delivery", "shadow"},
		{"    async: {ack: {status: 500}}\n", "routes[0].async.ack.status", "2xx"},
		{"    async: {ack: {body: ok}}\n", "routes[0].async.ack.content_type", "required"},
		{"    async: {max_attempts: 0}\n", "routes[0].async.max_attempts", "at least 1"},
		{"    async: {backoff: {initial: 1m, max: 1s}}\n", "routes[0].async.backoff.max", "shorter"},
		{"    async: {concurrency: 0}\n", "routes[0].async.concurrency", "at least 1"},
		{"    async: {concurrency: 10001}\n", "routes[0].async.concurrency", "at most 10000"},
		{"    async: {poll_interval: 1ms}\n", "routes[0].async.poll_interval", "at least 10ms"},
		{"    delivery: later\n", "routes[0].delivery", "unknown value"},
		// A synchronous route storing requests redelivers them with its
		// async settings, all but the ack.
		{stores + "    async: {poll_interval: 0s}\n", "routes[0].async.poll_interval", "at least 10ms"},
		{stores + "    async: {max_attempts: 0}\n", "routes[0].async.max_attempts", "at least 1"},
		{stores + "    async: {max_age: 0s}\n", "routes[0].async.max_age", "greater than 0"},
		{stores + "    async: {backoff: {initial: 0s}}\n", "routes[0].async.backoff.initial", "greater than 0"},
		{stores + "    async: {backoff: {initial: 1m, max: 1s}}\n", "routes[0].async.backoff.max", "shorter"},
		{stores + "    async: {concurrency: 0}\n", "routes[0].async.concurrency", "at least 1"},
		{stores + "    async: {concurrency: 10001}\n", "routes[0].async.concurrency", "at most 10000"},
	}
	for _, tt := range tests {
		t.Run(tt.path+"/"+tt.want, func(t *testing.T) {
			doc := asyncDoc + tt.extra
			if strings.HasPrefix(tt.extra, "    delivery:") {
				doc = strings.Replace(asyncDoc, "    delivery: async\n", tt.extra, 1)
			}
			assertProblem(t, mustFail(t, doc), tt.path, tt.want)
		})
	}
}

// The ack is an async route's alone, and a route storing nothing reads no
// async setting.
func TestSyncRoutesAsyncSettingsOnlyWhereUsed(t *testing.T) {
	route := strings.Replace(asyncDoc, "    delivery: async\n", "", 1)
	mustLoad(t, route+"    record: {request: true}\n    async: {ack: {status: 500, body: ok}}\n")
	mustLoad(t, route+"    async: {max_attempts: 0, max_age: 0s, concurrency: 0, poll_interval: 1ms, ack: {status: 500}}\n")
}

// An async route's defaults load with any retention and lease: its queued
// rows are never swept, and its forwards hold no claim. Presets of a
// three-day retention, as long as max_age's default, are among them.
func TestAsyncRouteDefaultsLoadWithShortRetentionAndLongTimeout(t *testing.T) {
	for _, preset := range []string{"shopify", "slack", "razorpay", "twitch"} {
		t.Run(preset, func(t *testing.T) {
			c := mustLoad(t, `
routes:
  - name: p
    path: /p
    preset: `+preset+`
    delivery: async
    upstream: {url: "http://127.0.0.1:9000/p"}
    verify: {secrets: ["s3cret"]}
`)
			if r := c.Routes[0]; r.Async.MaxAge < r.Retention {
				t.Fatalf("max_age %s, retention %s: want a preset whose retention is at most max_age's default", r.Async.MaxAge, r.Retention)
			}
		})
	}
	mustLoad(t, asyncDoc+"    retention: 1h\n")
	mustLoad(t, strings.Replace(asyncDoc, `upstream: {url: "http://127.0.0.1:9000/a"}`, `upstream: {url: "http://127.0.0.1:9000/a", timeout: 40s}`, 1))
	sync := strings.Replace(asyncDoc, "    delivery: async\n", "", 1)
	assertProblem(t, mustFail(t, strings.Replace(sync, `upstream: {url: "http://127.0.0.1:9000/a"}`, `upstream: {url: "http://127.0.0.1:9000/a", timeout: 40s}`, 1)),
		"routes[0].upstream.timeout", "not shorter than screen.lease")
}
