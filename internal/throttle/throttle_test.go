package throttle

import (
	"fmt"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/testenv"
)

// guessers are n distinct IPv6 /64s of one /48, each made to wait by
// four wrong tokens: a table full of guessing addresses, and then some.
func guessers(t *Throttle, n int) []string {
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("[2001:db8:48:%x::1]:4000", i)
		for range freeTries + 1 {
			t.Failed(addrs[i])
		}
	}
	return addrs
}

// An address waits for its own failures only: with the table full of
// guessing addresses, a fresh one is not made to wait (the operator's
// right token goes through), and its own wrong tokens are slowed down
// as ever. The table stays bounded.
func TestAFullTableMakesNoOtherAddressWait(t *testing.T) {
	clock := testenv.NewClock(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))
	th := New(clock.Now)
	bad := guessers(th, maxAddrs+5)
	if n := len(th.m); n > maxAddrs || th.order.Len() != n {
		t.Fatalf("table holds %d entries (%d in order), want at most %d", n, th.order.Len(), maxAddrs)
	}
	if w := th.Wait(bad[len(bad)-1]); w != firstDelay {
		t.Fatalf("the last guessing address waits %v, want %v", w, firstDelay)
	}

	for _, fresh := range []string{"192.0.2.10:5000", "[2001:db8:99::7]:5000"} {
		if w := th.Wait(fresh); w != 0 {
			t.Fatalf("fresh address %s waits %v for others' failures, want 0", fresh, w)
		}
		if w := th.Try(fresh); w != 0 {
			t.Fatalf("fresh address %s: sign-in try waits %v, want 0", fresh, w)
		}
		th.Succeeded(fresh) // its right token
	}

	// Wrong tokens from a fresh address are throttled as anywhere.
	const guesser = "198.51.100.1:6000"
	for i := range freeTries + 1 {
		if w := th.Try(guesser); w != 0 {
			t.Fatalf("wrong token %d from a fresh address waited %v, want a free try", i+1, w)
		}
	}
	if w := th.Try(guesser); w != firstDelay {
		t.Fatalf("after four wrong tokens the address waits %v, want %v", w, firstDelay)
	}
	if w := th.Wait(bad[len(bad)-1]); w != firstDelay {
		t.Fatalf("the last guessing address no longer waits (%v)", w)
	}
	if n := len(th.m); n > maxAddrs {
		t.Fatalf("table holds %d entries, want at most %d", n, maxAddrs)
	}
}

// The entries pushed out of a full table are those whose last failure is
// oldest, and an address that keeps failing stays.
func TestAFullTablePushesOutTheOldestFailure(t *testing.T) {
	clock := testenv.NewClock(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))
	th := New(clock.Now)
	const kept = "203.0.113.9:1"
	th.Failed(kept)
	clock.Advance(time.Millisecond)
	bad := guessers(th, maxAddrs-1) // the table is full
	th.Failed(kept)                 // failed again: now the newest
	clock.Advance(time.Millisecond)
	th.Failed("203.0.113.10:1") // pushes out the oldest, bad[0]
	if _, ok := th.m[clientKey(bad[0])]; ok {
		t.Fatal("the least recent failure was kept")
	}
	if e, ok := th.m[clientKey(kept)]; !ok || e.Value.(*strikes).failures != 2 {
		t.Fatal("the address that failed again was pushed out")
	}
	if _, ok := th.m[clientKey(bad[1])]; !ok {
		t.Fatal("a second entry was pushed out for one new address")
	}

	// Entries forgetAfter old are forgotten before anything is pushed out.
	clock.Advance(forgetAfter)
	th.Failed("203.0.113.11:1")
	if n := len(th.m); n != 1 || th.order.Len() != 1 {
		t.Fatalf("after %v the table holds %d entries, want only the new one", forgetAfter, n)
	}
}
