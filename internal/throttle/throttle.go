// Package throttle slows down wrong admin tokens per client address, for
// the console's sign-in and the admin API alike: one table, so that
// guesses split between them count together.
package throttle

import (
	"container/list"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Backoff of wrong tokens, per client address: the first freeTries
// failures in a row cost nothing (typos); each one after makes the
// address wait firstDelay, doubling up to maxDelay, before its next try.
// An address is forgotten forgetAfter its last failure, or at once when
// it signs in.
const (
	freeTries   = 3
	firstDelay  = time.Second
	maxDelay    = 5 * time.Minute
	forgetAfter = 15 * time.Minute
	// maxAddrs bounds the table: a new address beyond it pushes out the
	// one whose last failure is oldest, so that an address only ever
	// waits for its own failures.
	maxAddrs = 10000
)

type strikes struct {
	key      string // clientKey
	failures int
	last     time.Time // of the last failure
	until    time.Time // no try before
}

// Throttle slows down wrong tokens per client address (IPv6 per /64, a
// host's usual allocation).
type Throttle struct {
	now func() time.Time

	mu sync.Mutex
	m  map[string]*list.Element // of *strikes, in order
	// order holds the entries by their last failure, oldest first: the
	// first to forget, or to push out when the table is full.
	order *list.List
}

// New returns an empty Throttle on clock now (time.Now when nil).
func New(now func() time.Time) *Throttle {
	if now == nil {
		now = time.Now
	}
	return &Throttle{now: now, m: make(map[string]*list.Element), order: list.New()}
}

// Try takes a try for addr and counts it as a failure until Succeeded
// forgets it, or, taking none, says how long addr must still wait. One
// step under the lock: checked and counted apart, a burst of concurrent
// tries would all pass the check before the first was counted.
func (t *Throttle) Try(addr string) (wait time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if wait := t.wait(addr); wait > 0 {
		return wait
	}
	t.fail(addr)
	return 0
}

// Wait says how long addr must still wait before its next try, counting
// nothing: for requests that carry a token each (the admin API), whose
// failures Failed counts once the token was found wrong.
func (t *Throttle) Wait(addr string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.wait(addr)
}

// Failed counts a wrong token from addr.
func (t *Throttle) Failed(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.fail(addr)
}

func (t *Throttle) wait(addr string) time.Duration {
	now := t.now()
	if e := t.m[clientKey(addr)]; e != nil {
		if s := e.Value.(*strikes); s.until.After(now) {
			return s.until.Sub(now)
		}
	}
	return 0
}

func (t *Throttle) fail(addr string) {
	now := t.now()
	k := clientKey(addr)
	e := t.m[k]
	if e == nil {
		t.prune(now)
		if t.order.Len() >= maxAddrs {
			// The table is full of addresses that failed more recently
			// (within forgetAfter): the one that failed least recently
			// starts afresh, should it come back.
			t.remove(t.order.Front())
		}
		e = t.order.PushBack(&strikes{key: k})
		t.m[k] = e
	} else {
		t.order.MoveToBack(e)
	}
	s := e.Value.(*strikes)
	s.failures++
	s.last = now
	if n := s.failures - freeTries; n > 0 {
		s.until = now.Add(delay(n))
	}
}

// Succeeded forgets addr's failures.
func (t *Throttle) Succeeded(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.m[clientKey(addr)]; e != nil {
		t.remove(e)
	}
}

func (t *Throttle) remove(e *list.Element) {
	delete(t.m, e.Value.(*strikes).key)
	t.order.Remove(e)
}

// delay is the wait after the n-th failure beyond the free ones.
func delay(n int) time.Duration {
	d := firstDelay
	for i := 1; i < n && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
}

// prune forgets the addresses whose last failure is forgetAfter old, the
// oldest first; their waits (at most maxDelay) are over.
func (t *Throttle) prune(now time.Time) {
	for e := t.order.Front(); e != nil; e = t.order.Front() {
		if s := e.Value.(*strikes); now.Sub(s.last) < forgetAfter || now.Before(s.until) {
			return
		}
		t.remove(e)
	}
}

// clientKey is the throttled unit of a RemoteAddr.
func clientKey(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}
