package gateway

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A rolling update switches a route from async to sync on PostgreSQL: the
// new replica starts first, with nothing queued, and the old one keeps
// acknowledging and queueing until it is stopped. What it queued must
// still reach the upstream, once, from the new replica (SPEC §10).
func TestRollingSwitchToSyncDeliversWhatTheOldReplicaQueued(t *testing.T) {
	t.Parallel()
	s := backend{name: "postgres+memory", ledger: "postgres", screen: "memory"}.open(t)
	var taking atomic.Bool
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		if !taking.Load() {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, `{"n":%d}`, n)
	})

	gNew := startGatewayWith(t, s.config(t, up.URL, "", ""), asyncOptions(t)) // sync, no record.request
	time.Sleep(time.Second)                                                   // its look at start finds nothing queued
	gOld := startGatewayWith(t, s.config(t, up.URL, `    delivery: async
    async:
      backoff: {initial: 5ms, max: 1h}
`, ""), asyncOptions(t))
	wantOutcome(t, send(t, gOld, "/hooks", `{"id":"evt_rolling"}`), http.StatusAccepted, "accepted")
	testenv.Eventually(t, 10*time.Second, "the first attempt", func() bool { return up.count("evt_rolling") == 1 })
	shutdownGateway(t, gOld)
	taking.Store(true)

	rec := waitState(t, gNew, "evt_rolling", idempotency.StateDone)
	if rec.Status != http.StatusOK || string(rec.Body) != `{"n":2}` {
		t.Fatalf("evt_rolling recorded %d %q, want the upstream's second answer", rec.Status, rec.Body)
	}
	time.Sleep(time.Second)
	if n := up.count("evt_rolling"); n != 2 {
		t.Fatalf("the upstream got evt_rolling %d times, want 2 (the 503, then the delivery)", n)
	}
}

// An operator redelivers a done record of a sync route storing requests,
// the upstream asks for a later attempt, and the gateway restarts with
// record.request off: the record is done, not queued, and its accepted
// redelivery must still be made.
func TestRedeliveryPendingWhenTheRouteStopsStoringRequestsIsMade(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 2 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, `{"copy":%d}`, n)
	})
	db := dbPath(t)
	cfg := gwConfig(t, up.URL, db, "    record: {request: true}\n", "")
	cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", asyncAdminToken
	g := startGatewayWith(t, cfg, asyncOptions(t))
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_again"}`), http.StatusOK, "forwarded")
	if status, out := adminPost(t, g, "/admin/routes/hooks/records/evt_again/redeliver", ""); status != http.StatusAccepted {
		t.Fatalf("redeliver = %d %s, want 202", status, out)
	}
	testenv.Eventually(t, 10*time.Second, "the redelivery's first attempt recorded", func() bool {
		a, err := g.Ledger().Attempts(t0ctx, idempotency.Ref{Route: "hooks", Key: "evt_again"})
		return err == nil && len(a) == 2
	})
	shutdownGateway(t, g)

	g = startGatewayWith(t, gwConfig(t, up.URL, db, "", ""), asyncOptions(t))
	testenv.Eventually(t, 20*time.Second, "the redelivery's answer recorded", func() bool {
		return string(lookup(t, g, "hooks", "evt_again").Body) == `{"copy":3}`
	})
	time.Sleep(time.Second)
	if n := up.count("evt_again"); n != 3 {
		t.Fatalf("the upstream got evt_again %d times, want 3 (the forward, the redelivery's 503, its retry)", n)
	}
}

// A sync deployment storing no requests, with nothing queued, never runs
// River: no replica polls river_job or takes part in its leader election.
func TestSyncDeploymentWithNothingQueuedDoesNotRunTheQueue(t *testing.T) {
	t.Parallel()
	s := backend{name: "postgres+memory", ledger: "postgres", screen: "memory"}.open(t)
	g := startGatewayWith(t, s.config(t, newUpstream(t).URL, "", ""), asyncOptions(t))
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_sync"}`), http.StatusOK, "forwarded")
	time.Sleep(adoptEveryMin + time.Second)
	db, err := g.Ledger().DB()
	if err != nil {
		t.Fatal(err)
	}
	var queues, leaders int
	if err := db.QueryRow(`SELECT (SELECT COUNT(*) FROM river_queue), (SELECT COUNT(*) FROM river_leader)`).Scan(&queues, &leaders); err != nil {
		t.Fatal(err)
	}
	if queues != 0 || leaders != 0 || g.queue.q.Running() {
		t.Fatalf("River ran: %d queues, %d leaders in the database, running %v; want none", queues, leaders, g.queue.q.Running())
	}
}
