package sqlledger

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// On the database's own host the offset is measured as exactly zero, every
// time: its measurements differ only by their round trips, which never move
// it (and so never shift a lease comparison by a few microseconds).
func TestClockOfTheDatabaseHostStaysExact(t *testing.T) {
	l := openPG(t)
	l.clock.every = time.Millisecond
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); {
		if off, err := l.clock.shift(t.Context()); err != nil || off != 0 {
			t.Fatalf("offset %v, %v on the database's host, want 0", off, err)
		}
		time.Sleep(time.Millisecond)
	}
	if !l.clock.synced.Load() {
		t.Fatal("the clock was never measured")
	}
}

// A replica's clock stepped after the ledger measured it (NTP, an operator)
// is followed at the next measurement: a claim another owner made before
// the step is still seen live after a step of ten minutes forward.
func TestClockFollowsAStep(t *testing.T) {
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	l := openPGWith(t, Options{CommitBatch: 1, LookupBatch: 1, Now: now})
	l.clock.every = 50 * time.Millisecond
	req := func(owner string) idempotency.ClaimRequest {
		return idempotency.ClaimRequest{Ref: idempotency.Ref{Route: "r", Key: "k"}, Owner: owner, Lease: 30 * time.Second, Retention: time.Hour}
	}
	if c, err := l.Claim(t.Context(), req("before"), now()); err != nil || c.Status != idempotency.Acquired {
		t.Fatalf("claim before the step: %v %v", c.Status, err)
	}
	skew.Store(int64(10 * time.Minute))
	deadline := time.Now().Add(5 * time.Second)
	for {
		off, _ := l.clock.shift(t.Context())
		if off > -10*time.Minute-time.Second && off < -10*time.Minute+time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("offset %v five seconds after the clock stepped 10m forward, want about -10m", off)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if c, err := l.Claim(t.Context(), req("after"), now()); err != nil || c.Status != idempotency.InFlight {
		t.Fatalf("claim after the step: %v %v, want in_flight (the first claim has 30s of lease left)", c.Status, err)
	}
}

// A replica idle for longer than clockStale whose clock stepped meanwhile
// measures again before its first call binds anything: that call judges a
// live lease on the new offset, not on the offset from before the step
// (with which a step forward made another owner's live claim look expired
// and taken over).
func TestClockIdleLedgerMeasuresBeforeItsFirstCall(t *testing.T) {
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	l := openPGWith(t, Options{CommitBatch: 1, LookupBatch: 1, Now: now})
	l.clock.every, l.clock.stale = 50*time.Millisecond, 100*time.Millisecond
	req := func(owner string) idempotency.ClaimRequest {
		return idempotency.ClaimRequest{Ref: idempotency.Ref{Route: "r", Key: "k"}, Owner: owner, Lease: 30 * time.Second, Retention: time.Hour}
	}
	if c, err := l.Claim(t.Context(), req("before"), now()); err != nil || c.Status != idempotency.Acquired {
		t.Fatalf("claim before the step: %v %v", c.Status, err)
	}
	skew.Store(int64(10 * time.Minute))
	time.Sleep(150 * time.Millisecond) // idle past stale, no call
	if c, err := l.Claim(t.Context(), req("after"), now()); err != nil || c.Status != idempotency.InFlight {
		t.Fatalf("first claim after an idle spell and a step: %v %v, want in_flight (the first claim has 30s of lease left)", c.Status, err)
	}
}
