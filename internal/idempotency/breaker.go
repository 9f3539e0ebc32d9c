package idempotency

import (
	"sync"
	"time"
)

// breaker stops asking a screen that keeps failing. A screen that does not
// answer (a partition, a hung Redis) costs every claim its whole operation
// timeout (1s) before the fallback (screen.on_unavailable) applies; once
// BreakerFailures claims in a row have failed, claims go to the fallback
// at once for BreakerCooldown, then one claim probes the screen: success
// closes the breaker, failure opens it for another cooldown.
//
// Skipping the screen is exactly what a failed claim leads to anyway, so
// it changes no outcome, only how long it takes: in store mode the claim
// is a pending ledger row, which is safe beside replicas that still reach
// the screen because those confirm their screen claims with a ledger claim
// too (Options.ConfirmByClaim).
type breaker struct {
	failures int           // consecutive failures that open it
	cooldown time.Duration // how long it stays open before a probe
	now      func() time.Time

	mu      sync.Mutex
	fails   int       // consecutive failures while closed
	until   time.Time // open until; zero when closed
	probing bool      // a probe is in flight (half open)
}

// Breaker defaults: three claims in a row failing is not a blip, and a
// second is short enough that the screen is used again soon after it
// recovers.
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

// closed reports whether the screen is not known to be failing: calls
// that only tidy up after a failed claim ask it only then, and do not
// count as probes.
func (b *breaker) closed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.until.IsZero()
}

// abandon ends a call allow let through that says nothing about the
// screen (its caller went away).
func (b *breaker) abandon(probe bool) {
	if probe {
		b.mu.Lock()
		b.probing = false
		b.mu.Unlock()
	}
}

// done records the result of a call allow let through. It returns +1 when
// this call opened the breaker and -1 when it closed it (for the log), 0
// otherwise.
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
