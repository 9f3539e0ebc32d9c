package gateway

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A route switched from delivery: async to sync (the configuration edited,
// the gateway restarted on the same stores) while one of its deliveries is
// still queued and another is dead. The provider's retries must not be
// told the events were taken: the queued one answers as a delivery in
// flight (409 conflict, Retry-After), the dead one as a held key (409
// held), and neither is forwarded by the retry. The queue still delivers
// the queued one, although the route stores no requests now; its next
// retry replays the upstream's answer.
func TestRouteSwitchedFromAsyncToSyncAnswersItsQueuedAndDeadDeliveries(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		var taking atomic.Bool // the upstream fails (503) until the switch
		up := newUpstream(t)
		up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
			key := r.Header.Get("Idempotency-Key")
			if !taking.Load() {
				if key == "evt_queued" {
					// Its next attempt waits long enough for the switch.
					w.Header().Set("Retry-After", "6")
				}
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"taken":%q,"n":%d}`, key, n)
		})

		g1 := startWithDeadAndQueued(t, s, up)
		shutdownGateway(t, g1)
		dead, queued := up.count("evt_dead"), up.count("evt_queued")
		if dead != 2 || queued != 1 {
			t.Fatalf("before the switch the upstream got evt_dead %d and evt_queued %d times, want 2 and 1", dead, queued)
		}

		taking.Store(true)
		logs := &testenv.Buffer{}
		o := asyncOptions(t)
		o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
		g2 := startGatewayWith(t, s.config(t, up.URL, "", ""), o) // sync, no record.request

		for _, c := range []struct{ key, outcome string }{{"evt_queued", "conflict"}, {"evt_dead", "held"}} {
			r := send(t, g2, "/hooks", `{"id":"`+c.key+`"}`)
			wantOutcome(t, r, http.StatusConflict, c.outcome)
			if r.header.Get("Retry-After") == "" || r.header.Get("Idempotent-Replayed") != "" ||
				r.header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("%s after the switch: %v %s; want a problem with Retry-After, not a replay", c.key, r.header, r.body)
			}
		}
		if d, q := up.count("evt_dead"), up.count("evt_queued"); d != dead || q != queued {
			t.Fatalf("the retries reached the upstream: evt_dead %d → %d, evt_queued %d → %d copies", dead, d, queued, q)
		}

		// Worked by the queue, not forgotten with the route's async
		// setting: delivered once, then replayed.
		rec := waitState(t, g2, "evt_queued", idempotency.StateDone)
		if rec.Status != http.StatusOK || string(rec.Body) != `{"taken":"evt_queued","n":2}` {
			t.Fatalf("evt_queued recorded %d %q, want the upstream's 200", rec.Status, rec.Body)
		}
		r := send(t, g2, "/hooks", `{"id":"evt_queued"}`)
		wantOutcome(t, r, http.StatusOK, "replayed")
		if string(r.body) != `{"taken":"evt_queued","n":2}` || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("evt_queued's retry after its delivery: %q %v; want the upstream's answer replayed", r.body, r.header)
		}
		wantOutcome(t, send(t, g2, "/hooks", `{"id":"evt_dead"}`), http.StatusConflict, "held")
		if d, q := up.count("evt_dead"), up.count("evt_queued"); d != dead || q != queued+1 {
			t.Fatalf("after the switch the upstream got evt_dead %d and evt_queued %d more times, want 0 and 1", d-dead, q-queued)
		}
		for _, want := range []string{"queued=1", "dead=1"} {
			if line := lastLogLine(logs, want); !strings.Contains(line, "route=hooks") {
				t.Errorf("no start-up warning naming route hooks and %s:\n%s", want, logs)
			}
		}
	})
}

// startWithDeadAndQueued starts a gateway on s with the async route hooks,
// two attempts a delivery, and sends it evt_dead and evt_queued: it returns
// once up, failing them, has made evt_dead dead and had evt_queued's first
// attempt (up's Retry-After on it keeps it queued).
func startWithDeadAndQueued(t *testing.T, s *stores, up *upstream) *Gateway {
	t.Helper()
	async := s.config(t, up.URL, `    delivery: async
    async:
      max_attempts: 2
      backoff: {initial: 5ms, max: 1h}
`, "")
	g := startGatewayWith(t, async, asyncOptions(t))
	for _, key := range []string{"evt_dead", "evt_queued"} {
		wantOutcome(t, send(t, g, "/hooks", `{"id":"`+key+`"}`), http.StatusAccepted, "accepted")
	}
	waitState(t, g, "evt_dead", idempotency.StateDead)
	testenv.Eventually(t, 20*time.Second, "evt_queued's first attempt recorded", func() bool {
		a, err := g.Ledger().Attempts(t0ctx, idempotency.Ref{Route: "hooks", Key: "evt_queued"})
		return err == nil && len(a) == 1
	})
	if rec := lookup(t, g, "hooks", "evt_queued"); rec.State != idempotency.StateQueued {
		t.Fatalf("evt_queued is %s after its first attempt, want queued", rec.State)
	}
	return g
}

// SPEC §10: a route switched from async to sync keeps its dead (and
// queued) deliveries, and so does one no longer configured; the queue
// gauges must keep reporting them, or a dead-letter alert clears while
// they wait for an operator.
func TestQueueMetricsKeepRoutesNoLongerAsync(t *testing.T) {
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusInternalServerError) })
	db := dbPath(t)
	start := func(route string) *Gateway {
		cfg := gwConfig(t, up.URL, db, route, "")
		cfg.Admin.Listen = "127.0.0.1:0"
		return startGatewayWith(t, cfg, asyncOptions(t))
	}
	g := start("    delivery: async\n    async: {max_attempts: 1}\n")
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_dead"}`), http.StatusAccepted, "accepted")
	waitState(t, g, "evt_dead", idempotency.StateDead)
	waitMetrics(t, g, `hookstamp_queue_depth{route="hooks",state="dead"} 1`)
	shutdownGateway(t, g)

	dead := []string{
		`hookstamp_queue_depth{route="hooks",state="dead"} 1`,
		`hookstamp_queue_depth{route="hooks",state="queued"} 0`,
		`hookstamp_queue_oldest_seconds{route="hooks"} 0`,
	}
	g = start("") // sync, no record.request
	waitMetrics(t, g, dead...)
	shutdownGateway(t, g)

	cfg := gwConfig(t, up.URL, db, "", "")
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Routes[0].Name = "renamed"
	waitMetrics(t, startGatewayWith(t, cfg, asyncOptions(t)), dead...)
}
