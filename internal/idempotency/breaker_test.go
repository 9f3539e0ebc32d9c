package idempotency

import (
	"testing"
	"time"
)

// TestBreaker walks the breaker through its states with a manual clock:
// closed while failures are not consecutive, open after three in a row,
// one probe after the cooldown (the others still skip), reopened by a
// failed probe, closed by a successful one.
func TestBreaker(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	b := newBreaker(3, time.Second, func() time.Time { return now })
	call := func(failed bool) int {
		t.Helper()
		ok, probe := b.allow()
		if !ok {
			t.Fatalf("closed or half-open breaker refused a call")
		}
		return b.done(probe, failed)
	}
	refused := func(when string) {
		t.Helper()
		if ok, _ := b.allow(); ok {
			t.Fatalf("%s: the breaker let a call through", when)
		}
	}

	call(true)
	call(true)
	call(false) // not three in a row
	call(true)
	call(true)
	if got := call(true); got != +1 {
		t.Fatalf("third failure in a row: done = %d, want +1 (opened)", got)
	}
	refused("just opened")
	now = now.Add(999 * time.Millisecond)
	refused("within the cooldown")

	now = now.Add(time.Millisecond)
	ok, probe := b.allow()
	if !ok || !probe {
		t.Fatalf("after the cooldown: allow = %v, %v; want the probe", ok, probe)
	}
	refused("while the probe is in flight")
	if got := b.done(probe, true); got != 0 {
		t.Fatalf("failed probe: done = %d, want 0 (stays open)", got)
	}
	refused("after a failed probe")

	now = now.Add(time.Second)
	ok, probe = b.allow()
	if !ok || !probe {
		t.Fatal("no probe after the second cooldown")
	}
	b.abandon(probe) // its caller left: nothing learnt
	ok, probe = b.allow()
	if !ok || !probe {
		t.Fatal("an abandoned probe was not replaced by the next call")
	}
	if got := b.done(probe, false); got != -1 {
		t.Fatalf("successful probe: done = %d, want -1 (closed)", got)
	}
	call(true)
	call(true)
	if ok, _ := b.allow(); !ok {
		t.Fatal("closed again, two failures must not open it")
	}
}
