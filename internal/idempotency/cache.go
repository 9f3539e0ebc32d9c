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
// never changes, so only an operator's delete makes an entry stale: the
// admin API calls Delete on every replica it reaches, and entries expire
// after a maximum age for a replica that missed it.
//
// It is a sharded, byte-bounded segmented LRU: entries enter on probation
// and move to the protected segment (at most protectedShare of the budget)
// when a repeat reads them, so a flood of first deliveries churns
// probation alone and a retry storm's records stay. Entries hold few
// pointers (one object each, maps keyed by hash, expiry as a duration,
// shared header maps) because the collector marks them all every cycle.
type Cache struct {
	seed    maphash.Seed
	maxBody int
	maxAge  time.Duration
	now     func() time.Time
	epoch   time.Time // expiries are durations since it (monotonic)
	headers headerSets
	clears  atomic.Uint64 // Clear's calls: the current Ticket
	// suspended: the channel carrying deletes is down (Suspend).
	suspended atomic.Bool
	shards    [cacheShards]cacheShard
}

// Ticket is taken before a record is read and given to Put with it: a
// record read before a Clear may be one whose delete was missed.
type Ticket uint64

// Ticket returns the ticket for a read that starts now (0 for a nil cache).
func (c *Cache) Ticket() Ticket {
	if c == nil {
		return 0
	}
	return Ticket(c.clears.Load())
}

const cacheShards = 16

// protectedShare is the protected segment's most, in percent of a shard.
const protectedShare = 80

// DefaultCacheMaxAge bounds how long a missed delete goes on replaying.
const DefaultCacheMaxAge = 5 * time.Minute

type cacheShard struct {
	mu    sync.Mutex
	max   int
	used  int                   // both segments
	items map[uint64]*cacheItem // by the ref's hash; a collision is a miss
	// Sentinels of circular lists; next is the most recent.
	probation, protected cacheItem
	protectedMax         int
	protectedUsed        int
	deleted              map[Ref]time.Time // Delete's tombstones: until when

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
// holding bodies of at most maxBody bytes (screen.max_cached_body), each
// for at most maxAge (DefaultCacheMaxAge when 0); nil when maxBytes <= 0.
// The entries' heap is held to maxBytes / (1 + GOGC/100): the collector's
// headroom is part of what they cost a container.
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

// gcHeadroom is 1 + GOGC/100, or 1 with the collector off.
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

// Put caches a complete entry read under ticket t, keeping a copy of *ent
// that shares its headers and body. It refuses entries larger than a
// shard's budget, entries read before the last Clear, and, for
// ForgetTombstone, entries of a deleted ref: a delivery that read the
// record before the delete must not put it back.
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
	// Under the lock: Clear counts before it empties the shards.
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
			// Expired: it goes before anything live.
			victim = old
		} else if victim == it {
			// Make the new entry's room in the protected segment
			// rather than drop what was just put.
			victim = s.protected.prev
		}
		s.remove(victim)
	}
}

// headerSets shares equal header maps among cached entries (recorded
// headers never change). The table is never emptied and not charged to
// the budget, so it is bounded: at most maxHeaderSets sets of at most
// maxSharedHeaderBytes each; other entries keep their own map.
type headerSets struct {
	mu   sync.Mutex
	sets map[string]map[string]string
	buf  []byte
}

const (
	maxHeaderSets        = 1024
	maxSharedHeaderBytes = 256
)

// share returns the map an entry with headers h keeps, and whether other
// entries already hold it (its memory is not the entry's).
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
	// Length-prefixed pairs in name order: no two sets share a key.
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

func (s *cacheShard) reset() {
	s.probation.next, s.probation.prev = &s.probation, &s.probation
	s.protected.next, s.protected.prev = &s.protected, &s.protected
	s.used, s.protectedUsed = 0, 0
}

// pushFront makes it the most recent entry of head's list.
func pushFront(head, it *cacheItem) {
	it.prev, it.next = head, head.next
	head.next.prev = it
	head.next = it
}

func unlink(it *cacheItem) {
	it.prev.next, it.next.prev = it.next, it.prev
	it.prev, it.next = nil, nil
}

// promote moves an entry a repeat read to the protected segment, and the
// least recent ones past its share back to probation.
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

// Clear drops every entry, and what was read before it and not yet put
// (Ticket): after an outage of the channel carrying deletes.
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

// Suspend empties the cache and keeps it empty until Resume, while the
// channel carrying other replicas' deletes is down: repeats then read the
// screen or the ledger, which deletes do reach.
func (c *Cache) Suspend() {
	c.suspended.Store(true)
	c.Clear()
}

// Resume clears the cache (deletes published while it was suspended were
// lost) and lets it keep entries again, once the channel is back.
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

// entrySize approximates the memory an entry holds, unshared headers and
// fixed costs included.
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
