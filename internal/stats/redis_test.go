package stats

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/idempotencytest"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// newRedis starts a recorder on c that is closed when the test ends.
func newRedis(tb testing.TB, c Rediser, prefix string, clk *clock, mod func(*RedisOptions)) *Redis {
	tb.Helper()
	o := RedisOptions{Client: c, Prefix: prefix, Routes: []string{"pay", "ship"}, Now: clk.Now,
		FlushInterval: time.Hour} // tests flush explicitly
	if mod != nil {
		mod(&o)
	}
	r, err := NewRedis(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = r.Close() })
	return r
}

func sharedRedis(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	addr, prefix := testenv.RedisPrefix(tb)
	c := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { c.Close() })
	return c, prefix
}

func flush(tb testing.TB, rs ...*Redis) {
	tb.Helper()
	for _, r := range rs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.Flush(ctx)
		cancel()
		if err != nil {
			tb.Fatalf("flush: %v", err)
		}
	}
}

func TestRedisScenario(t *testing.T) {
	c, prefix := sharedRedis(t)
	clk := newClock()
	r := newRedis(t, c, prefix, clk, nil)
	play(t, r, clk)
	flush(t, r)
	checkScenario(t, r)
	if r.Dropped() != 0 {
		t.Errorf("dropped %d events", r.Dropped())
	}
}

// replicas records the scenario through two recorders, alternately, as two
// gateway replicas would.
type replicas [2]*Redis

func (rs *replicas) Record(ctx context.Context, route string, o idempotency.Outcome, key, source string) {
	rs[0].Record(ctx, route, o, key, source)
	rs[0], rs[1] = rs[1], rs[0]
}

func (rs *replicas) Query(ctx context.Context, w time.Duration, n int) (Snapshot, error) {
	return rs[0].Query(ctx, w, n)
}

// TestRedisReplicas: two recorders sharing Redis count into the same
// numbers, and either one reads all of them.
func TestRedisReplicas(t *testing.T) {
	c, prefix := sharedRedis(t)
	clk := newClock()
	a := newRedis(t, c, prefix, clk, nil)
	b := newRedis(t, c, prefix, clk, nil)
	rs := &replicas{a, b}
	play(t, rs, clk)
	flush(t, a, b)
	checkScenario(t, a)
	checkScenario(t, b)
}

// TestRedisCluster: the buckets of a route share a slot, so ZUNION over
// them works in a Redis Cluster.
func TestRedisCluster(t *testing.T) {
	addrs, _ := idempotencytest.StartRedisCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { c.Close() })
	clk := newClock()
	r := newRedis(t, c, "hookstamp:", clk, nil)
	play(t, r, clk)
	flush(t, r)
	checkScenario(t, r)
}

// TestRedisBounded: a bucket keeps 4 × Capacity names, the heaviest
// exactly, and keys expire.
func TestRedisBounded(t *testing.T) {
	c, prefix := sharedRedis(t)
	clk := newClock()
	r := newRedis(t, c, prefix, clk, func(o *RedisOptions) { o.Capacity = 4 })
	ctx := context.Background()
	for i := range 3 {
		for range 10 - i {
			r.Record(ctx, "pay", idempotency.Replayed, fmt.Sprintf("heavy-%d", i), "s")
		}
	}
	for i := range 100 {
		r.Record(ctx, "pay", idempotency.Replayed, fmt.Sprintf("noise-%d", i), "s")
	}
	flush(t, r)
	k := r.key("pay", "k", 0, epoch(clk.Now(), time.Minute))
	if n := c.ZCard(ctx, k).Val(); n != 16 {
		t.Errorf("ZCARD %s = %d, want 4 × the capacity 4", k, n)
	}
	if ttl := c.PTTL(ctx, k).Val(); ttl <= time.Hour || ttl > expiry(tiers[0]) {
		t.Errorf("PTTL %s = %v, want in (1h, %v]", k, ttl, expiry(tiers[0]))
	}
	snap, err := r.Query(ctx, time.Minute, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []Item{{"heavy-0", 10}, {"heavy-1", 9}, {"heavy-2", 8}}
	if got := snap.Routes["pay"].TopKeys; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("top keys %v, want %v", got, want)
	}
}

// TestRedisSlowNeverBlocks: while Redis does not answer writes, Record
// stays immediate; what does not fit the queue is dropped and counted, and
// recording resumes when Redis answers again.
func TestRedisSlowNeverBlocks(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	clk := newClock()
	r := newRedis(t, c, "hs:", clk, func(o *RedisOptions) {
		o.QueueSize = 16
		o.FlushInterval = 10 * time.Millisecond
		o.OpTimeout = 30 * time.Second // a flush hangs as long as Redis does
	})
	ctx := context.Background()
	// Writes wait while paused: a flush hangs until UNPAUSE. A Record that
	// waited for Redis would not return before the pause ends.
	const pause = 10 * time.Second
	if err := c.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range 5000 {
		r.Record(ctx, "pay", idempotency.Replayed, fmt.Sprint(i), "s")
	}
	if d := time.Since(start); d >= pause/2 {
		t.Errorf("5000 Records took %v while Redis hung", d)
	}
	if r.Dropped() == 0 {
		t.Error("nothing dropped with a queue of 16 and a hung Redis")
	}
	if err := c.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	flush(t, r) // the queue is drained: recording has room again
	dropped := r.Dropped()
	r.Record(ctx, "ship", idempotency.Forwarded, "after", "s")
	flush(t, r)
	snap, err := r.Query(ctx, time.Minute, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.Routes["ship"].Outcomes[idempotency.Forwarded]; got != 1 {
		t.Errorf("after the pause: ship forwarded %d, want 1 (dropped %d then %d)", got, dropped, r.Dropped())
	}
}

// TestRedisCloseFlushes: Close writes what is queued.
func TestRedisCloseFlushes(t *testing.T) {
	c, prefix := sharedRedis(t)
	clk := newClock()
	r := newRedis(t, c, prefix, clk, nil)
	r.Record(context.Background(), "pay", idempotency.Replayed, "k", "s")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	reader := newRedis(t, c, prefix, clk, nil)
	snap, err := reader.Query(context.Background(), time.Minute, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.Routes["pay"].TopKeys; fmt.Sprint(got) != fmt.Sprint([]Item{{"k", 1}}) {
		t.Errorf("top keys after Close %v, want [{k 1}]", got)
	}
	if err := r.Flush(context.Background()); err == nil {
		t.Error("Flush after Close: no error")
	}
}

// TestHeaviest: a flush writes a bucket's highest sums only, most first,
// the same ones whatever order the map iterates in.
func TestHeaviest(t *testing.T) {
	counts := map[string]int64{"a": 5, "b": 1, "c": 9, "d": 1, "e": 3}
	if got := heaviest(counts, 6); len(got) != 5 {
		t.Fatalf("heaviest(5 names, 6) kept %d, want all", len(got))
	}
	for range 20 {
		if got, want := heaviest(counts, 3), []Item{{"c", 9}, {"a", 5}, {"e", 3}}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("heaviest(_, 3) = %v, want %v", got, want)
		}
		if got := heaviest(counts, 4); got[3] != (Item{"b", 1}) {
			t.Fatalf("heaviest(_, 4) = %v: the tie at 1 goes to the first name, b", got)
		}
	}
}

// A key that repeats steadily, but less within any one flush than the
// keys already kept, is still found: the Redis recorder keeps what the
// memory recorder keeps (Space-Saving), not the counts of the last flush.
func TestRedisTopKeyOfASteadyStorm(t *testing.T) {
	c, prefix := sharedRedis(t)
	clk := newClock()
	r := newRedis(t, c, prefix, clk, func(o *RedisOptions) { o.Capacity = 4 })
	m := NewMemory(MemoryOptions{Capacity: 4, Now: clk.Now})
	ctx := context.Background()
	rec := func(key, source string) {
		r.Record(ctx, "pay", idempotency.Replayed, key, source)
		m.Record(ctx, "pay", idempotency.Replayed, key, source)
	}
	for i := range 4 {
		for range 5 {
			rec(fmt.Sprintf("early-%d", i), fmt.Sprintf("src-%d", i))
		}
	}
	flush(t, r)
	for range 20 { // one repeat a flush, 20 in all
		rec("storm", "stormer")
		flush(t, r)
	}
	for name, q := range map[string]recorder{"memory": m, "redis": r} {
		snap, err := q.Query(ctx, time.Minute, 1)
		if err != nil {
			t.Fatal(err)
		}
		rs := snap.Routes["pay"]
		if len(rs.TopKeys) == 0 || rs.TopKeys[0].Name != "storm" || rs.TopKeys[0].Count < 20 {
			t.Errorf("%s: top key %v, want storm with at least 20 (every other key has 5)", name, rs.TopKeys)
		}
		if len(rs.TopSources) == 0 || rs.TopSources[0].Name != "stormer" {
			t.Errorf("%s: top source %v, want stormer", name, rs.TopSources)
		}
	}
}

func TestRedisKeysCapped(t *testing.T) {
	c, prefix := sharedRedis(t)
	clk := newClock()
	r := newRedis(t, c, prefix, clk, func(o *RedisOptions) { o.Capacity = 4 })
	checkKeysCapped(t, r, flushKeysPer*4, func() { flush(t, r) })
}
