package stats

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock {
	return &clock{t: time.Date(2026, 6, 12, 10, 30, 0, 0, time.UTC)}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// ev is one scripted request: at an offset from the clock's start.
type ev struct {
	ago     time.Duration
	route   string
	outcome idempotency.Outcome
	key     string
	source  string
}

// scenario is a scripted mix of outcomes on two routes, some of it older
// than the short windows.
var scenario = []ev{
	{0, "pay", idempotency.Forwarded, "k1", "a"},
	{0, "pay", idempotency.Forwarded, "k2", "a"},
	{0, "pay", idempotency.Forwarded, "k3", "b"},
	{0, "pay", idempotency.Replayed, "k1", "a"},
	{0, "pay", idempotency.Replayed, "k1", "a"},
	{time.Minute, "pay", idempotency.Replayed, "k1", "b"},
	{0, "pay", idempotency.Conflict, "k2", "c"},
	{0, "pay", idempotency.Mismatch, "k1", "b"},
	{0, "pay", idempotency.Shadowed, "k3", "a"},
	{0, "pay", idempotency.Released, "k4", "a"},
	{0, "pay", idempotency.MissingKey, "", "a"},
	{0, "pay", idempotency.HeldKey, "k5", "d"}, // held repeats are not duplicates
	{0, "ship", idempotency.Forwarded, "x", "z"},
	{0, "ship", idempotency.Replayed, "x", "z"},
	// Outside 15m, inside 30m.
	{20 * time.Minute, "pay", idempotency.Replayed, "k9", "old"},
	// Outside 1h, inside 2h (the clock starts at hh:30).
	{90 * time.Minute, "pay", idempotency.Replayed, "k9", "old"},
	{90 * time.Minute, "pay", idempotency.Forwarded, "k9", "old"},
	// Outside 24h.
	{25 * time.Hour, "pay", idempotency.Replayed, "k1", "a"},
}

// recorder is what the tests drive of Memory and Redis.
type recorder interface {
	Record(ctx context.Context, route string, o idempotency.Outcome, key, source string)
	Query(ctx context.Context, window time.Duration, topN int) (Snapshot, error)
}

var (
	_ recorder = (*Memory)(nil)
	_ recorder = (*Redis)(nil)
)

// play records the scenario, oldest first, moving clk, and leaves clk at
// the start.
func play(tb testing.TB, rec recorder, clk *clock) {
	tb.Helper()
	start := clk.Now()
	for i := len(scenario) - 1; i >= 0; i-- {
		e := scenario[i]
		clk.Set(start.Add(-e.ago))
		rec.Record(context.Background(), e.route, e.outcome, e.key, e.source)
	}
	clk.Set(start)
}

type want struct {
	outcomes map[idempotency.Outcome]int64
	keys     []Item
	sources  []Item
	rate     float64
}

var scenarioWant = []struct {
	window time.Duration
	pay    want
	ship   want
}{
	{
		window: 15 * time.Minute,
		pay: want{
			outcomes: map[idempotency.Outcome]int64{"forwarded": 3, "replayed": 3, "conflict": 1, "mismatch": 1,
				"shadowed": 1, "released": 1, "missing_key": 1, "held": 1},
			keys:    []Item{{"k1", 4}, {"k2", 1}, {"k3", 1}},
			sources: []Item{{"a", 3}, {"b", 2}, {"c", 1}},
			rate:    0.5,
		},
		ship: want{outcomes: map[idempotency.Outcome]int64{"forwarded": 1, "replayed": 1},
			keys: []Item{{"x", 1}}, sources: []Item{{"z", 1}}, rate: 0.5},
	},
	{
		window: 30 * time.Minute,
		pay: want{
			outcomes: map[idempotency.Outcome]int64{"forwarded": 3, "replayed": 4, "conflict": 1, "mismatch": 1,
				"shadowed": 1, "released": 1, "missing_key": 1, "held": 1},
			keys:    []Item{{"k1", 4}, {"k2", 1}, {"k3", 1}, {"k9", 1}},
			sources: []Item{{"a", 3}, {"b", 2}, {"c", 1}, {"old", 1}},
			rate:    4.0 / 7,
		},
		ship: want{outcomes: map[idempotency.Outcome]int64{"forwarded": 1, "replayed": 1},
			keys: []Item{{"x", 1}}, sources: []Item{{"z", 1}}, rate: 0.5},
	},
	{
		window: 2 * time.Hour,
		pay: want{
			outcomes: map[idempotency.Outcome]int64{"forwarded": 4, "replayed": 5, "conflict": 1, "mismatch": 1,
				"shadowed": 1, "released": 1, "missing_key": 1, "held": 1},
			keys:    []Item{{"k1", 4}, {"k9", 2}, {"k2", 1}, {"k3", 1}},
			sources: []Item{{"a", 3}, {"b", 2}, {"old", 2}, {"c", 1}},
			rate:    5.0 / 9,
		},
		ship: want{outcomes: map[idempotency.Outcome]int64{"forwarded": 1, "replayed": 1},
			keys: []Item{{"x", 1}}, sources: []Item{{"z", 1}}, rate: 0.5},
	},
}

// checkScenario queries every window of scenarioWant and compares.
func checkScenario(t *testing.T, rec recorder) {
	t.Helper()
	for _, tc := range scenarioWant {
		t.Run(tc.window.String(), func(t *testing.T) {
			snap, err := rec.Query(context.Background(), tc.window, 10)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Window != tc.window {
				t.Errorf("window %v, want %v", snap.Window, tc.window)
			}
			checkRoute(t, snap, "pay", tc.pay)
			checkRoute(t, snap, "ship", tc.ship)
		})
	}
}

func checkRoute(tb testing.TB, snap Snapshot, route string, w want) {
	tb.Helper()
	rs := snap.Routes[route]
	if rs == nil {
		tb.Fatalf("route %q missing from %v", route, snap.Routes)
	}
	if !reflect.DeepEqual(rs.Outcomes, w.outcomes) {
		tb.Errorf("%s outcomes %v, want %v", route, rs.Outcomes, w.outcomes)
	}
	if !reflect.DeepEqual(rs.TopKeys, w.keys) {
		tb.Errorf("%s top keys %v, want %v", route, rs.TopKeys, w.keys)
	}
	if !reflect.DeepEqual(rs.TopSources, w.sources) {
		tb.Errorf("%s top sources %v, want %v", route, rs.TopSources, w.sources)
	}
	if got := rs.DuplicateRate(); fmt.Sprintf("%.6f", got) != fmt.Sprintf("%.6f", w.rate) {
		tb.Errorf("%s duplicate rate %v, want %v", route, got, w.rate)
	}
}

func TestMemoryScenario(t *testing.T) {
	clk := newClock()
	m := NewMemory(MemoryOptions{Now: clk.Now})
	play(t, m, clk)
	checkScenario(t, m)
}

func TestMemoryTopN(t *testing.T) {
	clk := newClock()
	m := NewMemory(MemoryOptions{Now: clk.Now})
	play(t, m, clk)
	snap, err := m.Query(context.Background(), time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := snap.Routes["pay"].TopKeys, []Item{{"k1", 4}}; !reflect.DeepEqual(got, want) {
		t.Errorf("top 1 keys %v, want %v", got, want)
	}
	if got, want := snap.Routes["pay"].TopSources, []Item{{"a", 3}}; !reflect.DeepEqual(got, want) {
		t.Errorf("top 1 sources %v, want %v", got, want)
	}
}

func TestWindowErrors(t *testing.T) {
	m := NewMemory(MemoryOptions{})
	for _, w := range []time.Duration{0, -time.Minute, MaxWindow + time.Second} {
		if _, err := m.Query(context.Background(), w, 10); err == nil {
			t.Errorf("window %v: no error", w)
		}
	}
	if _, err := m.Query(context.Background(), MaxWindow, 10); err != nil {
		t.Errorf("window %v: %v", MaxWindow, err)
	}
}

// TestMemoryExpiry: buckets older than the window are not read, and a slot
// reused for a new minute does not carry the old minute's counts.
func TestMemoryExpiry(t *testing.T) {
	clk := newClock()
	m := NewMemory(MemoryOptions{Now: clk.Now})
	m.Record(context.Background(), "pay", idempotency.Replayed, "k", "s")
	clk.Set(clk.Now().Add(time.Hour + time.Minute)) // the same minute slot, one bucket past the longest window
	m.Record(context.Background(), "pay", idempotency.Forwarded, "j", "s")
	snap, err := m.Query(context.Background(), time.Hour, 10)
	if err != nil {
		t.Fatal(err)
	}
	rs := snap.Routes["pay"]
	if want := map[idempotency.Outcome]int64{"forwarded": 1}; !reflect.DeepEqual(rs.Outcomes, want) {
		t.Errorf("outcomes %v, want %v", rs.Outcomes, want)
	}
	if len(rs.TopKeys) != 0 {
		t.Errorf("top keys %v, want none", rs.TopKeys)
	}
	clk.Set(clk.Now().Add(25 * time.Hour))
	snap, err = m.Query(context.Background(), MaxWindow, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Routes) != 0 {
		t.Errorf("after a day: %v, want no routes", snap.Routes)
	}
}

// TestMemoryBounded: any number of distinct repeated keys keeps at most
// Capacity per bucket, and a heavy hitter among them keeps its place.
func TestMemoryBounded(t *testing.T) {
	clk := newClock()
	m := NewMemory(MemoryOptions{Capacity: 8, Now: clk.Now})
	ctx := context.Background()
	for i := range 10000 {
		m.Record(ctx, "pay", idempotency.Replayed, fmt.Sprintf("noise-%d", i), fmt.Sprintf("10.0.%d.%d", i/256%256, i%256))
		if i%5 == 0 { // 2000 of 12000: above 12000/Capacity, so Space-Saving must keep it
			m.Record(ctx, "pay", idempotency.Replayed, "heavy", "attacker")
		}
	}
	snap, err := m.Query(ctx, time.Minute, -1)
	if err != nil {
		t.Fatal(err)
	}
	rs := snap.Routes["pay"]
	if len(rs.TopKeys) > 8 || len(rs.TopSources) > 8 {
		t.Fatalf("kept %d keys, %d sources; capacity 8", len(rs.TopKeys), len(rs.TopSources))
	}
	if rs.TopKeys[0].Name != "heavy" || rs.TopKeys[0].Count < 2000 {
		t.Errorf("top key %v, want heavy with at least 2000", rs.TopKeys[0])
	}
	if rs.TopSources[0].Name != "attacker" || rs.TopSources[0].Count < 2000 {
		t.Errorf("top source %v, want attacker with at least 2000", rs.TopSources[0])
	}
	if got := rs.Outcomes[idempotency.Replayed]; got != 12000 {
		t.Errorf("replayed %d, want 12000 (outcome counts are exact)", got)
	}
}

func TestTopK(t *testing.T) {
	tests := []struct {
		name string
		cap  int
		adds []string
		want map[string]int64
	}{
		{"exact under capacity", 3, []string{"a", "b", "a", "c", "a"}, map[string]int64{"a": 3, "b": 1, "c": 1}},
		{"min replaced, count inherited", 2, []string{"a", "a", "b", "c"}, map[string]int64{"a": 2, "c": 2}},
		{"heavy survives", 2, []string{"h", "x", "h", "y", "h", "z", "h"}, map[string]int64{"h": 4, "z": 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := newTopK(tc.cap)
			for _, a := range tc.adds {
				k.add(a, 1)
			}
			got := map[string]int64{}
			k.addTo(got)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func BenchmarkMemoryRecord(b *testing.B) {
	b.ReportAllocs()
	m := NewMemory(MemoryOptions{})
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("evt_%d", i)
	}
	ctx := context.Background()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			o := idempotency.Forwarded
			if i%4 == 0 {
				o = idempotency.Replayed
			}
			m.Record(ctx, "pay", o, keys[i%len(keys)], "10.0.0.1")
			i++
		}
	})
}

// TestMemoryConcurrent: records from many goroutines, with queries running
// alongside, all counted (run with -race).
func TestMemoryConcurrent(t *testing.T) {
	m := NewMemory(MemoryOptions{})
	ctx := context.Background()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				if _, err := m.Query(ctx, time.Hour, 5); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	var writers sync.WaitGroup
	for w := range 8 {
		writers.Go(func() {
			for i := range 500 {
				m.Record(ctx, fmt.Sprintf("r%d", w%2), idempotency.Replayed, fmt.Sprintf("k%d", i%10), "s")
			}
		})
	}
	writers.Wait()
	close(stop)
	wg.Wait()
	snap, err := m.Query(ctx, time.Hour, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"r0", "r1"} {
		if got := snap.Routes[r].Outcomes[idempotency.Replayed]; got != 2000 {
			t.Errorf("%s replayed %d, want 2000", r, got)
		}
		if got := snap.Routes[r].TopKeys[0].Count; got != 200 {
			t.Errorf("%s top key count %d, want 200", r, got)
		}
	}
}

// A window covers at least what it asks, rounded up to whole buckets: at
// 10:00:05 a one-minute window counts a repeat of 09:59:35, and a two-hour
// window one of 08:59:05 (the minute and hour buckets both).
func TestWindowCoversWhatItAsks(t *testing.T) {
	now := time.Date(2026, 6, 12, 10, 0, 5, 0, time.UTC)
	for name, newRec := range map[string]func(*testing.T, *clock) recorder{
		"memory": func(_ *testing.T, clk *clock) recorder { return NewMemory(MemoryOptions{Now: clk.Now}) },
		"redis": func(t *testing.T, clk *clock) recorder {
			c, prefix := sharedRedis(t)
			return newRedis(t, c, prefix, clk, nil)
		},
	} {
		t.Run(name, func(t *testing.T) {
			clk := newClock()
			r := newRec(t, clk)
			for _, at := range []time.Duration{61 * time.Minute, 30 * time.Second} {
				clk.Set(now.Add(-at))
				r.Record(context.Background(), "pay", idempotency.Replayed, "k", "s")
				if rr, ok := r.(*Redis); ok {
					flush(t, rr)
				}
			}
			clk.Set(now)
			for w, want := range map[time.Duration]int64{time.Minute: 1, 2 * time.Hour: 2, MaxWindow: 2} {
				snap, err := r.Query(context.Background(), w, 10)
				if err != nil {
					t.Fatal(err)
				}
				var got int64
				if rs := snap.Routes["pay"]; rs != nil {
					got = rs.Outcomes[idempotency.Replayed]
				}
				if got != want {
					t.Errorf("window %v at 10:00:05: %d replayed, want %d", w, got, want)
				}
			}
		})
	}
}

// An async route's first deliveries are accepted, not forwarded: they
// count as firsts, or every async route would show 100% duplicates.
func TestDuplicateRateCountsAcceptedAsFirsts(t *testing.T) {
	rs := &RouteStats{Outcomes: map[idempotency.Outcome]int64{idempotency.Accepted: 1, idempotency.Replayed: 2}}
	if got := rs.DuplicateRate(); fmt.Sprintf("%.4f", got) != "0.6667" {
		t.Errorf("duplicate rate %v, want 2/3", got)
	}
}

// checkKeysCapped records keys repeated once each in one bucket, fewer
// than a bucket keeps and then one more than it does, and wants the
// query to say when the bucket was full: keys may then be missing from
// the top, and counts too high.
func checkKeysCapped(t *testing.T, rec recorder, kept int, flush func()) {
	ctx := context.Background()
	for i := range kept - 1 {
		rec.Record(ctx, "pay", idempotency.Replayed, fmt.Sprintf("k%03d", i), "s")
	}
	flush()
	for _, w := range []time.Duration{time.Minute, 24 * time.Hour} {
		if snap, err := rec.Query(ctx, w, -1); err != nil || snap.Routes["pay"].KeysCapped {
			t.Fatalf("%d keys, %v window: capped %v (%v), want exact", kept-1, w, snap.Routes["pay"].KeysCapped, err)
		}
	}
	for i := kept - 1; i <= kept; i++ {
		rec.Record(ctx, "pay", idempotency.Replayed, fmt.Sprintf("k%03d", i), "s")
	}
	flush()
	for _, w := range []time.Duration{time.Minute, 24 * time.Hour} {
		if snap, err := rec.Query(ctx, w, -1); err != nil || !snap.Routes["pay"].KeysCapped {
			t.Errorf("%d keys, %v window: capped %v (%v), want capped", kept+1, w, snap.Routes["pay"].KeysCapped, err)
		}
	}
}

func TestMemoryKeysCapped(t *testing.T) {
	clk := newClock()
	checkKeysCapped(t, NewMemory(MemoryOptions{Capacity: 8, Now: clk.Now}), 8, func() {})
}
