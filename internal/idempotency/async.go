package idempotency

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// intake stores a first delivery of an async route without a claim before
// it: the insert of its queued row is the claim, atomic across replicas by
// the ledger's key (docs/decisions.md, "Async intake claims by storing").
// A key the screen or the ledger already holds is answered as its record.
// It reports false, having stored nothing, when the screen cannot be read
// (screen.on_unavailable applies) or the key is in flight on the claim
// path (the route was synchronous, or a replica runs an older hookstamp):
// Handle's claim loop then takes the delivery.
func (e *Engine) intake(ctx context.Context, p *Policy, d Delivery, fwd ForwardFunc) (Result, bool) {
	if e.o.Queue == nil || (d.Request == nil && d.StoreRequest == nil) {
		return Result{}, false
	}
	c, found, err := e.peek(ctx, d.Ref)
	switch {
	case err != nil:
		return Result{}, false
	case found && c.Status == Done:
		return e.replayFound(ctx, p, d, fwd, c.Entry)
	case found:
		return Result{}, false
	}
	d.withRequest()
	// Stored even if the provider has gone away.
	sctx, cancel := e.detached(ctx)
	defer cancel()
	for range intakeAttempts {
		held, takenOver, err := e.store(ctx, sctx, p, d)
		switch {
		case errors.Is(err, ErrNotFound):
			continue // the row holding the key was deleted since: store afresh
		case err != nil:
			e.depError("ledger", "enqueue", err)
			if rec := e.readable(ctx, d.Ref, err); rec != nil {
				// A ledger refusing writes still knows what it stored.
				return e.intakeFound(ctx, nil, p, d, fwd, rec)
			}
			if e.passLedger(err) {
				// As on a synchronous route: the upstream's own answer.
				e.warnPassing(ctx, d.Ref, err)
				return e.forwardUnclaimed(ctx, Passthrough, fwd), true
			}
			return e.unavailable(fmt.Errorf("enqueue %q: %w", d.Key, err)), true
		case held == nil:
			if takenOver {
				e.tookOver(ctx, d.Ref)
			}
			return Result{Outcome: Accepted, Ack: p.ackCopy(), TakenOver: takenOver}, true
		case held.State == StatePending:
			return Result{}, false
		}
		return e.intakeFound(ctx, sctx, p, d, fwd, held)
	}
	return e.unavailable(fmt.Errorf("enqueue %q: the record keeps vanishing", d.Key)), true
}

// intakeFound answers an async delivery whose key holds rec, settled or
// queued: the route's acknowledgement when rec was acknowledged, refilled
// into the screen under sctx unless it is nil (a refill of nobody's claim:
// it never ends one); otherwise, for a record made while the route was
// synchronous, its recorded answer, or held.
func (e *Engine) intakeFound(ctx, sctx context.Context, p *Policy, d Delivery, fwd ForwardFunc, rec *Record) (Result, bool) {
	if !acknowledged(p, EntryOf(rec)) {
		return e.replayRecord(ctx, p, d, fwd, rec)
	}
	ent := ackEntry(p, rec)
	if sctx != nil {
		e.refillScreen(sctx, d.Ref, newOwner(), asRefill(ent))
	}
	return e.replayFound(ctx, p, d, fwd, ent)
}

// store writes d's queued row, request and job unless its key has a row:
// held is nil when stored (takenOver: over a claim whose lease expired),
// else the row that holds the key (ErrNotFound: deleted before it could
// be read).
func (e *Engine) store(ctx, sctx context.Context, p *Policy, d Delivery) (held *Record, takenOver bool, err error) {
	now := e.o.Now()
	rec := &Record{Ref: d.Ref, State: StateQueued, Fingerprint: d.Fingerprint, Source: d.Source,
		CreatedAt: now, ExpiresAt: now.Add(p.Retention), Request: d.Request}
	traceOf(ctx, rec)
	qctx, span := e.o.Tracer.Start(sctx, "hookstamp.enqueue", trace.WithAttributes(attribute.String("hookstamp.state", string(StateQueued))))
	takenOver, err = e.o.Queue.Enqueue(qctx, rec, "", now)
	endSpan(span, err)
	if err == nil {
		ent := ackEntry(p, rec)
		e.refillScreen(sctx, d.Ref, "", ent)
		if cache := e.o.Cache; cache != nil {
			cache.Put(d.Ref, ent, d.ticket)
		}
		return nil, takenOver, nil
	}
	if !errors.Is(err, ErrNotOwner) {
		return nil, false, err
	}
	held, err = e.o.Ledger.Lookup(sctx, d.Ref)
	return held, false, err
}

// intakeAttempts bounds intake's store-or-read rounds for a key whose
// record is deleted between them.
const intakeAttempts = 3

// peek reads what the screen holds for ref, unless the breaker skips the
// screen (an error).
func (e *Engine) peek(ctx context.Context, ref Ref) (Claim, bool, error) {
	if e.o.Screen == nil {
		return Claim{}, false, nil
	}
	ok, probe := e.breaker.allow()
	if !ok {
		return Claim{}, false, errBreakerOpen
	}
	c, found, err := e.o.Screen.Peek(ctx, ref)
	if err != nil {
		e.depError("screen", "peek", err)
	}
	if err != nil && ctx.Err() != nil {
		e.breaker.abandon(probe)
	} else {
		e.breaker.done(probe, err != nil)
	}
	return c, found, err
}

// enqueue stores a claimed delivery of an async route — its queued row,
// request and job in one transaction — and only then acknowledges it
// (SPEC §10). A queue that cannot store it gets the claim released and
// 503: nothing is acknowledged that is not stored. It reports false when
// the claim was lost before the store: the caller claims again.
func (c *claim) enqueue(ctx context.Context, p *Policy, d Delivery) (Result, bool) {
	e := c.e
	d.withRequest()
	if e.o.Queue == nil || d.Request == nil {
		c.release(ctx)
		return e.unavailable(fmt.Errorf("enqueue %q: the route is async but no queue or request was given", d.Key)), true
	}
	now := e.o.Now()
	rec := &Record{Ref: d.Ref, State: StateQueued, Fingerprint: d.Fingerprint, Source: d.Source,
		CreatedAt: now, ExpiresAt: now.Add(p.Retention), Request: d.Request}
	traceOf(ctx, rec)
	// Stored even if the provider has gone away: the claim is settled
	// either way.
	sctx, cancel := e.detached(ctx)
	defer cancel()
	qctx, span := e.o.Tracer.Start(sctx, "hookstamp.enqueue", trace.WithAttributes(attribute.String("hookstamp.state", string(StateQueued))))
	// Its own pending row, replaced: the claim counted any takeover.
	_, err := e.o.Queue.Enqueue(qctx, rec, c.owner, now)
	endSpan(span, err)
	ent := ackEntry(p, rec)
	switch {
	case err == nil:
		c.settleScreen(sctx, ent)
		if cache := e.o.Cache; cache != nil {
			cache.Put(d.Ref, ent, d.ticket)
		}
		return Result{Outcome: Accepted, Ack: p.ackCopy(), TakenOver: c.Status == TakenOver}, true
	case errors.Is(err, ErrNotOwner):
		// The claim expired and another delivery of the key holds it: it
		// may have stored the event, or hold a claim of its own that can
		// still fail. Claiming again tells them apart (an acknowledgement,
		// or a wait for the holder).
		c.settleScreen(sctx, nil)
		return Result{}, false
	}
	e.depError("ledger", "enqueue", err)
	c.release(sctx)
	return e.unavailable(fmt.Errorf("enqueue %q: %w", d.Key, err)), true
}

// ackEntry is the screen and cache entry of an async delivery: its
// acknowledgement, which every repeat gets.
func ackEntry(p *Policy, rec *Record) *Entry {
	return &Entry{Response: *p.Ack, BodyCached: true, Async: true, Fingerprint: rec.Fingerprint, TraceID: rec.TraceID, SpanID: rec.SpanID}
}

// ackReplay answers a repeat on an async route with the route's
// acknowledgement, byte for byte the first delivery's.
func (e *Engine) ackReplay(p *Policy, ent *Entry) Result {
	r := Result{Outcome: Replayed, Replay: p.ackCopy()}
	if ent != nil {
		r.OriginalTraceID, r.OriginalSpanID = ent.TraceID, ent.SpanID
	}
	return r
}

// ackCopy is the route's acknowledgement, the caller's to keep.
func (p *Policy) ackCopy() *Response {
	ack := *p.Ack
	return &ack
}
