package idempotency

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestCacheKeepsWithinBudget(t *testing.T) {
	c := NewCache(16*4096, 1024, 0)
	body := []byte(strings.Repeat("b", 512))
	for i := 0; i < 10000; i++ {
		c.Put(Ref{Route: "r", Key: fmt.Sprint(i)}, &Entry{Response: Response{Status: 200, Body: body}, BodyCached: true}, c.Ticket())
	}
	used := 0
	for i := range c.shards {
		if c.shards[i].used > c.shards[i].max {
			t.Fatalf("shard %d holds %d bytes over its budget %d", i, c.shards[i].used, c.shards[i].max)
		}
		used += c.shards[i].used
	}
	if n := c.Len(); n == 0 || n > 16*4096/512 {
		t.Fatalf("cache holds %d entries (%d bytes)", n, used)
	}
	// The most recent entry survives; the first was evicted.
	if _, ok := c.Get(Ref{Route: "r", Key: "9999"}); !ok {
		t.Fatalf("most recent entry evicted")
	}
	if _, ok := c.Get(Ref{Route: "r", Key: "0"}); ok {
		t.Fatalf("oldest entry kept beyond the budget")
	}
}

// An entry that keeps being repeated stays cached however many other
// entries pass through: eviction takes what is not read.
func TestCacheKeepsWhatRepeatsRead(t *testing.T) {
	c := NewCache(16*4096, 1024, 0)
	body := []byte(strings.Repeat("b", 512))
	hot := Ref{Route: "r", Key: "hot"}
	c.Put(hot, &Entry{Response: Response{Status: 200, Body: body}, BodyCached: true}, c.Ticket())
	for i := 0; i < 10000; i++ {
		c.Put(Ref{Route: "r", Key: fmt.Sprint(i)}, &Entry{Response: Response{Status: 200, Body: body}, BodyCached: true}, c.Ticket())
		if _, ok := c.Get(hot); !ok {
			t.Fatalf("the entry read after every put was evicted after %d puts", i+1)
		}
	}
}

// Entries repeats have read stay cached through a flood of first
// deliveries ten times the budget, whose records nobody reads: the flood
// churns probation only. (Under a plain LRU the flood evicted them all, and
// every repeat of a retry storm went to Redis again.)
func TestCacheKeepsRepeatedEntriesThroughAFlood(t *testing.T) {
	const budget = 16 * 8192
	c := NewCache(int(budget*gcHeadroom()), 1024, 0)
	body := []byte(strings.Repeat("b", 512))
	put := func(key string) {
		c.Put(Ref{Route: "r", Key: key}, &Entry{Response: Response{Status: 200, Body: body}, BodyCached: true}, c.Ticket())
	}
	// An eighth of what fits: the refs' spread over the shards (a random
	// seed) never fills one shard's protected segment.
	hot := budget / 700 / 8
	for i := range hot {
		put(fmt.Sprint("hot", i))
		if _, ok := c.Get(Ref{Route: "r", Key: fmt.Sprint("hot", i)}); !ok {
			t.Fatalf("hot%d not cached", i)
		}
	}
	for i := range 10 * budget / 512 {
		put(fmt.Sprint("once", i))
	}
	lost := 0
	for i := range hot {
		if _, ok := c.Get(Ref{Route: "r", Key: fmt.Sprint("hot", i)}); !ok {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d entries read by repeats were evicted by a flood of entries nobody read", lost, hot)
	}
	if _, ok := c.Get(Ref{Route: "r", Key: fmt.Sprint("once", 10*budget/512-1)}); !ok {
		t.Fatal("the flood's last entry is not cached: probation must keep the most recent first deliveries")
	}
}

// Until something is repeated, probation has the whole budget (the cache
// holds as much as a plain LRU would); once everything has been read, the
// protected segment keeps to its share and new entries still get the rest.
func TestCacheSegmentsShareTheBudget(t *testing.T) {
	c := NewCache(int(16*8192*gcHeadroom()), 1024, 0)
	body := []byte(strings.Repeat("b", 512))
	ref := func(i int) Ref { return Ref{Route: "r", Key: fmt.Sprint(i)} }
	for i := range 2000 {
		c.Put(ref(i), &Entry{Response: Response{Status: 200, Body: body}, BodyCached: true}, c.Ticket())
	}
	used, max := 0, 0
	for i := range c.shards {
		used, max = used+c.shards[i].used, max+c.shards[i].max
	}
	if used < max*9/10 {
		t.Fatalf("nothing repeated: the cache holds %d bytes of its %d; want probation to use all of it", used, max)
	}
	for i := range 2000 {
		c.Get(ref(i))
	}
	for i := range c.shards {
		s := &c.shards[i]
		if s.protectedUsed > s.protectedMax || s.used > s.max {
			t.Fatalf("shard %d: protected %d of %d, all %d of %d", i, s.protectedUsed, s.protectedMax, s.used, s.max)
		}
	}
	for i := 2000; i < 2100; i++ {
		c.Put(ref(i), &Entry{Response: Response{Status: 200, Body: body}, BodyCached: true}, c.Ticket())
		if _, ok := c.Get(ref(i)); !ok {
			t.Fatalf("new entry %d not cached beside a full protected segment", i)
		}
	}
}

func TestCacheRefusesWhatTheLedgerMustAnswer(t *testing.T) {
	c := NewCache(1<<20, 1024, 0)
	cases := []struct {
		name string
		ent  *Entry
		want bool
	}{
		{"small body", &Entry{Response: Response{Body: []byte("ok")}, BodyCached: true}, true},
		{"body over max_cached_body", &Entry{Response: Response{Body: make([]byte, 2048)}, BodyCached: true}, false},
		{"body not cached by the screen", &Entry{Response: Response{Status: 200}}, false},
		{"body omitted by record.max_body", &Entry{Response: Response{Status: 200, BodyOmitted: true}}, true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ref := Ref{Route: "r", Key: fmt.Sprint(i)}
			c.Put(ref, tc.ent, c.Ticket())
			if _, ok := c.Get(ref); ok != tc.want {
				t.Fatalf("cached = %v, want %v", ok, tc.want)
			}
		})
	}
}

func TestCacheDelete(t *testing.T) {
	c := NewCache(1<<20, 1024, 0)
	ref := Ref{Route: "r", Key: "k"}
	c.Put(ref, &Entry{Response: Response{Body: []byte("x")}, BodyCached: true}, c.Ticket())
	c.Delete(ref)
	if _, ok := c.Get(ref); ok {
		t.Fatalf("deleted entry still served")
	}
	if NewCache(0, 1, 0) != nil {
		t.Fatalf("local_cache: 0 must turn the cache off")
	}
}

func TestNeverFinal(t *testing.T) {
	for _, s := range []int{408, 425, 429, 500, 502, 503, 504, 599} {
		if !NeverFinal(s) || DefaultFinal(s) {
			t.Errorf("status %d must never be final", s)
		}
	}
	for _, s := range []int{200, 201, 204, 400, 404, 409, 422} {
		if NeverFinal(s) || !DefaultFinal(s) {
			t.Errorf("status %d should be final by default", s)
		}
	}
}

func TestCacheEntriesExpireAndClear(t *testing.T) {
	c := NewCache(1<<20, 1024, time.Minute)
	now := time.Now()
	c.now = func() time.Time { return now }
	a, b := Ref{Route: "r", Key: "a"}, Ref{Route: "r", Key: "b"}
	ent := &Entry{Response: Response{Body: []byte("x")}, BodyCached: true}
	c.Put(a, ent, c.Ticket())
	now = now.Add(59 * time.Second)
	c.Put(b, ent, c.Ticket())
	if _, ok := c.Get(a); !ok {
		t.Fatalf("entry gone before its max age")
	}
	now = now.Add(2 * time.Second)
	if _, ok := c.Get(a); ok {
		t.Fatalf("entry served past its max age")
	}
	if _, ok := c.Get(b); !ok {
		t.Fatalf("younger entry expired with the older one")
	}
	c.Clear()
	if _, ok := c.Get(b); ok || c.Len() != 0 {
		t.Fatalf("Clear left %d entries", c.Len())
	}
}

// A delivery that read a record just before an operator deleted it must not
// put it back: Put is refused for ForgetTombstone after a Delete, then
// accepted again; other refs are unaffected.
func TestCacheDeleteKeepsTheRefOut(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	c := NewCache(1<<20, 1024, time.Hour)
	c.now = func() time.Time { return now }
	ref, other := Ref{Route: "r", Key: "deleted"}, Ref{Route: "r", Key: "other"}
	ent := &Entry{Response: Response{Status: 200, Body: []byte("ok")}, BodyCached: true}
	c.Put(ref, ent, c.Ticket())
	c.Delete(ref)
	c.Put(ref, ent, c.Ticket()) // the racing refill
	if _, ok := c.Get(ref); ok {
		t.Fatal("a refill right after the delete put the deleted record back")
	}
	c.Put(other, ent, c.Ticket())
	if _, ok := c.Get(other); !ok {
		t.Fatal("another ref was kept out")
	}
	now = now.Add(ForgetTombstone)
	c.Put(ref, ent, c.Ticket())
	if _, ok := c.Get(ref); !ok {
		t.Fatal("the ref is still kept out after ForgetTombstone")
	}
}

// A record read before a Clear (the replica resubscribed to deletes and
// may have missed some) is not put back by the delivery that read it: its
// ticket is from before the Clear. A read that starts after the Clear is
// cached, and so is a ref no Clear came between.
func TestCacheRefusesWhatWasReadBeforeAClear(t *testing.T) {
	c := NewCache(1<<20, 1024, time.Hour)
	ref, later := Ref{Route: "r", Key: "read before"}, Ref{Route: "r", Key: "read after"}
	ent := &Entry{Response: Response{Status: 200, Body: []byte("ok")}, BodyCached: true}
	before := c.Ticket()
	c.Clear()
	c.Put(ref, ent, before)
	if _, ok := c.Get(ref); ok {
		t.Fatal("a record read before the Clear was put back")
	}
	after := c.Ticket()
	c.Put(later, ent, after)
	c.Put(ref, ent, after)
	if c.Len() != 2 {
		t.Fatalf("reads after the Clear: %d entries cached, want 2", c.Len())
	}
	var none *Cache
	if none.Ticket() != 0 {
		t.Fatal("a nil cache's ticket is not zero")
	}
}

// While suspended (the channel carrying deletes is down) the cache answers
// nothing and keeps nothing, even what is read meanwhile; Resume turns it
// on again, without what was read before it.
func TestCacheSuspendedAnswersAndKeepsNothing(t *testing.T) {
	c := NewCache(1<<20, 1024, 0)
	ent := &Entry{Response: Response{Status: 200, Body: []byte("ok")}, BodyCached: true}
	before, during := Ref{Route: "r", Key: "before"}, Ref{Route: "r", Key: "during"}
	c.Put(before, ent, c.Ticket())
	c.Suspend()
	if _, ok := c.Get(before); ok {
		t.Fatal("a suspended cache answered an entry")
	}
	read := c.Ticket()
	c.Put(during, ent, read)
	if _, ok := c.Get(during); ok || c.Len() != 0 {
		t.Fatalf("a suspended cache kept an entry (%d held)", c.Len())
	}
	c.Resume()
	c.Put(during, ent, read) // read while suspended: a delete may have been missed
	if _, ok := c.Get(during); ok {
		t.Fatal("an entry read while suspended was kept after Resume")
	}
	c.Put(during, ent, c.Ticket())
	if _, ok := c.Get(during); !ok {
		t.Fatal("the cache kept nothing after Resume")
	}
}

// TestCacheBudgetIsWhatItHolds: screen.local_cache is what a full cache
// costs the process: the heap its entries hold, read from the runtime,
// times the collector's headroom (2 with GOGC's default), within 15% of the
// budget — whether the entries share their header map or each keeps its
// own. entrySize is then neither far over (wasting the budget) nor under
// (growing the process past it).
func TestCacheBudgetIsWhatItHolds(t *testing.T) {
	for _, unique := range []bool{false, true} {
		t.Run(fmt.Sprintf("unique headers %v", unique), func(t *testing.T) {
			const budget = 16 << 20
			held, entries := heapHeldBy(func() *Cache {
				c, _ := fullCache(t, budget, unique)
				return c
			})
			cost := float64(held) * gcHeadroom()
			if ratio := cost / budget; ratio < 0.85 || ratio > 1.15 {
				t.Fatalf("a full cache of %d entries holds %d bytes of heap, costing %.0f for a budget of %d (%.2f×)", entries, held, cost, budget, ratio)
			}
			t.Logf("%d entries, %d bytes of heap each; cost %.2f× the budget", entries, held/int64(entries), cost/budget)
		})
	}
}

// heapHeldBy is the heap held by the cache build returns: read while it is
// alive and again once it is dropped, both after full collections. Reading
// before the build instead would count garbage and finalizers left by
// earlier tests in the package against the cache when they are freed meanwhile.
func heapHeldBy(build func() *Cache) (held int64, entries int) {
	settled := func() int64 {
		runtime.GC()
		runtime.GC() // the first may only queue finalizers
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	c := build()
	entries = c.Len()
	alive := settled()
	runtime.KeepAlive(c)
	return alive - settled(), entries
}

// Entries whose kept headers are equal share one map; entries with other
// headers replay their own, unchanged.
func TestCacheSharesEqualHeaders(t *testing.T) {
	c := NewCache(1<<20, 1024, 0)
	put := func(key string, hdr map[string]string) {
		c.Put(Ref{Route: "r", Key: key}, &Entry{Response: Response{Status: 200, Headers: hdr, Body: []byte("ok")}, BodyCached: true}, c.Ticket())
	}
	get := func(key string) map[string]string {
		e, ok := c.Get(Ref{Route: "r", Key: key})
		if !ok {
			t.Fatalf("%s not cached", key)
		}
		return e.Headers
	}
	for i := range 10 {
		put(fmt.Sprint("json", i), map[string]string{"Content-Type": "application/json"})
	}
	put("text", map[string]string{"Content-Type": "text/plain"})
	// Values that would read alike if pairs were only separated, not
	// length-prefixed.
	put("nul1", map[string]string{"A": "x\x00B\x00y"})
	put("nul2", map[string]string{"A": "x", "B": "y"})
	put("two", map[string]string{"Content-Type": "application/json", "X-Request-Id": "a"})
	first := reflect.ValueOf(get("json0")).UnsafePointer()
	for i := range 10 {
		h := get(fmt.Sprint("json", i))
		if reflect.ValueOf(h).UnsafePointer() != first {
			t.Errorf("json%d keeps a map of its own", i)
		}
		if len(h) != 1 || h["Content-Type"] != "application/json" {
			t.Errorf("json%d headers = %v", i, h)
		}
	}
	if h := get("text"); len(h) != 1 || h["Content-Type"] != "text/plain" {
		t.Errorf("text headers = %v", h)
	}
	if h := get("nul1"); len(h) != 1 || h["A"] != "x\x00B\x00y" {
		t.Errorf("nul1 headers = %v", h)
	}
	if h := get("nul2"); len(h) != 2 || h["A"] != "x" || h["B"] != "y" {
		t.Errorf("nul2 headers = %v", h)
	}
	if h := get("two"); len(h) != 2 || h["Content-Type"] != "application/json" || h["X-Request-Id"] != "a" {
		t.Errorf("two headers = %v", h)
	}
}

// Two refs whose hashes collide: the one in the slot is a miss for the
// other, and a Put of the other replaces it.
func TestCacheHashCollision(t *testing.T) {
	c := NewCache(1<<20, 1024, 0)
	a, b := Ref{Route: "r", Key: "a"}, Ref{Route: "r", Key: "b"}
	c.Put(a, &Entry{Response: Response{Status: 200, Body: []byte("a")}, BodyCached: true}, c.Ticket())
	// Make the slot of a's hash hold b, as a collision would.
	h := c.hash(a)
	s := c.shard(h)
	s.slots[s.items[h]] = newSlot(b, &Entry{Response: Response{Status: 200, Body: []byte("b")}, BodyCached: true}, nil)
	s.slots[s.items[h]].hash = h
	if _, ok := c.Get(a); ok {
		t.Fatal("a ref served another ref's entry from a shared hash slot")
	}
	c.Put(a, &Entry{Response: Response{Status: 201, Body: []byte("a2")}, BodyCached: true}, c.Ticket())
	if e, ok := c.Get(a); !ok || e.Status != 201 {
		t.Fatalf("Put over a colliding slot: %v, %v", e, ok)
	}
	if c.Len() != 1 {
		t.Fatalf("%d entries after replacing a colliding one", c.Len())
	}
}

// TestCacheBudgetHoldsWithLargeUniqueHeaders: answers whose kept headers
// are large and differ from answer to answer (an upstream that puts a
// request id, a long Location or what the sender sent into a kept header)
// cost the process no more than screen.local_cache, like any others. The
// table of shared header sets is not charged to the budget: sets that
// outlived their entries, or that came with entries too large to cache,
// must not hold megabytes of headers beside it.
func TestCacheBudgetHoldsWithLargeUniqueHeaders(t *testing.T) {
	const budget = 1 << 20
	held, entries := heapHeldBy(func() *Cache {
		c := NewCache(budget, 64<<10, time.Hour)
		for i := range 2 * maxHeaderSets {
			// 16 KiB of header per answer: fits a shard's budget (32 KiB here),
			// so it is cached, and evicted by the next answers of its shard.
			hdr := map[string]string{"Content-Type": "application/json", "Location": fmt.Sprintf("/r/%06d/%s", i, strings.Repeat("x", 16<<10))}
			c.Put(Ref{Route: "hooks", Key: fmt.Sprint("evt_", i)}, &Entry{
				Response:   Response{Status: 201, Headers: hdr, Body: []byte(`{"ok":true}`)},
				BodyCached: true,
			}, c.Ticket())
		}
		return c
	})
	cost := float64(held) * gcHeadroom()
	if ratio := cost / budget; ratio > 1.5 {
		t.Fatalf("%d entries cached hold %d bytes of heap, costing %.0f for a budget of %d (%.1f×)", entries, held, cost, budget, ratio)
	}
	t.Logf("%d entries cached; %d bytes of heap, cost %.2f× the budget", entries, held, cost/budget)
}

// An entry handed out shares the cache's bytes, and stays what it was when
// its slot is emptied and given to another ref: a replay under way keeps
// answering its own record.
func TestCacheEntryOutlivesItsSlot(t *testing.T) {
	c := NewCache(1<<20, 1024, 0)
	refs := refsInShard(c, "k", 2)
	a, b := refs[0], refs[1]
	c.Put(a, &Entry{Response: Response{Status: 201, Body: []byte("body of a")}, BodyCached: true,
		Fingerprint: []byte("fingerprint a"), TraceID: "trace-a", SpanID: "span-a"}, c.Ticket())
	got, ok := c.Get(a)
	if !ok {
		t.Fatal("a not cached")
	}
	s := &c.shards[0]
	slot := s.items[c.hash(a)]
	c.Delete(a)
	c.Put(b, &Entry{Response: Response{Status: 202, Body: []byte("body of b")}, BodyCached: true,
		Fingerprint: []byte("fingerprint b"), TraceID: "trace-b", SpanID: "span-b"}, c.Ticket())
	if s.items[c.hash(b)] != slot {
		t.Fatal("b did not get a's slot: the test proves nothing")
	}
	if got.Status != 201 || string(got.Body) != "body of a" || string(got.Fingerprint) != "fingerprint a" ||
		got.TraceID != "trace-a" || got.SpanID != "span-a" {
		t.Fatalf("a's entry changed after its slot went to b: %+v", got)
	}
	if e, ok := c.Get(b); !ok || string(e.Body) != "body of b" || e.TraceID != "trace-b" {
		t.Fatalf("b: %+v, %v", e, ok)
	}
}

// A cached entry reads back as it was put, nil and empty kept apart: a
// record without a fingerprint matches any body, one with an empty body
// replays an empty body.
func TestCacheEntryRoundTrip(t *testing.T) {
	c := NewCache(1<<20, 1024, 0)
	hdr := map[string]string{"Content-Type": "text/plain"}
	cases := map[string]Entry{
		"full": {Response: Response{Status: 200, Headers: hdr, Body: []byte("ok")}, BodyCached: true,
			Fingerprint: []byte{1, 2, 3}, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7"},
		"nil body and fingerprint":   {Response: Response{Status: 204}, BodyCached: true},
		"empty body and fingerprint": {Response: Response{Status: 200, Body: []byte{}}, BodyCached: true, Fingerprint: []byte{}},
		"body omitted":               {Response: Response{Status: 200, BodyOmitted: true}, Fingerprint: []byte{9}},
		"unrecorded":                 {Response: Response{Status: 200, Body: []byte("x")}, BodyCached: true, Unrecorded: true},
		"async":                      {Response: Response{Status: 202, Body: []byte("ack")}, BodyCached: true, Async: true},
		"ack unknown":                {Response: Response{Status: 200, Body: []byte("ok")}, BodyCached: true, AckUnknown: true},
		"ids of 255 and 200 bytes": {Response: Response{Status: 200}, BodyCached: true,
			TraceID: strings.Repeat("t", 255), SpanID: strings.Repeat("s", 200)},
	}
	for name, want := range cases {
		ref := Ref{Route: "r", Key: name}
		c.Put(ref, &want, c.Ticket())
		var got Entry
		if !c.Load(ref, &got) {
			t.Fatalf("%s: not cached", name)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, want %+v", name, got, want)
		}
	}
}
