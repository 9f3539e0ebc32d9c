package idempotency

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Cache keeps done entries in-process (screen.local_cache). A done record
// never changes, so only an operator's delete makes an entry stale: the
// admin API calls Delete on every replica it reaches, and entries expire
// after a maximum age for a replica that missed it.
//
// It is a sharded, byte-bounded segmented LRU: entries enter on probation
// and move to the protected segment (at most protectedShare of the budget)
// when a repeat reads them, so a flood of first deliveries churns
// probation alone and a retry storm's records stay. The collector marks
// every pointer the cache holds on every cycle, so an entry holds two (its
// bytes and its header map, shared by equal ones): entries are slots of an
// array linked by index, found through a map that holds no pointers.
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
	used  int              // both segments
	items map[uint64]int32 // the ref's hash → its slot; a collision is a miss
	// slots hold the entries; slots 0 and 1 are the sentinels of the
	// probation and protected lists (circular, by index; next is the most
	// recent).
	slots         []cacheSlot
	free          []int32 // slots of removed entries
	protectedMax  int
	protectedUsed int
	deleted       map[Ref]time.Time // Delete's tombstones: until when
}

const probationList, protectedList int32 = 0, 1

// cacheSlot is one entry. Its bytes — route, key, body, fingerprint, trace
// and span ids, in that order — are one allocation that is never written
// after Put, so an entry handed out stays valid after its slot is reused.
type cacheSlot struct {
	prev, next int32
	// Lengths of data's parts.
	route, key, body, fingerprint uint32
	trace, span                   uint8
	flags                         slotFlags
	protected                     bool
	size                          int
	hash                          uint64
	expires                       time.Duration // since Cache.epoch
	data                          []byte
	headers                       map[string]string // shared with equal entries, or its own
	status                        int
}

type slotFlags uint8

const (
	bodyNil        slotFlags = 1 << iota // Body was nil, not empty
	fingerprintNil                       // no fingerprint: matches any body
	bodyCached
	bodyOmitted
	unrecorded
	async
	ackUnknown
)

// is reports whether the slot holds ref's entry.
func (sl *cacheSlot) is(ref Ref) bool {
	return string(sl.data[:sl.route]) == ref.Route &&
		string(sl.data[sl.route:sl.route+sl.key]) == ref.Key
}

// entry fills e with the slot's entry, sharing its bytes.
func (sl *cacheSlot) entry(e *Entry) {
	d := sl.data[sl.route+sl.key:]
	body, d := d[:sl.body:sl.body], d[sl.body:]
	fp, d := d[:sl.fingerprint:sl.fingerprint], d[sl.fingerprint:]
	trace, span := d[:sl.trace], d[sl.trace:int(sl.trace)+int(sl.span)]
	if sl.flags&bodyNil != 0 {
		body = nil
	}
	if sl.flags&fingerprintNil != 0 {
		fp = nil
	}
	*e = Entry{
		Response:   Response{Status: sl.status, Headers: sl.headers, Body: body, BodyOmitted: sl.flags&bodyOmitted != 0},
		BodyCached: sl.flags&bodyCached != 0, Unrecorded: sl.flags&unrecorded != 0, Async: sl.flags&async != 0,
		AckUnknown:  sl.flags&ackUnknown != 0,
		Fingerprint: fp,
		// The bytes are never written again (cacheSlot).
		TraceID: unsafe.String(unsafe.SliceData(trace), len(trace)),
		SpanID:  unsafe.String(unsafe.SliceData(span), len(span)),
	}
}

// newSlot is ref's entry e as a slot (unlinked), with its bytes copied.
func newSlot(ref Ref, e *Entry, headers map[string]string) cacheSlot {
	n := len(ref.Route) + len(ref.Key) + len(e.Body) + len(e.Fingerprint) + len(e.TraceID) + len(e.SpanID)
	data := make([]byte, 0, n)
	data = append(append(data, ref.Route...), ref.Key...)
	data = append(append(data, e.Body...), e.Fingerprint...)
	data = append(append(data, e.TraceID...), e.SpanID...)
	sl := cacheSlot{data: data, headers: headers, status: e.Status,
		route: uint32(len(ref.Route)), key: uint32(len(ref.Key)), body: uint32(len(e.Body)),
		fingerprint: uint32(len(e.Fingerprint)), trace: uint8(len(e.TraceID)), span: uint8(len(e.SpanID))}
	flag := func(on bool, f slotFlags) {
		if on {
			sl.flags |= f
		}
	}
	flag(e.Body == nil, bodyNil)
	flag(e.Fingerprint == nil, fingerprintNil)
	flag(e.BodyCached, bodyCached)
	flag(e.BodyOmitted, bodyOmitted)
	flag(e.Unrecorded, unrecorded)
	flag(e.Async, async)
	flag(e.AckUnknown, ackUnknown)
	return sl
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
		s.items = make(map[uint64]int32)
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

// Get returns the cached entry for ref. The entry shares the cache's
// bytes: callers must not change it.
func (c *Cache) Get(ref Ref) (*Entry, bool) {
	e := new(Entry)
	return e, c.Load(ref, e)
}

// Load fills e with the cached entry for ref, as Get, without allocating.
func (c *Cache) Load(ref Ref, e *Entry) bool {
	if c.suspended.Load() {
		return false
	}
	h := c.hash(ref)
	s := c.shard(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.items[h]
	if !ok || !s.slots[i].is(ref) {
		return false
	}
	if c.since() > s.slots[i].expires {
		s.remove(i)
		return false
	}
	s.promote(i)
	s.slots[i].entry(e)
	return true
}

// Put caches a complete entry read under ticket t, keeping a copy of *ent
// (its headers shared). It refuses entries larger than a shard's budget,
// entries read before the last Clear, and, for ForgetTombstone, entries of
// a deleted ref: a delivery that read the record before the delete must
// not put it back.
func (c *Cache) Put(ref Ref, ent *Entry, t Ticket) {
	if !ent.BodyCached && !ent.BodyOmitted || len(ent.Body) > c.maxBody ||
		len(ent.TraceID) > math.MaxUint8 || len(ent.SpanID) > math.MaxUint8 {
		return
	}
	hdr, shared := c.headers.share(ent.Headers)
	size := entrySize(ref, ent, !shared)
	h := c.hash(ref)
	s := c.shard(h)
	if size > s.max || uint64(size) > math.MaxUint32 {
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
	if i, ok := s.items[h]; ok {
		if s.slots[i].is(ref) {
			s.touch(i)
			return
		}
		s.remove(i) // a collision: the newer ref wins
	}
	now := c.since()
	sl := newSlot(ref, ent, hdr)
	sl.hash, sl.size, sl.expires = h, size, now+c.maxAge
	i := s.add(sl)
	s.items[h] = i
	s.pushFront(probationList, i)
	s.used += size
	for s.used > s.max {
		victim := s.slots[probationList].prev
		if old := s.slots[protectedList].prev; old != protectedList && now > s.slots[old].expires {
			// Expired: it goes before anything live.
			victim = old
		} else if victim == i {
			// Make the new entry's room in the protected segment
			// rather than drop what was just put.
			victim = s.slots[protectedList].prev
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
	s.slots = []cacheSlot{{next: probationList, prev: probationList}, {next: protectedList, prev: protectedList}}
	s.free = nil
	s.used, s.protectedUsed = 0, 0
}

// add stores sl in a free slot and returns its index.
func (s *cacheShard) add(sl cacheSlot) int32 {
	if n := len(s.free); n > 0 {
		i := s.free[n-1]
		s.free = s.free[:n-1]
		s.slots[i] = sl
		return i
	}
	s.slots = append(s.slots, sl)
	return int32(len(s.slots) - 1)
}

// pushFront makes slot i the most recent entry of list head.
func (s *cacheShard) pushFront(head, i int32) {
	first := s.slots[head].next
	s.slots[i].prev, s.slots[i].next = head, first
	s.slots[first].prev = i
	s.slots[head].next = i
}

func (s *cacheShard) unlink(i int32) {
	sl := &s.slots[i]
	s.slots[sl.prev].next, s.slots[sl.next].prev = sl.next, sl.prev
	sl.prev, sl.next = -1, -1
}

// promote moves an entry a repeat read to the protected segment, and the
// least recent ones past its share back to probation.
func (s *cacheShard) promote(i int32) {
	s.unlink(i)
	if sl := &s.slots[i]; !sl.protected {
		sl.protected = true
		s.protectedUsed += sl.size
	}
	s.pushFront(protectedList, i)
	for s.protectedUsed > s.protectedMax {
		old := s.slots[protectedList].prev
		s.unlink(old)
		s.slots[old].protected = false
		s.protectedUsed -= s.slots[old].size
		s.pushFront(probationList, old)
	}
}

func (s *cacheShard) touch(i int32) {
	s.unlink(i)
	if s.slots[i].protected {
		s.pushFront(protectedList, i)
	} else {
		s.pushFront(probationList, i)
	}
}

// remove drops slot i's entry; its bytes stay valid for whoever holds them.
func (s *cacheShard) remove(i int32) {
	s.unlink(i)
	sl := &s.slots[i]
	delete(s.items, sl.hash)
	s.used -= sl.size
	if sl.protected {
		s.protectedUsed -= sl.size
	}
	*sl = cacheSlot{prev: -1, next: -1}
	s.free = append(s.free, i)
}

// Delete drops ref from the cache and keeps it out for ForgetTombstone.
func (c *Cache) Delete(ref Ref) {
	h := c.hash(ref)
	s := c.shard(h)
	now := c.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.items[h]; ok && s.slots[i].is(ref) {
		s.remove(i)
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
	const fixed, perHeader, headersMap = 185, 48, 200
	n := fixed + len(ref.Route) + len(ref.Key) + len(e.Body) + len(e.Fingerprint) + len(e.TraceID) + len(e.SpanID)
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
