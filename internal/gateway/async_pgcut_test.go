package gateway

import (
	"database/sql"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/faultproxy"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// proxiedCluster is sharedCluster with PostgreSQL reached through a fault
// proxy, which the test cuts; direct is the schema's DSN without it.
func proxiedCluster(tb testing.TB) (c cluster, pg *faultproxy.Proxy, direct string) {
	tb.Helper()
	c = sharedCluster(tb)
	direct = c.dsn
	u, err := url.Parse(c.dsn)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := faultproxy.New("postgres", u.Host)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	c.dsn = u.String()
	return c, p, direct
}

// asyncOnProxy starts a gateway with the async route "hooks" on c. Its
// lease is short: a claim whose release the cut prevented soon expires.
func asyncOnProxy(tb testing.TB, c cluster, upstreamURL string) *Gateway {
	tb.Helper()
	cfg := c.asyncConfig(tb, upstreamURL, "store")
	cfg.Screen.Lease = 3 * time.Second
	return startGatewayWith(tb, cfg, asyncOptions(tb))
}

// keepSending calls send(w, i) for i = 0, 1, … on each of workers
// goroutines until send returns false or stop is called; stop waits for
// them.
func keepSending(workers int, send func(w, i int) bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if !send(w, i) {
					return
				}
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

// postEvent sends one event and returns its status, 0 when nothing came back.
func postEvent(g *Gateway, key string) int {
	resp, err := client.Post(g.URL()+"/hooks", "application/json", strings.NewReader(fmt.Sprintf(`{"id":%q}`, key)))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Cut under intake transactions: an intake that could not store its
// delivery answers 503, and every delivery acknowledged is in the ledger
// and reaches the upstream. The provider's retries of the refused ones
// are then stored and delivered too.
func TestAsyncPostgresCutDuringIntake(t *testing.T) {
	c, pg, _ := proxiedCluster(t)
	up := newUpstream(t)
	g := asyncOnProxy(t, c, up.URL)
	// Slowed, each intake's transaction stays open a while: the cut lands
	// inside some.
	pg.Slow(10 * time.Millisecond)
	var mu sync.Mutex
	status := map[string]int{}
	stop := keepSending(8, func(w, i int) bool {
		key := fmt.Sprintf("evt_%d_%d", w, i)
		code := postEvent(g, key)
		mu.Lock()
		status[key] = code
		mu.Unlock()
		return true
	})
	time.Sleep(300 * time.Millisecond)
	pg.Cut()
	time.Sleep(time.Second)
	pg.Restore()
	time.Sleep(300 * time.Millisecond)
	stop()

	var acked, refused []string
	for key, code := range status {
		switch code {
		case http.StatusAccepted:
			acked = append(acked, key)
		case http.StatusServiceUnavailable:
			refused = append(refused, key)
		default:
			t.Errorf("%s answered %d, want 202 (stored) or 503 (not stored)", key, code)
		}
	}
	if len(refused) == 0 || len(acked) == 0 {
		t.Fatalf("%d acknowledged, %d refused: the cut did not fall among intakes", len(acked), len(refused))
	}
	// A refused intake whose claim the cut kept from being released is
	// refused (409) until its lease runs out; a provider retries.
	for _, key := range refused {
		testenv.Eventually(t, 15*time.Second, "the provider's retry of "+key+" acknowledged", func() bool {
			return postEvent(g, key) == http.StatusAccepted
		})
	}
	// A run whose failure River could not record while the database was
	// cut stays running until River's rescuer, every 30s, takes it back.
	for _, key := range append(acked, refused...) {
		waitStateWithin(t, g, key, idempotency.StateDone, time.Minute)
		if n := up.count(key); n != 1 {
			t.Errorf("upstream got %s %d times, want once", key, n)
		}
	}
	t.Logf("%d acknowledged, %d refused during the cut", len(acked), len(refused))
}

// Cut while attempts settle: the upstream has answered, the ledger is
// gone past each run's horizon. Each record still ends done, with the
// upstream's answer, and none reaches the upstream twice: the replica
// kept each answer it could not record, and the job's next run records
// it instead of sending the delivery again (it was sent twice, with the
// same key).
func TestAsyncPostgresCutDuringCompletion(t *testing.T) {
	c, pg, _ := proxiedCluster(t)
	up, release := heldUpstream(t)
	g := asyncOnProxy(t, c, up.URL)
	keys := []string{"evt_a", "evt_b", "evt_c", "evt_d"}
	for _, key := range keys {
		if code := postEvent(g, key); code != http.StatusAccepted {
			t.Fatalf("%s answered %d, want 202", key, code)
		}
	}
	testenv.Eventually(t, 10*time.Second, "every attempt at the upstream", func() bool {
		for _, key := range keys {
			if up.count(key) == 0 {
				return false
			}
		}
		return true
	})
	pg.Cut()
	close(release) // the answers come back to a gateway without its ledger
	time.Sleep(2 * time.Second)
	pg.Restore()
	for _, key := range keys {
		rec := waitState(t, g, key, idempotency.StateDone)
		if n := up.count(key); n != 1 {
			t.Errorf("upstream got %s %d times, want once", key, n)
		}
		if rec.Status != http.StatusOK {
			t.Errorf("%s recorded %d, want the upstream's 200", key, rec.Status)
		}
	}
}

// The reply to the settling statement is lost: PostgreSQL ran it (the
// record done, the attempt stored, the job deleted) and the gateway never
// heard. It tries again until it does, and the delivery keeps one attempt
// and reached the upstream once.
func TestAsyncSettlementWhoseReplyWasLostIsStoredOnce(t *testing.T) {
	t.Parallel()
	c, pg, direct := proxiedCluster(t)
	up, release := heldUpstream(t)
	cfg := c.asyncConfig(t, up.URL, "store")
	cfg.Admin.Listen = "127.0.0.1:0" // for /metrics
	o := asyncOptions(t)
	// The run tries again until its horizon, upstream.timeout plus three
	// quarters of the margin: past the mute below.
	o.RescueMargin = 20 * time.Second
	g := startGatewayWith(t, cfg, o)
	db, err := sql.Open("pgx", direct)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if code := postEvent(g, "evt_lost"); code != http.StatusAccepted {
		t.Fatalf("answered %d, want 202", code)
	}
	testenv.Eventually(t, 10*time.Second, "the attempt at the upstream", func() bool { return up.count("evt_lost") == 1 })
	// The settling statement is the first after the answer to carry the
	// key (a bound parameter); the connection it runs on, and any that
	// asks after it since, hears nothing back.
	pg.MuteAfter([]byte("evt_lost"))
	close(release)
	testenv.Eventually(t, 10*time.Second, "the settlement to run unheard", func() bool {
		var state string
		err := db.QueryRow(`SELECT state FROM hookstamp_records WHERE route = 'hooks' AND "key" = 'evt_lost'`).Scan(&state)
		return err == nil && state == string(idempotency.StateDone)
	})
	// Past the ledger's timeout the gateway tries again, unheard too.
	time.Sleep(sqlledger.DefaultOpTimeout + time.Second)
	pg.Restore()
	testenv.Eventually(t, 30*time.Second, "the settlement to be heard", func() bool {
		return strings.Contains(scrape(t, g), `hookstamp_delivery_attempts_total{result="delivered",route="hooks"} 1`)
	})
	var jobs int
	if err := db.QueryRow(`SELECT COUNT(*) FROM river_job`).Scan(&jobs); err != nil || jobs != 0 {
		t.Fatalf("river_job holds %d jobs (%v), want none", jobs, err)
	}
	attempts, err := g.Ledger().Attempts(t.Context(), idempotency.Ref{Route: "hooks", Key: "evt_lost"})
	if err != nil {
		t.Fatal(err)
	}
	if len(attempts) != 1 || attempts[0].Status != http.StatusOK {
		t.Fatalf("attempts %+v, want the one delivery's (200)", attempts)
	}
	if n := up.count("evt_lost"); n != 1 {
		t.Fatalf("upstream got %d copies, want 1", n)
	}
}

// With store.on_unavailable: pass, an async route whose ledger cannot
// store a delivery forwards it at once, as a synchronous route would:
// the provider gets the upstream's own answer (outcome passthrough)
// instead of a 503 that a provider without retries (GitHub) never sends
// again. Whether the screen could be read first or not, the same answer.
func TestAsyncLedgerDownPassForwardsAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, redis string }{
		{"screen read first", ""},
		{"screen down too", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))}, // nothing listens
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, pg, _ := proxiedCluster(t)
			up := newUpstream(t)
			cfg := c.asyncConfig(t, up.URL, "store")
			cfg.Store.OnUnavailable = config.StoreUnavailablePass
			if tc.redis != "" {
				cfg.Screen.Redis.Addrs = []string{tc.redis}
			}
			g := startGatewayWith(t, cfg, asyncOptions(t))
			pg.Cut()
			r := send(t, g, "/hooks", `{"id":"evt_pass"}`)
			wantOutcome(t, r, http.StatusOK, "passthrough")
			if !strings.Contains(string(r.body), `"key":"evt_pass","n":1`) {
				t.Fatalf("answer %q, want the upstream's", r.body)
			}
			if n := up.count("evt_pass"); n != 1 {
				t.Fatalf("upstream got evt_pass %d times, want 1", n)
			}
		})
	}
}

// A ledger that refuses writes but answers reads (a standby during a
// failover) still knows what it stored: a repeat of a stored async
// delivery gets its acknowledgement, whatever store.on_unavailable says,
// and is never forwarded at once beside the queue's delivery.
func TestAsyncReadOnlyLedgerStillAcknowledgesStored(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{config.StoreUnavailableReject, config.StoreUnavailablePass} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			c := sharedCluster(t)
			up := newUpstream(t)
			start := func(name, dsn string) *Gateway {
				cfg := c.asyncConfig(t, up.URL, "store")
				cfg.Store.DSN, cfg.Store.OnUnavailable = dsn, mode
				cfg.Screen.Prefix += name + ":" // a screen of its own: the standby's knows nothing
				return startGatewayWith(t, cfg, asyncOptions(t))
			}
			writer := start("writer", c.dsn)
			first := send(t, writer, "/hooks", `{"id":"evt_ro_async"}`)
			wantOutcome(t, first, http.StatusAccepted, "accepted")
			waitState(t, writer, "evt_ro_async", idempotency.StateDone)

			ro := start("standby", c.dsn+"&default_transaction_read_only=on")
			again := send(t, ro, "/hooks", `{"id":"evt_ro_async"}`)
			wantOutcome(t, again, http.StatusAccepted, "replayed")
			sameReply(t, first, again)
			if n := up.count("evt_ro_async"); n != 1 {
				t.Fatalf("upstream got the stored event %d times, want 1", n)
			}
		})
	}
}
