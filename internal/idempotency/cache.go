package idempotency

import (
	"encoding/binary"
	"hash/maphash"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Cache keeps done entries in-process (screen.local_cache). A done record
// never changes, so a cached entry is never stale; only an operator's
// delete removes a record, and the admin API calls Delete on every replica
// it can reach (and the Redis screen broadcasts it).
//
// An entry also has a maximum age: a replica that missed a delete (its
// pub/sub subscription was down, or there is no shared screen to carry the
// message) stops replaying the deleted record when its copy expires.
//
// It is a byte-bounded segmented LRU: an entry enters on probation and is
// promoted to the protected segment when a repeat reads it; eviction takes
// the least recently used entry on probation, and a protected one only when
// probation is empty. The protected segment holds at most protectedShare of
// the budget (its least recent entries go back on probation), and probation
// has the rest, all of it while nothing has been repeated. So a flood of
// first deliveries, whose records mostly are never read, churns probation
// alone, and the records that repeats keep reading — a retry storm's — stay
// cached through it; under a plain LRU every new record pushed them out.
//
// It is split into shards so that concurrent repeats do not all queue on
// one mutex. It is laid out for the garbage collector,
// which marks every pointer of a full cache (tens of thousands of entries)
// in every cycle: one object per entry (list links and the entry itself
// inline), a shard map keyed by the ref's hash rather than by two strings,
// expiry as a duration rather than a time.Time (which holds a pointer),
// and one header map for all the entries whose kept headers are equal (a
// route's answers mostly carry the same Content-Type) instead of two
// objects per entry. BenchmarkCacheGC measures it.
type Cache struct {
	seed    maphash.Seed
	maxBody int
	maxAge  time.Duration
	now     func() time.Time
	epoch   time.Time // expiries are durations since it (monotonic)
	headers headerSets
	// clears counts Clear's calls: a Ticket taken before a record was read
	// from the screen or the ledger is refused by Put once a Clear ran.
	clears atomic.Uint64
	// suspended is set while the channel that carries deletes is down
	// (Suspend, Resume): the cache answers nothing and keeps nothing.
	suspended atomic.Bool
	shards    [cacheShards]cacheShard
}

// Ticket is what a delivery takes before it reads a record from the screen
// or the ledger, and gives to Put with what it read.
//
// Clear runs when this replica may have missed operators' deletes (its
// subscription to them was down). A record read before that Clear may be
// one an operator deleted meanwhile; the missed delete left no tombstone
// (Delete's) to keep it out, so Put refuses it by its ticket instead of
// putting it back for the cache's maximum age.
type Ticket uint64

// Ticket returns the ticket for a read that starts now; a nil cache gives
// the zero ticket.
func (c *Cache) Ticket() Ticket {
	if c == nil {
		return 0
	}
	return Ticket(c.clears.Load())
}

const cacheShards = 16

// protectedShare is the most of a shard's budget its protected segment
// holds, in percent.
const protectedShare = 80

// DefaultCacheMaxAge bounds how long a replica that missed an operator's
// delete can go on replaying the deleted record.
const DefaultCacheMaxAge = 5 * time.Minute

type cacheShard struct {
	mu   sync.Mutex
	max  int
	used int // both segments
	// items is keyed by the ref's 64-bit hash; an item whose ref differs
	// (a collision) is a miss for Get and replaced by Put.
	items map[uint64]*cacheItem
	// probation and protected are sentinels of circular lists: next = most
	// recent.
	probation, protected cacheItem
	protectedMax         int
	protectedUsed        int
	// deleted holds, for ForgetTombstone after a Delete, when the refs
	// deleted may be cached again (see Put).
	deleted map[Ref]time.Time
}

type cacheItem struct {
	prev, next *cacheItem
	hash       uint64
	size       int
	protected  bool
	expires    time.Duration // since Cache.epoch
	ref        Ref
	ent        Entry
}

// NewCache returns a cache whose entries cost the process about maxBytes,
// holding entries whose bodies are at most maxBody bytes
// (screen.max_cached_body: larger responses are replayed from the ledger),
// each for at most maxAge (DefaultCacheMaxAge when 0); nil when maxBytes
// <= 0 (off).
//
// What entries cost the process is their heap and the collector's headroom
// for it: with GOGC at its default of 100 the heap grows by as much as is
// live before the next collection, so a live byte is two bytes of the
// process's peak memory. The entries are held to maxBytes / (1 + GOGC/100)
// of heap, so that screen.local_cache is what the cache adds to the
// process, as operators sizing a container read it.
func NewCache(maxBytes, maxBody int, maxAge time.Duration) *Cache {
	if maxBytes <= 0 {
		return nil
	}
	if maxAge <= 0 {
		maxAge = DefaultCacheMaxAge
	}
	c := &Cache{seed: maphash.MakeSeed(), maxBody: maxBody, maxAge: maxAge, now: time.Now, epoch: time.Now()}
	per := int(float64(maxBytes)/gcHeadroom()) / cacheShards
	for i := range c.shards {
		s := &c.shards[i]
		s.max, s.protectedMax = per, per*protectedShare/100
		s.items = make(map[uint64]*cacheItem)
		s.reset()
	}
	return c
}

// gcHeadroom is the factor by which the collector lets a live heap grow
// before it collects again: 1 + GOGC/100, or 1 with the collector off.
func gcHeadroom() float64 {
	sample := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 2 // GOGC's default
	}
	percent := int64(sample[0].Value.Uint64()) // GOGC=off reads as -1
	if percent < 0 {
		return 1
	}
	return 1 + float64(percent)/100
}

// since is now as a duration since the cache's epoch.
func (c *Cache) since() time.Duration { return c.now().Sub(c.epoch) }

func (c *Cache) hash(ref Ref) uint64 {
	var h maphash.Hash
	h.SetSeed(c.seed)
	h.WriteString(ref.Route)
	h.WriteByte(0)
	h.WriteString(ref.Key)
	return h.Sum64()
}

func (c *Cache) shard(h uint64) *cacheShard { return &c.shards[h%cacheShards] }

// Get returns the cached entry for ref. The entry is shared: callers must
// not change it.
func (c *Cache) Get(ref Ref) (*Entry, bool) {
	if c.suspended.Load() {
		return nil, false
	}
	h := c.hash(ref)
	s := c.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[h]
	if !ok || it.ref != ref {
		return nil, false
	}
	if c.since() > it.expires {
		s.remove(it)
		return nil, false
	}
	s.promote(it)
	return &it.ent, true
}

// Put caches a complete entry (its body present or omitted by design),
// read under ticket t. Entries larger than a shard's budget are not
// cached, nor, for ForgetTombstone, entries of a deleted ref: a delivery
// that read the record before an operator deleted it must not put it back
// (the cost is that a ref delivered again right after its delete is not
// cached for a minute). Nor are entries read before the last Clear (see
// Ticket). The cache keeps a copy of *ent (sharing its headers and body,
// which are never changed once recorded).
func (c *Cache) Put(ref Ref, ent *Entry, t Ticket) {
	if !ent.BodyCached && !ent.BodyOmitted || len(ent.Body) > c.maxBody {
		return
	}
	hdr, shared := c.headers.share(ent.Headers)
	size := entrySize(ref, ent, !shared)
	h := c.hash(ref)
	s := c.shard(h)
	if size > s.max {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Under the shard's lock: Clear counts itself before it empties the
	// shards, so a Put either sees the new count or is emptied by it.
	if Ticket(c.clears.Load()) != t || c.suspended.Load() {
		return
	}
	if len(s.deleted) > 0 {
		if until, ok := s.deleted[ref]; ok {
			if c.now().Before(until) {
				return
			}
			delete(s.deleted, ref)
		}
	}
	if it, ok := s.items[h]; ok {
		if it.ref == ref {
			s.touch(it)
			return
		}
		s.remove(it) // a collision: the newer ref wins
	}
	now := c.since()
	it := &cacheItem{hash: h, size: size, expires: now + c.maxAge, ref: ref, ent: *ent}
	it.ent.Headers = hdr
	s.items[h] = it
	pushFront(&s.probation, it)
	s.used += size
	for s.used > s.max {
		victim := s.probation.prev
		if old := s.protected.prev; old != &s.protected && now > old.expires {
			// Past its max age a protected entry is never served again:
			// it goes before anything live, or a retry storm that ended
			// would keep the protected share of the budget after it.
			victim = old
		} else if victim == it {
			// Only the new entry is left on probation: make its room in
			// the protected segment rather than drop what was just put
			// (size <= s.max, so it fits once the rest is gone).
			victim = s.protected.prev
		}
		s.remove(victim)
	}
}

// headerSets shares equal header maps among cached entries. Recorded
// headers never change, so one map can serve every entry that carries the
// same names and values. At most maxHeaderSets distinct sets are kept
// (routes that keep a header unique to each answer, such as a request id,
// would fill any table); entries past that keep their own map.
//
// The table is never emptied and its sets are not charged to the budget,
// so only small sets enter it (maxSharedHeaderBytes): it then holds at
// most about 1 MiB whatever the answers. Sharing pays off for the few
// short sets a route's answers repeat (a Content-Type); large ones kept it
// uncharged long after their entries were evicted, or had never been
// cached (a 16 KiB Location unique to each answer: 73× a 1 MiB budget,
// TestCacheBudgetHoldsWithLargeUniqueHeaders).
type headerSets struct {
	mu   sync.Mutex
	sets map[string]map[string]string
	buf  []byte
}

const (
	maxHeaderSets = 1024
	// maxSharedHeaderBytes bounds the names and values of a shared set;
	// a larger set stays its entry's own, charged to the budget.
	maxSharedHeaderBytes = 256
)

// share returns the map an entry with headers h keeps, and whether it is
// one that other entries already hold (and its memory is not the entry's):
// an equal shared map, or h itself when h becomes the shared one or the
// table is full.
func (hs *headerSets) share(h map[string]string) (map[string]string, bool) {
	if len(h) == 0 || len(h) > 4 {
		return h, false
	}
	size := 0
	for k, v := range h {
		size += len(k) + len(v)
	}
	if size > maxSharedHeaderBytes {
		return h, false
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	// The key lists the pairs in name order, each name and value preceded
	// by its length, so that no two different sets share a key whatever
	// bytes a recorded value holds.
	var names [4]string
	n := 0
	for k := range h {
		names[n] = k
		n++
	}
	slices.Sort(names[:n])
	b := hs.buf[:0]
	for _, k := range names[:n] {
		v := h[k]
		b = append(binary.AppendUvarint(b, uint64(len(k))), k...)
		b = append(binary.AppendUvarint(b, uint64(len(v))), v...)
	}
	hs.buf = b
	if shared, ok := hs.sets[string(b)]; ok { // no allocation for the lookup
		return shared, true
	}
	if len(hs.sets) >= maxHeaderSets {
		return h, false
	}
	if hs.sets == nil {
		hs.sets = make(map[string]map[string]string)
	}
	hs.sets[string(b)] = h
	return h, false
}

// reset empties both segments' lists.
func (s *cacheShard) reset() {
	s.probation.next, s.probation.prev = &s.probation, &s.probation
	s.protected.next, s.protected.prev = &s.protected, &s.protected
	s.used, s.protectedUsed = 0, 0
}

// pushFront makes it the most recent entry of the list whose sentinel is
// head.
func pushFront(head, it *cacheItem) {
	it.prev, it.next = head, head.next
	head.next.prev = it
	head.next = it
}

func unlink(it *cacheItem) {
	it.prev.next, it.next.prev = it.next, it.prev
	it.prev, it.next = nil, nil
}

// promote moves an entry a repeat read to the front of the protected
// segment, and the protected segment's least recent entries past its share
// back to the front of probation.
func (s *cacheShard) promote(it *cacheItem) {
	unlink(it)
	if !it.protected {
		it.protected = true
		s.protectedUsed += it.size
	}
	pushFront(&s.protected, it)
	for s.protectedUsed > s.protectedMax {
		old := s.protected.prev
		unlink(old)
		old.protected = false
		s.protectedUsed -= old.size
		pushFront(&s.probation, old)
	}
}

// touch makes it the most recent entry of its segment.
func (s *cacheShard) touch(it *cacheItem) {
	unlink(it)
	if it.protected {
		pushFront(&s.protected, it)
	} else {
		pushFront(&s.probation, it)
	}
}

func (s *cacheShard) remove(it *cacheItem) {
	unlink(it)
	delete(s.items, it.hash)
	s.used -= it.size
	if it.protected {
		s.protectedUsed -= it.size
	}
}

// Delete drops ref from the cache and keeps it out for ForgetTombstone.
func (c *Cache) Delete(ref Ref) {
	h := c.hash(ref)
	s := c.shard(h)
	now := c.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if it, ok := s.items[h]; ok && it.ref == ref {
		s.remove(it)
	}
	if s.deleted == nil {
		s.deleted = make(map[Ref]time.Time)
	}
	for r, until := range s.deleted { // deletes are operators' acts: few
		if !now.Before(until) {
			delete(s.deleted, r)
		}
	}
	s.deleted[ref] = now.Add(ForgetTombstone)
}

// Clear drops every entry: after an outage of the channel that carries
// deletes, nothing cached before it can be trusted to be current, nor
// anything read before it and not yet put (see Ticket).
func (c *Cache) Clear() {
	c.clears.Add(1)
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		clear(s.items)
		s.reset()
		s.mu.Unlock()
	}
}

// Suspend empties the cache and keeps it empty until Resume: the channel
// that carries other replicas' deletes is down, so a delete made meanwhile
// would not reach this replica, which would go on replaying the deleted
// record (the provider's redelivery answered, never forwarded) for as long
// as the outage lasts. Clear at the resubscription alone came too late for
// that; while suspended, repeats read the screen or the ledger, which the
// delete did reach.
func (c *Cache) Suspend() {
	c.suspended.Store(true)
	c.Clear()
}

// Resume clears the cache (deletes published while it was suspended were
// lost) and lets it keep entries again: call it once the channel carrying
// deletes is back. Reads that began before it cannot put what they read
// (Ticket).
func (c *Cache) Resume() {
	c.Clear()
	c.suspended.Store(false)
}

// Suspended reports whether the cache is suspended (Suspend).
func (c *Cache) Suspended() bool { return c.suspended.Load() }

// Len is the number of cached entries.
func (c *Cache) Len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.items)
		s.mu.Unlock()
	}
	return n
}

// entrySize approximates the memory an entry holds, so that the budget
// (screen.local_cache) is what the process actually spends: the backing
// arrays of body and fingerprint (their capacity, not their length), the
// headers map unless other entries share it (ownHeaders false; the shared
// sets are few and not charged), and the fixed cost of the item (entry and
// list links) and its slot in the shard's map (about 165 bytes, read from
// the heap of a full cache: TestCacheBudgetIsWhatItHolds).
func entrySize(ref Ref, e *Entry, ownHeaders bool) int {
	const fixed, perHeader, headersMap = 165, 48, 200
	n := fixed + len(ref.Route) + len(ref.Key) + cap(e.Body) + cap(e.Fingerprint) + len(e.TraceID) + len(e.SpanID)
	if !ownHeaders {
		return n
	}
	if len(e.Headers) > 0 {
		n += headersMap
	}
	for k, v := range e.Headers {
		n += len(k) + len(v) + perHeader
	}
	return n
}
