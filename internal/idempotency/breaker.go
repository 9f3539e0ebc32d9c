package idempotency

import (
	"sync"
	"time"
)

// breaker stops asking a screen that keeps failing, which would cost every
// claim a whole operation timeout before screen.on_unavailable applies.
// After failures claims in a row failed, claims skip the screen for
// cooldown, then one probes it. Skipping changes no outcome: it is what a
// failed claim leads to anyway.
type breaker struct {
	failures int           // consecutive failures that open it
	cooldown time.Duration // how long it stays open before a probe
	now      func() time.Time

	mu      sync.Mutex
	fails   int       // consecutive failures while closed
	until   time.Time // open until; zero when closed
	probing bool      // a probe is in flight (half open)
}

// Breaker defaults.
const (
	BreakerFailures = 3
	BreakerCooldown = time.Second
)

func newBreaker(failures int, cooldown time.Duration, now func() time.Time) *breaker {
	return &breaker{failures: failures, cooldown: cooldown, now: now}
}

// allow reports whether the screen may be asked now, and whether this call
// is the probe of a half-open breaker (report its result with done).
func (b *breaker) allow() (ok, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.until.IsZero():
		return true, false
	case b.probing || b.now().Before(b.until):
		return false, false
	}
	b.probing = true
	return true, true
}

// closed reports whether the screen is not known to be failing; it is no
// probe.
func (b *breaker) closed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.until.IsZero()
}

// abandon ends a call whose caller went away: no news of the screen.
func (b *breaker) abandon(probe bool) {
	if probe {
		b.mu.Lock()
		b.probing = false
		b.mu.Unlock()
	}
}

// done records a call's result: +1 when it opened the breaker, -1 when it
// closed it, 0 otherwise.
func (b *breaker) done(probe, failed bool) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	if !failed {
		b.fails = 0
		if !b.until.IsZero() {
			b.until = time.Time{}
			return -1
		}
		return 0
	}
	if !b.until.IsZero() {
		// A failed probe, or a call let through before the breaker opened.
		b.until = b.now().Add(b.cooldown)
		return 0
	}
	b.fails++
	if b.fails < b.failures {
		return 0
	}
	b.fails = 0
	b.until = b.now().Add(b.cooldown)
	return +1
}
