package idempotency

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// acquire takes d's key for owner or learns what holds it (SPEC §1 CLAIM
// and CONFIRM): in this process's flights, then the screen, whose grant the
// ledger confirms because the screen forgets; or the ledger alone. A
// non-nil *Result ends the delivery.
func (e *Engine) acquire(ctx context.Context, p *Policy, d Delivery, fwd ForwardFunc, owner string) (claim, *Result) {
	if f := e.flights.get(d.Ref); f != nil {
		return claim{Claim: Claim{Status: InFlight, Fingerprint: f.fingerprint}, e: e, ref: d.Ref, local: f}, nil
	}
	req := ClaimRequest{Ref: d.Ref, Owner: owner, Fingerprint: d.Fingerprint, Also: d.Also,
		Lease: e.o.Lease, Retention: p.Retention, Source: d.Source, RefuseReuse: !p.ReplayOnMismatch}
	if e.o.Screen == nil {
		return e.ledgerClaim(ctx, req, fwd)
	}
	got, err := e.screenClaim(ctx, req)
	if err != nil {
		return e.withoutScreen(ctx, p, req, d, fwd, err)
	}
	c := e.newClaim(req, got)
	c.screen = true
	if got.Status != Acquired && got.Status != TakenOver {
		return c, nil
	}
	if got.Status == TakenOver {
		e.tookOver(ctx, req.Ref)
	}
	// A retried commit of the key goes first, for the confirmation to find.
	e.nudgeCommitRetry(ctx, req.Ref)
	if e.o.ConfirmByClaim {
		return e.confirmByClaim(ctx, req, c)
	}
	return e.confirm(ctx, req, c)
}

// errBreakerOpen: the screen was not asked (see breaker).
var errBreakerOpen = fmt.Errorf("%w: the screen keeps failing; it is skipped until a probe succeeds", ErrUnavailable)

// screenClaim claims in the screen unless the breaker is open.
func (e *Engine) screenClaim(ctx context.Context, req ClaimRequest) (Claim, error) {
	ok, probe := e.breaker.allow()
	if !ok {
		return Claim{}, errBreakerOpen
	}
	sctx, span := e.o.Tracer.Start(ctx, "hookstamp.claim")
	c, err := e.o.Screen.Claim(sctx, req)
	endSpan(span, err, attribute.String("hookstamp.claim", c.Status.String()))
	if err != nil {
		e.depError("screen", "claim", err)
	}
	if err != nil && ctx.Err() != nil {
		e.breaker.abandon(probe) // the caller left: no news of the screen
		return c, err
	}
	switch e.breaker.done(probe, err != nil) {
	case +1:
		e.o.Logger.WarnContext(ctx, "the screen keeps failing: claims skip it and apply screen.on_unavailable until a probe succeeds",
			"failures", e.o.BreakerFailures, "probe_every", e.o.BreakerCooldown, "err", err)
	case -1:
		e.o.Logger.InfoContext(ctx, "the screen answers again: claims use it")
	}
	return c, err
}

// withoutScreen goes on as screen.on_unavailable says after the screen
// claim failed. Unless the breaker skipped the screen, the claim may have
// landed although its answer was lost, and only this delivery can end it.
func (e *Engine) withoutScreen(ctx context.Context, p *Policy, req ClaimRequest, d Delivery, fwd ForwardFunc, err error) (claim, *Result) {
	lost := !errors.Is(err, errBreakerOpen)
	if e.o.ScreenUnavailable == FailStore {
		c, stop := e.ledgerClaim(ctx, req, fwd)
		if lost {
			e.afterLostScreenClaim(ctx, req, &c, stop != nil)
		}
		return c, stop
	}
	if lost {
		e.tidyScreen(ctx, req.Ref, req.Owner, nil)
	}
	if e.o.ScreenUnavailable == FailPass {
		r := e.passthrough(ctx, p, req, d, fwd, err)
		return claim{}, &r
	}
	// Rejected is what is not recorded: the ledger may hold the answer.
	if r, ok, _ := e.replayRecorded(ctx, p, d, fwd); ok {
		return claim{}, &r
	}
	r := e.unavailable(fmt.Errorf("screen claim %q: %w", req.Key, err))
	return claim{}, &r
}

// afterLostScreenClaim settles a screen claim whose answer was lost: with
// the delivery when the ledger claim c was granted, at once otherwise.
func (e *Engine) afterLostScreenClaim(ctx context.Context, req ClaimRequest, c *claim, failed bool) {
	switch {
	case !failed && (c.Status == Acquired || c.Status == TakenOver):
		c.lostScreen = true
	case !failed && c.Status == Done:
		e.tidyScreen(ctx, req.Ref, req.Owner, asRefill(c.Entry))
	default:
		e.tidyScreen(ctx, req.Ref, req.Owner, nil)
	}
}

// ledgerClaim makes the claim a pending ledger row.
func (e *Engine) ledgerClaim(ctx context.Context, req ClaimRequest, fwd ForwardFunc) (claim, *Result) {
	e.nudgeCommitRetry(ctx, req.Ref)
	lctx, span := e.o.Tracer.Start(ctx, "hookstamp.claim", trace.WithAttributes(attribute.String("hookstamp.claim_store", "ledger")))
	got, err := e.o.Ledger.Claim(lctx, req, e.o.Now())
	endSpan(span, err, attribute.String("hookstamp.claim", got.Status.String()))
	c := e.newClaim(req, got)
	c.ledger = true
	if err == nil {
		e.claimWrote(ctx, got.Status)
		if got.Status == TakenOver {
			e.tookOver(ctx, req.Ref)
		}
		return c, nil
	}
	e.depError("ledger", "claim", err)
	if mayHaveLanded(ctx) {
		c.release(ctx)
	}
	if rec := e.readable(ctx, req.Ref, err); rec != nil {
		c.Claim = Claim{Status: Held, Fingerprint: rec.Fingerprint, Entry: EntryOf(rec)}
		if rec.State.Answered() {
			c.Claim = Claim{Status: Done, Fingerprint: rec.Fingerprint, Entry: EntryOf(rec)}
		}
		return c, nil
	}
	if e.passLedger(err) {
		r := e.forwardUnclaimed(ctx, Passthrough, fwd)
		return claim{}, &r
	}
	r := e.unavailable(fmt.Errorf("ledger claim %q: %w", req.Key, err))
	return claim{}, &r
}

// confirm looks up in the ledger the key the screen granted as c.
func (e *Engine) confirm(ctx context.Context, req ClaimRequest, c claim) (claim, *Result) {
	cctx, span := e.o.Tracer.Start(ctx, "hookstamp.confirm")
	rec, err := e.o.Ledger.Lookup(cctx, req.Ref)
	if errors.Is(err, ErrNotFound) {
		err = nil
	}
	endSpan(span, err)
	switch {
	case err != nil:
		e.depError("ledger", "lookup", err)
		return e.unconfirmed(ctx, c, err, false)
	case rec == nil && e.writesFailing.Load():
		return e.confirmByClaim(ctx, req, c) // see writefail.go
	case rec == nil:
		return c, nil
	case c.recorded(ctx, rec):
		return c, nil
	}
	// A pending row: a replica claimed in the ledger while it could not
	// reach the screen. Its claim stands while its lease lives, and after
	// it against another event's body, as a ledger claim's does.
	if rec.LeaseUntil.After(e.o.Now()) || !req.MayTakeOver(rec.Fingerprint) {
		c.release(ctx)
		c.Claim = Claim{Status: InFlight, Owner: rec.Owner, Fingerprint: rec.Fingerprint}
		c.screen, c.ledger = false, true
		return c, nil
	}
	if e.writesFailing.Load() {
		return e.confirmByClaim(ctx, req, c) // takes the expired claim over, or fails closed
	}
	if c.Status != TakenOver {
		e.tookOver(ctx, req.Ref)
	}
	c.Claim = Claim{Status: TakenOver}
	return c, nil
}

// confirmByClaim confirms the screen's grant c with a ledger claim
// (Options.ConfirmByClaim).
func (e *Engine) confirmByClaim(ctx context.Context, req ClaimRequest, c claim) (claim, *Result) {
	cctx, span := e.o.Tracer.Start(ctx, "hookstamp.confirm", trace.WithAttributes(attribute.String("hookstamp.claim_store", "ledger")))
	lc, err := e.o.Ledger.Claim(cctx, req, e.o.Now())
	endSpan(span, err, attribute.String("hookstamp.claim", lc.Status.String()))
	if err != nil {
		e.depError("ledger", "claim", err)
		if rec := e.readable(ctx, req.Ref, err); rec != nil && c.recorded(ctx, rec) {
			return c, nil
		}
		return e.unconfirmed(ctx, c, err, mayHaveLanded(ctx))
	}
	e.claimWrote(ctx, lc.Status)
	switch lc.Status {
	case Acquired:
		c.ledger = true
		return c, nil
	case TakenOver:
		// A replica that claimed in the ledger died: its lease expired.
		if c.Status != TakenOver {
			e.tookOver(ctx, req.Ref)
		}
		c.Claim, c.ledger = lc, true
		return c, nil
	case Done:
		e.refill(ctx, req.Ref, req.Owner, lc.Entry)
		c.Claim = lc
		return c, nil
	}
	// Held, or a replica that could not reach the screen holds the key.
	c.release(ctx)
	c.Claim, c.screen, c.ledger = lc, false, true
	return c, nil
}

// recorded turns the screen's grant c into the done record (refilled into
// the screen) or held record its confirmation found; false for others.
func (c *claim) recorded(ctx context.Context, rec *Record) bool {
	switch {
	case rec.State.Answered():
		ent := EntryOf(rec)
		c.e.refill(ctx, c.ref, c.owner, ent)
		c.Claim = Claim{Status: Done, Fingerprint: rec.Fingerprint, Entry: ent}
		return true
	case rec.State == StateHeld:
		c.release(ctx)
		c.Claim = Claim{Status: Held, Fingerprint: rec.Fingerprint, Entry: EntryOf(rec)}
		c.screen, c.ledger = false, true
		return true
	}
	return false
}

// unconfirmed goes on with the screen's grant c the ledger could not
// confirm: forwarded as passthrough (store.on_unavailable: pass), or
// released with 503. rowMayExist: the ledger may hold c's pending row.
func (e *Engine) unconfirmed(ctx context.Context, c claim, err error, rowMayExist bool) (claim, *Result) {
	if e.passLedger(err) {
		e.warnPassing(ctx, c.ref, err)
		c.pass = true
		return c, nil
	}
	c.ledger = rowMayExist
	c.release(ctx)
	r := e.unavailable(fmt.Errorf("confirm %q: %w", c.ref.Key, err))
	return claim{}, &r
}

// warnPassing logs a delivery forwarded without a ledger.
func (e *Engine) warnPassing(ctx context.Context, ref Ref, err error) {
	e.o.Logger.WarnContext(ctx, "forwarding without a ledger: it is unavailable", "route", ref.Route, "key", ref.Key, "err", err)
}

// passLedger reports whether a failed ledger call lets the delivery be
// forwarded without dedup: a logic error (a table missing) is no outage,
// and passing it would forward every repeat until somebody noticed.
func (e *Engine) passLedger(err error) bool {
	return e.o.LedgerUnavailable == FailPass && errors.Is(err, ErrUnavailable)
}

// readable returns ref's done or held record after a ledger claim failed
// to reach the ledger, if it can still be read: a ledger refusing writes
// (a standby, a full disk) still knows what is recorded. After a timeout
// the read gets a tenth of OpTimeout: a locked SQLite file reads at once,
// and a hung database must not cost a second full timeout.
func (e *Engine) readable(ctx context.Context, ref Ref, err error) *Record {
	if !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.o.OpTimeout/10)
		defer cancel()
	}
	rec, lerr := e.o.Ledger.Lookup(ctx, ref)
	if lerr != nil || (!rec.State.Answered() && rec.State != StateHeld) {
		return nil
	}
	return rec
}

// mayHaveLanded reports whether a ledger claim that failed because the
// delivery was cut may still be made by its batch, and must be released.
// One that timed out is not chased; its row expires with its lease.
func mayHaveLanded(ctx context.Context) bool { return ctx.Err() != nil }
