package testenv

import (
	"testing"
	"time"
)

// Eventually polls cond every few milliseconds until it holds, and fails
// the test, naming what it waited for, if d passes first.
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
