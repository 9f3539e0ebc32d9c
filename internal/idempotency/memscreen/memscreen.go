// Package memscreen is the in-process idempotency.Screen (screen.driver:
// memory): a sharded map of claims, for a gateway that runs as one process.
// Replicas do not see each other's claims; use redisscreen for several.
//
// Memory is bounded: a janitor sweeps expired entries, and done entries
// beyond MaxDoneBytes are dropped oldest first. In-flight entries are kept
// one lease past their lease, so that a claim then reports TakenOver, and
// are never dropped early: they are the claims.
package memscreen

import (
	"context"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// Options configure a Screen. Zero values take the defaults named.
type Options struct {
	// MaxCachedBody is the largest body a done entry keeps
	// (screen.max_cached_body); a larger one keeps status and headers.
	MaxCachedBody int
	// Now is the clock for leases and expiry; nil means time.Now.
	Now func() time.Time
	// SweepInterval is the janitor's period; zero means one minute.
	SweepInterval time.Duration
	// MaxDoneBytes bounds the memory done entries hold, oldest dropped
	// first (DefaultMaxDoneBytes when zero; negative: no bound): a repeat
	// of a dropped key is confirmed in the ledger.
	MaxDoneBytes int
	// MaxUnrecordedBytes bounds, apart from MaxDoneBytes, the Unrecorded
	// done entries (DefaultMaxUnrecordedBytes when zero; negative: no
	// bound). A repeat of a dropped one has no row to be confirmed by and
	// is forwarded again, so the newest of each shard is never dropped,
	// and recorded entries never push one out.
	MaxUnrecordedBytes int
	// NoDone keeps no done entries except Unrecorded ones (no ledger row
	// would catch their repeats): Complete ends the claim. For a gateway
	// whose local cache keeps the done records in the same process.
	NoDone bool
}

// Defaults of Options.MaxDoneBytes and Options.MaxUnrecordedBytes. The
// engine retries the commits of as many bytes of unrecorded records
// (idempotency.MaxCommitRetryBytes).
const (
	DefaultMaxDoneBytes       = 32 << 20
	DefaultMaxUnrecordedBytes = idempotency.MaxCommitRetryBytes
)

// shardCount spreads the lock over parallel claims.
const shardCount = 64

// Screen is an in-process idempotency.Screen. Its methods are safe for
// concurrent use. The zero value is not usable: call New.
type Screen struct {
	maxBody int
	noDone  bool
	// maxDone is each shard's share of MaxDoneBytes, maxUnrecorded the
	// whole of MaxUnrecordedBytes; 0 = no bound.
	maxDone, maxUnrecorded int
	// unrecorded sums the sizes of every shard's Unrecorded entries: an
	// even share of their budget would drop answers of a few hundred KiB
	// that meet in a shard long before the budget is reached.
	unrecorded atomic.Int64
	now        func() time.Time
	seed       maphash.Seed
	shards     [shardCount]shard

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

var _ idempotency.Screen = (*Screen)(nil)

type shard struct {
	mu  sync.Mutex
	m   map[idempotency.Ref]*entry
	seq uint64
	// done and unrecorded list the done entries, oldest first, for
	// eviction: recorded ones and Unrecorded ones, each within its own
	// budget.
	done, unrecorded fifo
	// forgotten: Forget's tombstones, until when.
	forgotten map[idempotency.Ref]time.Time
}

// fifo lists done entries oldest first; stale items (entries dropped or
// replaced since) are skipped and swept. bytes sums the sizes of the live
// ones; so does total, if set, with those of the other shards' fifos.
type fifo struct {
	items []doneItem
	head  int
	bytes int
	total *atomic.Int64
}

type doneItem struct {
	ref idempotency.Ref
	seq uint64 // the entry's, to tell it from a later one of the same key
}

func (f *fifo) push(ref idempotency.Ref, e *entry) {
	f.items = append(f.items, doneItem{ref: ref, seq: e.seq})
	f.add(e.size)
}

func (f *fifo) add(n int) {
	f.bytes += n
	if f.total != nil {
		f.total.Add(int64(n))
	}
}

// used is what budgets bound: the shard's bytes, or the total.
func (f *fifo) used() int {
	if f.total != nil {
		return int(f.total.Load())
	}
	return f.bytes
}

// evict drops the oldest of f's entries from sh until f is within budget
// (0: no bound), sparing the entry numbered keep; sh.mu is held. A total
// over budget is brought down by the shard being written to: about the
// oldest first, as writes spread evenly over the shards.
func (f *fifo) evict(sh *shard, budget int, keep uint64) {
	for budget > 0 && f.used() > budget && f.head < len(f.items) {
		it := f.items[f.head]
		if it.seq == keep {
			break
		}
		f.head++
		if old := sh.m[it.ref]; old != nil && old.done && old.seq == it.seq {
			sh.forgetDone(old)
			delete(sh.m, it.ref)
		}
	}
	if f.head > len(f.items)/2 {
		f.items = append(f.items[:0], f.items[f.head:]...)
		f.head = 0
	}
}

// sweep drops the items whose entry is gone or was replaced; sh.mu is held.
func (f *fifo) sweep(sh *shard) {
	live := f.items[:0]
	for _, it := range f.items[f.head:] {
		if e := sh.m[it.ref]; e != nil && e.done && e.seq == it.seq {
			live = append(live, it)
		}
	}
	clear(f.items[len(live):])
	f.items, f.head = live, 0
}

// entry is one key's state, never modified once another goroutine may have
// seen it: transitions replace it and close changed.
type entry struct {
	done bool
	// in flight
	owner       string
	fingerprint []byte
	leaseUntil  time.Time
	// done
	val *idempotency.Entry
	// dropAt: ttl for done entries, one lease past the lease for claims.
	dropAt time.Time
	// changed is made by the first Wait, closed on the next transition.
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
	maxDone, maxUnrecorded := o.MaxDoneBytes, o.MaxUnrecordedBytes
	if maxDone == 0 {
		maxDone = DefaultMaxDoneBytes
	}
	if maxUnrecorded == 0 {
		maxUnrecorded = DefaultMaxUnrecordedBytes
	}
	s := &Screen{
		maxBody:       o.MaxCachedBody,
		noDone:        o.NoDone,
		maxDone:       max(maxDone, 0) / shardCount,
		maxUnrecorded: max(maxUnrecorded, 0),
		now:           o.Now,
		seed:          maphash.MakeSeed(),
		stop:          make(chan struct{}),
		done:          make(chan struct{}),
	}
	if s.now == nil {
		s.now = time.Now
	}
	for i := range s.shards {
		s.shards[i].m = make(map[idempotency.Ref]*entry)
		s.shards[i].unrecorded.total = &s.unrecorded
	}
	every := o.SweepInterval
	if every <= 0 {
		every = time.Minute
	}
	go s.janitor(every)
	return s
}

// Close stops the janitor; the Screen still answers. Close is idempotent.
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
		case now.Before(e.leaseUntil) || !req.MayTakeOver(e.fingerprint):
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

// Peek reports the live claim or done entry holding ref, without claiming
// it (idempotency.Screen).
func (s *Screen) Peek(_ context.Context, ref idempotency.Ref) (idempotency.Claim, bool, error) {
	now := s.now()
	sh := s.shard(ref)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[ref]
	switch {
	case e == nil:
	case e.done && now.Before(e.dropAt):
		return idempotency.Claim{Status: idempotency.Done, Fingerprint: slices.Clone(e.val.Fingerprint), Entry: cloneEntry(e.val)}, true, nil
	case !e.done && now.Before(e.leaseUntil):
		return idempotency.Claim{Status: idempotency.InFlight, Owner: e.owner, Fingerprint: slices.Clone(e.fingerprint)}, true, nil
	}
	return idempotency.Claim{}, false, nil
}

// Complete records a copy of e as done for ttl (idempotency.Screen).
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
	if kept.Unrecorded {
		sh.unrecorded.push(ref, ne)
		sh.unrecorded.evict(sh, s.maxUnrecorded, ne.seq)
	} else {
		sh.done.push(ref, ne)
		sh.done.evict(sh, s.maxDone, 0)
	}
	return nil
}

// endClaim is Complete with NoDone: the claim is dropped (only owner's for
// a refill) and its waiters woken.
func (s *Screen) endClaim(ref idempotency.Ref, owner string, refill bool) {
	sh := s.shard(ref)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[ref]; e != nil {
		if refill && !e.done && e.owner != owner {
			return // a stale read must not end another delivery's claim
		}
		e.wake()
		sh.forgetDone(e)
		delete(sh.m, ref)
	}
}

// forgetDone takes a done entry out of the accounting; sh.mu is held.
func (sh *shard) forgetDone(e *entry) {
	switch {
	case !e.done:
	case e.val.Unrecorded:
		sh.unrecorded.add(-e.size)
	default:
		sh.done.add(-e.size)
	}
}

// doneSize approximates what a done entry holds, fixed costs included.
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

// Release drops owner's in-flight entry, even past its lease if nobody took
// it over; ErrNotOwner otherwise.
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

// Wait blocks until owner's in-flight entry for ref changes or passes its
// lease, or ctx is done. It returns at once when owner holds no live claim,
// so a completion before the Wait is not missed.
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
			// look again: with an injected clock the lease may go on
		}
	}
}

// Len reports how many entries the screen holds, unswept ones included.
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

// sweep drops expired entries one shard at a time.
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
		sh.done.sweep(sh)
		sh.unrecorded.sweep(sh)
		sh.mu.Unlock()
	}
}

// keep is the screen's copy of e, without a body larger than MaxCachedBody
// that the ledger has.
func (s *Screen) keep(e *idempotency.Entry) *idempotency.Entry {
	c := cloneEntry(e)
	c.BodyCached = len(e.Body) <= s.maxBody || e.Unrecorded
	if !c.BodyCached {
		c.Body = nil
	}
	return c
}

// cloneEntry copies e deeply, apart from the caller's.
func cloneEntry(e *idempotency.Entry) *idempotency.Entry {
	c := *e
	c.Headers = maps.Clone(e.Headers)
	c.Body = slices.Clone(e.Body)
	c.Fingerprint = slices.Clone(e.Fingerprint)
	return &c
}
