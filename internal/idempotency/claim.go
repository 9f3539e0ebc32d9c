package idempotency

import (
	"context"
	"errors"
	"time"
)

// claim is a delivery's claim on its key as acquire left it: what the
// stores answered and which of them hold the claim (this delivery's when
// Acquired or TakenOver, the holder's when InFlight). It owns forward,
// commit, hold and release.
type claim struct {
	Claim // the stores' answer; Owner is an InFlight holder's
	e     *Engine
	ref   Ref
	owner string // this delivery's
	// screen and ledger name the stores holding the claim: the screen, a
	// pending ledger row, or both (Options.ConfirmByClaim).
	screen, ledger bool
	// lostScreen: a ledger claim taken after a screen claim whose answer
	// was lost, which the screen may hold too; it is settled in the
	// background, or other replicas would answer 409 for its lease.
	lostScreen bool
	// pass: forwarded without deduplication (passthrough): no store holds
	// the claim, or only the screen when the ledger cannot be reached.
	pass bool
	// local: the key is in flight in this process; no store was asked.
	local *flight
	// expires is the earliest the lease of this delivery's claim can end,
	// on this process's clock (from before the stores were asked); zero
	// when no lease bounds it.
	expires time.Time
}

// newClaim is req's claim as the stores answered it, held by no store yet.
func (e *Engine) newClaim(req ClaimRequest, got Claim) claim {
	return claim{Claim: got, e: e, ref: req.Ref, owner: req.Owner}
}

// holds reports whether a store holds the claim.
func (c *claim) holds() bool { return c.screen || c.ledger }

// release drops the claim so that the next delivery is forwarded; a claim
// lost meanwhile is someone else's to settle. It is detached from ctx: it
// is most needed when the delivery was cut.
func (c *claim) release(ctx context.Context) {
	e := c.e
	ctx, cancel := e.detached(ctx)
	defer cancel()
	var ledgerErr, screenErr error
	rctx, span := e.o.Tracer.Start(ctx, "hookstamp.release")
	if c.ledger {
		// The ledger row first: a repeat woken by the screen's release
		// must not find it still pending.
		ledgerErr = ignoreNotOwner(e.o.Ledger.Release(rctx, c.ref, c.owner))
	}
	if c.screen {
		screenErr = ignoreNotOwner(e.o.Screen.Release(rctx, c.ref, c.owner))
	}
	if c.lostScreen {
		e.tidyScreen(ctx, c.ref, c.owner, nil)
	}
	err := errors.Join(ledgerErr, screenErr)
	endSpan(span, err)
	if err == nil {
		return
	}
	if ledgerErr != nil {
		e.depError("ledger", "release", ledgerErr)
	}
	if screenErr != nil {
		e.depError("screen", "release", screenErr)
	}
	e.o.Logger.WarnContext(ctx, "release failed; a claim it left in place expires with its lease",
		"route", c.ref.Route, "key", c.ref.Key, "err", err)
}

// detached is ctx's values without its cancellation or deadline, bounded
// by OpTimeout: for settling what a request began, even when its provider
// has gone away or an earlier call spent the settling context.
func (e *Engine) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), e.o.OpTimeout)
}

func ignoreNotOwner(err error) error {
	if errors.Is(err, ErrNotOwner) {
		return nil
	}
	return err
}

// settleScreen ends the screen's side of a claim whose ledger side is
// settled: the screen gets ent as the record or, with ent nil, the claim
// is released (with its pending ledger row, if any).
func (c *claim) settleScreen(ctx context.Context, ent *Entry) {
	switch {
	case c.lostScreen:
		c.e.tidyScreen(ctx, c.ref, c.owner, ent)
	case !c.screen:
	case ent != nil:
		c.e.complete(ctx, c.ref, c.owner, ent)
	default:
		c.release(ctx)
	}
}

// markDone ends the screen's side of a claim whose record ent the ledger
// committed. When the ledger holds the claim too (confirm-by-claim), the
// screen is marked in the background, after the answer: the ledger's
// record already decides every repeat (docs/decisions.md, "The screen is
// marked done after the answer"). Once Close began it is marked at once.
func (c *claim) markDone(ctx context.Context, ent *Entry) {
	e := c.e
	if !c.screen || !c.ledger || c.lostScreen ||
		!e.background(ctx, func(ctx context.Context) { e.complete(ctx, c.ref, c.owner, ent) }) {
		c.settleScreen(ctx, ent)
	}
}

// refillScreen is tidyScreen for an entry no delivery's claim left in the
// screen: skipped while the breaker is open, as claims are.
func (e *Engine) refillScreen(ctx context.Context, ref Ref, owner string, ent *Entry) {
	if e.breaker.closed() {
		e.tidyScreen(ctx, ref, owner, ent)
	}
}

// tidyScreen turns a screen claim whose answer was lost into ent's record,
// or releases it (ent nil), in the background: it most likely never
// landed, and the answer must not wait another timeout for it. Not
// skipped while the breaker is open: the claims whose answers were lost
// are the ones that open it, and a Redis that blocked lands them when it
// wakes (the breaker bounds how many). Skipped once Close began.
func (e *Engine) tidyScreen(ctx context.Context, ref Ref, owner string, ent *Entry) {
	if e.o.Screen == nil {
		return
	}
	e.background(ctx, func(ctx context.Context) {
		op, err := "complete", error(nil)
		if ent != nil {
			err = e.o.Screen.Complete(ctx, ref, owner, ent, e.o.TTL)
		} else if op, err = "release", e.o.Screen.Release(ctx, ref, owner); errors.Is(err, ErrNotOwner) {
			err = nil // the claim never landed, or is no longer ours
		}
		if err != nil {
			e.depError("screen", op, err)
		}
	})
}

// background runs f within OpTimeout after the delivery, for Close to wait
// for; false, and f not run, once Close began.
func (e *Engine) background(ctx context.Context, f func(context.Context)) bool {
	e.tidyMu.Lock()
	defer e.tidyMu.Unlock()
	if e.tidyClosed {
		return false
	}
	ctx = context.WithoutCancel(ctx)
	e.tidy.Go(func() {
		ctx, cancel := context.WithTimeout(ctx, e.o.OpTimeout)
		defer cancel()
		f(ctx)
	})
	return true
}

// complete marks the screen entry done; a failure only costs a ledger
// lookup on the next repeat.
func (e *Engine) complete(ctx context.Context, ref Ref, owner string, ent *Entry) {
	if e.o.Screen == nil {
		return
	}
	if err := e.o.Screen.Complete(ctx, ref, owner, ent, e.o.TTL); err != nil {
		e.depError("screen", "complete", err)
	}
}

// refill puts a record read from the ledger into the screen, over the
// caller's claim only (Entry.Refill).
func (e *Engine) refill(ctx context.Context, ref Ref, owner string, ent *Entry) {
	e.complete(ctx, ref, owner, asRefill(ent))
}

// asRefill is a copy of ent marked Refill: ent may be shared.
func asRefill(ent *Entry) *Entry {
	r := *ent
	r.Refill = true
	return &r
}
