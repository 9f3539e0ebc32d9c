package idempotency

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// enqueue stores a claimed delivery of an async route — its queued row,
// request and job in one transaction — and only then acknowledges it
// (SPEC §10). A queue that cannot store it gets the claim released and
// 503: nothing is acknowledged that is not stored.
func (c *claim) enqueue(ctx context.Context, p *Policy, d Delivery) Result {
	e := c.e
	if e.o.Queue == nil || d.Request == nil {
		c.release(ctx)
		return e.unavailable(fmt.Errorf("enqueue %q: the route is async but no queue or request was given", d.Key))
	}
	now := e.o.Now()
	rec := &Record{Ref: d.Ref, State: StateQueued, Fingerprint: d.Fingerprint, Source: d.Source,
		CreatedAt: now, ExpiresAt: now.Add(p.Retention), Request: d.Request}
	traceOf(ctx, rec)
	// Stored even if the provider has gone away: the claim is settled
	// either way.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.o.OpTimeout)
	defer cancel()
	qctx, span := e.o.Tracer.Start(sctx, "hookstamp.enqueue", trace.WithAttributes(attribute.String("hookstamp.state", string(StateQueued))))
	err := e.o.Queue.Enqueue(qctx, rec, c.owner, now)
	endSpan(span, err)
	ent := ackEntry(p, rec)
	switch {
	case err == nil:
		c.settleScreen(sctx, ent)
		if cache := e.o.Cache; cache != nil {
			cache.Put(d.Ref, ent, d.ticket)
		}
		ack := *p.Ack
		return Result{Outcome: Accepted, Ack: &ack, TakenOver: c.Status == TakenOver}
	case errors.Is(err, ErrNotOwner):
		// The claim expired and another delivery of the key stored it:
		// it is stored, so this one gets the acknowledgement too.
		c.settleScreen(sctx, nil)
		return e.ackReplay(p, ent)
	}
	e.depError("ledger", "enqueue", err)
	c.release(sctx)
	return e.unavailable(fmt.Errorf("enqueue %q: %w", d.Key, err))
}

// ackEntry is the screen and cache entry of an async delivery: its
// acknowledgement, which every repeat gets.
func ackEntry(p *Policy, rec *Record) *Entry {
	return &Entry{Response: *p.Ack, BodyCached: true, Fingerprint: rec.Fingerprint, TraceID: rec.TraceID, SpanID: rec.SpanID}
}

// ackReplay answers a repeat on an async route with the route's
// acknowledgement, byte for byte the first delivery's.
func (e *Engine) ackReplay(p *Policy, ent *Entry) Result {
	ack := *p.Ack
	r := Result{Outcome: Replayed, Replay: &ack}
	if ent != nil {
		r.OriginalTraceID, r.OriginalSpanID = ent.TraceID, ent.SpanID
	}
	return r
}
