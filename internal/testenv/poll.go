package testenv

import (
	"testing"
	"time"
)

// Eventually polls cond every few milliseconds until it holds, failing tb
// with what was awaited once d has passed. It is how a test waits on a
// condition (a count reached, a connection accepted, a cache cleared)
// rather than sleeping and hoping. Call it from the test's goroutine.
func Eventually(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
