package loadbench

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/testenv"
)

// Scripts, the writes they make, PUBLISH and other commands are counted
// apart from INFO commandstats; a write is a command COMMAND flags
// "write", HINCRBY and the sorted-set writes included.
func TestStoreDeltaSortsRedisCommands(t *testing.T) {
	writes := writeCommands(map[string]*redis.CommandInfo{
		"hset": {Flags: []string{"write", "denyoom", "fast"}}, "pexpire": {Flags: []string{"write", "fast"}},
		"hincrby": {Flags: []string{"write", "denyoom", "fast"}}, "zincrby": {Flags: []string{"write", "denyoom", "fast"}},
		"zpopmin": {Flags: []string{"write", "fast"}}, "get": {Flags: []string{"readonly", "fast"}},
		"evalsha": {Flags: []string{"noscript", "stale", "skip_monitor", "no_mandatory_keys", "movablekeys"}},
		"publish": {Flags: []string{"pubsub", "loading", "stale", "fast", "may_replicate"}},
	})
	before := parseCommandStats("# Commandstats\r\ncmdstat_evalsha:calls=10,usec=5\r\ncmdstat_hset:calls=20,usec=1\r\n")
	after := parseCommandStats("# Commandstats\r\ncmdstat_evalsha:calls=12,usec=5\r\ncmdstat_hset:calls=22,usec=1\r\n" +
		"cmdstat_pexpire:calls=2,usec=1\r\ncmdstat_publish:calls=1,usec=1\r\ncmdstat_get:calls=3,usec=1\r\n" +
		"cmdstat_hincrby:calls=5,usec=1\r\ncmdstat_zincrby:calls=1,usec=1\r\ncmdstat_zpopmin:calls=1,usec=1\r\n")
	d := StoreSample{LedgerRows: 5, Redis: before}.delta(StoreSample{LedgerRows: 9, Redis: after}, writes)
	want := StoreDelta{LedgerRows: 4, RedisWrites: 11, RedisScripts: 2, RedisPublishes: 1, RedisCommands: 15}
	if d != want {
		t.Fatalf("delta %+v, want %+v", d, want)
	}
}

// A script's writes on the shared Redis show in a window's sample, the
// writes told apart by the server's own COMMAND flags.
func TestStoreStatsSeesAScriptsWrites(t *testing.T) {
	addr, prefix := testenv.RedisPrefix(t)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx := context.Background()
	writes, err := redisWriteCommands(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"hset", "pexpire", "hincrby", "zadd", "zincrby", "zpopmin", "del", "getex"} {
		if !writes[name] {
			t.Errorf("%s is not among Redis's write commands", name)
		}
	}
	for _, name := range []string{"get", "hget", "evalsha", "publish", "zscore"} {
		if writes[name] {
			t.Errorf("%s is among Redis's write commands", name)
		}
	}
	s := &storeStats{redis: c, writes: writes}
	s0 := s.sample(ctx, "")
	script := redis.NewScript(`redis.call('HSET', KEYS[1], 'a', '1') redis.call('PEXPIRE', KEYS[1], 60000)
		redis.call('HINCRBY', KEYS[1], 'n', 1) redis.call('ZINCRBY', KEYS[2], 1, 'm') redis.call('ZPOPMIN', KEYS[2]) return 1`)
	for range 3 {
		if err := script.Run(ctx, c, []string{prefix + "k", prefix + "z"}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	d := s0.delta(s.sample(ctx, ""), s.writes)
	// The server is shared: others may add to the counts, never take.
	if d.RedisScripts < 3 || d.RedisWrites < 15 {
		t.Fatalf("delta %+v: want at least 3 scripts and 15 writes", d)
	}
}

// The p99 ratio divides the open loop's percentiles (both systems at the
// one offered rate), the others closed-loop throughputs; the closed-loop
// p99 ratio is kept apart, not a goal. A ratio whose system did not run
// (A1 left out of a run) is left out, not zero.
func TestRatiosOfPeers(t *testing.T) {
	r := &Report{Settings: Settings{Concurrency: []int{Headline}, OpenRate: 1000}}
	for _, x := range []struct {
		name     string
		tput, p9 float64
	}{{"B1", 900, 22}, {"B4u", 1000, 20}, {"B2", 40000, 5}, {"U0", 50000, 4}, {"N0", 20000, 6}, {"F1r", 16000, 9}, {"F1u", 1000, 20}, {"L1", 5000, 10}} {
		r.Results = append(r.Results, Result{System: x.name, Loop: "closed", Concurrency: Headline, Summary: Summary{Throughput: x.tput, P99: x.p9}})
	}
	r.Results = append(r.Results, Result{System: "B1", Loop: "open", Rate: 1000, Summary: Summary{Throughput: 1000, P99: 21}},
		Result{System: "B4u", Loop: "open", Rate: 1000, Summary: Summary{Throughput: 1000, P99: 20}})
	r.finish()
	want := map[string]float64{"repeats_vs_upstream_alone": 0.8, "repeats_vs_nginx_hop": 2, "repeats_vs_fiber_idempotency": 2.5,
		"unique_vs_ledger_only": 0.9, "unique_vs_fiber_idempotency": 0.9, "unique_p99_vs_ledger_only": 1.05,
		"unique_p99_vs_ledger_only_closed": 1.1}
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
		if g.Name == "unique_p99_vs_ledger_only" && g.Note != "open loop, 1000 req/s" {
			t.Errorf("goal %s noted %q, want the open loop's rate", g.Name, g.Note)
		}
	}
	if !met["unique_p99_vs_ledger_only"] || met["unique_vs_ledger_only"] || !met["repeats_vs_upstream_alone"] {
		t.Errorf("goals met: %v", met)
	}
	// B1 and B4u ran, the open loop too, but B4u has no open-loop cell.
	r = &Report{Settings: Settings{Concurrency: []int{Headline}, OpenRate: 1000, OpenSeconds: 2, Systems: []string{"B1", "B4u"}}}
	for _, name := range []string{"B1", "B4u"} {
		r.Results = append(r.Results, Result{System: name, Loop: "closed", Concurrency: Headline, Summary: Summary{Requests: 1000, Throughput: 1000, P99: 20}})
	}
	r.Results = append(r.Results, Result{System: "B1", Loop: "open", Rate: 1000, Summary: Summary{Requests: 1000, Throughput: 1000, P99: 21}})
	r.finish()
	if want := "goal unique_p99_vs_ledger_only: not measured: B4u has no open-loop cell"; !slices.Contains(r.Failures, want) {
		t.Errorf("failures %q, want %q", r.Failures, want)
	}
}

// A1's acknowledged rate is divided by L1's for the async goal, and the
// drain measured after its cell shows in the JSON and under the table.
func TestAsyncIntakeRatioAndDrain(t *testing.T) {
	a1 := &system{name: asyncSystem, closed: map[int]*agg{Headline: {
		cell:  Cell{Requests: 8000, Elapsed: time.Second},
		drain: &drainAgg{delivered: 3000, elapsed: 2 * time.Second},
	}}}
	l1 := &system{name: "L1", closed: map[int]*agg{Headline: {cell: Cell{Requests: 5000, Elapsed: time.Second}}}}
	r := &Report{Settings: Settings{Concurrency: []int{Headline}}}
	r.addSystem(a1)
	r.addSystem(l1)
	r.finish()
	if got := r.Ratios["async_intake_vs_pg_insert"]; got != 1.6 {
		t.Errorf("async_intake_vs_pg_insert = %v, want 1.6", got)
	}
	if len(r.Goals) != 1 || r.Goals[0].Name != "async_intake_vs_pg_insert" || !r.Goals[0].Met {
		t.Errorf("goals %+v, want async_intake_vs_pg_insert met", r.Goals)
	}
	b, err := json.Marshal(r.find(asyncSystem, "closed", Headline))
	if err != nil {
		t.Fatal(err)
	}
	if want := `"drain":{"delivered":3000,"seconds":2,"drain_per_s":1500,"queued_left":0}`; !strings.Contains(string(b), want) {
		t.Errorf("A1 result %s, want %s", b, want)
	}
	if b, _ := json.Marshal(r.find("L1", "closed", Headline)); strings.Contains(string(b), "drain") {
		t.Errorf("L1 result %s has a drain", b)
	}
	var out strings.Builder
	r.PrintTable(&out)
	if want := "A1 drain after c=64: 1500 deliveries/s to the upstream (3000 in 2.0 s, 0 queued left)"; !strings.Contains(out.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, out.String())
	}
}

// A run in which a system's process died (F1 killed after its working
// set was recorded: every request refused) fails: the dead system's cells
// and the goals it is part of are named, instead of a ratio and a goal
// quietly left out of a report that passes; so does a goal whose system
// ran but has no cell (N0). Errors up to maxErrorShare pass; goals
// between systems that did not run are not expected.
func TestFailedCellsAndMissingGoalsFailTheRun(t *testing.T) {
	r := &Report{Settings: Settings{Concurrency: []int{16, Headline}, OpenRate: 1000, Systems: []string{"B2", "F1u", "F1r", "N0"}}}
	for _, x := range []struct {
		name      string
		conc      int
		ok, errs  uint64
		tput, p99 float64
	}{
		{"B2", 16, 100_000, 100, 30000, 2},     // 0.1%: passes
		{"B2", Headline, 120_000, 0, 40000, 5}, // clean
		{"F1u", 16, 2000, 3, 600, 30},          // 0.15%: fails
		{"F1u", Headline, 0, 15_000, 0, 0},
		{"F1r", Headline, 0, 15_000, 0, 0},
	} {
		r.Results = append(r.Results, Result{System: x.name, Loop: "closed", Concurrency: x.conc,
			Summary: Summary{Requests: x.ok, Errors: x.errs, Throughput: x.tput, P99: x.p99}})
	}
	r.Results = append(r.Results, Result{System: "B2", Loop: "open", Rate: 1000, Summary: Summary{Requests: 10_000, Throughput: 1000}})
	r.finish()

	want := []string{
		"goal repeats_vs_fiber_idempotency: not measured: F1r answered nothing in its c=64 cell",
		"goal repeats_vs_nginx_hop: not measured: N0 has no c=64 cell",
		"F1u closed c=16: 3 errors in 2003 requests",
		"F1u closed c=64: no request answered (15000 errors)",
		"F1r closed c=64: no request answered (15000 errors)",
	}
	got := strings.Join(r.Failures, "\n")
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("failures lack %q:\n%s", w, got)
		}
	}
	if strings.Contains(got, "B2 closed c=16") || strings.Contains(got, "upstream_alone") || strings.Contains(got, "unique_vs_fiber") {
		t.Errorf("failures name a cell within the error share or a goal whose systems did not run:\n%s", got)
	}
	goals := map[string]Goal{}
	for _, g := range r.Goals {
		goals[g.Name] = g
	}
	if g, ok := goals["repeats_vs_fiber_idempotency"]; !ok || g.Met || !strings.Contains(g.Note, "not measured") {
		t.Errorf("goal repeats_vs_fiber_idempotency %+v (listed %v), want it listed, not met, not measured", g, ok)
	}
	var out strings.Builder
	r.PrintTable(&out)
	if !strings.Contains(out.String(), "the run FAILED") {
		t.Errorf("table does not say the run failed:\n%s", out.String())
	}

	// A run stopped early (its error is the failure) still names its
	// failed cells, but not each goal it did not get to.
	stopped := &Report{Settings: r.Settings, Results: r.Results, stopped: true}
	stopped.finish()
	got = strings.Join(stopped.Failures, "\n")
	if strings.Contains(got, "goal ") || !strings.Contains(got, "F1r closed c=64: no request answered") {
		t.Errorf("failures of a stopped run:\n%s\nwant its failed cells and no goal", got)
	}
}

// The memory run's peak is the largest RSS sampled during it, not the
// process's VmHWM, which counts the rounds before it too.
func TestMemoryRunPeakIsItsLargestSample(t *testing.T) {
	m := &RSSResult{Samples: []float64{100, 104, 131.5, 120, 118, 119, 121, 120}}
	m.finish()
	if m.PeakRSS != 131.5 {
		t.Errorf("peak %v MiB, want 131.5, the largest sample", m.PeakRSS)
	}
	if m.FirstMinute != 102 || m.LastMinute != 120.5 {
		t.Errorf("first minute %v, last %v; want 102 and 120.5", m.FirstMinute, m.LastMinute)
	}
}
