package idempotency_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// TestKeyReuseOverAnExpiredClaimIsMismatch on an async route: the intake
// stores by writing over an expired claim's row, and must not store
// another event's body there, under the first event's Idempotency-Key,
// while the first event's own retry would get 422 and be lost. The retry
// is still stored, also when the claim holds its fingerprint under an
// earlier setting (Also); and a route that replays on mismatch still
// takes the expired claim over with the other body, as a claim would.
func TestAsyncKeyReuseOverAnExpiredClaimIsMismatch(t *testing.T) {
	const lease = 50 * time.Millisecond
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (idempotency.Options, *sqlledger.Ledger)
	}{
		{"ledger only", func(t *testing.T) (idempotency.Options, *sqlledger.Ledger) {
			l := postgresLedger(t)
			return idempotency.Options{Ledger: l}, l
		}},
		{"Redis screen confirmed by a ledger claim", func(t *testing.T) (idempotency.Options, *sqlledger.Ledger) {
			l, s := productionStores(t)
			return idempotency.Options{Ledger: l, Screen: s, ConfirmByClaim: true, ScreenUnavailable: idempotency.FailStore}, l
		}},
		{"memory screen confirmed by a lookup", func(t *testing.T) (idempotency.Options, *sqlledger.Ledger) {
			l := sqliteLedger(t)
			s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
			t.Cleanup(s.Close)
			return idempotency.Options{Ledger: l, Screen: s, ScreenUnavailable: idempotency.FailStore}, l
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			first, earlier, other := []byte("amount=100"), []byte("v1:amount=100"), []byte("amount=999")
			setup := func(t *testing.T, key string, fp []byte) (*idempotency.Engine, *sqlledger.Ledger, *countedJobs, idempotency.Ref) {
				t.Helper()
				o, l := tc.open(t)
				jobs := &countedJobs{}
				l.UseJobs(jobs)
				o.Lease, o.Queue = lease, l
				e := newEngine(t, o)
				t.Cleanup(e.Close)
				ref := idempotency.Ref{Route: "r", Key: key}
				// A replica that died holding the key in the ledger.
				wantAcquired(t)(l.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "killed-gateway", Fingerprint: fp, Lease: lease, Retention: time.Hour}, time.Now()))
				time.Sleep(3 * lease)
				return e, l, jobs, ref
			}
			p := *racePolicy
			p.Ack = &idempotency.Response{Status: 202}
			delivery := func(ref idempotency.Ref, fp []byte, also ...[]byte) idempotency.Delivery {
				d := idempotency.Delivery{Ref: ref, Fingerprint: fp,
					Request: &idempotency.Request{Method: "POST", Path: "/hooks", Body: fp}}
				if also != nil {
					d.Also = func() [][]byte { return also }
				}
				return d
			}
			var forwards atomic.Int64
			stored := func(t *testing.T, l *sqlledger.Ledger, jobs *countedJobs, ref idempotency.Ref, fp []byte) {
				t.Helper()
				rec, err := l.Lookup(ctx, ref)
				if err != nil || rec.State != idempotency.StateQueued || string(rec.Fingerprint) != string(fp) || jobs.n.Load() != 1 {
					t.Fatalf("ledger: %+v (%v), %d jobs; want queued with %q and one job", rec, err, jobs.n.Load(), fp)
				}
			}

			t.Run("another body", func(t *testing.T) {
				e, l, jobs, ref := setup(t, "evt_reused_after_expiry", first)
				r := e.Handle(ctx, &p, delivery(ref, other), fwdCount(&forwards))
				if r.Outcome != idempotency.Mismatch || r.Status != 422 || jobs.n.Load() != 0 {
					t.Fatalf("another body over the expired claim: %s %d (%v), %d jobs; want 422 mismatch, nothing stored", r.Outcome, r.Status, r.Err, jobs.n.Load())
				}
				if rec, err := l.Lookup(ctx, ref); err != nil || rec.State != idempotency.StatePending || string(rec.Fingerprint) != string(first) {
					t.Fatalf("ledger after the other body: %+v (%v), want the first event's claim", rec, err)
				}
				r = e.Handle(ctx, &p, delivery(ref, first), fwdCount(&forwards))
				if r.Outcome != idempotency.Accepted || !r.TakenOver {
					t.Fatalf("the first event's retry: %s %d (%v), want accepted over the expired claim", r.Outcome, r.Status, r.Err)
				}
				stored(t, l, jobs, ref, first)
			})
			t.Run("the claim holds an earlier setting's digest", func(t *testing.T) {
				e, l, jobs, ref := setup(t, "evt_earlier_setting", earlier)
				r := e.Handle(ctx, &p, delivery(ref, first, earlier), fwdCount(&forwards))
				if r.Outcome != idempotency.Accepted {
					t.Fatalf("the retry: %s %d (%v), want accepted", r.Outcome, r.Status, r.Err)
				}
				stored(t, l, jobs, ref, first)
			})
			t.Run("replay on mismatch", func(t *testing.T) {
				e, l, jobs, ref := setup(t, "evt_replay_on_mismatch", first)
				p := p
				p.ReplayOnMismatch = true
				r := e.Handle(ctx, &p, delivery(ref, other), fwdCount(&forwards))
				if r.Outcome != idempotency.Accepted {
					t.Fatalf("another body, replay on mismatch: %s %d (%v), want accepted over the expired claim", r.Outcome, r.Status, r.Err)
				}
				stored(t, l, jobs, ref, other)
			})
			if n := forwards.Load(); n != 0 {
				t.Errorf("%d forwards at intake, want none", n)
			}
		})
	}
}
