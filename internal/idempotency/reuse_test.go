package idempotency_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
)

// An expired claim whose delivery never settled (its gateway killed, or
// its commit lost with no screen to keep the answer) still names the event
// its key was first used for. Another body under that key is key reuse,
// 422, as it is while the claim lives and once it is recorded; taken over,
// it would reach the upstream under the first event's Idempotency-Key, and
// the first event's own retry would then be refused. That retry takes the
// claim over and is forwarded (SPEC §6).
func TestKeyReuseOverAnExpiredClaimIsMismatch(t *testing.T) {
	const lease = 50 * time.Millisecond
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) (idempotency.Options, idempotency.Ledger, func(req idempotency.ClaimRequest))
	}{
		{"ledger only", func(t *testing.T) (idempotency.Options, idempotency.Ledger, func(idempotency.ClaimRequest)) {
			l := postgresLedger(t)
			return idempotency.Options{Ledger: l}, l, func(req idempotency.ClaimRequest) { wantAcquired(t)(l.Claim(context.Background(), req, time.Now())) }
		}},
		{"Redis screen confirmed by a ledger claim", func(t *testing.T) (idempotency.Options, idempotency.Ledger, func(idempotency.ClaimRequest)) {
			l, s := productionStores(t)
			return idempotency.Options{Ledger: l, Screen: s, ConfirmByClaim: true, ScreenUnavailable: idempotency.FailStore}, l,
				func(req idempotency.ClaimRequest) {
					wantAcquired(t)(s.Claim(context.Background(), req))
					wantAcquired(t)(l.Claim(context.Background(), req, time.Now()))
				}
		}},
		{"memory screen", func(t *testing.T) (idempotency.Options, idempotency.Ledger, func(idempotency.ClaimRequest)) {
			l := sqliteLedger(t)
			s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
			t.Cleanup(s.Close)
			return idempotency.Options{Ledger: l, Screen: s, ScreenUnavailable: idempotency.FailStore}, l,
				func(req idempotency.ClaimRequest) { wantAcquired(t)(s.Claim(context.Background(), req)) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			o, l, claimDead := tc.setup(t)
			o.Lease = lease
			e := newEngine(t, o)
			t.Cleanup(e.Close)
			ref := idempotency.Ref{Route: "r", Key: "evt_reused_after_expiry"}
			first, other := []byte("amount=100"), []byte("amount=999")
			claimDead(idempotency.ClaimRequest{Ref: ref, Owner: "killed-gateway", Fingerprint: first, Lease: lease, Retention: time.Hour})
			time.Sleep(3 * lease)

			var forwards atomic.Int64
			r := e.Handle(ctx, racePolicy, idempotency.Delivery{Ref: ref, Fingerprint: other}, fwdBody(&forwards, []byte(`{"reused":1}`)))
			if r.Outcome != idempotency.Mismatch || forwards.Load() != 0 {
				t.Fatalf("another body over the expired claim: %s (%v), upstream received %d; want mismatch, nothing forwarded", r.Outcome, r.Err, forwards.Load())
			}
			r = e.Handle(ctx, racePolicy, idempotency.Delivery{Ref: ref, Fingerprint: first}, fwdBody(&forwards, []byte(`{"first":1}`)))
			if r.Outcome != idempotency.Forwarded || forwards.Load() != 1 {
				t.Fatalf("the first event's retry: %s (%v), upstream received %d; want it taken over and forwarded once", r.Outcome, r.Err, forwards.Load())
			}
			rec, err := l.Lookup(ctx, ref)
			if err != nil || rec.State != idempotency.StateDone || string(rec.Fingerprint) != string(first) {
				t.Fatalf("ledger: %+v (%v), want done with the first event's fingerprint", rec, err)
			}
		})
	}
}

// wantAcquired fails t unless the claim it is given was acquired.
func wantAcquired(t *testing.T) func(idempotency.Claim, error) {
	return func(c idempotency.Claim, err error) {
		t.Helper()
		if err != nil || c.Status != idempotency.Acquired {
			t.Fatalf("the dead owner's claim: %v (%v), want acquired", c.Status, err)
		}
	}
}
