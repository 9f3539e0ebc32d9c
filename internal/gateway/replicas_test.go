package gateway

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/idempotencytest"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// Tests of the production deployment: several gateway replicas sharing one
// PostgreSQL ledger and one Redis screen (SPEC §6).

// cluster is what the replicas of one test share.
type cluster struct {
	dsn    string   // PostgreSQL, the test's own schema
	addrs  []string // Redis: one node, or the seeds of a Redis Cluster
	prefix string
}

// sharedCluster is the machine's PostgreSQL and Redis, under the test's own
// schema and prefix.
func sharedCluster(tb testing.TB) cluster {
	tb.Helper()
	addr, prefix := testenv.RedisPrefix(tb)
	return cluster{dsn: testenv.Postgres(tb), addrs: []string{addr}, prefix: prefix}
}

// replicaConfig is gwConfig on the cluster's PostgreSQL and Redis, with the
// in-process cache off (so that every repeat goes through the shared
// stores) and screen.on_unavailable set to onScreenDown.
func (c cluster) replicaConfig(tb testing.TB, upstreamURL, onScreenDown string) *config.Config {
	tb.Helper()
	cfg := gwConfig(tb, upstreamURL, "unused", "    wait_timeout: 10s", "")
	cfg.Store.Driver, cfg.Store.DSN = config.StorePostgres, c.dsn
	cfg.Screen.Driver = config.ScreenRedis
	cfg.Screen.Redis.Addrs = c.addrs
	cfg.Screen.Prefix = c.prefix
	cfg.Screen.LocalCache = 0
	cfg.Screen.OnUnavailable = onScreenDown
	return cfg
}

// replicas starts n gateways on the cluster.
func (c cluster) replicas(tb testing.TB, n int, upstreamURL, onScreenDown string) []*Gateway {
	tb.Helper()
	gws := make([]*Gateway, n)
	for i := range gws {
		gws[i] = startGateway(tb, c.replicaConfig(tb, upstreamURL, onScreenDown))
	}
	return gws
}

// redisClient talks to the cluster's Redis directly, to see what the
// screen holds.
func (c cluster) redisClient(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	rc := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: c.addrs})
	tb.Cleanup(func() { _ = rc.Close() })
	return rc
}

// inScreen reports whether the screen holds an entry for key on route hooks.
func (c cluster) inScreen(tb testing.TB, rc redis.UniversalClient, key string) bool {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := rc.Exists(ctx, c.prefix+"hooks:"+key).Result()
	if err != nil {
		tb.Fatalf("redis EXISTS: %v", err)
	}
	return n == 1
}

// slowReceipts makes the upstream answer after d with a body unique to the
// forward, so that two forwards of one key could never look identical.
func slowReceipts(up *upstream, d time.Duration) {
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		time.Sleep(d)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"key":%q,"n":%d,"seq":%d}`, r.Header.Get("Idempotency-Key"), n, up.total.Load())
	})
}

// exactlyOnceAcross sends copies deliveries of each of keys events at
// once, copy i to replica i mod len(gws), and checks what a provider and
// the upstream would notice: every key forwarded exactly once, every
// answer for a key the same, one forwarded outcome and the rest replayed,
// and one done ledger row holding that answer.
func exactlyOnceAcross(t *testing.T, gws []*Gateway, up *upstream, tag string, keys, copies int) {
	t.Helper()
	key := func(k int) string { return fmt.Sprintf("evt_%s_%02d", tag, k) }
	replies := race(t, keys*copies, func(i int) reply {
		return send(t, gws[i%len(gws)], "/hooks", fmt.Sprintf(`{"id":%q}`, key(i%keys)))
	})
	for k := 0; k < keys; k++ {
		if n := up.count(key(k)); n != 1 {
			t.Errorf("%s forwarded %d times across %d replicas, want exactly 1", key(k), n, len(gws))
		}
		var first *reply
		outcomes := map[string]int{}
		for i := k; i < len(replies); i += keys {
			r := replies[i]
			outcomes[r.outcome()]++
			if r.status != 200 {
				t.Fatalf("%s copy %d: %d %q %s", key(k), i/keys, r.status, r.outcome(), r.body)
			}
			if first == nil {
				first = &replies[i]
				continue
			}
			sameReply(t, *first, r)
		}
		if outcomes["forwarded"] != 1 || outcomes["replayed"] != copies-1 {
			t.Errorf("%s outcomes %v, want 1 forwarded and %d replayed", key(k), outcomes, copies-1)
		}
		rec := lookup(t, gws[k%len(gws)], "hooks", key(k))
		if rec.State != idempotency.StateDone || string(rec.Body) != string(first.body) {
			t.Errorf("%s ledger row %s %q, want done with the answer every copy got %q", key(k), rec.State, rec.Body, first.body)
		}
	}
}

// Three replicas sharing PostgreSQL and Redis, 20 events delivered 10 times
// each at once, spread over the replicas: the upstream sees each event once.
func TestReplicasForwardEachEventOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		start func(tb testing.TB) cluster
	}{
		{"redis", sharedCluster},
		{"redis-cluster", func(tb testing.TB) cluster {
			addrs, _ := idempotencytest.StartRedisCluster(tb)
			return cluster{dsn: testenv.Postgres(tb), addrs: addrs, prefix: "hs:"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tc.start(t)
			up := newUpstream(t)
			slowReceipts(up, 50*time.Millisecond)
			gws := c.replicas(t, 3, up.URL, config.ScreenUnavailableStore)
			exactlyOnceAcross(t, gws, up, "rep", 20, 10)

			// The claims went through Redis: the done entries are there.
			rc := c.redisClient(t)
			for k := 0; k < 20; k++ {
				if key := fmt.Sprintf("evt_rep_%02d", k); !c.inScreen(t, rc, key) {
					t.Fatalf("no screen entry for %s: the replicas did not use Redis", key)
				}
			}
		})
	}
}

// Replicas whose clocks disagree by ten minutes either way, sharing
// PostgreSQL without a screen, so that every claim is a ledger lease: a
// repeat at one replica while the first delivery is still being forwarded
// by another waits for it and replays its answer. On each replica's own
// clock the replica running ahead would find the lease long run out, and
// so would a correct replica find the lease of one running behind: each
// would take the delivery over and forward it a second time.
func TestSkewedReplicasAgreeOnLedgerLeases(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	up, release := heldUpstream(t)
	start := func(skew time.Duration) *Gateway {
		cfg := c.replicaConfig(t, up.URL, config.ScreenUnavailableStore)
		cfg.Screen.Driver = config.ScreenNone
		return startGatewayWith(t, cfg, Options{Logger: testLogger(t), Now: func() time.Time { return time.Now().Add(skew) }})
	}
	right, ahead, behind := start(0), start(10*time.Minute), start(-10*time.Minute)
	type pair struct {
		key           string
		first, repeat *Gateway
	}
	pairs := []pair{{"evt_to_ahead", right, ahead}, {"evt_from_behind", behind, right}}
	firsts, repeats := make([]chan reply, len(pairs)), make([]chan reply, len(pairs))
	for i, p := range pairs {
		body := fmt.Sprintf(`{"id":%q}`, p.key)
		firsts[i], repeats[i] = make(chan reply, 1), make(chan reply, 1)
		go func() { firsts[i] <- send(t, p.first, "/hooks", body) }()
		testenv.Eventually(t, 5*time.Second, p.key+" at the upstream", func() bool { return up.count(p.key) == 1 })
		go func() { repeats[i] <- send(t, p.repeat, "/hooks", body) }()
	}
	// A repeat taken over is forwarded at once; give it the time to show.
	time.Sleep(500 * time.Millisecond)
	close(release)
	for i, p := range pairs {
		first, repeat := <-firsts[i], <-repeats[i]
		wantOutcome(t, first, http.StatusOK, "forwarded")
		wantOutcome(t, repeat, http.StatusOK, "replayed")
		sameReply(t, first, repeat)
		if n := up.count(p.key); n != 1 {
			t.Errorf("%s forwarded %d times, want once", p.key, n)
		}
	}
}
