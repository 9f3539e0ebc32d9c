package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// Tests of the Redis screen under pressure an operator's Redis meets: a
// Redis that blocks (a slow command, DEBUG SLEEP standing in), and one at
// maxmemory with noeviction. Each runs on a redis-server of its own.

// pressureCluster is a dedicated redis-server that takes DEBUG commands,
// with the test's own PostgreSQL schema, and a client to it.
func pressureCluster(tb testing.TB, extra ...string) (cluster, *redis.Client) {
	tb.Helper()
	rs := testenv.StartRedisServer(tb, append([]string{"--enable-debug-command", "yes"}, extra...)...)
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr, ReadTimeout: 10 * time.Second})
	tb.Cleanup(func() { _ = rc.Close() })
	return cluster{dsn: testenv.Postgres(tb), addrs: []string{rs.Addr}, prefix: "hs:"}, rc
}

// blockRedis makes the server answer nothing for d, and returns once it
// has stopped answering.
func blockRedis(tb testing.TB, rc *redis.Client, d time.Duration) {
	tb.Helper()
	go rc.Do(context.Background(), "DEBUG", "SLEEP", d.Seconds())
	probe := redis.NewClient(&redis.Options{Addr: rc.Options().Addr, ReadTimeout: 20 * time.Millisecond, MaxRetries: -1})
	defer probe.Close()
	testenv.Eventually(tb, time.Second, "Redis blocked", func() bool { return probe.Ping(context.Background()).Err() != nil })
}

// sendAll sends one delivery per key at once and returns the replies in
// keys' order; a delivery that gets no answer has status 0.
func sendAll(g *Gateway, keys []string) []reply {
	out := make([]reply, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() {
			resp, err := client.Post(g.URL()+"/hooks", "application/json", strings.NewReader(fmt.Sprintf(`{"id":%q}`, k)))
			if err != nil {
				out[i] = reply{header: http.Header{}, body: []byte(err.Error())}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			out[i] = reply{status: resp.StatusCode, header: resp.Header, body: b}
		})
	}
	wg.Wait()
	return out
}

func keysOf(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s_%d", prefix, i)
	}
	return keys
}

// Redis blocks while new events arrive: their screen claims time out and
// open the breaker, and land once Redis wakes, claims no delivery holds.
// Each delivery settles what it may have left in the screen whatever the
// breaker says, so a retry a second after Redis woke is answered at once,
// not after wait_timeout with a 409 (reject) or a late replay (store).
func TestClaimsLandingAfterRedisBlockedAreSettled(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{config.ScreenUnavailableStore, config.ScreenUnavailableReject} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			c, rc := pressureCluster(t)
			up := newUpstream(t)
			g := startGateway(t, c.replicaConfig(t, up.URL, mode))
			wantOutcome(t, send(t, g, "/hooks", `{"id":"evt_warm"}`), 200, "forwarded")

			blockRedis(t, rc, 2*time.Second)
			keys := keysOf("evt_blocked", 8)
			sendAll(g, keys)
			testenv.Eventually(t, 5*time.Second, "Redis awake", func() bool { return rc.Ping(context.Background()).Err() == nil })
			time.Sleep(time.Second)
			// Another event first: the breaker's probe, which closes it.
			send(t, g, "/hooks", `{"id":"evt_probe"}`)

			start := time.Now()
			again := sendAll(g, keys)
			for i, k := range keys {
				if again[i].status == http.StatusConflict || again[i].status == 0 {
					t.Errorf("retry of %s with Redis awake: %d %s, want an answer (forwarded or replayed)", k, again[i].status, again[i].outcome())
				}
				if n := up.count(k); n > 1 {
					t.Errorf("upstream received %s %d times, want at most 1", k, n)
				}
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("retries with Redis awake took %v, want well under wait_timeout (10s): their keys were held by claims no delivery owns", d)
			}
		})
	}
}

// screen.on_unavailable: reject. A blocked Redis opens the breaker; once
// both stores answer again, repeats of recorded events arrive together.
// The first claim is the breaker's probe and every other skips the
// screen; each is replayed from the ledger, which holds their answers, as
// with pass and store, not refused 503.
func TestRejectModeReplaysRecordedWhileTheScreenIsSkipped(t *testing.T) {
	t.Parallel()
	c, rc := pressureCluster(t)
	up := newUpstream(t)
	g := startGateway(t, c.replicaConfig(t, up.URL, config.ScreenUnavailableReject))
	keys := keysOf("evt_recorded", 40)
	for _, k := range keys {
		wantOutcome(t, send(t, g, "/hooks", fmt.Sprintf(`{"id":%q}`, k)), 200, "forwarded")
	}
	blockRedis(t, rc, 1200*time.Millisecond)
	sendAll(g, keysOf("evt_new", 3)) // open the breaker
	testenv.Eventually(t, 5*time.Second, "Redis awake", func() bool { return rc.Ping(context.Background()).Err() == nil })
	time.Sleep(3 * time.Second) // past the breaker's cooldown

	for i, r := range sendAll(g, keys) {
		if r.status != http.StatusOK || r.outcome() != "replayed" {
			t.Errorf("repeat of recorded %s: %d %s, want 200 replayed", keys[i], r.status, r.outcome())
		}
	}
	for _, k := range keys {
		if n := up.count(k); n != 1 {
			t.Errorf("upstream received %s %d times, want 1", k, n)
		}
	}
}

// Redis at maxmemory with noeviction refuses every write, the SET NX of
// the screen.prefix marker included, although the marker is there and
// names this deployment's ledger. A replica started then (a rolling
// update) must use the screen as the replicas started before do, the
// marker read deciding: off it, /readyz would say the screen unreachable
// and, with reject, every delivery get 503.
func TestMarkerReadDecidesWhenRedisRefusesWrites(t *testing.T) {
	t.Parallel()
	c, rc := pressureCluster(t)
	up := newUpstream(t)
	replica := func() *Gateway {
		cfg := c.replicaConfig(t, up.URL, config.ScreenUnavailableReject)
		cfg.Admin.Listen = "127.0.0.1:0"
		return startGateway(t, cfg)
	}
	a := replica()
	wantOutcome(t, send(t, a, "/hooks", `{"id":"evt_rec"}`), 200, "forwarded")
	testenv.Eventually(t, 5*time.Second, "the screen's done entry", func() bool {
		return rc.HGet(context.Background(), c.prefix+"hooks:evt_rec", "s").Val() == "d"
	})
	fillRedis(t, rc)
	if err := rc.Set(context.Background(), "probe", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("a write to the full Redis: %v, want OOM: this test proves nothing", err)
	}

	b := replica()
	testenv.Eventually(t, 5*time.Second, "the new replica ready", func() bool {
		resp, err := http.Get("http://" + b.AdminAddr() + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	wantOutcome(t, send(t, b, "/hooks", `{"id":"evt_rec"}`), 200, "replayed")
	if n := up.count("evt_rec"); n != 1 {
		t.Fatalf("upstream received evt_rec %d times, want 1", n)
	}
}

// fillRedis fills the server with keys outside the screen's prefix and
// sets maxmemory just under what it uses, with noeviction: every write is
// refused.
func fillRedis(tb testing.TB, rc *redis.Client) {
	tb.Helper()
	ctx := context.Background()
	if err := rc.Do(ctx, "DEBUG", "POPULATE", 20000, "junk", 200).Err(); err != nil {
		tb.Fatal(err)
	}
	var used int64
	for l := range strings.SplitSeq(rc.Info(ctx, "memory").Val(), "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			_, _ = fmt.Sscan(v, &used)
		}
	}
	if err := rc.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		tb.Fatal(err)
	}
	if err := rc.ConfigSet(ctx, "maxmemory", fmt.Sprint(used-64<<10)).Err(); err != nil {
		tb.Fatal(err)
	}
}
