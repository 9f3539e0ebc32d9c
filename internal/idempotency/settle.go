package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// settleReserve is what a claim's lease keeps after its forward, for the
// settling: past the lease another replica could take the live claim
// over. It takes at most half of what the lease leaves beyond
// upstream.timeout, so that an upstream answering in time is not cut.
func (e *Engine) settleReserve(p *Policy) time.Duration {
	reserve := min(e.o.OpTimeout, e.o.Lease/10)
	if t := p.UpstreamTimeout; t > 0 && t < e.o.Lease {
		reserve = min(reserve, (e.o.Lease-t)/2)
	}
	return reserve
}

// withinLease ends a forward at the claim's lease less the settling's
// reserve.
func (c *claim) withinLease(ctx context.Context, p *Policy) (context.Context, context.CancelFunc) {
	return context.WithDeadline(ctx, c.expires.Add(-c.e.settleReserve(p)))
}

// commitWithinLease ends a commit while half the settling's reserve is
// left, when the screen holds the claim: a commit the ledger holds past
// the lease would let another replica take the claim over and forward
// again, while a failed one leaves the answer to the screen, which
// decides repeats from then on. Without the screen nothing would decide
// them, and a late commit is the better chance.
func (c *claim) commitWithinLease(ctx context.Context, p *Policy) (context.Context, context.CancelFunc) {
	if !c.screen || c.lostScreen || c.expires.IsZero() {
		return ctx, func() {}
	}
	by := c.expires.Add(-c.e.settleReserve(p) / 2)
	if d, ok := ctx.Deadline(); ok && !d.After(by) {
		return ctx, func() {} // the settling's own timeout comes first
	}
	return context.WithDeadline(ctx, by)
}

// forward sends the delivery for the claim's owner and settles the claim:
// commit when the answer is final, hold or release otherwise.
func (c *claim) forward(ctx context.Context, p *Policy, d Delivery, fwd ForwardFunc) Result {
	e := c.e
	d.withRequest()
	if e.flights != nil && c.holds() {
		// Finished after the settling, for its waiters to find it.
		f := e.flights.start(d.Ref, d.Fingerprint)
		defer e.flights.finish(d.Ref, f)
	}
	started, clock := e.o.Now(), time.Now()
	up, ferr := e.call(ctx, fwd)
	att := e.attemptOf(p, d, started, time.Since(clock), up, ferr)
	// Settle even if the provider has gone away.
	sctx, cancel := e.detached(ctx)
	defer cancel()
	takenOver := c.Status == TakenOver
	if ferr != nil {
		return c.unanswered(sctx, p, d, ferr, att)
	}
	if !p.final(up) {
		c.release(sctx)
		e.addAttempt(sctx, att)
		return Result{Outcome: c.outcome(Released), Upstream: up, TakenOver: takenOver}
	}
	c.commit(ctx, sctx, p, d, up, att)
	return Result{Outcome: c.outcome(Forwarded), Upstream: up, TakenOver: takenOver}
}

// outcome is o, or Passthrough for a delivery forwarded without
// deduplication.
func (c *claim) outcome(o Outcome) Outcome {
	if c.pass {
		return Passthrough
	}
	return o
}

// unanswered settles a claim whose forward got no answer: held on a hold
// route when the effect is unknown, released otherwise.
func (c *claim) unanswered(ctx context.Context, p *Policy, d Delivery, ferr error, att *Attempt) Result {
	status, ambiguous := c.e.o.Classify(ferr)
	takenOver := c.Status == TakenOver
	// A forward that shutdown abandoned after sending is as ambiguous as a
	// timeout: SPEC §1's hold outranks §6's release of abandoned claims.
	if ambiguous && p.HoldAmbiguous && c.holds() {
		if r, ok := c.hold(ctx, p, d, status, ferr, att); ok {
			return r
		}
	}
	c.release(ctx)
	c.e.addAttempt(ctx, att)
	if c.pass {
		return Result{Outcome: Passthrough, Status: status, Detail: "the upstream did not answer", Err: ferr, TakenOver: takenOver}
	}
	return Result{Outcome: Released, Status: status, Detail: "the upstream did not answer; the delivery was not recorded and its retry will be forwarded", Err: ferr, TakenOver: takenOver}
}

// commit records up in one ledger transaction and marks the screen's entry
// done, within sctx. When the ledger cannot be reached the screen's entry
// is the only record and the commit is retried in the background.
func (c *claim) commit(ctx, sctx context.Context, p *Policy, d Delivery, up *Upstream, att *Attempt) {
	e := c.e
	now := e.o.Now()
	rec := &Record{Ref: d.Ref, State: StateDone, Fingerprint: d.Fingerprint, Response: p.recordResponse(up),
		Source: d.Source, CreatedAt: now, CompletedAt: now, ExpiresAt: now.Add(p.Retention),
		Request: d.Request, Attempt: att}
	traceOf(ctx, rec)
	ent := EntryOf(rec)
	cctx, span := e.o.Tracer.Start(sctx, "hookstamp.commit")
	cctx, cancel := c.commitWithinLease(cctx, p)
	err := e.o.Ledger.Commit(cctx, rec, c.owner, now)
	cancel()
	endSpan(span, err)
	switch {
	case err == nil:
		e.writesWork(ctx)
		c.markDone(sctx, ent)
		if cache := e.o.Cache; cache != nil {
			cache.Put(d.Ref, ent, d.ticket)
		}
	case errors.Is(err, ErrNotOwner):
		// The second copy after a takeover: the first record stays.
		e.o.Logger.WarnContext(ctx, "record already settled by another delivery",
			"route", d.Route, "key", d.Key)
		c.settleScreen(sctx, nil)
		e.addAttempt(sctx, att) // a second copy the upstream did receive
	case c.pass:
		// A bonus lost: no commit failure, which would bury real ones.
		e.depError("ledger", "commit", err)
		e.writesFailed(ctx, err)
		e.o.Logger.WarnContext(ctx, "passthrough delivery not recorded: the ledger is unavailable",
			"route", d.Route, "key", d.Key, "err", err)
		ent.Unrecorded = true
		tctx, cancel := e.detached(sctx)
		c.settleScreen(tctx, ent)
		cancel()
	default:
		e.depError("ledger", "commit", err)
		e.writesFailed(ctx, err)
		e.hook(e.o.Hooks.CommitFailure, d.Route)
		e.o.Logger.ErrorContext(ctx, "commit failed after a successful forward; repeats are intercepted only while the screen remembers",
			"route", d.Route, "key", d.Key, "err", err)
		ent.Unrecorded = true
		// A ledger that hung spent sctx: the screen, now the only record,
		// gets a deadline of its own.
		tctx, cancel := e.detached(sctx)
		c.settleScreen(tctx, ent)
		cancel()
		e.retryCommit(ctx, rec, c.owner, now, c.ledger, d.ticket, err)
	}
}

// hold records an ambiguous result as held (record.ambiguous: hold).
func (c *claim) hold(ctx context.Context, p *Policy, d Delivery, status int, cause error, att *Attempt) (Result, bool) {
	e := c.e
	now := e.o.Now()
	rec := &Record{Ref: d.Ref, State: StateHeld, Fingerprint: d.Fingerprint, Source: d.Source,
		CreatedAt: now, ExpiresAt: now.Add(p.Retention), Request: d.Request, Attempt: att}
	traceOf(ctx, rec)
	cctx, span := e.o.Tracer.Start(ctx, "hookstamp.commit", trace.WithAttributes(attribute.String("hookstamp.state", "held")))
	err := e.o.Ledger.Commit(cctx, rec, c.owner, now)
	endSpan(span, err)
	if err != nil {
		e.depError("ledger", "commit", err)
		e.o.Logger.ErrorContext(ctx, "could not hold an ambiguous delivery; releasing it",
			"route", d.Route, "key", d.Key, "err", err)
		e.writesFailed(ctx, err)
		return Result{}, false
	}
	e.writesWork(ctx)
	// Repeats confirm in the ledger and find the hold there.
	c.settleScreen(ctx, nil)
	e.hookDelta(e.o.Hooks.HeldChanged, d.Route, 1)
	e.o.Logger.WarnContext(ctx, "key held after an ambiguous upstream result; resolve it through the admin API",
		"route", d.Route, "key", d.Key, "err", cause)
	return Result{Outcome: HeldKey, Status: status, Err: cause,
		Detail: "the upstream gave no answer; the event is held until an operator resolves it"}, true
}

// traceOf stamps rec with the delivery's trace, for span links.
func traceOf(ctx context.Context, rec *Record) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		rec.TraceID, rec.SpanID = sc.TraceID().String(), sc.SpanID().String()
	}
}

// passthrough forwards without a claim (screen.on_unavailable: pass),
// unless the ledger answers with the delivery's record.
func (e *Engine) passthrough(ctx context.Context, p *Policy, req ClaimRequest, d Delivery, fwd ForwardFunc, cause error) Result {
	r, ok, err := e.replayRecorded(ctx, p, d, fwd)
	if ok {
		return r
	}
	if err != nil && !e.passLedger(err) {
		// The screen's pass mode gives up deduplication in the screen, not
		// the ledger's fail-closed policy (SPEC §6).
		return e.unavailable(fmt.Errorf("ledger lookup %q: %w", req.Key, err))
	}
	e.o.Logger.WarnContext(ctx, "forwarding without deduplication: dependency unavailable",
		"route", req.Route, "key", req.Key, "err", cause)
	c := claim{e: e, ref: req.Ref, owner: req.Owner, pass: true}
	return c.forward(ctx, p, d, fwd)
}

// Passthrough forwards a request the route does not deduplicate: no claim,
// no record, outcome passthrough.
func (e *Engine) Passthrough(ctx context.Context, fwd ForwardFunc) Result {
	return e.forwardUnclaimed(ctx, Passthrough, fwd)
}

// shadow forwards a repeat that enforce mode would have intercepted with
// outcome would.
func (e *Engine) shadow(ctx context.Context, fwd ForwardFunc, would Outcome) Result {
	r := e.forwardUnclaimed(ctx, Shadowed, fwd)
	r.Would = would
	return r
}

// forwardUnclaimed forwards without holding a claim and without recording.
func (e *Engine) forwardUnclaimed(ctx context.Context, o Outcome, fwd ForwardFunc) Result {
	up, err := e.call(ctx, fwd)
	if err != nil {
		status, _ := e.o.Classify(err)
		return Result{Outcome: o, Status: status, Detail: "the upstream did not answer", Err: err}
	}
	return Result{Outcome: o, Upstream: up}
}

// call runs the ForwardFunc inside the forward span.
func (e *Engine) call(ctx context.Context, fwd ForwardFunc) (*Upstream, error) {
	fctx, span := e.o.Tracer.Start(ctx, "hookstamp.forward", trace.WithSpanKind(trace.SpanKindClient))
	up, err := fwd(fctx)
	if err == nil {
		AnswerOnSpan(span, up.Status)
	}
	endSpan(span, err)
	return up, err
}

// AnswerOnSpan puts the upstream's answer status on span, the client span
// of a forward, as OpenTelemetry's HTTP conventions have it: the status
// code, and for a 4xx or 5xx answer an Error status with error.type the
// code (the description left empty: the code says it).
func AnswerOnSpan(span trace.Span, status int) {
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 400 {
		span.SetAttributes(attribute.String("error.type", strconv.Itoa(status)))
		span.SetStatus(codes.Error, "")
	}
}
