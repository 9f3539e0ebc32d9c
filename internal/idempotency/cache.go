package idempotency

import (
	"container/list"
	"hash/maphash"
	"sync"
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
// It is a byte-bounded LRU split into shards so that concurrent repeats do
// not all queue on one mutex.
type Cache struct {
	seed    maphash.Seed
	maxBody int
	maxAge  time.Duration
	now     func() time.Time
	shards  [cacheShards]cacheShard
}

const cacheShards = 16

// DefaultCacheMaxAge bounds how long a replica that missed an operator's
// delete can go on replaying the deleted record.
const DefaultCacheMaxAge = 5 * time.Minute

type cacheShard struct {
	mu    sync.Mutex
	max   int
	used  int
	items map[Ref]*list.Element
	lru   list.List // front = most recent
	// deleted holds, for ForgetTombstone after a Delete, when the refs
	// deleted may be cached again (see Put).
	deleted map[Ref]time.Time
}

type cacheItem struct {
	ref     Ref
	ent     *Entry
	size    int
	expires time.Time
}

// NewCache returns a cache holding about maxBytes of entries whose bodies
// are at most maxBody bytes (screen.max_cached_body: larger responses are
// replayed from the ledger), each for at most maxAge (DefaultCacheMaxAge
// when 0); nil when maxBytes <= 0 (off).
func NewCache(maxBytes, maxBody int, maxAge time.Duration) *Cache {
	if maxBytes <= 0 {
		return nil
	}
	if maxAge <= 0 {
		maxAge = DefaultCacheMaxAge
	}
	c := &Cache{seed: maphash.MakeSeed(), maxBody: maxBody, maxAge: maxAge, now: time.Now}
	per := maxBytes / cacheShards
	for i := range c.shards {
		c.shards[i].max = per
		c.shards[i].items = make(map[Ref]*list.Element)
	}
	return c
}

func (c *Cache) shard(ref Ref) *cacheShard {
	var h maphash.Hash
	h.SetSeed(c.seed)
	h.WriteString(ref.Route)
	h.WriteByte(0)
	h.WriteString(ref.Key)
	return &c.shards[h.Sum64()%cacheShards]
}

// Get returns the cached entry for ref.
func (c *Cache) Get(ref Ref) (*Entry, bool) {
	s := c.shard(ref)
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.items[ref]
	if !ok {
		return nil, false
	}
	it := el.Value.(*cacheItem)
	if c.now().After(it.expires) {
		s.remove(el)
		return nil, false
	}
	s.lru.MoveToFront(el)
	return it.ent, true
}

// Put caches a complete entry (its body present or omitted by design).
// Entries larger than a shard's budget are not cached, nor, for
// ForgetTombstone, entries of a deleted ref: a delivery that read the record
// before an operator deleted it must not put it back (the cost is that a
// ref delivered again right after its delete is not cached for a minute).
func (c *Cache) Put(ref Ref, ent *Entry) {
	if !ent.BodyCached && !ent.BodyOmitted || len(ent.Body) > c.maxBody {
		return
	}
	size := entrySize(ref, ent)
	s := c.shard(ref)
	if size > s.max {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.deleted) > 0 {
		if until, ok := s.deleted[ref]; ok {
			if c.now().Before(until) {
				return
			}
			delete(s.deleted, ref)
		}
	}
	if el, ok := s.items[ref]; ok {
		s.lru.MoveToFront(el)
		return
	}
	s.items[ref] = s.lru.PushFront(&cacheItem{ref: ref, ent: ent, size: size, expires: c.now().Add(c.maxAge)})
	s.used += size
	for s.used > s.max {
		s.remove(s.lru.Back())
	}
}

func (s *cacheShard) remove(el *list.Element) {
	it := el.Value.(*cacheItem)
	s.lru.Remove(el)
	delete(s.items, it.ref)
	s.used -= it.size
}

// Delete drops ref from the cache and keeps it out for ForgetTombstone.
func (c *Cache) Delete(ref Ref) {
	s := c.shard(ref)
	now := c.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.items[ref]; ok {
		s.remove(el)
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
// deletes, nothing cached before it can be trusted to be current.
func (c *Cache) Clear() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		clear(s.items)
		s.lru.Init()
		s.used = 0
		s.mu.Unlock()
	}
}

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
// headers map, and the fixed cost of the entry, its LRU element and its
// slot in the shard's map (about 600 bytes, measured with a heap profile).
func entrySize(ref Ref, e *Entry) int {
	const fixed, perHeader, headersMap = 600, 48, 200
	n := fixed + len(ref.Route) + len(ref.Key) + cap(e.Body) + cap(e.Fingerprint) + len(e.TraceID) + len(e.SpanID)
	if len(e.Headers) > 0 {
		n += headersMap
	}
	for k, v := range e.Headers {
		n += len(k) + len(v) + perHeader
	}
	return n
}
