package sqlledger

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
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
	if l.clock.reading.Load() == nil {
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

// steppedPair opens two ledgers on one schema: a on the right time, and b
// on a clock stepped by step when the test calls doStep, which has b
// measure its offset first. The time API builds no time whose wall clock
// moved apart from its monotonic reading, so b's clock moves both (as
// tests' clocks do) and b's step seam reports the step from b's reading
// before it.
func steppedPair(t *testing.T, step time.Duration) (a, b *Ledger, bNow func() time.Time, doStep func()) {
	t.Helper()
	dsn := testenv.Postgres(t)
	var skew atomic.Int64
	bNow = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	o := Options{Driver: DriverPostgres, DSN: dsn, MaxOpenConns: 4, CommitBatch: 1, LookupBatch: 1}
	a = openMigrated(t, o)
	o.Now = bNow
	b = openMigrated(t, o)
	var before atomic.Pointer[time.Time]
	b.clock.step = func(from, to time.Time) time.Duration {
		if p := before.Load(); p != nil && from.Equal(*p) {
			return step
		}
		return wallStep(from, to)
	}
	return a, b, bNow, func() {
		t.Helper()
		if _, err := b.clock.shift(t.Context()); err != nil {
			t.Fatal(err)
		}
		at := b.clock.reading.Load().at
		before.Store(&at)
		skew.Store(int64(step))
	}
}

func leaseReq(owner string) idempotency.ClaimRequest {
	return idempotency.ClaimRequest{Ref: idempotency.Ref{Route: "r", Key: "k"}, Owner: owner, Lease: 30 * time.Second, Retention: time.Hour}
}

// A replica whose clock stepped 45 s forward since its last measurement
// measures again before its next claim binds anything: another replica's
// claim with 30 s of lease left stays live, not taken over.
func TestClockStepForwardKeepsAnotherReplicasLeaseLive(t *testing.T) {
	a, b, bNow, doStep := steppedPair(t, 45*time.Second)
	doStep()
	if c, err := a.Claim(t.Context(), leaseReq("a"), time.Now()); err != nil || c.Status != idempotency.Acquired {
		t.Fatalf("claim by a: %v %v", c.Status, err)
	}
	if c, err := b.Claim(t.Context(), leaseReq("b"), bNow()); err != nil || c.Status != idempotency.InFlight {
		t.Fatalf("claim by b after its clock stepped 45s forward: %v %v, want in_flight (a's lease has 30s left)", c.Status, err)
	}
}

// A replica whose clock stepped 45 s back claims with a lease the other
// replicas see last its 30 s, not one that ended 15 s before it was written.
func TestClockStepBackwardWritesALiveLease(t *testing.T) {
	a, b, bNow, doStep := steppedPair(t, -45*time.Second)
	doStep()
	if c, err := b.Claim(t.Context(), leaseReq("b"), bNow()); err != nil || c.Status != idempotency.Acquired {
		t.Fatalf("claim by b after its clock stepped 45s back: %v %v", c.Status, err)
	}
	if c, err := a.Claim(t.Context(), leaseReq("a"), time.Now()); err != nil || c.Status != idempotency.InFlight {
		t.Fatalf("claim by a: %v %v, want in_flight (b's lease has 30s left)", c.Status, err)
	}
}

// A call that finds the clock stepped and cannot measure it again gets the
// error, not the offset from before the step; the next call measures.
func TestClockStepNotMeasuredFailsTheCall(t *testing.T) {
	_, b, _, doStep := steppedPair(t, 45*time.Second)
	doStep()
	cut, cancel := context.WithCancel(t.Context())
	cancel()
	if off, err := b.clock.shift(cut); err == nil {
		t.Fatalf("shift after a step, its measurement cut: offset %v, want an error", off)
	}
	if off, err := b.clock.shift(t.Context()); err != nil || off < -46*time.Second || off > -44*time.Second {
		t.Fatalf("shift after a step of 45s forward: offset %v, %v; want about -45s", off, err)
	}
}

// Only a step counts: not the time between two readings of an unstepped
// clock, nor a test's clock that moves by Add (it moves the monotonic
// reading with the wall), nor a time without a monotonic reading.
func TestWallStepIsZeroWithoutAStep(t *testing.T) {
	c := newDBClock(nil, time.Now, time.Second)
	defer c.close()
	from := time.Now()
	time.Sleep(20 * time.Millisecond)
	clk := testenv.NewClock(time.Now())
	before := clk.Now()
	clk.Advance(-45 * time.Second)
	for _, tc := range []struct {
		name     string
		from, to time.Time
	}{
		{"time.Now", from, time.Now()},
		{"time.Now().Add, forward", from, time.Now().Add(45 * time.Second)},
		{"time.Now().Add, back", from.Add(10 * time.Minute), time.Now()},
		{"testenv.Clock", before, clk.Now()},
		{"no monotonic reading", from.Round(0), time.Now().Add(time.Hour).Round(0)},
	} {
		if s := c.step(tc.from, tc.to); s > time.Millisecond || s < -time.Millisecond {
			t.Errorf("%s: step %v, want about 0", tc.name, s)
		}
	}
}

// shift runs on every ledger call.
func TestClockShiftAllocatesNothing(t *testing.T) {
	c := newDBClock(nil, time.Now, time.Second)
	defer c.close()
	c.reading.Store(&clockReading{offset: time.Second, at: time.Now()})
	c.due.Store(int64(time.Hour))
	if n := testing.AllocsPerRun(100, func() { _, _ = c.shift(t.Context()) }); n != 0 {
		t.Errorf("shift allocates %v times a call", n)
	}
}
