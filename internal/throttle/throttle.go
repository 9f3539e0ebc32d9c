// Package throttle slows down wrong admin tokens per client address, for
// the console's sign-in and the admin API alike: one table, so that
// guesses split between them count together.
package throttle

import (
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
	// maxAddrs bounds the table; addresses beyond it share one entry, so
	// that many addresses cannot push out the one being slowed down.
	maxAddrs = 10000
)

// overflow is the shared entry of the addresses beyond maxAddrs.
const overflow = "overflow"

type strikes struct {
	failures int
	last     time.Time // of the last failure
	until    time.Time // no try before
}

// Throttle slows down wrong tokens per client address (IPv6 per /64, a
// host's usual allocation).
type Throttle struct {
	now func() time.Time

	mu sync.Mutex
	m  map[string]*strikes
}

// New returns an empty Throttle on clock now (time.Now when nil).
func New(now func() time.Time) *Throttle {
	if now == nil {
		now = time.Now
	}
	return &Throttle{now: now, m: make(map[string]*strikes)}
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
	if s := t.m[t.bucket(addr)]; s != nil && s.until.After(now) {
		return s.until.Sub(now)
	}
	return 0
}

func (t *Throttle) fail(addr string) {
	now := t.now()
	k := t.bucket(addr)
	s := t.m[k]
	if s == nil {
		t.prune(now)
		if len(t.m) >= maxAddrs {
			k = overflow
		}
		if s = t.m[k]; s == nil {
			s = &strikes{}
			t.m[k] = s
		}
	}
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
	delete(t.m, t.bucket(addr))
}

// delay is the wait after the n-th failure beyond the free ones.
func delay(n int) time.Duration {
	d := firstDelay
	for i := 1; i < n && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
}

func (t *Throttle) prune(now time.Time) {
	for k, s := range t.m {
		if now.Sub(s.last) >= forgetAfter && !now.Before(s.until) {
			delete(t.m, k)
		}
	}
}

// bucket is addr's entry: its IP (IPv6: its /64), or the overflow entry
// when the table is full and addr is not in it. Called with mu held.
func (t *Throttle) bucket(addr string) string {
	k := clientKey(addr)
	if _, ok := t.m[k]; !ok && len(t.m) >= maxAddrs {
		return overflow
	}
	return k
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
