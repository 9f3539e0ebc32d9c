package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// Outages of the screen and the ledger (SPEC §6), made real: a dedicated
// redis-server the test kills and restarts or flushes, and a fault proxy
// between the gateway and PostgreSQL or Redis that cuts or hangs
// connections. The machine's shared servers are never touched.

// dedicatedCluster is the shared PostgreSQL (own schema) with a
// redis-server of the test's own.
func dedicatedCluster(tb testing.TB) (cluster, *testenv.RedisServer) {
	tb.Helper()
	rs := testenv.StartRedisServer(tb)
	return cluster{dsn: testenv.Postgres(tb), addrs: []string{rs.Addr}, prefix: "hs:"}, rs
}

// wantUnavailable checks a fail-closed answer: 503, Retry-After, outcome
// unavailable, as a problem document.
func wantUnavailable(tb testing.TB, r reply) {
	tb.Helper()
	wantOutcome(tb, r, 503, "unavailable")
	if r.header.Get("Retry-After") == "" {
		tb.Fatalf("503 without Retry-After")
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		tb.Fatalf("503 Content-Type %q, want a problem document", ct)
	}
}

// The screen forgets (FLUSHALL, restart without persistence); the ledger
// does not: repeats are replayed, never forwarded again.
func TestScreenLossReplaysFromLedger(t *testing.T) {
	t.Parallel()
	c, rs := dedicatedCluster(t)
	up := newUpstream(t)
	gws := c.replicas(t, 2, up.URL, config.ScreenUnavailableStore)
	rc := c.redisClient(t)

	first := send(t, gws[0], "/hooks", `{"id":"evt_lost"}`)
	wantOutcome(t, first, 200, "forwarded")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rc.FlushAll(ctx).Err(); err != nil {
		t.Fatalf("FLUSHALL on the dedicated server: %v", err)
	}
	again := send(t, gws[1], "/hooks", `{"id":"evt_lost"}`)
	wantOutcome(t, again, 200, "replayed")
	sameReply(t, first, again)
	if !c.inScreen(t, rc, "evt_lost") {
		t.Fatalf("the replay from the ledger did not refill the screen")
	}

	rs.Stop()
	rs.Start() // no persistence: an empty Redis
	if c.inScreen(t, rc, "evt_lost") {
		t.Fatalf("restarted Redis still holds the entry; the test proves nothing")
	}
	for _, g := range gws {
		r := send(t, g, "/hooks", `{"id":"evt_lost"}`)
		wantOutcome(t, r, 200, "replayed")
		sameReply(t, first, r)
	}
	if n := up.count("evt_lost"); n != 1 {
		t.Fatalf("upstream received evt_lost %d times after the screen lost it, want 1", n)
	}
}

// Redis unreachable, for each screen.on_unavailable, then back: the screen
// is used again without a restart.
func TestRedisUnreachable(t *testing.T) {
	t.Parallel()
	t.Run("store", func(t *testing.T) {
		t.Parallel()
		c, rs := dedicatedCluster(t)
		up := newUpstream(t)
		slowReceipts(up, 50*time.Millisecond)
		gws := c.replicas(t, 3, up.URL, config.ScreenUnavailableStore)
		rs.Stop()
		// Claims are pending ledger rows: still exactly once across replicas.
		exactlyOnceAcross(t, gws, up, "down", 20, 10)

		rs.Start()
		screenUsedAgain(t, c, gws[0], up, "evt_back")
	})
	t.Run("reject", func(t *testing.T) {
		t.Parallel()
		c, rs := dedicatedCluster(t)
		up := newUpstream(t)
		g := c.replicas(t, 1, up.URL, config.ScreenUnavailableReject)[0]
		rs.Stop()
		wantUnavailable(t, send(t, g, "/hooks", `{"id":"evt_rej"}`))
		if n := up.total.Load(); n != 0 {
			t.Fatalf("screen down in reject mode: upstream received %d deliveries, want 0", n)
		}
		rs.Start()
		screenUsedAgain(t, c, g, up, "evt_rej")
	})
	t.Run("pass", func(t *testing.T) {
		t.Parallel()
		c, rs := dedicatedCluster(t)
		up := newUpstream(t)
		g := c.replicas(t, 1, up.URL, config.ScreenUnavailablePass)[0]
		rs.Stop()
		first := send(t, g, "/hooks", `{"id":"evt_pass"}`)
		wantOutcome(t, first, 200, "passthrough")
		if n := up.count("evt_pass"); n != 1 {
			t.Fatalf("pass mode: upstream received %d, want 1", n)
		}
		// The ledger still answers: a recorded delivery is not forwarded twice.
		again := send(t, g, "/hooks", `{"id":"evt_pass"}`)
		wantOutcome(t, again, 200, "replayed")
		sameReply(t, first, again)
		rs.Start()
		screenUsedAgain(t, c, g, up, "evt_pass_back")
	})
}

// screenUsedAgain waits until the gateway's Redis client answers again
// (go-redis stops dialling a server that refused it PoolSize times and
// probes it once a second), then delivers a new key and checks that it was
// forwarded normally and claimed through the screen.
func screenUsedAgain(t *testing.T, c cluster, g *Gateway, up *upstream, key string) {
	t.Helper()
	p, ok := g.screen.(interface{ Ping(context.Context) error })
	if !ok {
		t.Fatalf("screen %T has no Ping", g.screen)
	}
	testenv.Eventually(t, 10*time.Second, "the gateway's Redis client to answer again", func() bool {
		return p.Ping(context.Background()) == nil
	})
	// Claims that failed while Redis was away may have opened the breaker:
	// after its cooldown, the next claim probes the screen.
	time.Sleep(idempotency.BreakerCooldown)
	body := fmt.Sprintf(`{"id":%q}`, key)
	wantOutcome(t, send(t, g, "/hooks", body), 200, "forwarded")
	if !c.inScreen(t, c.redisClient(t), key) {
		t.Fatalf("Redis is back but %s has no screen entry: the screen is not used again", key)
	}
	wantOutcome(t, send(t, g, "/hooks", body), 200, "replayed")
	if n := up.count(key); n != 1 {
		t.Fatalf("upstream received %s %d times, want 1", key, n)
	}
}

// Redis accepts connections and never answers: every call is bounded, so
// deliveries fall back to ledger claims in bounded time, and the screen is
// used again once Redis answers.
func TestRedisHangs(t *testing.T) {
	t.Parallel()
	addr, prefix := testenv.RedisPrefix(t)
	proxy := testenv.StartFaultProxy(t, addr)
	c := cluster{dsn: testenv.Postgres(t), addrs: []string{proxy.Addr}, prefix: prefix}
	up := newUpstream(t)
	g := c.replicas(t, 1, up.URL, config.ScreenUnavailableStore)[0]
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_h0"}`), 200, "forwarded")

	proxy.Hang()
	start := time.Now()
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_h1"}`), 200, "forwarded")
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("a hung Redis held the delivery %v; calls should give up after the 1s operation timeout", took)
	}
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_h1"}`), 200, "replayed")
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_h0"}`), 200, "replayed")

	// Three claims in a row failed: the breaker skips the screen, so the
	// next deliveries do not each wait out the 1s operation timeout (ten
	// of them would take 10s; a generous bound still tells the two apart).
	start = time.Now()
	const fast = 10
	for i := range fast {
		wantOutcome(t, send(t, g, "/hooks", fmt.Sprintf(`{"id":"evt_b%d"}`, i)), 200, "forwarded")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("%d deliveries took %v with Redis hung: the screen was asked each time", fast, took)
	}

	proxy.Restore()
	c.addrs = []string{addr} // look at Redis itself, not through the proxy
	screenUsedAgain(t, c, g, up, "evt_h2")
	if up.count("evt_h0") != 1 || up.count("evt_h1") != 1 {
		t.Fatalf("forwards: h0 %d, h1 %d, want 1 each", up.count("evt_h0"), up.count("evt_h1"))
	}
	for i := range fast {
		key := fmt.Sprintf("evt_b%d", i)
		wantOutcome(t, send(t, g, "/hooks", fmt.Sprintf(`{"id":%q}`, key)), 200, "replayed")
		if n := up.count(key); n != 1 {
			t.Fatalf("upstream received %s %d times, want 1", key, n)
		}
	}
}

// PostgreSQL unreachable (connections reset) or hung (never answers):
// 503 + Retry-After and nothing forwarded, in bounded time; recorded
// deliveries the screen remembers are still replayed; serving again when
// PostgreSQL is back, without a restart.
func TestPostgresUnreachable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fault func(p *testenv.FaultProxy)
		// bound is how long a delivery may wait for the ledger: the
		// ledger's 5s operation timeout, plus slack.
		bound time.Duration
	}{
		{"cut", (*testenv.FaultProxy).Cut, 3 * time.Second},
		{"hang", (*testenv.FaultProxy).Hang, 8 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr, prefix := testenv.RedisPrefix(t)
			dsn, proxy := postgresBehindProxy(t)
			c := cluster{dsn: dsn, addrs: []string{addr}, prefix: prefix}
			up := newUpstream(t)
			g := c.replicas(t, 1, up.URL, config.ScreenUnavailableStore)[0]
			recorded := send(t, g, "/hooks", `{"id":"evt_pg0"}`)
			wantOutcome(t, recorded, 200, "forwarded")

			tc.fault(proxy)
			start := time.Now()
			wantUnavailable(t, send(t, g, "/hooks", `{"id":"evt_pg1"}`))
			if took := time.Since(start); took > tc.bound {
				t.Fatalf("the ledger outage held the delivery %v, want at most %v", took, tc.bound)
			}
			if n := up.count("evt_pg1"); n != 0 {
				t.Fatalf("ledger down: upstream received %d, want 0 (fail closed)", n)
			}
			r := send(t, g, "/hooks", `{"id":"evt_pg0"}`)
			wantOutcome(t, r, 200, "replayed")
			sameReply(t, recorded, r)

			proxy.Restore()
			wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_pg1"}`), 200, "forwarded")
			wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_pg1"}`), 200, "replayed")
			if n := up.count("evt_pg1"); n != 1 {
				t.Fatalf("upstream received evt_pg1 %d times, want 1", n)
			}
		})
	}
}

// postgresBehindProxy gives the test its own schema, reached through a
// fault proxy.
func postgresBehindProxy(tb testing.TB) (string, *testenv.FaultProxy) {
	tb.Helper()
	u, err := url.Parse(testenv.Postgres(tb))
	if err != nil {
		tb.Fatalf("PostgreSQL DSN: %v", err)
	}
	proxy := testenv.StartFaultProxy(tb, u.Host)
	u.Host = proxy.Addr
	return u.String(), proxy
}

// Redis fails for one replica only (a partition, a timeout, a pool
// exhausted by a burst) while another holds a claim in it: the replica that
// falls back to a ledger claim must see that claim, not forward a second
// copy.
func TestPartialScreenOutage(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	proxy := testenv.StartFaultProxy(t, c.addrs[0])
	up, release := holdFirstCopy(t, "evt_split")
	b := startGateway(t, c.replicaConfig(t, up.URL, config.ScreenUnavailableStore))
	cut := c // replica a reaches Redis through the proxy
	cut.addrs = []string{proxy.Addr}
	cfgA := cut.replicaConfig(t, up.URL, config.ScreenUnavailableStore)
	cfgA.Routes[0].Inflight = config.InflightReject // answer at once instead of waiting
	a := startGateway(t, cfgA)

	first := make(chan reply, 1)
	go func() { first <- send(t, b, "/hooks", `{"id":"evt_split"}`) }()
	testenv.Eventually(t, 5*time.Second, "the first copy in flight through replica b", func() bool { return up.count("evt_split") == 1 })

	proxy.Cut() // replica a loses Redis; b keeps it
	wantOutcome(t, send(t, a, "/hooks", `{"id":"evt_split"}`), 409, "conflict")
	release()
	r := <-first
	wantOutcome(t, r, 200, "forwarded")
	again := send(t, a, "/hooks", `{"id":"evt_split"}`)
	wantOutcome(t, again, 200, "replayed")
	sameReply(t, r, again)
	if n := up.count("evt_split"); n != 1 {
		t.Fatalf("upstream received the event %d times, want 1", n)
	}
}

// The screen loses an in-flight claim (FLUSHALL while the first copy is at
// the upstream): a repeat on another replica finds the claim in the ledger
// and is not forwarded beside it.
func TestScreenLossDuringFlight(t *testing.T) {
	t.Parallel()
	c, _ := dedicatedCluster(t)
	up, release := holdFirstCopy(t, "evt_flush")
	a := startGateway(t, c.replicaConfig(t, up.URL, config.ScreenUnavailableStore))
	cfgB := c.replicaConfig(t, up.URL, config.ScreenUnavailableStore)
	cfgB.Routes[0].Inflight = config.InflightReject // answer at once instead of waiting
	b := startGateway(t, cfgB)

	first := make(chan reply, 1)
	go func() { first <- send(t, a, "/hooks", `{"id":"evt_flush"}`) }()
	testenv.Eventually(t, 5*time.Second, "the first copy in flight", func() bool { return up.count("evt_flush") == 1 })
	rc := c.redisClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rc.FlushAll(ctx).Err(); err != nil {
		t.Fatalf("FLUSHALL on the dedicated server: %v", err)
	}
	wantOutcome(t, send(t, b, "/hooks", `{"id":"evt_flush"}`), 409, "conflict")
	release()
	r := <-first
	wantOutcome(t, r, 200, "forwarded")
	again := send(t, b, "/hooks", `{"id":"evt_flush"}`)
	wantOutcome(t, again, 200, "replayed")
	sameReply(t, r, again)
	if n := up.count("evt_flush"); n != 1 {
		t.Fatalf("upstream received the event %d times, want 1", n)
	}
}

// A screen claim whose answer was lost — Redis ran it, the reply never
// came within the operation timeout — is replaced by a ledger claim
// (screen.on_unavailable: store). When that delivery is recorded, the claim
// left in the screen must be settled too: left alone, it would answer every
// repeat at another replica 409 until its lease ran out.
func TestLostScreenClaimAnswer(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	proxy := testenv.StartFaultProxy(t, c.addrs[0])
	up, release := holdFirstCopy(t, "evt_lost_answer")
	cfgB := c.replicaConfig(t, up.URL, config.ScreenUnavailableStore)
	cfgB.Routes[0].Inflight = config.InflightReject // answer at once instead of waiting
	b := startGateway(t, cfgB)
	slow := c // replica a reaches Redis through the proxy
	slow.addrs = []string{proxy.Addr}
	a := startGateway(t, slow.replicaConfig(t, up.URL, config.ScreenUnavailableStore))
	rc := c.redisClient(t)
	// A first delivery loads the screen's scripts into Redis: a NOSCRIPT
	// round trip would not be the claim the proxy mutes.
	wantOutcome(t, send(t, a, "/hooks", `{"id":"evt_warm"}`), 200, "forwarded")
	testenv.Eventually(t, 5*time.Second, "evt_warm marked done in the screen", func() bool {
		s, _ := rc.HGet(context.Background(), c.prefix+"hooks:evt_warm", "s").Result()
		return s == "d"
	})

	// The claim reaches Redis and runs; its answer is dropped.
	proxy.MuteAfter([]byte("evt_lost_answer"))
	first := make(chan reply, 1)
	go func() { first <- send(t, a, "/hooks", `{"id":"evt_lost_answer"}`) }()
	testenv.Eventually(t, 5*time.Second, "the first copy forwarded on a ledger claim", func() bool { return up.count("evt_lost_answer") == 1 })
	proxy.Restore()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if s, err := rc.HGet(ctx, c.prefix+"hooks:evt_lost_answer", "s").Result(); err != nil || s != "f" {
		t.Fatalf("the screen does not hold the claim whose answer was lost (state %q, %v); the test proves nothing", s, err)
	}
	wantOutcome(t, send(t, b, "/hooks", `{"id":"evt_lost_answer"}`), 409, "conflict")

	release()
	r := <-first
	wantOutcome(t, r, 200, "forwarded")
	// The claim left in Redis is settled in the background, at once.
	var again reply
	testenv.Eventually(t, 5*time.Second, "a repeat at replica b replayed", func() bool {
		again = send(t, b, "/hooks", `{"id":"evt_lost_answer"}`)
		return again.header.Get("Hookstamp-Outcome") == "replayed"
	})
	wantOutcome(t, again, 200, "replayed")
	sameReply(t, r, again)
	if n := up.count("evt_lost_answer"); n != 1 {
		t.Fatalf("upstream received the event %d times, want 1", n)
	}
}

// holdFirstCopy is an upstream that holds the first copy of key until
// release is called (at the latest when the test ends) and answers every
// other request at once, each copy with its own body.
func holdFirstCopy(tb testing.TB, key string) (up *upstream, release func()) {
	tb.Helper()
	hold := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	up = newUpstream(tb)
	tb.Cleanup(release)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 && r.Header.Get("Idempotency-Key") == key {
			<-hold
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"copy":%d}`, n)
	})
	return up, release
}

// A replica that starts while PostgreSQL is unreachable serves anyway
// (intake answers 503) and starts its delivery queue once the database is
// back: a replica that stopped instead would take its share of traffic
// down with it.
func TestAsyncReplicaStartsWhilePostgresIsDown(t *testing.T) {
	t.Parallel()
	dsn, proxy := postgresBehindProxy(t)
	up := newUpstream(t)
	cfg := gwConfig(t, up.URL, "unused", asyncRoute, "")
	cfg.Store.Driver, cfg.Store.DSN = config.StorePostgres, dsn
	migrated := startGatewayWith(t, cfg, asyncOptions(t))
	if err := migrated.Shutdown(t0ctx); err != nil {
		t.Fatalf("shut the migrating replica down: %v", err)
	}

	proxy.Cut()
	cfg.Store.AutoMigrate = false
	g := startGatewayWith(t, cfg, asyncOptions(t))
	wantUnavailable(t, send(t, g, "/hooks", `{"id":"evt_down"}`))

	proxy.Restore()
	testenv.Eventually(t, 20*time.Second, "an acknowledgement once PostgreSQL is back", func() bool {
		return send(t, g, "/hooks", `{"id":"evt_down"}`).status == http.StatusAccepted
	})
	waitState(t, g, "evt_down", idempotency.StateDone)
	if n := up.count("evt_down"); n != 1 {
		t.Fatalf("upstream received evt_down %d times, want 1", n)
	}
}
