package sqlledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// A replica's first clock measurement can fail for reasons of its own — the
// delivery that asked was cut (its ctx cancelled), a blip — while the
// database answers everyone else. Calls made after it must still be on the
// database's clock: a replica ten minutes ahead must not take over a live
// lease, nor sweep a record with retention left, in the second after.
func TestFailedFirstClockMeasurementKeepsTheDatabaseClock(t *testing.T) {
	t.Parallel()
	ls, now := skewedReplicas(t, 0, 10*time.Minute)
	right, ahead := ls[0], ls[1]

	held := ref("held-after-a-cut-first-call")
	mustClaim(t, right, idempotency.ClaimRequest{Ref: held, Owner: "right", Lease: 30 * time.Second, Retention: time.Hour},
		now[0](), idempotency.Acquired)
	kept := ref("kept-after-a-cut-first-call")
	mustCommit(t, right, doneRecord(kept, now[0](), now[0]().Add(5*time.Minute)), "right", now[0]())

	// The replica ahead's first call: its delivery was cut.
	cut, cancel := context.WithCancel(context.Background())
	cancel()
	_, _ = ahead.Lookup(cut, held)

	c, err := ahead.Claim(context.Background(), idempotency.ClaimRequest{Ref: held, Owner: "ahead", Lease: 30 * time.Second,
		Retention: time.Hour}, now[1]())
	if err == nil && c.Status != idempotency.InFlight {
		t.Errorf("claim by the replica ahead after its first call was cut: %v, want in_flight (or an error): "+
			"the lease of the replica with the right time has 30s left", c.Status)
	}
	if n, err := ahead.Sweep(context.Background(), now[1](), 0); err == nil && n != 0 {
		t.Errorf("sweep by the replica ahead after its first call was cut deleted %d records, want none "+
			"(five minutes of retention left)", n)
	}
}

// A hung database: the first clock measurement of one call hangs until
// that call's deadline. Another call, with a shorter deadline of its own,
// must fail by its deadline, not queue behind the first call's measurement
// until the first call gives up.
func TestHungFirstClockMeasurementHoldsNoOtherCallPastItsDeadline(t *testing.T) {
	o := sqlledger.Options{Driver: sqlledger.DriverPostgres, OpTimeout: 3 * time.Second, LookupBatch: 1,
		DSN: "postgres://postgres@" + blackHole(t) + "/test?sslmode=disable"}
	l, err := sqlledger.Open(t.Context(), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer l.Close()
	first := make(chan error, 1)
	go func() { _, err := l.Lookup(context.Background(), ref("first")); first <- err }()
	time.Sleep(200 * time.Millisecond) // the first call is measuring the clock

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = l.Lookup(ctx, ref("second"))
	elapsed := time.Since(start)
	wantUnavailable(t, "a lookup against a server that never answers", err)
	if elapsed > time.Second {
		t.Errorf("a lookup with a 200ms deadline returned after %v: it waited for another call's clock measurement", elapsed)
	}
	<-first
}
