package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/redisscreen"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// lostAnswerScreen makes each screen claim land in Redis and then lose its
// answer, as when the reply comes after the operation timeout.
type lostAnswerScreen struct {
	*redisscreen.Screen
}

func (s lostAnswerScreen) Claim(ctx context.Context, req idempotency.ClaimRequest) (idempotency.Claim, error) {
	if _, err := s.Screen.Claim(ctx, req); err != nil {
		return idempotency.Claim{}, err
	}
	return idempotency.Claim{}, fmt.Errorf("%w: the answer was lost", idempotency.ErrUnavailable)
}

// A screen claim whose answer was lost is replaced by a ledger claim
// (screen.on_unavailable: store). When the ledger does not grant it, the
// claim left in the screen is settled at once: turned into the record the
// ledger holds, or dropped when another replica's ledger claim holds the
// key — not left to answer repeats at other replicas 409 for its lease —
// and without holding up the answer: in the background.
// (A claim the ledger grants is settled with the delivery:
// gateway.TestLostScreenClaimAnswer.)
func TestLostScreenClaimIsSettled(t *testing.T) {
	ctx := context.Background()
	l, s := productionStores(t)
	// Each case has an engine of its own: Close waits for its background
	// calls, and no more start after it.
	lostEngine := func() *idempotency.Engine {
		t.Helper()
		e := newEngine(t, idempotency.Options{Screen: lostAnswerScreen{s}, Ledger: l, ConfirmByClaim: true,
			ScreenUnavailable: idempotency.FailStore, Lease: 30 * time.Second,
			// Every claim here fails; the breaker must not open, or the
			// screen would rightly be left alone.
			BreakerFailures: 100})
		return e
	}
	e := lostEngine()
	var forwards atomic.Int64
	p := *racePolicy
	p.RejectInflight = true
	// screenSees is what a claim at another replica finds in the screen.
	screenSees := func(ref idempotency.Ref) idempotency.ClaimStatus {
		t.Helper()
		c, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "another-replica", Lease: time.Second, Retention: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return c.Status
	}

	// Recorded in the ledger, not in the screen (flushed, say).
	done := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_recorded"}}
	if r := e.Handle(ctx, &p, done, fwdCount(&forwards)); r.Outcome != idempotency.Forwarded {
		t.Fatalf("first delivery: %s (%v)", r.Outcome, r.Err)
	}
	if err := s.Forget(ctx, done.Ref); err != nil {
		t.Fatal(err)
	}
	if r := e.Handle(ctx, &p, done, fwdCount(&forwards)); r.Outcome != idempotency.Replayed {
		t.Fatalf("repeat: %s (%v), want replayed", r.Outcome, r.Err)
	}
	e.Close() // the screen is settled in the background; Close waits for it
	if st := screenSees(done.Ref); st != idempotency.Done {
		t.Fatalf("after the repeat, the screen answers another replica %v, want done: the lost claim was left in flight", st)
	}

	// Held in the ledger by a replica that could not reach the screen.
	busy := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_busy"}}
	if _, err := l.Claim(ctx, idempotency.ClaimRequest{Ref: busy.Ref, Owner: "ledger-replica", Lease: 30 * time.Second, Retention: time.Hour}, time.Now()); err != nil {
		t.Fatal(err)
	}
	e = lostEngine()
	if r := e.Handle(ctx, &p, busy, fwdCount(&forwards)); r.Outcome != idempotency.Conflict {
		t.Fatalf("repeat of a delivery in flight elsewhere: %s (%v), want conflict", r.Outcome, r.Err)
	}
	e.Close()
	if st := screenSees(busy.Ref); st != idempotency.Acquired {
		t.Fatalf("the screen answers another replica %v, want acquired: the lost claim was left behind", st)
	}
	if n := forwards.Load(); n != 1 {
		t.Fatalf("upstream received %d forwards, want 1", n)
	}
}

// Once Close has begun (shutdown gave up on a delivery still running), no
// background call starts: the screen is about to be closed. The claim left
// in the screen expires with its lease.
func TestNoTidyingAfterClose(t *testing.T) {
	ctx := context.Background()
	l, s := productionStores(t)
	e := newEngine(t, idempotency.Options{Screen: lostAnswerScreen{s}, Ledger: l, ConfirmByClaim: true,
		ScreenUnavailable: idempotency.FailStore, Lease: 30 * time.Second, BreakerFailures: 100})
	e.Close()
	var forwards atomic.Int64
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_late"}}
	if r := e.Handle(ctx, racePolicy, d, fwdCount(&forwards)); r.Outcome != idempotency.Forwarded {
		t.Fatalf("delivery after Close: %s (%v), want forwarded", r.Outcome, r.Err)
	}
	e.Close() // waits for nothing
	c, err := s.Claim(ctx, idempotency.ClaimRequest{Ref: d.Ref, Owner: "another-replica", Lease: time.Second, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != idempotency.InFlight {
		t.Fatalf("the screen answers %v: a background call ran after Close", c.Status)
	}
}

// lateClaimScreen loses each claim's answer before the claim reaches
// Redis; the test lands it later (land), as a command that was still on
// its way when its caller gave up.
type lateClaimScreen struct {
	*redisscreen.Screen
	pending chan idempotency.ClaimRequest
}

func (s lateClaimScreen) Claim(_ context.Context, req idempotency.ClaimRequest) (idempotency.Claim, error) {
	s.pending <- req
	return idempotency.Claim{}, fmt.Errorf("%w: the answer was lost", idempotency.ErrUnavailable)
}

func (s lateClaimScreen) land(t *testing.T) {
	t.Helper()
	_, _ = s.Screen.Claim(context.Background(), <-s.pending) // nobody reads its answer
}

// The upstream fails, so the delivery — claimed in the ledger after the
// screen claim's answer was lost — is released, and the claim in the
// screen with it, in the background. When the screen claim reaches Redis
// only after that release, it must not hold the key: the provider's retry
// at another replica is forwarded at once, not answered 409 for a lease.
func TestLostScreenClaimLandingAfterItsRelease(t *testing.T) {
	ctx := context.Background()
	l, s := productionStores(t)
	screen := lateClaimScreen{Screen: s, pending: make(chan idempotency.ClaimRequest, 1)}
	e := newEngine(t, idempotency.Options{Screen: screen, Ledger: l, ConfirmByClaim: true,
		ScreenUnavailable: idempotency.FailStore, Lease: 30 * time.Second, BreakerFailures: 100})
	var forwards atomic.Int64
	failing := fwdFailing(&forwards)
	p := *racePolicy
	p.RejectInflight = true
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_overtaken"}}
	if r := e.Handle(ctx, &p, d, failing); r.Outcome != idempotency.Released {
		t.Fatalf("delivery the upstream failed: %s (%v), want released", r.Outcome, r.Err)
	}
	e.Close() // the screen's release runs in the background; Close waits for it
	screen.land(t)

	other := newEngine(t, idempotency.Options{Screen: s, Ledger: l, ConfirmByClaim: true,
		ScreenUnavailable: idempotency.FailStore, Lease: 30 * time.Second})
	defer other.Close()
	if r := other.Handle(ctx, &p, d, fwdCount(&forwards)); r.Outcome != idempotency.Forwarded {
		t.Fatalf("the provider's retry at another replica: %s (%v), want forwarded", r.Outcome, r.Err)
	}
	if n := forwards.Load(); n != 2 {
		t.Fatalf("upstream received %d forwards, want 2 (the failed one and the retry)", n)
	}
}

// With screen.on_unavailable: reject (or pass), a screen claim whose
// answer was lost — Redis answered after the operation timeout, or the
// provider hung up while the claim was on its way — ends the delivery
// 503 (or forwards it unclaimed). The claim that landed must not stay
// behind: nobody will ever complete or release it, and the provider's
// retry would be answered 409 (or held waiting) for a whole lease, then
// counted as a takeover of a delivery that never was forwarded.
func TestLostScreenClaimIsReleasedWhenNotFallingBackToTheLedger(t *testing.T) {
	for _, mode := range []struct {
		name string
		fail idempotency.FailMode
		want idempotency.Outcome
	}{
		{"reject", idempotency.FailReject, idempotency.Unavailable},
		{"pass", idempotency.FailPass, idempotency.Passthrough},
	} {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			l, s := productionStores(t)
			e := newEngine(t, idempotency.Options{Screen: lostAnswerScreen{s}, Ledger: l,
				ScreenUnavailable: mode.fail, Lease: 30 * time.Second, BreakerFailures: 100})
			var forwards atomic.Int64
			failing := fwdFailing(&forwards)
			p := *racePolicy
			p.RejectInflight = true
			d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_lost_" + mode.name}}
			if r := e.Handle(ctx, &p, d, failing); r.Outcome != mode.want {
				t.Fatalf("delivery whose screen claim got no answer: %s (%v), want %s", r.Outcome, r.Err, mode.want)
			}
			e.Close() // background calls, if any, are done

			retry := newEngine(t, idempotency.Options{Screen: s, Ledger: l,
				ScreenUnavailable: mode.fail, Lease: 30 * time.Second})
			defer retry.Close()
			if r := retry.Handle(ctx, &p, d, fwdCount(&forwards)); r.Outcome != idempotency.Forwarded || r.TakenOver {
				t.Fatalf("the provider's retry once Redis answers: %s (taken over %v, %v), want forwarded: the lost claim was left in the screen",
					r.Outcome, r.TakenOver, r.Err)
			}
		})
	}
}

// fwdFailing counts forwards, each answered 503 by the upstream (not final:
// the claim is released).
func fwdFailing(n *atomic.Int64) idempotency.ForwardFunc {
	return func(context.Context) (*idempotency.Upstream, error) {
		n.Add(1)
		return &idempotency.Upstream{Status: 503, Header: http.Header{}}, nil
	}
}

// cutLedger makes the ledger claim land and then cuts the delivery, as
// when shutdown abandons a delivery while its claim's batch commits.
type cutLedger struct {
	*sqlledger.Ledger
	cut func()
}

func (l *cutLedger) Claim(ctx context.Context, req idempotency.ClaimRequest, now time.Time) (idempotency.Claim, error) {
	if _, err := l.Ledger.Claim(context.WithoutCancel(ctx), req, now); err != nil {
		return idempotency.Claim{}, err
	}
	l.cut()
	return idempotency.Claim{}, fmt.Errorf("%w: %w", idempotency.ErrUnavailable, ctx.Err())
}

// A delivery cut while its claims were being made leaves neither behind:
// the screen's claim and the ledger row that landed after it left are
// released, so the provider's retry is forwarded at once instead of
// getting 409 for the whole lease. Production stores: Redis screen,
// PostgreSQL ledger, ledger claims as confirmation.
func TestCutDeliveryReleasesItsClaims(t *testing.T) {
	ctx := context.Background()
	l, s := productionStores(t)

	dctx, cut := context.WithCancel(ctx)
	opts := idempotency.Options{Screen: s, Ledger: &cutLedger{Ledger: l, cut: cut}, ConfirmByClaim: true,
		ScreenUnavailable: idempotency.FailStore, Lease: 30 * time.Second}
	e := newEngine(t, opts)
	var forwards atomic.Int64
	fwd := func(context.Context) (*idempotency.Upstream, error) {
		forwards.Add(1)
		return &idempotency.Upstream{Status: 200, Header: http.Header{}, Body: []byte("ok")}, nil
	}
	p := &idempotency.Policy{Route: "r", Final: idempotency.DefaultFinal, MaxBody: 1 << 20,
		Retention: time.Hour, WaitTimeout: time.Second}
	d := idempotency.Delivery{Ref: idempotency.Ref{Route: "r", Key: "evt_cut"}}

	if r := e.Handle(dctx, p, d, fwd); r.Outcome != idempotency.Unavailable {
		t.Fatalf("cut delivery: %s, want unavailable", r.Outcome)
	}
	if _, err := l.Lookup(ctx, d.Ref); !errors.Is(err, idempotency.ErrNotFound) {
		t.Fatalf("the cut delivery's ledger row is still there (%v): retries would wait for its lease", err)
	}
	opts.Ledger = l
	retry := newEngine(t, opts)
	if r := retry.Handle(ctx, p, d, fwd); r.Outcome != idempotency.Forwarded {
		t.Fatalf("the provider's retry: %s (%v), want forwarded: a claim of the cut delivery was left behind", r.Outcome, r.Err)
	}
	if n := forwards.Load(); n != 1 {
		t.Fatalf("upstream received %d forwards, want 1", n)
	}
}
