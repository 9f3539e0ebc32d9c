package gateway

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// PostgreSQL goes away while the upstream processes a delivery, and comes
// back a moment later. SPEC §1: the provider gets the upstream's answer
// (commit failure). Then the gateway keeps trying to record it: the ledger
// ends up holding the record, and the provider's retry after the claim's
// lease — with no screen, or with a screen that forgot the entry (a flush)
// — is replayed. Before, the expired pending row was taken over and the
// upstream booked the event a second time.
func TestCommitLostToAPostgresOutageIsRecordedOnceItIsBack(t *testing.T) {
	t.Parallel()
	for _, screen := range []string{config.ScreenNone, config.ScreenRedis} {
		t.Run(screen, func(t *testing.T) {
			t.Parallel()
			dsn, proxy := postgresBehindProxy(t)
			c := cluster{dsn: dsn}
			var flush func()
			if screen == config.ScreenRedis {
				rs := testenv.StartRedisServer(t) // a server of its own: flushed below
				c.addrs, c.prefix = []string{rs.Addr}, "hs:"
				flush = func() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					if err := c.redisClient(t).FlushAll(ctx).Err(); err != nil {
						t.Fatalf("FLUSHALL on the dedicated server %s: %v", rs.Addr, err)
					}
				}
			}
			up, release := heldUpstream(t)
			cfg := c.replicaConfig(t, up.URL, config.ScreenUnavailableStore)
			cfg.Screen.Driver = screen
			cfg.Screen.Lease = 3 * time.Second
			g := startGateway(t, cfg)

			const key = "evt_commit_in_outage"
			body := `{"id":"` + key + `"}`
			first := make(chan reply, 1)
			go func() { first <- send(t, g, "/hooks", body) }()
			testenv.Eventually(t, 5*time.Second, "the delivery at the upstream", func() bool { return up.count(key) == 1 })
			proxy.Cut() // PostgreSQL gone while the upstream books the event
			close(release)
			r := <-first
			wantOutcome(t, r, http.StatusOK, "forwarded") // SPEC §1: processed, so answered

			time.Sleep(700 * time.Millisecond)
			proxy.Restore()
			testenv.Eventually(t, 10*time.Second, "the ledger to hold the record", func() bool {
				rec, err := g.Ledger().Lookup(context.Background(), idempotency.Ref{Route: "hooks", Key: key})
				return err == nil && rec.State == idempotency.StateDone
			})
			if flush != nil {
				flush()
			}
			time.Sleep(cfg.Screen.Lease) // the first claim's lease is over
			again := send(t, g, "/hooks", body)
			wantOutcome(t, again, http.StatusOK, "replayed")
			sameReply(t, r, again)
			if n := up.count(key); n != 1 {
				t.Fatalf("upstream received %s %d times, want 1", key, n)
			}
		})
	}
}
