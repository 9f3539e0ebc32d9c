package idempotency_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
)

// The confirm step with a lookup (Options.ConfirmByClaim off: the memory
// screen, the embedded default, and the Redis screen with
// screen.on_unavailable reject or pass). The production pair (Redis +
// store) confirms by claiming, and the gateway's outage tests exercise
// that path; these exercise the other.

// switchLedger is a ledger that can be cut off and brought back: while
// down, every call fails as an unreachable database does.
type switchLedger struct {
	idempotency.Ledger
	down atomic.Bool
}

func (l *switchLedger) unreachable(op string) error {
	return fmt.Errorf("%s: %w: connection refused", op, idempotency.ErrUnavailable)
}

func (l *switchLedger) Lookup(ctx context.Context, r idempotency.Ref) (*idempotency.Record, error) {
	if l.down.Load() {
		return nil, l.unreachable("lookup")
	}
	return l.Ledger.Lookup(ctx, r)
}

func (l *switchLedger) Claim(ctx context.Context, req idempotency.ClaimRequest, now time.Time) (idempotency.Claim, error) {
	if l.down.Load() {
		return idempotency.Claim{}, l.unreachable("claim")
	}
	return l.Ledger.Claim(ctx, req, now)
}

func (l *switchLedger) Commit(ctx context.Context, rec *idempotency.Record, owner string, now time.Time) error {
	if l.down.Load() {
		return l.unreachable("commit")
	}
	return l.Ledger.Commit(ctx, rec, owner, now)
}

func (l *switchLedger) Release(ctx context.Context, r idempotency.Ref, owner string) error {
	if l.down.Load() {
		return l.unreachable("release")
	}
	return l.Ledger.Release(ctx, r, owner)
}

// lookupConfirmEngine is an engine on a memory screen confirming with
// lookups, as gateway.New builds it for screen.driver: memory without a
// local cache.
func lookupConfirmEngine(t *testing.T, l idempotency.Ledger) *idempotency.Engine {
	t.Helper()
	s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
	t.Cleanup(s.Close)
	e := newEngine(t, idempotency.Options{Screen: s, Ledger: l, ScreenUnavailable: idempotency.FailStore})
	t.Cleanup(e.Close)
	return e
}

// SPEC §6: ledger unreachable → 503 + Retry-After, nothing forwarded
// (store.on_unavailable: reject, the default). The screen granted the
// claim, but the ledger could not confirm that the event was not recorded
// already: forwarding it could be the second copy. The screen's claim is
// released, so that the provider's retry, once the ledger is back, is
// forwarded at once rather than answered 409 for a lease.
func TestLookupConfirmFailsClosedWhenTheLedgerIsDown(t *testing.T) {
	ctx := context.Background()
	l := &switchLedger{Ledger: sqliteLedger(t)}
	e := lookupConfirmEngine(t, l)
	p := *racePolicy
	p.RejectInflight = true // a claim left behind answers 409 at once
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_ledger_down"}, Fingerprint: []byte("fp")}
	var forwards atomic.Int64

	l.down.Store(true)
	r := e.Handle(ctx, &p, d, fwdCount(&forwards))
	if r.Outcome != idempotency.Unavailable || r.Status != 503 || r.RetryAfter <= 0 {
		t.Fatalf("ledger down: %s %d (Retry-After %v), want unavailable 503 with Retry-After", r.Outcome, r.Status, r.RetryAfter)
	}
	if n := forwards.Load(); n != 0 {
		t.Fatalf("ledger down: upstream received %d, want 0 (fail closed)", n)
	}

	l.down.Store(false)
	if r := e.Handle(ctx, &p, d, fwdCount(&forwards)); r.Outcome != idempotency.Forwarded {
		t.Fatalf("retry with the ledger back: %s (%v), want forwarded (the screen's claim was released)", r.Outcome, r.Err)
	}
	if r := e.Handle(ctx, &p, d, fwdCount(&forwards)); r.Outcome != idempotency.Replayed {
		t.Fatalf("repeat: %s, want replayed", r.Outcome)
	}
	if n := forwards.Load(); n != 1 {
		t.Fatalf("upstream received %d, want 1", n)
	}
}

// A pending ledger row with a live lease is another replica's claim (one
// that claimed in the ledger: screen.driver none, or a screen it could not
// reach). A screen claim confirmed by a lookup must see it and not forward
// a second copy beside it; once that row's lease has expired, the key is
// taken over.
func TestLookupConfirmSeesALiveLedgerClaim(t *testing.T) {
	ctx := context.Background()
	l := sqliteLedger(t)
	var takeovers atomic.Int64
	s := memscreen.New(memscreen.Options{MaxCachedBody: 64 << 10})
	t.Cleanup(s.Close)
	e := newEngine(t, idempotency.Options{Screen: s, Ledger: l, ScreenUnavailable: idempotency.FailStore,
		Hooks: idempotency.Hooks{Takeover: func(string) { takeovers.Add(1) }}})
	t.Cleanup(e.Close)
	p := *racePolicy
	p.RejectInflight = true
	var forwards atomic.Int64

	live := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_ledger_claimed"}}
	c, err := l.Claim(ctx, idempotency.ClaimRequest{Ref: live.Ref, Owner: "other-replica", Lease: time.Hour, Retention: time.Hour}, time.Now())
	if err != nil || c.Status != idempotency.Acquired {
		t.Fatalf("other replica's ledger claim: %v %v", c.Status, err)
	}
	for i := range 2 {
		r := e.Handle(ctx, &p, live, fwdCount(&forwards))
		if r.Outcome != idempotency.Conflict {
			t.Fatalf("delivery %d beside another replica's live ledger claim: %s, want conflict", i+1, r.Outcome)
		}
	}
	if n := forwards.Load(); n != 0 {
		t.Fatalf("upstream received %d beside another replica's live claim, want 0", n)
	}
	if n := takeovers.Load(); n != 0 {
		t.Fatalf("takeovers counted %d for a live claim", n)
	}

	dead := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_ledger_claim_expired"}}
	c, err = l.Claim(ctx, idempotency.ClaimRequest{Ref: dead.Ref, Owner: "dead-replica", Lease: time.Second, Retention: time.Hour},
		time.Now().Add(-time.Minute))
	if err != nil || c.Status != idempotency.Acquired {
		t.Fatalf("dead replica's ledger claim: %v %v", c.Status, err)
	}
	if r := e.Handle(ctx, &p, dead, fwdCount(&forwards)); r.Outcome != idempotency.Forwarded || !r.TakenOver {
		t.Fatalf("delivery after the dead replica's lease: %s (taken over %v), want forwarded as a takeover", r.Outcome, r.TakenOver)
	}
	if n := takeovers.Load(); n != 1 {
		t.Fatalf("takeovers counted %d, want 1", n)
	}
	if rec, err := l.Lookup(ctx, dead.Ref); err != nil || rec.State != idempotency.StateDone {
		t.Fatalf("ledger after the takeover: %+v %v, want done", rec, err)
	}
}
