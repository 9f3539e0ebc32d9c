// Package memscreen is the in-process idempotency.Screen (screen.driver:
// memory): a sharded map of claims, for a gateway that runs as one process.
// Replicas do not see each other's claims; use redisscreen for several.
//
// Memory is bounded: an entry is dropped when it is claimed again after it
// expired (lazily), a janitor goroutine started by New and stopped by
// Close sweeps expired entries every SweepInterval, and done entries beyond
// MaxDoneBytes are dropped oldest first. Done entries expire after their
// ttl; in-flight entries are kept for one more lease after their lease
// ends, so that a claim in that window reports TakenOver (the owner died)
// rather than a silent Acquired, then dropped. In-flight entries are never
// dropped early: they are the claims.
package memscreen

import (
	"context"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// Options configure a Screen. Zero values take the defaults named.
type Options struct {
	// MaxCachedBody is the largest response body, in bytes, a done entry
	// keeps (screen.max_cached_body). An entry whose body is larger keeps
	// status and headers only and reports BodyCached false. Zero keeps no
	// body except the empty one.
	MaxCachedBody int
	// Now is the clock for leases and expiry; nil means time.Now.
	Now func() time.Time
	// SweepInterval is how often the janitor drops expired entries; zero
	// means one minute.
	SweepInterval time.Duration
	// MaxDoneBytes bounds the memory done entries hold
	// (DefaultMaxDoneBytes when zero; negative: no bound). Beyond it the
	// oldest are dropped: the screen forgets, and a repeat of a dropped key
	// is confirmed in the ledger, replayed and remembered again. Without a
	// bound a busy gateway would keep every delivery of the last
	// screen.ttl (24h) in memory.
	MaxDoneBytes int
	// NoDone keeps no done entries: Complete ends the claim and wakes its
	// waiters, and the next claim of the key is granted, for the ledger to
	// confirm. The gateway sets it when the engine's local cache keeps the
	// done records in the same process: a second copy here doubled their
	// memory and answered no repeat the cache, consulted first, did not.
	// Unrecorded entries are kept all the same: the cache may evict them,
	// and no ledger row would catch the repeat then.
	NoDone bool
}

// DefaultMaxDoneBytes is Options.MaxDoneBytes when zero.
const DefaultMaxDoneBytes = 32 << 20

// shardCount spreads the lock: with one mutex, parallel claims on a busy
// gateway serialise on it (see BenchmarkClaimParallel).
const shardCount = 64

// Screen is an in-process idempotency.Screen. Its methods are safe for
// concurrent use. The zero value is not usable: call New.
type Screen struct {
	maxBody int
	noDone  bool
	// maxDone is each shard's share of MaxDoneBytes; 0 = no bound.
	maxDone int
	now     func() time.Time
	seed    maphash.Seed
	shards  [shardCount]shard

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

var _ idempotency.Screen = (*Screen)(nil)

type shard struct {
	mu  sync.Mutex
	m   map[idempotency.Ref]*entry
	seq uint64
	// done lists the shard's done entries oldest first, for eviction;
	// items whose entry has since left the map (or been replaced) are
	// skipped, and dropped by the janitor. doneBytes sums the sizes of the
	// done entries in m.
	done      []doneItem
	doneHead  int
	doneBytes int
	// forgotten holds, for ForgetTombstone after a Forget, the refs whose
	// Complete is refused until they are claimed again.
	forgotten map[idempotency.Ref]time.Time
}

type doneItem struct {
	ref idempotency.Ref
	seq uint64 // the entry's, to tell it from a later one of the same key
}

// entry is one key's state. An entry is never modified in place once
// another goroutine may have seen it: transitions replace it and close
// changed, so that waiters learn of the transition.
type entry struct {
	done bool
	// in flight
	owner       string
	fingerprint []byte
	leaseUntil  time.Time
	// done
	val *idempotency.Entry
	// dropAt is when the janitor reclaims the entry: ttl for done entries,
	// one lease after the lease for in-flight ones.
	dropAt time.Time
	// changed is made by the first Wait and closed when the entry leaves
	// this state.
	changed chan struct{}
	// seq and size identify and weigh a done entry (MaxDoneBytes).
	seq  uint64
	size int
}

func (e *entry) wake() {
	if e.changed != nil {
		close(e.changed)
		e.changed = nil
	}
}

// New returns a Screen and starts its janitor; Close stops it.
func New(o Options) *Screen {
	maxDone := o.MaxDoneBytes
	if maxDone == 0 {
		maxDone = DefaultMaxDoneBytes
	}
	s := &Screen{
		maxBody: o.MaxCachedBody,
		noDone:  o.NoDone,
		maxDone: max(maxDone, 0) / shardCount,
		now:     o.Now,
		seed:    maphash.MakeSeed(),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if s.now == nil {
		s.now = time.Now
	}
	for i := range s.shards {
		s.shards[i].m = make(map[idempotency.Ref]*entry)
	}
	every := o.SweepInterval
	if every <= 0 {
		every = time.Minute
	}
	go s.janitor(every)
	return s
}

// Close stops the janitor. The Screen still answers afterwards, it just
// no longer sweeps. Close is idempotent.
func (s *Screen) Close() {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
	})
}

func (s *Screen) shard(ref idempotency.Ref) *shard {
	return &s.shards[maphash.Comparable(s.seed, ref)%shardCount]
}

// Claim takes the key for req.Owner, or reports the live claim or done
// entry holding it.
func (s *Screen) Claim(_ context.Context, req idempotency.ClaimRequest) (idempotency.Claim, error) {
	if req.Lease <= 0 {
		return idempotency.Claim{}, fmt.Errorf("memscreen: claim %s %q: lease %v is not positive", req.Route, req.Key, req.Lease)
	}
	now := s.now()
	sh := s.shard(req.Ref)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(sh.forgotten) > 0 {
		delete(sh.forgotten, req.Ref) // a new delivery: its complete counts
	}
	status := idempotency.Acquired
	if e := sh.m[req.Ref]; e != nil {
		switch {
		case e.done && now.Before(e.dropAt):
			return idempotency.Claim{Status: idempotency.Done, Fingerprint: slices.Clone(e.val.Fingerprint), Entry: cloneEntry(e.val)}, nil
		case e.done:
			// expired: claim it afresh
		case e.owner == req.Owner:
			// The owner claiming again holds it already.
			return idempotency.Claim{Status: idempotency.Acquired}, nil
		case now.Before(e.leaseUntil):
			return idempotency.Claim{Status: idempotency.InFlight, Owner: e.owner, Fingerprint: slices.Clone(e.fingerprint)}, nil
		default:
			status = idempotency.TakenOver
		}
		e.wake()
		sh.forgetDone(e)
	}
	sh.m[req.Ref] = &entry{
		owner:       req.Owner,
		fingerprint: slices.Clone(req.Fingerprint),
		leaseUntil:  now.Add(req.Lease),
		dropAt:      now.Add(2 * req.Lease),
	}
	return idempotency.Claim{Status: status}, nil
}

// Complete records e as done for ttl, whoever holds the key, unless a done
// entry is there already. The screen keeps its own copy; BodyCached in the
// stored entry is decided by MaxCachedBody (and Unrecorded), not taken
// from e.
func (s *Screen) Complete(_ context.Context, ref idempotency.Ref, owner string, e *idempotency.Entry, ttl time.Duration) error {
	if e == nil {
		return fmt.Errorf("memscreen: complete %s %q: nil entry", ref.Route, ref.Key)
	}
	if ttl <= 0 {
		return fmt.Errorf("memscreen: complete %s %q: ttl %v is not positive", ref.Route, ref.Key, ttl)
	}
	if s.noDone && !e.Unrecorded {
		s.endClaim(ref, owner, e.Refill)
		return nil
	}
	kept := s.keep(e)
	now := s.now()
	sh := s.shard(ref)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if until, ok := sh.forgotten[ref]; ok && now.Before(until) {
		return nil // deleted by an operator after the caller read it
	}
	if old := sh.m[ref]; old != nil {
		if old.done && now.Before(old.dropAt) {
			return nil // a done record never changes
		}
		if e.Refill && !old.done && old.owner != owner {
			return nil // a stale read must not end another delivery's claim
		}
		old.wake()
		sh.forgetDone(old)
	}
	sh.seq++
	ne := &entry{done: true, val: kept, dropAt: now.Add(ttl), seq: sh.seq, size: doneSize(ref, kept)}
	sh.m[ref] = ne
	sh.done = append(sh.done, doneItem{ref: ref, seq: ne.seq})
	sh.doneBytes += ne.size
	for s.maxDone > 0 && sh.doneBytes > s.maxDone && sh.doneHead < len(sh.done) {
		it := sh.done[sh.doneHead]
		sh.doneHead++
		if old := sh.m[it.ref]; old != nil && old.done && old.seq == it.seq {
			sh.forgetDone(old)
			delete(sh.m, it.ref)
		}
	}
	if sh.doneHead > len(sh.done)/2 {
		sh.done = append(sh.done[:0], sh.done[sh.doneHead:]...)
		sh.doneHead = 0
	}
	return nil
}

// endClaim is Complete with NoDone: the claim on ref, whoever holds it
// (only owner's for a refill), is dropped and its waiters woken; nothing
// is left behind.
func (s *Screen) endClaim(ref idempotency.Ref, owner string, refill bool) {
	sh := s.shard(ref)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[ref]; e != nil {
		if refill && !e.done && e.owner != owner {
			return // a stale read must not end another delivery's claim
		}
		e.wake()
		delete(sh.m, ref)
	}
}

// forgetDone takes a done entry leaving the map out of the shard's
// accounting; sh.mu is held.
func (sh *shard) forgetDone(e *entry) {
	if e.done {
		sh.doneBytes -= e.size
	}
}

// doneSize approximates what a done entry holds: its strings and slices,
// the headers map, and about 400 bytes of fixed cost (the entry, the
// idempotency.Entry, the map slot, the eviction list item).
func doneSize(ref idempotency.Ref, e *idempotency.Entry) int {
	n := 400 + len(ref.Route) + len(ref.Key) + len(e.Body) + len(e.Fingerprint) + len(e.TraceID) + len(e.SpanID)
	if len(e.Headers) > 0 {
		n += 200
	}
	for k, v := range e.Headers {
		n += len(k) + len(v) + 48
	}
	return n
}

// Release drops owner's in-flight entry; ErrNotOwner when the key is not
// in flight for owner (taken over, done, forgotten). A claim whose lease
// ran out but that nobody took over is still owner's to release.
func (s *Screen) Release(_ context.Context, ref idempotency.Ref, owner string) error {
	sh := s.shard(ref)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[ref]
	if e == nil || e.done || e.owner != owner {
		return fmt.Errorf("memscreen: release %s %q: %w", ref.Route, ref.Key, idempotency.ErrNotOwner)
	}
	e.wake()
	delete(sh.m, ref)
	return nil
}

// Forget drops whatever the screen holds for ref.
func (s *Screen) Forget(_ context.Context, ref idempotency.Ref) error {
	sh := s.shard(ref)
	now := s.now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[ref]; e != nil {
		e.wake()
		sh.forgetDone(e)
		delete(sh.m, ref)
	}
	if sh.forgotten == nil {
		sh.forgotten = make(map[idempotency.Ref]time.Time)
	}
	for r, until := range sh.forgotten { // forgets are operators' acts: few
		if !now.Before(until) {
			delete(sh.forgotten, r)
		}
	}
	sh.forgotten[ref] = now.Add(idempotency.ForgetTombstone)
	return nil
}

// ForgetDone drops ref's done entry, if any; a claim is left alone.
func (s *Screen) ForgetDone(_ context.Context, ref idempotency.Ref) error {
	sh := s.shard(ref)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[ref]; e != nil && e.done {
		sh.forgetDone(e)
		delete(sh.m, ref)
	}
	return nil
}

// Wait blocks until owner's in-flight entry for ref is completed, released,
// forgotten, taken over or past its lease, or ctx is done (ctx.Err()). It
// returns nil at once when owner holds no live claim on ref, so a
// completion between the caller's Claim and its Wait is not missed. It does
// not return early otherwise.
func (s *Screen) Wait(ctx context.Context, ref idempotency.Ref, owner string) error {
	sh := s.shard(ref)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		sh.mu.Lock()
		e := sh.m[ref]
		now := s.now()
		if e == nil || e.done || e.owner != owner || !now.Before(e.leaseUntil) {
			sh.mu.Unlock()
			return nil
		}
		if e.changed == nil {
			e.changed = make(chan struct{})
		}
		changed, left := e.changed, e.leaseUntil.Sub(now)
		sh.mu.Unlock()

		if timer == nil {
			timer = time.NewTimer(left)
		} else {
			timer.Reset(left)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
			return nil
		case <-timer.C:
			// the lease may have ended: look again (with an injected clock
			// it may not have, then wait for the rest of it)
		}
	}
}

// Len reports how many entries the screen holds, expired ones not yet
// swept included.
func (s *Screen) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

func (s *Screen) janitor(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sweep()
		}
	}
}

// sweep drops expired entries one shard at a time, so that claims on other
// shards go on meanwhile.
func (s *Screen) sweep() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		now := s.now()
		for ref, e := range sh.m {
			if !now.Before(e.dropAt) {
				e.wake()
				sh.forgetDone(e)
				delete(sh.m, ref)
			}
		}
		// Drop eviction items whose entry is gone or was replaced.
		live := sh.done[:0]
		for _, it := range sh.done[sh.doneHead:] {
			if e := sh.m[it.ref]; e != nil && e.done && e.seq == it.seq {
				live = append(live, it)
			}
		}
		clear(sh.done[len(live):])
		sh.done, sh.doneHead = live, 0
		sh.mu.Unlock()
	}
}

// keep is the screen's own copy of e, without its body when the body is
// larger than MaxCachedBody and the ledger has it.
func (s *Screen) keep(e *idempotency.Entry) *idempotency.Entry {
	c := cloneEntry(e)
	c.BodyCached = len(e.Body) <= s.maxBody || e.Unrecorded
	if !c.BodyCached {
		c.Body = nil
	}
	return c
}

// cloneEntry copies e deeply: callers may change what they pass in or get
// back without touching the screen's entry.
func cloneEntry(e *idempotency.Entry) *idempotency.Entry {
	c := *e
	c.Headers = maps.Clone(e.Headers)
	c.Body = slices.Clone(e.Body)
	c.Fingerprint = slices.Clone(e.Fingerprint)
	return &c
}
