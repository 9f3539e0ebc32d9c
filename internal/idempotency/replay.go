package idempotency

import (
	"context"
	"errors"
	"fmt"
)

// cached answers d from the in-process cache when it holds d's record.
func (e *Engine) cached(ctx context.Context, p *Policy, d Delivery, fwd ForwardFunc) (Result, bool) {
	var ent Entry
	if c := e.o.Cache; c != nil && c.Load(d.Ref, &ent) {
		return e.replay(ctx, p, d, fwd, &ent)
	}
	return Result{}, false
}

// replayFound answers a delivery whose claim found its record done, and
// keeps the record in the cache: it never changes, so the next repeat is
// answered without a network call.
func (e *Engine) replayFound(ctx context.Context, p *Policy, d Delivery, fwd ForwardFunc, ent *Entry) (Result, bool) {
	if ent != nil {
		e.keep(p, d, ent)
	}
	return e.replay(ctx, p, d, fwd, ent)
}

// keep puts ent in the cache unless a synchronous route would have to
// read the ledger again for it: an async delivery's entry stands for a
// record that changes (a queued one is delivered, a dead one redriven).
func (e *Engine) keep(p *Policy, d Delivery, ent *Entry) {
	if c := e.o.Cache; c != nil && (p.Ack != nil || !ent.Async) {
		c.Put(d.Ref, ent, d.ticket)
	}
}

// replay answers a delivery whose record exists: replayed, mismatch, or
// forwarded in shadow mode; on a synchronous route, an async delivery's
// record without an answer gets 409 (unanswered). It reports false when
// the screen remembered a record whose body only the ledger keeps and the
// ledger no longer has it (swept or deleted): the screen's entry is
// dropped and the caller claims afresh, since the ledger is the truth.
func (e *Engine) replay(ctx context.Context, p *Policy, d Delivery, fwd ForwardFunc, ent *Entry) (Result, bool) {
	if p.Shadow {
		would := Replayed
		if !d.matches(ent.Fingerprint) && !p.ReplayOnMismatch {
			would = Mismatch
		}
		return e.shadow(ctx, fwd, would), true
	}
	if !d.matches(ent.Fingerprint) && !p.ReplayOnMismatch {
		return e.mismatch(ent), true
	}
	if acknowledged(p, ent) {
		return e.ackReplay(p, ent), true
	}
	if !ent.Async && (ent.BodyCached || ent.BodyOmitted) && replayable(ent.Status) {
		resp := ent.Response
		return Result{Outcome: Replayed, Replay: &resp, OriginalTraceID: ent.TraceID, OriginalSpanID: ent.SpanID}, true
	}
	// The body is in the ledger only, the entry is an async delivery's
	// (its acknowledgement, or a queued or dead record's) on a synchronous
	// route, or a held key's: the record's state now says what this route
	// answers.
	rec, err := e.o.Ledger.Lookup(ctx, d.Ref)
	if err == nil {
		if ent := EntryOf(rec); acknowledged(p, ent) {
			return e.ackReplay(p, ent), true
		}
	}
	switch {
	case err == nil && rec.State == StateDone:
		if !replayable(rec.Status) {
			e.o.Logger.ErrorContext(ctx, "a done record holds no status to replay; answering 503", "route", d.Route, "key", d.Key, "status", rec.Status)
			return e.unavailable(fmt.Errorf("replay of %q: recorded status %d", d.Key, rec.Status)), true
		}
		e.keep(p, d, EntryOf(rec))
		resp := rec.Response
		return Result{Outcome: Replayed, Replay: &resp, OriginalTraceID: rec.TraceID, OriginalSpanID: rec.SpanID}, true
	case err == nil && rec.State != StatePending:
		return e.unanswered(p, d, rec), true
	case err == nil || errors.Is(err, ErrNotFound):
		// Gone, or a pending row: a claim made since the record went.
		e.o.Logger.InfoContext(ctx, "the screen remembered a record the ledger no longer holds; claiming afresh",
			"route", d.Route, "key", d.Key)
		e.forgetDone(ctx, d)
		return Result{}, false
	}
	e.depError("ledger", "lookup", err)
	return e.unavailable(fmt.Errorf("replay body of %q: %w", d.Key, err)), true
}

// replayable reports whether status can be sent as an answer: a record
// without one (0) must never become the 200 the HTTP server defaults to.
func replayable(status int) bool { return status >= 100 && status <= 999 }

// replayRecord answers d from rec, its record just read from the ledger
// (done, queued or dead): as replay does, without reading it again.
func (e *Engine) replayRecord(ctx context.Context, p *Policy, d Delivery, fwd ForwardFunc, rec *Record) (Result, bool) {
	ent := EntryOf(rec)
	if ent.Async && p.Ack == nil {
		r := e.unanswered(p, d, rec)
		if p.Shadow {
			return e.shadow(ctx, fwd, r.Outcome), true
		}
		return r, true
	}
	return e.replay(ctx, p, d, fwd, ent)
}

// unanswered answers, on a synchronous route, a repeat whose record holds
// no answer of the upstream: the provider must not be told the event was
// taken. A queued delivery (stored while the route was async) is one in
// flight: 409 conflict, the queue delivers it and a later repeat replays
// the upstream's answer. A dead one waits for an operator as a held key
// does: 409 held.
func (e *Engine) unanswered(p *Policy, d Delivery, rec *Record) Result {
	if !d.matches(rec.Fingerprint) && !p.ReplayOnMismatch {
		return e.mismatch(EntryOf(rec))
	}
	switch rec.State {
	case StateQueued:
		return e.conflict("this event was stored for delivery while the route was async and is still queued; hookstamp delivers it to the upstream, retry later for the upstream's answer")
	case StateDead:
		return Refusal(HeldKey, "this event was stored for delivery while the route was async and ran out of attempts; it is held until an operator redelivers or deletes it", nil, e.o.RetryAfter)
	}
	return e.held()
}

// forgetDone drops the screen's done entry of d's key, not a claim another
// repeat may have made since.
func (e *Engine) forgetDone(ctx context.Context, d Delivery) {
	if e.o.Screen == nil {
		return
	}
	if err := e.o.Screen.ForgetDone(ctx, d.Ref); err != nil {
		e.o.Logger.WarnContext(ctx, "could not drop the screen's entry of a record the ledger no longer holds",
			"route", d.Route, "key", d.Key, "err", fmt.Errorf("forget the done entry of %q in screen: %w", d.Key, err))
	}
}

// settledInLedger answers from the ledger a repeat the screen says is in
// flight, before its 409: the holder may have been recorded without
// marking its screen entry done. A done row is replayed and refilled over
// the holder's claim; a held row answers held.
func (e *Engine) settledInLedger(ctx context.Context, p *Policy, d Delivery, fwd ForwardFunc, c *claim) (Result, bool) {
	if !c.screen || ctx.Err() != nil {
		return Result{}, false
	}
	rec, err := e.o.Ledger.Lookup(ctx, d.Ref)
	if err != nil {
		if !errors.Is(err, ErrNotFound) {
			e.depError("ledger", "lookup", err)
		}
		return Result{}, false
	}
	switch rec.State {
	case StateDone, StateQueued, StateDead:
		ent := EntryOf(rec)
		e.refill(ctx, d.Ref, c.Owner, ent)
		e.keep(p, d, ent)
		return e.replayRecord(ctx, p, d, fwd, rec)
	case StateHeld:
		if ent := EntryOf(rec); acknowledged(p, ent) {
			return e.replay(ctx, p, d, fwd, ent)
		}
		if !d.matches(rec.Fingerprint) && !p.ReplayOnMismatch {
			return e.mismatch(nil), true
		}
		return e.held(), true
	}
	return Result{}, false
}

// replayRecorded answers from the ledger's record a delivery about to be
// forwarded without deduplication; false, with the lookup's error if it
// failed, when it is to be forwarded.
func (e *Engine) replayRecorded(ctx context.Context, p *Policy, d Delivery, fwd ForwardFunc) (Result, bool, error) {
	rec, err := e.o.Ledger.Lookup(ctx, d.Ref)
	if errors.Is(err, ErrNotFound) {
		return Result{}, false, nil
	}
	if err != nil {
		e.depError("ledger", "lookup", err)
		return Result{}, false, err
	}
	switch rec.State {
	case StateDone, StateQueued, StateDead:
		r, ok := e.replayRecord(ctx, p, d, fwd, rec)
		return r, ok, nil
	case StateHeld:
		if ent := EntryOf(rec); acknowledged(p, ent) {
			r, ok := e.replay(ctx, p, d, fwd, ent)
			return r, ok, nil
		}
		if !p.Shadow {
			return e.held(), true, nil
		}
	}
	return Result{}, false, nil
}

func (e *Engine) mismatch(ent *Entry) Result {
	r := Refusal(Mismatch, "this idempotency key was already used for a delivery with different content", nil, 0)
	if ent != nil {
		r.OriginalTraceID, r.OriginalSpanID = ent.TraceID, ent.SpanID
	}
	return r
}

func (e *Engine) held() Result {
	return Refusal(HeldKey, "this event's first delivery got no answer from the upstream; it is held until an operator resolves it", nil, e.o.RetryAfter)
}

func (e *Engine) conflict(detail string) Result {
	return Refusal(Conflict, detail, nil, e.o.RetryAfter)
}

func (e *Engine) unavailable(err error) Result {
	return Refusal(Unavailable, "the idempotency store is unavailable; nothing was forwarded, retry later", err, e.o.RetryAfter)
}
