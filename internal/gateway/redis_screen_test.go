package gateway

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// The first delivery is recorded in the ledger, but marking its screen
// entry done fails (replica a loses Redis just after the upstream
// answered): a repeat at replica b is a repeat of a recorded delivery and
// must be replayed (inflight wait: once the wait is over; reject: at once),
// not answered 409 while the stale claim's lease runs.
func TestRepeatAfterFailedScreenCompleteIsReplayed(t *testing.T) {
	c := sharedCluster(t)
	proxy := testenv.StartFaultProxy(t, c.addrs[0])
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			proxy.Cut() // replica a cannot reach Redis from here on
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"n":%d}`, n)
	})
	slow := c
	slow.addrs = []string{proxy.Addr}
	a := startGateway(t, slow.replicaConfig(t, up.URL, config.ScreenUnavailableStore))
	for _, inflight := range []string{config.InflightWait, config.InflightReject} {
		t.Run(inflight, func(t *testing.T) {
			key := "evt_nocomplete_" + inflight
			body := fmt.Sprintf(`{"id":%q}`, key)
			cfgB := c.replicaConfig(t, up.URL, config.ScreenUnavailableStore)
			cfgB.Routes[0].Inflight = inflight
			cfgB.Routes[0].WaitTimeout = 2 * time.Second
			b := startGateway(t, cfgB)

			first := send(t, a, "/hooks", body)
			wantOutcome(t, first, 200, "forwarded")
			proxy.Restore()
			if rec := lookup(t, a, "hooks", key); rec.State != "done" {
				t.Fatalf("ledger row %s, want done", rec.State)
			}
			for range 2 { // the second finds the screen entry refilled
				again := send(t, b, "/hooks", body)
				wantOutcome(t, again, 200, "replayed")
				sameReply(t, first, again)
			}
			if n := up.count(key); n != 1 {
				t.Fatalf("upstream received the event %d times, want 1", n)
			}
		})
	}
}

// An ACL user granted the prefix's keys but no pub/sub channel (Redis 7's
// default for new users): the retry of a delivery whose gateway died is
// forwarded once the dead claim's lease is over (SPEC §6), not refused
// with 503 because the takeover's wake-up message may not be published.
func TestRedisACLUserWithoutChannelsTakesOver(t *testing.T) {
	c, srv := dedicatedCluster(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "hs", "on", ">s3cret", "resetchannels", "~hs:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t)
	cfg := c.replicaConfig(t, up.URL, config.ScreenUnavailableReject)
	cfg.Screen.Redis.Username, cfg.Screen.Redis.Password = "hs", "s3cret"
	g := startGateway(t, cfg)
	// The claim of a gateway killed mid-flight, its lease just over.
	key := c.prefix + "hooks:evt_acl_takeover"
	deadline := time.Now().Add(-time.Second).UnixMilli()
	if err := admin.HSet(ctx, key, "s", "f", "o", "dead-owner", "u", deadline, "f", "").Err(); err != nil {
		t.Fatal(err)
	}
	admin.PExpire(ctx, key, time.Minute)
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_acl_takeover"}`), 200, "forwarded")
	if n := up.count("evt_acl_takeover"); n != 1 {
		t.Fatalf("upstream received %d copies, want 1", n)
	}
}

// screen.on_unavailable reject: the screen loses the in-flight claim
// (FLUSHALL while the first copy is at the upstream); a repeat at another
// replica must not be forwarded beside it — lease takeover is the one
// place the upstream may see a second copy (SPEC §1).
func TestScreenLossDuringFlightWithoutStoreFallback(t *testing.T) {
	for _, mode := range []string{config.ScreenUnavailableReject, config.ScreenUnavailablePass} {
		t.Run(mode, func(t *testing.T) {
			c, _ := dedicatedCluster(t)
			up, release := holdFirstCopy(t, "evt_flush_rej")
			a := startGateway(t, c.replicaConfig(t, up.URL, mode))
			cfgB := c.replicaConfig(t, up.URL, mode)
			cfgB.Routes[0].Inflight = config.InflightReject
			b := startGateway(t, cfgB)
			first := make(chan reply, 1)
			go func() { first <- send(t, a, "/hooks", `{"id":"evt_flush_rej"}`) }()
			testenv.Eventually(t, 5*time.Second, "the first copy in flight", func() bool { return up.count("evt_flush_rej") == 1 })
			if err := c.redisClient(t).FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			r2 := send(t, b, "/hooks", `{"id":"evt_flush_rej"}`)
			release()
			r := <-first
			wantOutcome(t, r, 200, "forwarded")
			if n := up.count("evt_flush_rej"); n != 1 {
				t.Fatalf("upstream received the event %d times, want 1 (repeat got %d %s)", n, r2.status, r2.outcome())
			}
			wantOutcome(t, r2, 409, "conflict")
		})
	}
}
