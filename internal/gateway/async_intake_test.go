package gateway

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// An async intake claims by storing. A key still claimed on the
// synchronous path — the route was sync a moment ago, or a replica of an
// older hookstamp claimed it — is not stored behind that claim's back: the
// repeat waits for it as on a sync route, and a claim whose owner died is
// taken over by the intake.
func TestAsyncIntakeDefersToAKeyClaimedOnTheSyncPath(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	up := newUpstream(t)
	cfg := c.asyncConfig(t, up.URL, config.ScreenUnavailableStore)
	cfg.Routes[0].WaitTimeout = 300 * time.Millisecond
	g := startGatewayWith(t, cfg, asyncOptions(t))
	claim := func(key string, lease time.Duration) {
		t.Helper()
		got, err := g.Ledger().Claim(t0ctx, idempotency.ClaimRequest{Ref: idempotency.Ref{Route: "hooks", Key: key},
			Owner: "a-sync-replica", Lease: lease, Retention: time.Hour}, time.Now())
		if err != nil || got.Status != idempotency.Acquired {
			t.Fatalf("sync-path claim of %s: %v %v", key, got.Status, err)
		}
	}

	claim("evt_live", time.Minute)
	r := send(t, g, "/hooks", `{"id":"evt_live"}`)
	wantOutcome(t, r, http.StatusConflict, "conflict")
	if rec := lookup(t, g, "hooks", "evt_live"); rec.State != idempotency.StatePending || rec.Owner != "a-sync-replica" {
		t.Fatalf("the live claim became %s owned by %q: the intake stored behind it", rec.State, rec.Owner)
	}

	claim("evt_dead", 50*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_dead"}`), http.StatusAccepted, "accepted")
	waitState(t, g, "evt_dead", idempotency.StateDone)
	if n := up.count("evt_dead"); n != 1 {
		t.Fatalf("the taken-over key reached the upstream %d times, want 1", n)
	}
	if n := up.count("evt_live"); n != 0 {
		t.Fatalf("the key claimed elsewhere reached the upstream %d times from the queue, want 0", n)
	}
}

// The screen forgets; the ledger's queued row answers the repeat, on
// another replica, with the first acknowledgement and no second job.
func TestAsyncRepeatAfterTheScreenForgotIsAnsweredFromTheLedger(t *testing.T) {
	t.Parallel()
	c, _ := dedicatedCluster(t)
	up, release := heldUpstream(t)
	gws := c.asyncReplicas(t, 2, up.URL)
	rc := c.redisClient(t)

	first := send(t, gws[0], "/hooks", `{"id":"evt_forgot"}`)
	wantOutcome(t, first, http.StatusAccepted, "accepted")
	testenv.Eventually(t, 5*time.Second, "the acknowledgement in the screen", func() bool { return c.inScreen(t, rc, "evt_forgot") })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rc.FlushAll(ctx).Err(); err != nil {
		t.Fatalf("FLUSHALL on the dedicated server: %v", err)
	}
	again := send(t, gws[1], "/hooks", `{"id":"evt_forgot"}`)
	wantOutcome(t, again, http.StatusAccepted, "replayed")
	sameReply(t, first, again)
	testenv.Eventually(t, 5*time.Second, "the screen refilled from the ledger", func() bool { return c.inScreen(t, rc, "evt_forgot") })
	wantOutcome(t, send(t, gws[1], "/hooks", `{"id":"evt_forgot","amount":2}`), http.StatusUnprocessableEntity, "mismatch")

	close(release)
	waitState(t, gws[0], "evt_forgot", idempotency.StateDone)
	if n := up.count("evt_forgot"); n != 1 {
		t.Fatalf("upstream got evt_forgot %d times, want 1", n)
	}
}

// The screen is not needed to store an async delivery exactly once, but
// screen.on_unavailable still decides what happens while it is down.
func TestAsyncIntakeWithTheScreenDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode, outcome string
		status        int
	}{
		{config.ScreenUnavailableReject, "unavailable", http.StatusServiceUnavailable},
		{config.ScreenUnavailableStore, "accepted", http.StatusAccepted},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			c, rs := dedicatedCluster(t)
			up := newUpstream(t)
			g := startGatewayWith(t, c.asyncConfig(t, up.URL, tc.mode), asyncOptions(t))
			rs.Stop()
			wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_down"}`), tc.status, tc.outcome)
			if tc.status != http.StatusAccepted {
				return
			}
			wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_down"}`), http.StatusAccepted, "replayed")
			waitState(t, g, "evt_down", idempotency.StateDone)
			if n := up.count("evt_down"); n != 1 {
				t.Fatalf("upstream got evt_down %d times, want 1", n)
			}
		})
	}
}

// An async intake that stores over a claim whose owner died has taken it
// over, as a claim that does so has: the dead owner may have forwarded,
// so it is counted. A key stored afresh is not.
func TestAsyncIntakeOverAnExpiredClaimCountsATakeover(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, s *stores) {
		up := newUpstream(t)
		cfg := s.config(t, up.URL, asyncRoute, "")
		cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", asyncAdminToken
		g := startGatewayWith(t, cfg, asyncOptions(t))
		takeovers := func() string {
			t.Helper()
			m := regexp.MustCompile(`(?m)^hookstamp_takeovers_total\{route="hooks"\} (\S+)$`).FindStringSubmatch(scrape(t, g))
			if m == nil {
				return "absent"
			}
			return m[1]
		}

		wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_new"}`), http.StatusAccepted, "accepted")
		if n := takeovers(); n != "0" {
			t.Fatalf("takeovers after a key stored afresh = %s, want 0", n)
		}
		got, err := g.Ledger().Claim(t0ctx, idempotency.ClaimRequest{Ref: idempotency.Ref{Route: "hooks", Key: "evt_dead"},
			Owner: "a-dead-replica", Lease: 50 * time.Millisecond, Retention: time.Hour}, time.Now())
		if err != nil || got.Status != idempotency.Acquired {
			t.Fatalf("the dead replica's claim: %v %v", got.Status, err)
		}
		time.Sleep(100 * time.Millisecond)
		wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_dead"}`), http.StatusAccepted, "accepted")
		if n := takeovers(); n != "1" {
			t.Fatalf("takeovers after storing over the expired claim = %s, want 1", n)
		}
		waitState(t, g, "evt_dead", idempotency.StateDone)
		if n := up.count("evt_dead"); n != 1 {
			t.Fatalf("the taken-over key reached the upstream %d times, want 1", n)
		}

		// Another event's claim is not taken over by this body: stored
		// there, it would be delivered under that event's key.
		got, err = g.Ledger().Claim(t0ctx, idempotency.ClaimRequest{Ref: idempotency.Ref{Route: "hooks", Key: "evt_reused"},
			Owner: "a-dead-replica", Fingerprint: bytes.Repeat([]byte{7}, 32), Lease: 50 * time.Millisecond, Retention: time.Hour}, time.Now())
		if err != nil || got.Status != idempotency.Acquired {
			t.Fatalf("the dead replica's claim: %v %v", got.Status, err)
		}
		time.Sleep(100 * time.Millisecond)
		wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_reused"}`), http.StatusUnprocessableEntity, "mismatch")
		if n := takeovers(); n != "1" {
			t.Fatalf("takeovers after refusing another event's claim = %s, want 1", n)
		}
	})
}
