package loadbench

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/testenv"
)

// Scripts, the writes they make, PUBLISH and other commands are counted
// apart from INFO commandstats.
func TestStoreDeltaSortsRedisCommands(t *testing.T) {
	before := parseCommandStats("# Commandstats\r\ncmdstat_evalsha:calls=10,usec=5\r\ncmdstat_hset:calls=20,usec=1\r\n")
	after := parseCommandStats("# Commandstats\r\ncmdstat_evalsha:calls=12,usec=5\r\ncmdstat_hset:calls=22,usec=1\r\n" +
		"cmdstat_pexpire:calls=2,usec=1\r\ncmdstat_publish:calls=1,usec=1\r\ncmdstat_get:calls=3,usec=1\r\n")
	d := StoreSample{LedgerRows: 5, Redis: before}.delta(StoreSample{LedgerRows: 9, Redis: after})
	want := StoreDelta{LedgerRows: 4, RedisWrites: 4, RedisScripts: 2, RedisPublishes: 1, RedisCommands: 8}
	if d != want {
		t.Fatalf("delta %+v, want %+v", d, want)
	}
}

// A script's writes on the shared Redis show in a window's sample.
func TestStoreStatsSeesAScriptsWrites(t *testing.T) {
	addr, prefix := testenv.RedisPrefix(t)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	s := &storeStats{redis: c}
	ctx := context.Background()
	s0 := s.sample(ctx, "")
	script := redis.NewScript(`redis.call('HSET', KEYS[1], 'a', '1') redis.call('PEXPIRE', KEYS[1], 60000) return 1`)
	for range 3 {
		if err := script.Run(ctx, c, []string{prefix + "k"}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	d := s0.delta(s.sample(ctx, ""))
	// The server is shared: others may add to the counts, never take.
	if d.RedisScripts < 3 || d.RedisWrites < 6 {
		t.Fatalf("delta %+v: want at least 3 scripts and 6 writes", d)
	}
}

// The p99 ratio divides percentiles, the others throughputs; a ratio
// whose system did not run (the async intake before it exists) is left
// out, not zero.
func TestRatiosOfPeers(t *testing.T) {
	r := &Report{Settings: Settings{Concurrency: []int{Headline}}}
	for _, x := range []struct {
		name     string
		tput, p9 float64
	}{{"B1", 900, 22}, {"B4u", 1000, 20}, {"B2", 40000, 5}, {"U0", 50000, 4}, {"N0", 20000, 6}, {"F1r", 16000, 9}, {"F1u", 1000, 20}, {"L1", 5000, 10}} {
		r.Results = append(r.Results, Result{System: x.name, Loop: "closed", Concurrency: Headline, Summary: Summary{Throughput: x.tput, P99: x.p9}})
	}
	r.finish()
	want := map[string]float64{"repeats_vs_upstream_alone": 0.8, "repeats_vs_nginx_hop": 2, "repeats_vs_fiber_idempotency": 2.5,
		"unique_vs_ledger_only": 0.9, "unique_vs_fiber_idempotency": 0.9, "unique_p99_vs_ledger_only": 1.1}
	for k, v := range want {
		if r.Ratios[k] != v {
			t.Errorf("%s = %v, want %v", k, r.Ratios[k], v)
		}
	}
	if _, ok := r.Ratios["async_intake_vs_pg_insert"]; ok {
		t.Errorf("async_intake_vs_pg_insert reported without an %s system", asyncSystem)
	}
	met := map[string]bool{}
	for _, g := range r.Goals {
		met[g.Name] = g.Met
	}
	if !met["unique_p99_vs_ledger_only"] || met["unique_vs_ledger_only"] || !met["repeats_vs_upstream_alone"] {
		t.Errorf("goals met: %v", met)
	}
}
