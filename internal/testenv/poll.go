package testenv

import (
	"testing"
	"time"
)

// pollEvery is how often Poll and Eventually check their condition.
const pollEvery = 5 * time.Millisecond

// Poll checks cond every few milliseconds until it holds (true) or d has
// passed (false). Unlike Eventually it may be called from any goroutine.
func Poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollEvery)
	}
	return true
}

// Eventually polls cond until it holds, failing tb with what was awaited
// once d has passed. It is how a test waits on a condition (a count
// reached, a connection accepted, a cache cleared) rather than sleeping
// and hoping. Call it from the test's goroutine.
func Eventually(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Poll(d, cond) {
		tb.Fatalf("timed out after %v waiting for %s", d, what)
	}
}
