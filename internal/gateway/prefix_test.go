package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency/redisscreen"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// Two deployments, each with a ledger of its own, on one Redis (SPEC §5:
// the screen's prefix is claimed for one ledger).

// deploymentConfig is gwConfig with the Redis screen at addr under
// prefix, on a ledger of its own (driver sqlite: a file; postgres: a
// schema), with the in-process cache off so that repeats reach the screen.
func deploymentConfig(tb testing.TB, upstreamURL, driver, addr, prefix string) *config.Config {
	tb.Helper()
	cfg := gwConfig(tb, upstreamURL, dbPath(tb), "", "")
	onStore(tb, cfg, driver)
	cfg.Screen.Driver = config.ScreenRedis
	cfg.Screen.Redis.Addrs = []string{addr}
	cfg.Screen.Prefix = prefix
	cfg.Screen.LocalCache = 0
	return cfg
}

// loggerTo logs at warn level to the test's log and to logs.
func loggerTo(tb testing.TB, logs *testenv.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.MultiWriter(logs, &tbWriter{tb: tb}), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// marker is what the prefix's marker key holds ("" when none).
func marker(tb testing.TB, rc redis.UniversalClient, prefix string) string {
	tb.Helper()
	v, err := rc.Get(context.Background(), MarkerKey(prefix)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		tb.Fatalf("GET %s: %v", MarkerKey(prefix), err)
	}
	return v
}

func deploymentOf(tb testing.TB, g *Gateway) string {
	tb.Helper()
	id, err := g.Ledger().Deployment(context.Background())
	if err != nil {
		tb.Fatalf("the ledger's deployment identity: %v", err)
	}
	return id
}

// The reviewer's case: deployments A and B, ledgers of their own, one
// Redis, the default prefix for both, a route of the same name; A
// forwards evt_1. B must not start on A's prefix, where it would answer
// evt_1 with A's answer and its upstream never get it; under a prefix of
// its own it forwards evt_1 to its upstream.
func TestSecondDeploymentOnAPrefixIsRefused(t *testing.T) {
	for _, driver := range []string{config.StoreSQLite, config.StorePostgres} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			addr, prefix := testenv.RedisPrefix(t)
			upA, upB := newUpstream(t), newUpstream(t)
			a := startGateway(t, deploymentConfig(t, upA.URL, driver, addr, prefix))
			wantOutcome(t, send(t, a, "/hooks", `{"id":"evt_1"}`), http.StatusOK, "forwarded")

			cfgB := deploymentConfig(t, upB.URL, driver, addr, prefix)
			b, err := New(context.Background(), cfgB, Options{Logger: testLogger(t)})
			if err == nil {
				t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
				r := send(t, startedGateway(t, b), "/hooks", `{"id":"evt_1"}`)
				t.Fatalf("deployment B started on deployment A's screen.prefix (evt_1: %s, B's upstream got it %d times)", r.outcome(), upB.count("evt_1"))
			}
			if !errors.Is(err, ErrPrefixTaken) {
				t.Fatalf("B's start: %v, want ErrPrefixTaken", err)
			}
			for _, want := range []string{deploymentOf(t, a), "screen.prefix of its own", "DEL " + MarkerKey(prefix)} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal does not say %q: %v", want, err)
				}
			}

			cfgB.Screen.Prefix = prefix + "b:"
			b = startGateway(t, cfgB)
			wantOutcome(t, send(t, b, "/hooks", `{"id":"evt_1"}`), http.StatusOK, "forwarded")
			if n := upB.count("evt_1"); n != 1 {
				t.Fatalf("B's upstream received evt_1 %d times, want 1", n)
			}
		})
	}
}

// startedGateway starts g, made by New.
func startedGateway(tb testing.TB, g *Gateway) *Gateway {
	tb.Helper()
	if err := g.Start(); err != nil {
		tb.Fatalf("gateway.Start: %v", err)
	}
	return g
}

// Replicas of one deployment share its ledger, so they claim the prefix
// for the same identity: both start, and share the screen.
func TestReplicasOfOneDeploymentShareThePrefix(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	up := newUpstream(t)
	gws := c.replicas(t, 2, up.URL, config.ScreenUnavailableReject)
	if got, want := marker(t, c.redisClient(t), c.prefix), deploymentOf(t, gws[0]); got != want || want == "" {
		t.Fatalf("marker %q, want the ledger's deployment %q", got, want)
	}
	first := send(t, gws[0], "/hooks", `{"id":"evt_replicas"}`)
	wantOutcome(t, first, http.StatusOK, "forwarded")
	again := send(t, gws[1], "/hooks", `{"id":"evt_replicas"}`)
	wantOutcome(t, again, http.StatusOK, "replayed")
	sameReply(t, first, again)
}

// A Redis that lost the marker (FLUSHALL here) gets it again from the
// running gateway's check, so that another deployment starting after is
// still refused; and from the next start.
func TestLostPrefixMarkerIsSetAgain(t *testing.T) {
	t.Parallel()
	c, _ := dedicatedCluster(t)
	rc := c.redisClient(t)
	up := newUpstream(t)
	a := startGatewayWith(t, c.replicaConfig(t, up.URL, config.ScreenUnavailableStore),
		Options{Logger: testLogger(t), PrefixCheck: 50 * time.Millisecond})
	id := deploymentOf(t, a)
	if err := rc.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the marker set again after FLUSHALL", func() bool { return marker(t, rc, c.prefix) == id })
	other := deploymentConfig(t, up.URL, config.StorePostgres, c.addrs[0], c.prefix)
	if _, err := New(context.Background(), other, Options{Logger: testLogger(t)}); !errors.Is(err, ErrPrefixTaken) {
		t.Fatalf("another deployment after the flush: %v, want ErrPrefixTaken", err)
	}

	shutdownGateway(t, a)
	if err := rc.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	startGateway(t, c.replicaConfig(t, up.URL, config.ScreenUnavailableStore))
	if got := marker(t, rc, c.prefix); got != id {
		t.Fatalf("marker after a start on a flushed Redis %q, want %q", got, id)
	}
}

// Redis unreachable at start: the gateway starts as before (the guard
// does not block it), and claims the prefix once Redis answers. It finds
// another deployment's marker there: it logs the refusal, reports it on
// /readyz, and does not use the screen, so that the event the other
// deployment forwarded reaches this one's upstream instead of being
// answered with the other's answer.
func TestPrefixClaimedOnceRedisAnswers(t *testing.T) {
	t.Parallel()
	addr, prefix := testenv.RedisPrefix(t)
	upA, upB := newUpstream(t), newUpstream(t)
	a := startGateway(t, deploymentConfig(t, upA.URL, config.StorePostgres, addr, prefix))
	wantOutcome(t, send(t, a, "/hooks", `{"id":"evt_1"}`), http.StatusOK, "forwarded")

	proxy := testenv.StartFaultProxy(t, addr)
	proxy.Cut()
	cfgB := deploymentConfig(t, upB.URL, config.StorePostgres, proxy.Addr, prefix)
	cfgB.Screen.OnUnavailable = config.ScreenUnavailableStore
	cfgB.Admin.Listen, cfgB.Admin.Token = "127.0.0.1:0", asyncAdminToken
	logs := &testenv.Buffer{}
	start := time.Now()
	b := startGatewayWith(t, cfgB, Options{Logger: loggerTo(t, logs)})
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("start with Redis unreachable took %v", took)
	}
	proxy.Restore()
	// B's screen client answers again: without the guard, B's repeat
	// would be answered from A's entry.
	testenv.Eventually(t, 10*time.Second, "B's Redis client to answer", func() bool {
		return b.screen.(*redisscreen.Screen).Ping(context.Background()) == nil
	})
	r := send(t, b, "/hooks", `{"id":"evt_1"}`)
	wantOutcome(t, r, http.StatusOK, "forwarded")
	if n := upB.count("evt_1"); n != 1 {
		t.Fatalf("B's upstream received evt_1 %d times, want 1", n)
	}
	status, body := get(t, "http://"+b.AdminAddr()+"/readyz")
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "claimed by another deployment") {
		t.Fatalf("/readyz of B: %d %s, want 503 naming the other deployment's claim", status, body)
	}
	if line := lastLogLine(logs, "level=ERROR"); !strings.Contains(line, "DEL "+MarkerKey(prefix)) {
		t.Fatalf("no error logged naming the way out; logs:\n%s", logs)
	}
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	if got, want := marker(t, rc, prefix), deploymentOf(t, a); got != want {
		t.Fatalf("marker %q, want A's %q", got, want)
	}
}

// A ledger of an earlier release (no hookstamp_meta: auto_migrate off,
// gateway migrate not run) does not block the start: the gateway warns
// that nothing guards its prefix, as nothing did before.
func TestLedgerWithoutIdentityStartsWithAWarning(t *testing.T) {
	t.Parallel()
	addr, prefix := testenv.RedisPrefix(t)
	up := newUpstream(t)
	startGateway(t, deploymentConfig(t, up.URL, config.StoreSQLite, addr, prefix)) // another deployment's marker

	cfg := deploymentConfig(t, up.URL, config.StoreSQLite, addr, prefix+"setup:")
	old := startGateway(t, cfg) // migrates its ledger
	w, err := old.Ledger().Writer()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Exec("DROP TABLE " + sqlledger.MetaTable); err != nil {
		t.Fatal(err)
	}
	shutdownGateway(t, old)
	cfg.Store.AutoMigrate, cfg.Screen.Prefix = false, prefix
	logs := &testenv.Buffer{}
	g := startGatewayWith(t, cfg, Options{Logger: loggerTo(t, logs)})
	if !strings.Contains(logs.String(), "no deployment identity") {
		t.Fatalf("no warning that the prefix is not guarded; logs:\n%s", logs)
	}
	wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_old"}`), http.StatusOK, "forwarded")
}

// A Redis user the ACL lets read the marker but not write it cannot claim
// the prefix, yet still learns whose it is: B is refused on A's prefix.
// It was let start (the guard off) whatever the marker said.
func TestPrefixReadableButNotWritableStillRefusesAnother(t *testing.T) {
	addr, prefix := testenv.RedisPrefix(t)
	up := newUpstream(t)
	a := startGateway(t, deploymentConfig(t, up.URL, config.StoreSQLite, addr, prefix))
	rc := redis.NewClient(&redis.Options{Addr: addr})
	user := "hs_" + strings.ReplaceAll(prefix, ":", "_")
	t.Cleanup(func() {
		_ = rc.Do(context.Background(), "ACL", "DELUSER", user).Err()
		_ = rc.Close()
	})
	// Every key of the prefix but the marker, which it may only read.
	if err := rc.Do(context.Background(), "ACL", "SETUSER", user, "on", ">pw-"+user, "resetkeys",
		"~"+prefix+"[^d]*", "%R~"+MarkerKey(prefix), "&*", "+@all").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}

	cfgB := deploymentConfig(t, up.URL, config.StoreSQLite, addr, prefix)
	cfgB.Screen.Redis.Username, cfgB.Screen.Redis.Password = user, "pw-"+user
	b, err := New(context.Background(), cfgB, Options{Logger: testLogger(t)})
	if err == nil {
		_ = b.Shutdown(context.Background())
		t.Fatalf("B started on A's prefix (marker %s) with a user that may not write it", marker(t, rc, prefix))
	}
	if !errors.Is(err, ErrPrefixTaken) || !strings.Contains(err.Error(), deploymentOf(t, a)) {
		t.Fatalf("B's start: %v, want ErrPrefixTaken naming A", err)
	}
}
