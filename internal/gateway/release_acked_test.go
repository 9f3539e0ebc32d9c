package gateway

import (
	"database/sql"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// ambiguousUpstream answers {"copy":n} to its n-th request, or, while the
// returned flag is set, nothing for a second: a forward with a shorter
// upstream.timeout is sent and gets no answer, which a record.ambiguous:
// hold route holds.
func ambiguousUpstream(tb testing.TB) (*upstream, *atomic.Bool) {
	up, hang := newUpstream(tb), new(atomic.Bool)
	hang.Store(true)
	gone := make(chan struct{})
	tb.Cleanup(func() { close(gone) })
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		if hang.Load() {
			select {
			case <-gone:
			case <-time.After(time.Second):
			}
			return
		}
		fmt.Fprintf(w, `{"copy":%d}`, n)
	})
	return up, hang
}

// heldThenRestarted starts a gateway on driver whose route "hooks" is
// before with record.ambiguous: hold, sends evt_h, answered want, and
// stops it once the upstream's silence held the delivery. It returns the
// upstream, answering from then on, and a gateway on the same store with
// route "hooks" now after and the admin API on.
func heldThenRestarted(t *testing.T, driver, before string, want int, after string) (*upstream, *Gateway) {
	t.Helper()
	up, hang := ambiguousUpstream(t)
	path := dbPath(t)
	cfg := gwConfig(t, up.URL, path, before+"    record: {ambiguous: hold}\n", "")
	onStore(t, cfg, driver)
	cfg.Routes[0].Upstream.Timeout = 200 * time.Millisecond
	g := startGatewayWith(t, cfg, asyncOptions(t))
	if r := send(t, g, "/hooks", `{"id":"evt_h"}`); r.status != want {
		t.Fatalf("evt_h = %d %s, want %d", r.status, r.outcome(), want)
	}
	waitState(t, g, "evt_h", idempotency.StateHeld)
	shutdownGateway(t, g)

	hang.Store(false)
	next := gwConfig(t, up.URL, path, after, "")
	next.Store = cfg.Store
	next.Admin.Listen, next.Admin.Token = "127.0.0.1:0", asyncAdminToken
	return up, startGatewayWith(t, next, asyncOptions(t))
}

// heldAsyncEdited is heldThenRestarted of an async route that stays
// async, with the held row then changed by update.
func heldAsyncEdited(t *testing.T, driver, update string) (*upstream, *Gateway, *sql.DB) {
	t.Helper()
	up, g := heldThenRestarted(t, driver, asyncRoute, http.StatusAccepted, asyncRoute+"    record: {ambiguous: hold}\n")
	db, err := g.Ledger().DB()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(update); err != nil {
		t.Fatal(err)
	}
	return up, g, db
}

// releaseHeld asks g's admin API to release evt_h.
func releaseHeld(t *testing.T, g *Gateway) (int, string) {
	t.Helper()
	return adminPost(t, g, "/admin/routes/hooks/records/evt_h/resolve", `{"action":"release"}`)
}

// A delivery an async route acknowledged (202) and then held, released by
// an operator once the route is sync (a config edit and a restart, or the
// call landing on a replica with the new configuration), is delivered by
// the queue: release decides by the row, not the route's mode now.
// Released as a sync route's key, its row and stored request were deleted
// and no job made: the provider, told 202, never sends it again, and the
// user lost the event for good.
func TestReleaseOfAnAcknowledgedHeldDeliveryOnARouteNoLongerAsyncDeliversIt(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		for _, now := range []struct{ name, route string }{
			{"storing requests", "    record: {ambiguous: hold, request: true}\n"},
			// Its jobs wait until the queue adopts the route (watchFormer).
			{"storing none", "    record: {ambiguous: hold}\n"},
		} {
			t.Run(driver+"/"+now.name, func(t *testing.T) {
				up, g := heldThenRestarted(t, driver, asyncRoute, http.StatusAccepted, now.route)
				if st, body := releaseHeld(t, g); st != http.StatusOK || !strings.Contains(body, `"state":"queued"`) {
					t.Fatalf("release = %d %s, want 200, queued", st, body)
				}
				rec := waitStateWithin(t, g, "evt_h", idempotency.StateDone, 30*time.Second)
				if rec.Status != http.StatusOK || string(rec.Body) != `{"copy":2}` {
					t.Errorf("evt_h recorded %d %q, want the upstream's answer to the second copy", rec.Status, rec.Body)
				}
				time.Sleep(500 * time.Millisecond)
				if n := up.count("evt_h"); n != 2 {
					t.Errorf("the upstream got evt_h %d times, want 2 (the unanswered attempt, then the release's)", n)
				}
			})
		}
	}
}

// A key held while its route was sync without record.request (nothing
// stored to deliver again), the route then made async: release deletes
// the row as a sync route's release does, and the provider's retry is
// acknowledged and delivered. Release went by the route's mode and asked
// the queue to deliver a request never stored: every release answered
// 503 "the ledger did not answer", and the user's key stayed held for
// good, each retry of the provider refused 409.
func TestReleaseOfAHeldKeyWithoutARequestOnARouteMadeAsyncLetsTheRetryIn(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			up, g := heldThenRestarted(t, driver, "", http.StatusGatewayTimeout, asyncRoute+"    record: {ambiguous: hold}\n")
			if r := send(t, g, "/hooks", `{"id":"evt_h"}`); r.status != http.StatusConflict {
				t.Fatalf("a retry of the held key = %d %s, want 409 held", r.status, r.outcome())
			}
			if st, body := releaseHeld(t, g); st != http.StatusOK || !strings.Contains(body, `"state":"released"`) {
				t.Fatalf("release = %d %s, want 200, released", st, body)
			}
			if _, err := g.Ledger().Lookup(t0ctx, idempotency.Ref{Route: "hooks", Key: "evt_h"}); err == nil {
				t.Fatal("the released row is still in the ledger")
			}
			wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_h"}`), http.StatusAccepted, "accepted")
			waitState(t, g, "evt_h", idempotency.StateDone)
			if n := up.count("evt_h"); n != 2 {
				t.Errorf("the upstream got evt_h %d times, want 2 (the unanswered forward, then the retry's delivery)", n)
			}
		})
	}
}

// A held delivery acknowledged to its provider whose request is gone
// (never so: requests go with their record) cannot be delivered again:
// release answers 409 saying so and keeps it held, neither 503 (the
// ledger answered) nor a delete, which would lose the event.
func TestReleaseOfAnAcknowledgedHeldDeliveryWithoutItsRequestIsRefused(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			up, g, db := heldAsyncEdited(t, driver, `UPDATE hookstamp_records SET request_method = NULL, request_path = NULL, request_headers = NULL, request_body = NULL WHERE "key" = 'evt_h'`)
			jobs := func() int {
				var n int
				if err := db.QueryRow(`SELECT COUNT(*) FROM river_job`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			before := jobs()
			st, body := releaseHeld(t, g)
			if st != http.StatusConflict || !strings.Contains(body, "no request is stored") {
				t.Fatalf("release = %d %s, want 409 naming the missing request", st, body)
			}
			time.Sleep(500 * time.Millisecond)
			if rec := lookup(t, g, "hooks", "evt_h"); rec.State != idempotency.StateHeld {
				t.Errorf("after the refused release evt_h is %s, want held", rec.State)
			}
			if n := jobs() - before; n != 0 {
				t.Errorf("%d jobs made by the refused release, want none", n)
			}
			if n := up.count("evt_h"); n != 1 {
				t.Errorf("the upstream got evt_h %d times, want 1", n)
			}
		})
	}
}

// A delivery an async route held under a release without acked (the
// column NULL) reads as not known to be acknowledged; released while its
// route is still async, it is delivered again from its stored request, as
// that release did. A release by the row's flag alone deleted it: its
// provider, told 202, never sends it again.
func TestReleaseOfAHeldDeliveryStoredBeforeAckedWasKeptDeliversIt(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			up, g, _ := heldAsyncEdited(t, driver, `UPDATE hookstamp_records SET acked = NULL WHERE "key" = 'evt_h'`)
			if st, body := releaseHeld(t, g); st != http.StatusOK || !strings.Contains(body, `"state":"queued"`) {
				t.Fatalf("release = %d %s, want 200, queued", st, body)
			}
			if rec := waitStateWithin(t, g, "evt_h", idempotency.StateDone, 30*time.Second); string(rec.Body) != `{"copy":2}` {
				t.Errorf("evt_h recorded %d %q, want the upstream's answer to the second copy", rec.Status, rec.Body)
			}
			if n := up.count("evt_h"); n != 2 {
				t.Errorf("the upstream got evt_h %d times, want 2 (the unanswered attempt, then the release's)", n)
			}
		})
	}
}
