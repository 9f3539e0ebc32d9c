package idempotency

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// checkCacheShard verifies, under the shard's lock, that both lists are
// well linked, hold every item of the map exactly once, that each item's
// protected flag matches its list, and that used and protectedUsed are the
// sums of the sizes their lists hold and within their bounds.
func checkCacheShard(t *testing.T, c *Cache, i int, op string) {
	t.Helper()
	s := &c.shards[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[int32]bool, len(s.items))
	sums := [2]int{}
	for seg, head := range []int32{probationList, protectedList} {
		n := 0
		for j := s.slots[head].next; j != head; j = s.slots[j].next {
			if n++; n > len(s.items)+1 {
				t.Fatalf("after %s: shard %d segment %d: a cycle or more items than the map holds", op, i, seg)
			}
			sl := &s.slots[j]
			if s.slots[sl.next].prev != j || s.slots[sl.prev].next != j {
				t.Fatalf("after %s: shard %d segment %d: broken links", op, i, seg)
			}
			if seen[j] {
				t.Fatalf("after %s: shard %d: slot %d in the lists twice", op, i, j)
			}
			seen[j] = true
			if sl.protected != (seg == 1) {
				t.Fatalf("after %s: shard %d: slot %d flagged protected=%v in segment %d", op, i, j, sl.protected, seg)
			}
			if k, ok := s.items[sl.hash]; !ok || k != j {
				t.Fatalf("after %s: shard %d: listed slot %d is not the map's", op, i, j)
			}
			sums[seg] += sl.size
		}
	}
	for _, j := range s.free {
		if seen[j] || s.slots[j].data != nil {
			t.Fatalf("after %s: shard %d: free slot %d is listed or holds an entry", op, i, j)
		}
	}
	if len(s.items)+len(s.free)+2 != len(s.slots) {
		t.Fatalf("after %s: shard %d: %d entries and %d free slots in %d slots", op, i, len(s.items), len(s.free), len(s.slots))
	}
	if len(seen) != len(s.items) {
		t.Fatalf("after %s: shard %d: lists hold %d items, map %d", op, i, len(seen), len(s.items))
	}
	if s.used != sums[0]+sums[1] || s.protectedUsed != sums[1] {
		t.Fatalf("after %s: shard %d: used %d protectedUsed %d; lists hold %d + %d", op, i, s.used, s.protectedUsed, sums[0], sums[1])
	}
	if s.used > s.max || s.protectedUsed > s.protectedMax || s.used < 0 || s.protectedUsed < 0 {
		t.Fatalf("after %s: shard %d: used %d of %d, protected %d of %d", op, i, s.used, s.max, s.protectedUsed, s.protectedMax)
	}
}

// Random Puts (new refs, existing refs, collisions, entries larger than the
// protected segment and than the shard), Gets (hits, expiries, promotions
// and demotions), Deletes and Clears keep the shards' accounting exact.
func TestCacheAccountingUnderRandomOperations(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		r := rand.New(rand.NewPCG(seed, seed*7))
		now := time.Unix(1_700_000_000, 0)
		c := NewCache(16*4096*int(gcHeadroom()), 1<<20, time.Minute)
		c.now = func() time.Time { return now }
		max := c.shards[0].max
		sizes := []int{0, 64, 300, 700, c.shards[0].protectedMax - 100, max - 400, max + 10}
		ref := func() Ref { return Ref{Route: "r", Key: fmt.Sprint(r.IntN(120))} }
		deleted := map[Ref]bool{}
		for step := range 3000 {
			var op string
			switch p := r.IntN(100); {
			case p < 45:
				rf := ref()
				body := []byte(rf.Key + strings.Repeat("x", sizes[r.IntN(len(sizes))]))
				c.Put(rf, &Entry{Response: Response{Status: 200, Body: body}, BodyCached: true}, c.Ticket())
				op = "Put " + rf.Key
			case p < 85:
				rf := ref()
				e, ok := c.Get(rf)
				if ok && !strings.HasPrefix(string(e.Body), rf.Key) {
					t.Fatalf("seed %d step %d: Get %v served another ref's entry", seed, step, rf)
				}
				if ok && deleted[rf] {
					t.Fatalf("seed %d step %d: Get %v served a deleted entry", seed, step, rf)
				}
				op = "Get " + rf.Key
			case p < 90:
				rf := ref()
				c.Delete(rf)
				deleted[rf] = true
				if _, ok := c.Get(rf); ok {
					t.Fatalf("seed %d step %d: served right after Delete", seed, step)
				}
				op = "Delete " + rf.Key
			case p < 91:
				c.Clear()
				if c.Len() != 0 {
					t.Fatal("Clear left entries")
				}
				op = "Clear"
			case p < 95:
				now = now.Add(time.Duration(r.IntN(40)) * time.Second)
				// Tombstones lapse after ForgetTombstone; forget the model's
				// deletes conservatively when that much time passed.
				op = "tick"
			default:
				// A collision: an item of one ref sitting in the slot of
				// another ref's hash, then a Put of that other ref.
				a, b := ref(), ref()
				ha, hb := c.hash(a), c.hash(b)
				if a == b || ha%cacheShards != hb%cacheShards {
					continue
				}
				s := c.shard(ha)
				s.mu.Lock()
				ia, oka := s.items[ha]
				_, okb := s.items[hb]
				if oka && !okb {
					delete(s.items, ha)
					s.slots[ia].hash = hb
					s.items[hb] = ia
				}
				s.mu.Unlock()
				c.Put(b, &Entry{Response: Response{Status: 200, Body: []byte(b.Key + "c")}, BodyCached: true}, c.Ticket())
				op = "collision Put " + b.Key
			}
			if op == "tick" {
				for rf := range deleted {
					delete(deleted, rf) // may be cached again after ForgetTombstone
				}
			}
			for i := range c.shards {
				checkCacheShard(t, c, i, fmt.Sprintf("seed %d step %d %s", seed, step, op))
			}
		}
	}
}

// The same under concurrent goroutines (run with -race); the invariants are
// checked once the goroutines are done.
func TestCacheAccountingUnderConcurrency(t *testing.T) {
	c := NewCache(16*4096*int(gcHeadroom()), 1<<20, 50*time.Millisecond)
	max := c.shards[0].max
	sizes := []int{0, 300, 700, c.shards[0].protectedMax - 100, max - 400}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 20000 {
				rf := Ref{Route: "r", Key: fmt.Sprint(r.IntN(200))}
				switch p := r.IntN(1000); {
				case p < 450:
					body := []byte(rf.Key + "|" + strings.Repeat("x", sizes[r.IntN(len(sizes))]))
					c.Put(rf, &Entry{Response: Response{Status: 200, Body: body}, BodyCached: true}, c.Ticket())
				case p < 990:
					if e, ok := c.Get(rf); ok && !strings.HasPrefix(string(e.Body), rf.Key+"|") {
						t.Errorf("Get %v served another ref's entry", rf)
						return
					}
				case p < 998:
					c.Delete(rf)
				default:
					c.Clear()
				}
			}
		}()
	}
	wg.Wait()
	for i := range c.shards {
		checkCacheShard(t, c, i, "concurrent run")
	}
}

// refsInShard returns n refs whose hashes land in shard 0.
func refsInShard(c *Cache, prefix string, n int) []Ref {
	var refs []Ref
	for i := 0; len(refs) < n; i++ {
		rf := Ref{Route: "r", Key: fmt.Sprintf("%s%d", prefix, i)}
		if c.hash(rf)%cacheShards == 0 {
			refs = append(refs, rf)
		}
	}
	return refs
}

// An entry within the shard's budget is cached even when the protected
// segment is full: Put makes room by evicting, it does not evict the entry
// it just put. (Here the Put of a 4 KB entry into a 10 KB shard whose
// protected segment holds 7.7 KB evicts the three entries on probation and
// then the new entry itself, leaving the cache with less than before and
// without the entry; the plain LRU cached it.)
func TestCachePutBesideAFullProtectedSegment(t *testing.T) {
	c := NewCache(16*10000*int(gcHeadroom()), 64<<10, time.Hour)
	s := &c.shards[0]
	small := []byte(strings.Repeat("s", 400))
	put := func(rf Ref, body []byte) {
		c.Put(rf, &Entry{Response: Response{Status: 200, Body: body}, BodyCached: true}, c.Ticket())
	}
	for _, rf := range refsInShard(c, "hot", 30) {
		put(rf, small)
		c.Get(rf)
	}
	probation := refsInShard(c, "cold", 3)
	for _, rf := range probation {
		put(rf, small)
	}
	big := Ref{Route: "r", Key: "big"}
	for i := 0; c.hash(big)%cacheShards != 0; i++ {
		big.Key = fmt.Sprint("big", i)
	}
	body := make([]byte, 4000)
	if size := entrySize(big, &Entry{Response: Response{Body: body}}, false); size > s.max {
		t.Fatalf("test set-up: entry of %d bytes, shard budget %d", size, s.max)
	}
	before := len(s.items)
	t.Logf("shard: budget %d, protected %d of %d, %d entries", s.max, s.protectedUsed, s.protectedMax, before)
	put(big, body)
	if _, ok := c.Get(big); !ok {
		t.Fatalf("an entry of %d bytes within the shard's budget of %d was not cached (entries %d -> %d, used %d)",
			entrySize(big, &Entry{Response: Response{Body: body}}, false), s.max, before, len(s.items), s.used)
	}
}

// Protected entries past their max age are never served, and they must not
// keep holding the protected share of the budget once they are dead: after
// a retry storm's entries expired, new entries (nothing repeated) get the
// budget as they did under the plain LRU. Here the flood's 12 most recent
// entries of the shard (9.6 KB of a 10 KB budget) should be cached; with
// the expired storm's 7.7 KB still protected only 2 are.
func TestCacheExpiredProtectedEntriesGiveBackTheBudget(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	c := NewCache(16*10000*int(gcHeadroom()), 64<<10, time.Minute)
	c.now = func() time.Time { return now }
	body := []byte(strings.Repeat("s", 600))
	put := func(rf Ref) {
		c.Put(rf, &Entry{Response: Response{Status: 200, Body: body}, BodyCached: true}, c.Ticket())
	}
	for _, rf := range refsInShard(c, "storm", 30) {
		put(rf)
		c.Get(rf)
	}
	now = now.Add(2 * time.Minute) // the storm is over, its entries dead
	flood := refsInShard(c, "once", 200)
	for _, rf := range flood {
		put(rf)
	}
	kept := 0
	for _, rf := range flood[len(flood)-12:] {
		if _, ok := c.Get(rf); ok {
			kept++
		}
	}
	if kept < 12 {
		s := &c.shards[0]
		t.Fatalf("of the flood's 12 most recent entries %d are cached; the shard holds %d bytes of expired protected entries of its %d", kept, s.protectedUsed, s.max)
	}
}
