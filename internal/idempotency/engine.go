package idempotency

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// FailMode says what to do when a dependency cannot be reached.
type FailMode int

// Failure policies (SPEC §3 store.on_unavailable and screen.on_unavailable).
const (
	// FailReject answers 503 + Retry-After and forwards nothing.
	FailReject FailMode = iota
	// FailPass forwards without deduplication (outcome passthrough).
	FailPass
	// FailStore (screen only) makes the claim in the ledger instead.
	FailStore
)

// ForwardFunc sends the delivery upstream once and returns its complete
// answer, or a transport error that Options.Classify understands. The state
// machine calls it at most once per delivery.
type ForwardFunc func(ctx context.Context) (*Upstream, error)

// Delivery is what the state machine needs to know about one request.
type Delivery struct {
	Ref
	// Fingerprint is the digest of what the delivery means; nil = none.
	Fingerprint []byte
	// Also returns other digests a record of this key may hold for a retry
	// of this delivery: those of fingerprint settings the route had before
	// (extract.Fingerprinter.Also). A record holding one of them is this
	// delivery's, not a key reuse; new records get Fingerprint. It is only
	// called when Fingerprint does not match, during Handle; nil = none.
	Also func() [][]byte
	// Source is the sender (routes[].source), for duplicate statistics.
	Source string

	// ticket is the cache's, taken by Handle before it reads anything, for
	// every Cache.Put of what this delivery read or recorded.
	ticket Ticket
}

// Hooks receive events that are not outcomes, for metrics. Nil fields are
// ignored.
type Hooks struct {
	// Takeover: a claim whose owner died was taken over after its lease.
	Takeover func(route string)
	// CommitFailure: the upstream answered finally but the ledger commit
	// failed; the provider got the upstream's answer.
	CommitFailure func(route string)
	// DependencyError: a call to the screen or ledger failed to reach it.
	DependencyError func(dependency, op string)
	// HeldChanged: a key became held on route (delta +1); operators resolve
	// (delta -1) through the admin API, which calls it too.
	HeldChanged func(route string, delta int)
}

// Options configure an Engine. Zero values take the defaults named.
type Options struct {
	// Screen is the fast claim store. Nil means screen "none": every claim
	// is a pending row in the ledger.
	Screen Screen
	// Ledger is the durable source of truth. Required.
	Ledger Ledger
	// Lease is the lifetime of an in-flight claim (screen.lease; 30s).
	Lease time.Duration
	// TTL is the lifetime of a done screen entry (screen.ttl; 24h).
	TTL time.Duration
	// ScreenUnavailable is screen.on_unavailable (FailStore by default:
	// FailStore is the zero value only if set explicitly; see New).
	ScreenUnavailable FailMode
	// LedgerUnavailable is store.on_unavailable (FailReject or FailPass).
	LedgerUnavailable FailMode
	// Classify maps a ForwardFunc error to the status the provider gets
	// (502 or 504) and whether the effect upstream is unknown (the request
	// was sent, no answer came). Nil: 502, not ambiguous.
	Classify func(error) (status int, ambiguous bool)
	// Cache keeps done entries in-process (screen.local_cache); nil = off.
	Cache *Cache
	// ConfirmByClaim confirms a claim the screen granted by claiming in the
	// ledger too (a pending row, conditional insert) instead of looking the
	// key up. Set it when replicas share a screen that can fail for some of
	// them but not others (a partition, a timeout, an exhausted pool) and
	// ScreenUnavailable is FailStore: a replica that falls back to a ledger
	// claim then sees the claims made through the screen, and never
	// forwards a second copy beside them. It costs one ledger write per
	// first delivery; repeats the screen answers are unaffected.
	ConfirmByClaim bool
	// BreakerFailures and BreakerCooldown: after BreakerFailures screen
	// claims in a row failed, claims skip the screen (screen.on_unavailable
	// applies at once) for BreakerCooldown, then one probes it (defaults
	// BreakerFailures, BreakerCooldown; see breaker).
	BreakerFailures int
	BreakerCooldown time.Duration
	// OpTimeout bounds the commit and release that follow a forward; they
	// run even when the provider has gone away (5s).
	OpTimeout time.Duration
	// CommitRetryFor is how long a commit that could not reach the ledger
	// after the upstream answered is retried in the background
	// (DefaultCommitRetryFor; negative: not retried). See recommit.go.
	CommitRetryFor time.Duration
	// RetryAfter is the Retry-After of conflict, held and unavailable
	// answers (1s).
	RetryAfter time.Duration
	// Now is the clock for ledger leases and expiry (time.Now).
	Now func() time.Time
	// Tracer makes the claim, confirm, forward, commit and release spans
	// (no-op by default).
	Tracer trace.Tracer
	Hooks  Hooks
	// Logger receives failures, with keys but never bodies (slog.Default).
	Logger *slog.Logger
}

// Engine runs the state machine of SPEC §1 for every route. It is safe for
// concurrent use.
type Engine struct {
	o       Options
	breaker *breaker
	// tidyScreen's background calls; none start once tidyClosed is set.
	tidyMu     sync.Mutex
	tidyClosed bool
	tidy       sync.WaitGroup
	flights    *flights // nil without a screen: the seed's ledger-only design
	// Background retries of failed commits (recommit.go); retryStop is
	// closed by Close.
	retryMu     sync.Mutex
	retryClosed bool
	retrying    map[Ref]*commitRetry
	retryBytes  int          // sum of retrying's sizes
	retryCount  atomic.Int64 // len(retrying), read without retryMu
	retryStop   chan struct{}
	retries     sync.WaitGroup
}

// New returns an engine. Options.Ledger is required.
func New(o Options) (*Engine, error) {
	if o.Ledger == nil {
		return nil, errors.New("idempotency: a ledger is required")
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.TTL <= 0 {
		o.TTL = 24 * time.Hour
	}
	if o.Classify == nil {
		o.Classify = func(error) (int, bool) { return http.StatusBadGateway, false }
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 5 * time.Second
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = time.Second
	}
	if o.CommitRetryFor == 0 {
		o.CommitRetryFor = DefaultCommitRetryFor
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Tracer == nil {
		o.Tracer = noop.NewTracerProvider().Tracer("hookstamp")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.BreakerFailures <= 0 {
		o.BreakerFailures = BreakerFailures
	}
	if o.BreakerCooldown <= 0 {
		o.BreakerCooldown = BreakerCooldown
	}
	e := &Engine{o: o, breaker: newBreaker(o.BreakerFailures, o.BreakerCooldown, time.Now), retryStop: make(chan struct{})}
	if o.Screen != nil {
		e.flights = &flights{}
	}
	return e, nil
}

// via says which store holds a claim.
type via int

const (
	viaScreen via = iota + 1
	viaLedger
	// viaScreenNoLedger: the screen claim holds but the ledger cannot be
	// reached and store.on_unavailable is pass. The screen still stops
	// concurrent repeats; the outcome is passthrough.
	viaScreenNoLedger
	viaNone // fail-open: no claim is held
	// viaBoth: the screen granted the claim and the ledger holds it as a
	// pending row too (Options.ConfirmByClaim).
	viaBoth
	// viaLocal: the key is in flight in this process (flights); nothing
	// was asked of the screen or the ledger.
	viaLocal
	// viaLedgerLostScreen: the claim is a pending ledger row
	// (screen.on_unavailable: store) taken after a screen claim that got no
	// answer — a timeout, a dropped connection — so the screen may hold
	// the claim too. The ledger is the claim; the screen's is settled in
	// the background (Engine.tidyScreen), since left there it would answer
	// repeats at every other replica 409 until its lease ran out.
	viaLedgerLostScreen
)

// ledger reports whether the claim is a pending ledger row.
func (v via) ledger() bool { return v == viaLedger || v == viaBoth || v == viaLedgerLostScreen }

// screen reports whether the claim lives in the screen.
func (v via) screen() bool { return v == viaScreen || v == viaScreenNoLedger || v == viaBoth }

// tidyScreen settles, in the background, a claim the screen may hold
// although its answer was lost (viaLedgerLostScreen): it turns it into
// ent's record, or releases it when ent is nil (only the owner's claim is
// released). In the background because the claim most likely never
// landed — Redis was refusing or hung — and the provider's answer must not
// wait out another timeout for it; skipped while the breaker says the
// screen keeps failing (the claim, if any, expires with its lease), and
// once Close has begun. Close waits for these calls.
func (e *Engine) tidyScreen(ctx context.Context, ref Ref, owner string, ent *Entry) {
	if e.o.Screen == nil || !e.breaker.closed() {
		return
	}
	e.tidyMu.Lock()
	defer e.tidyMu.Unlock()
	if e.tidyClosed {
		return
	}
	ctx = context.WithoutCancel(ctx)
	e.tidy.Go(func() {
		ctx, cancel := context.WithTimeout(ctx, e.o.OpTimeout)
		defer cancel()
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

// Close stops the background calls of tidyScreen and waits for those
// under way, and gives each commit being retried one last attempt: call
// it before closing the screen and the ledger. A delivery still running
// (shutdown gave up on it) no longer starts any.
func (e *Engine) Close() {
	e.tidyMu.Lock()
	e.tidyClosed = true
	e.tidyMu.Unlock()
	e.tidy.Wait()
	e.closeRetries()
}

// Handle decides what happens to one delivery, calling fwd at most once.
//
// The order of operations is the contract of SPEC §1: claim in the screen,
// confirm in the ledger, forward, then commit the record in one transaction
// before the provider is answered, or release the claim so that the
// provider's retry is forwarded again.
func (e *Engine) Handle(ctx context.Context, p *Policy, d Delivery, fwd ForwardFunc) Result {
	d.ticket = e.o.Cache.Ticket()
	if r, ok := e.cached(ctx, p, d, fwd); ok {
		return r
	}
	req := ClaimRequest{Ref: d.Ref, Owner: newOwner(), Fingerprint: d.Fingerprint,
		Lease: e.o.Lease, Retention: p.Retention, Source: d.Source}
	var deadline time.Time
	gone := false
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			// After a wait: the delivery waited for may have been cached.
			if r, ok := e.cached(ctx, p, d, fwd); ok {
				return r
			}
			// A claim of an earlier attempt holds nothing (it found the key
			// busy), but a screen claim whose answer was lost may still be
			// being released in the background (tidyScreen): under a new
			// owner, that release cannot drop this attempt's claim.
			req.Owner = newOwner()
		}
		var c Claim
		var v via
		claimedAt := time.Now()
		local := e.flights.get(d.Ref)
		if local != nil {
			c, v = Claim{Status: InFlight, Fingerprint: local.fingerprint}, viaLocal
		} else {
			var stop *Result
			if c, v, stop = e.claim(ctx, p, req, d, fwd); stop != nil {
				return *stop
			}
		}
		switch c.Status {
		case Acquired, TakenOver:
			fctx, cancel := e.withinLease(ctx, p, claimedAt)
			defer cancel()
			return e.forward(fctx, p, d, fwd, req.Owner, v, c.Status == TakenOver)
		case Done:
			// A done record never changes: keep it, so that the next repeat
			// is answered without a network call (and a cached entry that
			// aged out comes back on the first repeat that finds it).
			if cache := e.o.Cache; cache != nil && c.Entry != nil {
				cache.Put(d.Ref, c.Entry, d.ticket)
			}
			r, ok := e.done(ctx, p, d, fwd, c.Entry)
			if ok {
				return r
			}
			if gone {
				return e.unavailable(fmt.Errorf("replay of %q: the record keeps vanishing", d.Key))
			}
			gone = true // the screen was cleared: claim afresh
		case Held:
			if p.Shadow {
				return e.shadow(ctx, fwd)
			}
			if !d.matches(c.Fingerprint) && !p.ReplayOnMismatch {
				return e.mismatch(nil) // key reuse, as for a key in flight
			}
			return e.held()
		case InFlight:
			if p.Shadow {
				return e.shadow(ctx, fwd)
			}
			if !d.matches(c.Fingerprint) && !p.ReplayOnMismatch {
				return e.mismatch(nil)
			}
			if p.RejectInflight {
				if r, ok := e.settledInLedger(ctx, p, d, fwd, v, c.Owner); ok {
					return r
				}
				return e.conflict("a delivery of this event is in flight")
			}
			if deadline.IsZero() {
				deadline = time.Now().Add(p.WaitTimeout)
			}
			if !e.wait(ctx, v, d.Ref, c.Owner, local, deadline, attempt) {
				if r, ok := e.settledInLedger(ctx, p, d, fwd, v, c.Owner); ok {
					return r
				}
				return e.conflict("a delivery of this event is still in flight")
			}
		default:
			return e.unavailable(fmt.Errorf("claim %q: unexpected status %v", d.Key, c.Status))
		}
	}
}

// settledInLedger answers, from the ledger, a repeat that the screen says
// is in flight, before it gets a 409: when the delivery holding the screen
// claim was recorded but marking its screen entry done failed (its
// replica lost Redis right after the commit), the screen keeps the stale
// claim until its lease runs out, and every repeat meanwhile would be
// answered conflict although its record exists. A done row is replayed
// and put into the screen over the stale claim (only over owner's claim:
// a newer one is left alone); a held row answers held. It reports false,
// and the repeat gets its 409, when the ledger holds no settled row or
// cannot be read.
func (e *Engine) settledInLedger(ctx context.Context, p *Policy, d Delivery, fwd ForwardFunc, v via, owner string) (Result, bool) {
	if v != viaScreen || ctx.Err() != nil {
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
	case StateDone:
		ent := EntryOf(rec)
		e.refill(ctx, d.Ref, owner, ent)
		if cache := e.o.Cache; cache != nil {
			cache.Put(d.Ref, ent, d.ticket)
		}
		return e.done(ctx, p, d, fwd, ent)
	case StateHeld:
		if !d.matches(rec.Fingerprint) && !p.ReplayOnMismatch {
			return e.mismatch(nil), true
		}
		return e.held(), true
	}
	return Result{}, false
}

// cached answers d from the in-process cache when it holds d's record.
func (e *Engine) cached(ctx context.Context, p *Policy, d Delivery, fwd ForwardFunc) (Result, bool) {
	if c := e.o.Cache; c != nil {
		if ent, ok := c.Get(d.Ref); ok {
			return e.done(ctx, p, d, fwd, ent)
		}
	}
	return Result{}, false
}

// claim takes the key or learns what holds it: first in the screen, then,
// when the screen granted it, confirmed in the ledger (the screen forgets:
// TTL, eviction, restarts, FLUSHALL). A non-nil *Result ends the delivery.
func (e *Engine) claim(ctx context.Context, p *Policy, req ClaimRequest, d Delivery, fwd ForwardFunc) (Claim, via, *Result) {
	if e.o.Screen == nil {
		return e.ledgerClaim(ctx, req, fwd)
	}
	c, err := e.screenClaim(ctx, req)
	if err != nil {
		if e.o.ScreenUnavailable == FailStore {
			c, v, stop := e.ledgerClaim(ctx, req, fwd)
			if !errors.Is(err, errBreakerOpen) {
				c, v = e.afterLostScreenClaim(ctx, req, c, v, stop != nil)
			}
			return c, v, stop
		}
		// No claim is kept from here on, but the screen's may have landed
		// (its answer was lost): nobody would end it, and the provider's
		// retry would meet it for a whole lease. Drop it, as a claim the
		// ledger does not grant is dropped above.
		if !errors.Is(err, errBreakerOpen) {
			e.tidyScreen(ctx, req.Ref, req.Owner, nil)
		}
		if e.o.ScreenUnavailable == FailPass {
			r := e.passthrough(ctx, p, req, d, fwd, err)
			return Claim{}, viaNone, &r
		}
		r := e.unavailable(fmt.Errorf("screen claim %q: %w", req.Key, err))
		return Claim{}, viaNone, &r
	}
	if c.Status != Acquired && c.Status != TakenOver {
		return c, viaScreen, nil
	}
	if c.Status == TakenOver {
		e.hook(e.o.Hooks.Takeover, req.Route)
	}

	// The screen forgot the key, or never had it: a commit of it this
	// process is retrying goes first, so that the confirmation finds it.
	e.nudgeCommitRetry(ctx, req.Ref)
	if e.o.ConfirmByClaim {
		return e.confirmByClaim(ctx, req, c)
	}
	cctx, span := e.o.Tracer.Start(ctx, "hookstamp.confirm")
	rec, err := e.o.Ledger.Lookup(cctx, req.Ref)
	if errors.Is(err, ErrNotFound) {
		err = nil
	}
	endSpan(span, err)
	switch {
	case err != nil:
		e.depError("ledger", "lookup", err)
		if e.passLedger(err) {
			e.o.Logger.WarnContext(ctx, "forwarding without a ledger: it is unavailable",
				"route", req.Route, "key", req.Key, "err", err)
			return c, viaScreenNoLedger, nil
		}
		e.release(ctx, viaScreen, req.Ref, req.Owner)
		r := e.unavailable(fmt.Errorf("confirm %q: %w", req.Key, err))
		return Claim{}, viaNone, &r
	case rec == nil:
		return c, viaScreen, nil
	}
	if rc, v, ok := e.recordedClaim(ctx, req, rec); ok {
		return rc, v, nil
	}
	// A pending row: a replica claimed in the ledger while it could not
	// reach the screen. Its claim stands while its lease lives.
	if rec.LeaseUntil.After(e.o.Now()) {
		e.release(ctx, viaScreen, req.Ref, req.Owner)
		return Claim{Status: InFlight, Owner: rec.Owner, Fingerprint: rec.Fingerprint}, viaLedger, nil
	}
	if c.Status != TakenOver {
		e.hook(e.o.Hooks.Takeover, req.Route)
	}
	return Claim{Status: TakenOver}, viaScreen, nil
}

// passLedger reports whether a failed ledger call lets the delivery be
// forwarded without dedup (store.on_unavailable: pass). Only a ledger that
// could not be reached does: a logic error (its table missing, a privilege
// revoked) is no outage, and passing it would forward every delivery, repeats
// included, for as long as nobody notices; it fails closed (503).
func (e *Engine) passLedger(err error) bool {
	return e.o.LedgerUnavailable == FailPass && errors.Is(err, ErrUnavailable)
}

// errBreakerOpen: the screen was not asked (see breaker).
var errBreakerOpen = fmt.Errorf("%w: the screen keeps failing; it is skipped until a probe succeeds", ErrUnavailable)

// screenClaim claims in the screen unless the breaker says it keeps
// failing.
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

// recordedClaim answers a screen claim whose confirmation found rec done
// or held: a done record is put into the screen over the claim (repeats
// are answered there again), a held one releases the claim and stands.
// false for any other state.
func (e *Engine) recordedClaim(ctx context.Context, req ClaimRequest, rec *Record) (Claim, via, bool) {
	switch rec.State {
	case StateDone:
		ent := EntryOf(rec)
		e.refill(ctx, req.Ref, req.Owner, ent)
		return Claim{Status: Done, Fingerprint: rec.Fingerprint, Entry: ent}, viaScreen, true
	case StateHeld:
		e.release(ctx, viaScreen, req.Ref, req.Owner)
		return Claim{Status: Held, Fingerprint: rec.Fingerprint}, viaLedger, true
	}
	return Claim{}, viaNone, false
}

// confirmByClaim confirms a screen claim by claiming in the ledger as well
// (Options.ConfirmByClaim): the conditional insert fails if a replica that
// could not reach the screen holds a pending row, and reports a recorded or
// held key as a lookup would.
func (e *Engine) confirmByClaim(ctx context.Context, req ClaimRequest, c Claim) (Claim, via, *Result) {
	cctx, span := e.o.Tracer.Start(ctx, "hookstamp.confirm", trace.WithAttributes(attribute.String("hookstamp.claim_store", "ledger")))
	lc, err := e.o.Ledger.Claim(cctx, req, e.o.Now())
	endSpan(span, err, attribute.String("hookstamp.claim", lc.Status.String()))
	if err != nil {
		e.depError("ledger", "claim", err)
		if rec := e.readable(ctx, req.Ref, err); rec != nil {
			// The ledger refused the claim but holds the record: answer
			// from it, as a lookup confirming the claim would have.
			if rc, v, ok := e.recordedClaim(ctx, req, rec); ok {
				return rc, v, nil
			}
		}
		if e.passLedger(err) {
			e.o.Logger.WarnContext(ctx, "forwarding without a ledger: it is unavailable",
				"route", req.Route, "key", req.Key, "err", err)
			return c, viaScreenNoLedger, nil
		}
		v := viaScreen
		if mayHaveLanded(ctx) {
			v = viaBoth // the batch may have inserted the row after we left
		}
		e.release(ctx, v, req.Ref, req.Owner)
		r := e.unavailable(fmt.Errorf("confirm %q: %w", req.Key, err))
		return Claim{}, viaNone, &r
	}
	switch lc.Status {
	case Acquired:
		return c, viaBoth, nil
	case TakenOver:
		// A replica that claimed in the ledger died: its lease expired.
		if c.Status != TakenOver {
			e.hook(e.o.Hooks.Takeover, req.Route)
		}
		return lc, viaBoth, nil
	case Done:
		e.refill(ctx, req.Ref, req.Owner, lc.Entry)
		return lc, viaScreen, nil
	}
	// Held, or InFlight: a replica claimed in the ledger while it could not
	// reach the screen, and its claim stands while its lease lives.
	e.release(ctx, viaScreen, req.Ref, req.Owner)
	return lc, viaLedger, nil
}

// readable looks ref up after a ledger write (a claim) failed to reach the
// ledger, and returns its done or held record if the ledger can still be
// read: a ledger that refuses writes (a PostgreSQL standby during a
// failover, default_transaction_read_only, a full SQLite disk) still
// knows which deliveries are recorded, and forwarding one of them again
// would break exactly-once. A write that timed out gets a read of a tenth
// of OpTimeout: a SQLite file whose write lock another process holds
// times out writes but reads at once (WAL), while a hung database must
// not hold the delivery for a second full timeout. nil when the delivery
// was cut, when the ledger cannot be read, and for logic errors, which
// fail closed.
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
	if lerr != nil || (rec.State != StateDone && rec.State != StateHeld) {
		return nil
	}
	return rec
}

// ledgerClaim makes the claim a pending ledger row (screen "none", or the
// screen is unreachable and screen.on_unavailable is store).
func (e *Engine) ledgerClaim(ctx context.Context, req ClaimRequest, fwd ForwardFunc) (Claim, via, *Result) {
	e.nudgeCommitRetry(ctx, req.Ref)
	lctx, span := e.o.Tracer.Start(ctx, "hookstamp.claim", trace.WithAttributes(attribute.String("hookstamp.claim_store", "ledger")))
	c, err := e.o.Ledger.Claim(lctx, req, e.o.Now())
	endSpan(span, err, attribute.String("hookstamp.claim", c.Status.String()))
	if err != nil {
		e.depError("ledger", "claim", err)
		if mayHaveLanded(ctx) {
			e.release(ctx, viaLedger, req.Ref, req.Owner)
		}
		if rec := e.readable(ctx, req.Ref, err); rec != nil {
			// The ledger refused the claim but holds the record.
			if rec.State == StateDone {
				return Claim{Status: Done, Fingerprint: rec.Fingerprint, Entry: EntryOf(rec)}, viaLedger, nil
			}
			return Claim{Status: Held, Fingerprint: rec.Fingerprint}, viaLedger, nil
		}
		if e.passLedger(err) {
			r := e.forwardUnclaimed(ctx, Passthrough, fwd)
			return Claim{}, viaNone, &r
		}
		r := e.unavailable(fmt.Errorf("ledger claim %q: %w", req.Key, err))
		return Claim{}, viaNone, &r
	}
	if c.Status == TakenOver {
		e.hook(e.o.Hooks.Takeover, req.Route)
	}
	return c, viaLedger, nil
}

// afterLostScreenClaim settles a screen claim that got no answer but may
// have been made, once the ledger claim that replaced it is known: a claim
// the ledger granted is settled in both stores when the delivery ends
// (viaLedgerLostScreen); otherwise the screen's claim is dropped, or
// turned into the record the ledger holds, now.
func (e *Engine) afterLostScreenClaim(ctx context.Context, req ClaimRequest, c Claim, v via, failed bool) (Claim, via) {
	switch {
	case !failed && (c.Status == Acquired || c.Status == TakenOver):
		return c, viaLedgerLostScreen
	case !failed && c.Status == Done:
		e.tidyScreen(ctx, req.Ref, req.Owner, asRefill(c.Entry)) // as a confirm refills it
	default:
		e.tidyScreen(ctx, req.Ref, req.Owner, nil)
	}
	return c, v
}

// mayHaveLanded reports whether a ledger claim that failed because the
// delivery was cut (shutdown abandoned it, the provider hung up) may still
// have been made: a batch carrying its row can commit after the caller
// left. Such a row is released (only the owner's own row is deleted), since
// nobody is left to commit it. A claim that failed on the ledger's own
// timeout is not chased with another call that would wait out the same
// timeout before the answer; its row, if any, expires with its lease.
func mayHaveLanded(ctx context.Context) bool { return ctx.Err() != nil }

// passthrough is the fail-open path: a dependency is down and the policy
// says forward anyway. The ledger is still asked first when it answers, so
// that a recorded delivery is replayed rather than forwarded twice.
func (e *Engine) passthrough(ctx context.Context, p *Policy, req ClaimRequest, d Delivery, fwd ForwardFunc, cause error) Result {
	r, ok, err := e.replayRecorded(ctx, p, d, fwd)
	if ok {
		return r
	}
	if err != nil && !e.passLedger(err) {
		// The screen's pass mode gives up deduplication in the screen, not
		// the ledger's fail-closed policy: without a ledger and with
		// store.on_unavailable reject, nothing is forwarded (SPEC §6).
		return e.unavailable(fmt.Errorf("ledger lookup %q: %w", req.Key, err))
	}
	e.o.Logger.WarnContext(ctx, "forwarding without deduplication: dependency unavailable",
		"route", req.Route, "key", req.Key, "err", cause)
	return e.forward(ctx, p, d, fwd, req.Owner, viaNone, false)
}

// replayRecorded answers a delivery about to be forwarded without
// deduplication from the ledger, when the ledger answers and holds its
// record: replayed (or mismatch) when done, 409 when held. It reports
// false when the delivery is to be forwarded, with the lookup's error when
// the ledger did not answer (ErrNotFound is no error).
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
	case StateDone:
		r, ok := e.done(ctx, p, d, fwd, EntryOf(rec))
		return r, ok, nil
	case StateHeld:
		if !p.Shadow {
			return e.held(), true, nil
		}
	}
	return Result{}, false, nil
}

// wait holds an in-flight repeat until the holder may have finished, or
// the deadline passes (false).
func (e *Engine) wait(ctx context.Context, v via, ref Ref, owner string, local *flight, deadline time.Time, attempt int) bool {
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if v == viaLocal {
		select {
		case <-local.done:
		case <-wctx.Done():
		}
		return ctx.Err() == nil && time.Now().Before(deadline)
	}
	var err error
	if v == viaScreen {
		err = e.o.Screen.Wait(wctx, ref, owner)
	}
	if v != viaScreen || (err != nil && wctx.Err() == nil) {
		// Ledger claims have no notifications, and a failing screen must
		// not be spun on: back off, then claim again.
		backoff := min(10*time.Millisecond<<min(attempt, 5), 250*time.Millisecond)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-wctx.Done():
			t.Stop()
		}
	}
	return ctx.Err() == nil && time.Now().Before(deadline)
}

// withinLease bounds a claimed delivery's forward by its claim's lease,
// counted from claimedAt (taken before the claim was asked for, so on the
// safe side of the lease's start), less a reserve for the commit that
// follows: upstream.timeout is only shorter than the lease, and what the
// claim and its confirmation took (a slow ledger, a slow Redis) comes out
// of the same lease. A forward still running when the lease ran out would
// let a repeat at another replica take the live claim over and forward a
// second copy, and the two providers would both be told "forwarded" with
// different answers; ended here, it is a timeout like any other (released,
// or held on a hold route). With the defaults (30s lease, 10s timeout) it
// never binds. The reserve never takes more than half of what the
// configuration leaves between upstream.timeout and the lease (SPEC §3
// asks only lease > timeout): otherwise an upstream answering within its
// timeout after a fast claim would be cut to a 504 and forwarded again.
func (e *Engine) withinLease(ctx context.Context, p *Policy, claimedAt time.Time) (context.Context, context.CancelFunc) {
	reserve := min(e.o.OpTimeout, e.o.Lease/10)
	if t := p.UpstreamTimeout; t > 0 && t < e.o.Lease {
		reserve = min(reserve, (e.o.Lease-t)/2)
	}
	return context.WithDeadline(ctx, claimedAt.Add(e.o.Lease-reserve))
}

// forward sends the delivery for the claim's owner and settles the claim:
// commit when final, release otherwise.
func (e *Engine) forward(ctx context.Context, p *Policy, d Delivery, fwd ForwardFunc, owner string, v via, takenOver bool) Result {
	if e.flights != nil && v != viaNone {
		// Finished when this returns: after the commit, the screen update
		// and the cache (or the release), so that its waiters find them.
		f := e.flights.start(d.Ref, d.Fingerprint)
		defer e.flights.finish(d.Ref, f)
	}
	up, ferr := e.call(ctx, fwd)
	// Settle even if the provider has gone away: a claim left behind would
	// stall the retry until its lease expires.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.o.OpTimeout)
	defer cancel()
	outcome := Forwarded
	if v == viaNone || v == viaScreenNoLedger {
		outcome = Passthrough
	}
	if ferr != nil {
		status, ambiguous := e.o.Classify(ferr)
		// A forward that shutdown abandoned after sending is as ambiguous
		// as a timeout: on a hold route it is held, not released (SPEC §1's
		// hold outranks §6's release of abandoned claims there).
		if ambiguous && p.HoldAmbiguous && v != viaNone {
			if r, ok := e.hold(sctx, p, d, owner, v, status, ferr); ok {
				return r
			}
		}
		e.release(sctx, v, d.Ref, owner)
		if outcome == Passthrough {
			return Result{Outcome: Passthrough, Status: status, Detail: "the upstream did not answer", Err: ferr, TakenOver: takenOver}
		}
		return Result{Outcome: Released, Status: status, Detail: "the upstream did not answer; the delivery was not recorded and its retry will be forwarded", Err: ferr, TakenOver: takenOver}
	}
	if !p.final(up) {
		e.release(sctx, v, d.Ref, owner)
		if outcome == Passthrough {
			return Result{Outcome: Passthrough, Upstream: up, TakenOver: takenOver}
		}
		return Result{Outcome: Released, Upstream: up, TakenOver: takenOver}
	}

	now := e.o.Now()
	rec := &Record{Ref: d.Ref, State: StateDone, Fingerprint: d.Fingerprint, Response: p.recordResponse(up),
		Source: d.Source, CreatedAt: now, CompletedAt: now, ExpiresAt: now.Add(p.Retention)}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		rec.TraceID, rec.SpanID = sc.TraceID().String(), sc.SpanID().String()
	}
	ent := EntryOf(rec)
	cctx, span := e.o.Tracer.Start(sctx, "hookstamp.commit")
	err := e.o.Ledger.Commit(cctx, rec, owner, now)
	endSpan(span, err)
	switch {
	case err == nil:
		e.settleScreen(sctx, v, d.Ref, owner, ent)
		if c := e.o.Cache; c != nil {
			c.Put(d.Ref, ent, d.ticket)
		}
	case errors.Is(err, ErrNotOwner):
		// Another delivery was recorded first: this one was the second copy
		// after a lease takeover (same Idempotency-Key upstream). The record
		// that won stays; this provider still gets what its upstream said.
		e.o.Logger.WarnContext(ctx, "record already settled by another delivery",
			"route", d.Route, "key", d.Key)
		e.settleScreen(sctx, v, d.Ref, owner, nil)
	case outcome == Passthrough:
		// Forwarded without deduplication because the ledger could not be
		// reached (store.on_unavailable: pass): recording it was a bonus,
		// and a commit_failures count for every such delivery of an outage
		// would bury the failures that break a promise.
		e.depError("ledger", "commit", err)
		e.o.Logger.WarnContext(ctx, "passthrough delivery not recorded: the ledger is unavailable",
			"route", d.Route, "key", d.Key, "err", err)
		ent.Unrecorded = true
		e.settleScreen(sctx, v, d.Ref, owner, ent)
	default:
		e.depError("ledger", "commit", err)
		e.hook(e.o.Hooks.CommitFailure, d.Route)
		e.o.Logger.ErrorContext(ctx, "commit failed after a successful forward; repeats are intercepted only while the screen remembers",
			"route", d.Route, "key", d.Key, "err", err)
		// The screen's entry is the only record: it must replay without
		// the ledger and outlive the local cache.
		ent.Unrecorded = true
		e.settleScreen(sctx, v, d.Ref, owner, ent)
		e.retryCommit(ctx, rec, owner, now, v.ledger(), d.ticket, err)
	}
	return Result{Outcome: outcome, Upstream: up, TakenOver: takenOver}
}

// hold records an ambiguous result as held (record.ambiguous: hold).
func (e *Engine) hold(ctx context.Context, p *Policy, d Delivery, owner string, v via, status int, cause error) (Result, bool) {
	now := e.o.Now()
	rec := &Record{Ref: d.Ref, State: StateHeld, Fingerprint: d.Fingerprint, Source: d.Source,
		CreatedAt: now, ExpiresAt: now.Add(p.Retention)}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		rec.TraceID, rec.SpanID = sc.TraceID().String(), sc.SpanID().String()
	}
	cctx, span := e.o.Tracer.Start(ctx, "hookstamp.commit", trace.WithAttributes(attribute.String("hookstamp.state", "held")))
	err := e.o.Ledger.Commit(cctx, rec, owner, now)
	endSpan(span, err)
	if err != nil {
		e.depError("ledger", "commit", err)
		e.o.Logger.ErrorContext(ctx, "could not hold an ambiguous delivery; releasing it",
			"route", d.Route, "key", d.Key, "err", err)
		return Result{}, false
	}
	// Repeats confirm in the ledger and find the hold there.
	e.settleScreen(ctx, v, d.Ref, owner, nil)
	e.hookDelta(e.o.Hooks.HeldChanged, d.Route, 1)
	e.o.Logger.WarnContext(ctx, "key held after an ambiguous upstream result; resolve it through the admin API",
		"route", d.Route, "key", d.Key, "err", cause)
	return Result{Outcome: HeldKey, Status: status, Err: cause,
		Detail: "the upstream gave no answer; the event is held until an operator resolves it"}, true
}

// done answers a delivery whose record exists: replay it, or reject a
// different delivery reusing the key, or forward anyway in shadow mode.
//
// It reports false when the record is gone: the screen remembered a record
// whose body only the ledger keeps, and the ledger row has since been swept
// (record.retention shorter than screen.ttl) or deleted by an operator —
// and perhaps claimed again, so that the row is not a done one. The
// screen and cache entries are then dropped and the delivery is claimed
// afresh — the ledger is the truth, and it is reachable, so a 503 would
// only make the provider retry into the same answer until the screen's TTL.
// (An entry whose commit failed never comes here: it keeps its body.)
func (e *Engine) done(ctx context.Context, p *Policy, d Delivery, fwd ForwardFunc, ent *Entry) (Result, bool) {
	if p.Shadow {
		return e.shadow(ctx, fwd), true
	}
	if !d.matches(ent.Fingerprint) && !p.ReplayOnMismatch {
		return e.mismatch(ent), true
	}
	resp := ent.Response
	if !ent.BodyCached && !ent.BodyOmitted {
		rec, err := e.o.Ledger.Lookup(ctx, d.Ref)
		if err == nil && rec.State != StateDone {
			err = ErrNotFound // a pending or held row has no answer to replay
		}
		if errors.Is(err, ErrNotFound) {
			e.o.Logger.InfoContext(ctx, "the screen remembered a record the ledger no longer holds; claiming afresh",
				"route", d.Route, "key", d.Key)
			// Only the done entry: a repeat that read it too may have
			// dropped it already and claimed the key, and an operator's
			// Forget here would wipe that claim and let this delivery be
			// forwarded beside it.
			if err := e.forgetDone(ctx, d.Ref); err != nil {
				e.o.Logger.WarnContext(ctx, "could not drop the screen's entry of a record the ledger no longer holds",
					"route", d.Route, "key", d.Key, "err", err)
			}
			return Result{}, false
		}
		if err != nil {
			e.depError("ledger", "lookup", err)
			return e.unavailable(fmt.Errorf("replay body of %q: %w", d.Key, err)), true
		}
		resp = rec.Response
		if c := e.o.Cache; c != nil {
			c.Put(d.Ref, EntryOf(rec), d.ticket)
		}
	}
	return Result{Outcome: Replayed, Replay: &resp, OriginalTraceID: ent.TraceID, OriginalSpanID: ent.SpanID}, true
}

// shadow forwards a repeat that enforce mode would have intercepted.
func (e *Engine) shadow(ctx context.Context, fwd ForwardFunc) Result {
	return e.forwardUnclaimed(ctx, Shadowed, fwd)
}

// Passthrough forwards a request the route does not deduplicate (a method
// it does not list, an optional key absent): no claim, no record, outcome
// passthrough, inside the same forward span as every other forward.
func (e *Engine) Passthrough(ctx context.Context, fwd ForwardFunc) Result {
	return e.forwardUnclaimed(ctx, Passthrough, fwd)
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
		span.SetAttributes(attribute.Int("http.response.status_code", up.Status))
	}
	endSpan(span, err)
	return up, err
}

func (e *Engine) mismatch(ent *Entry) Result {
	r := Result{Outcome: Mismatch, Status: http.StatusUnprocessableEntity,
		Detail: "this idempotency key was already used for a delivery with different content"}
	if ent != nil {
		r.OriginalTraceID, r.OriginalSpanID = ent.TraceID, ent.SpanID
	}
	return r
}

func (e *Engine) held() Result {
	return Result{Outcome: HeldKey, Status: http.StatusConflict, RetryAfter: e.o.RetryAfter,
		Detail: "this event's first delivery got no answer from the upstream; it is held until an operator resolves it"}
}

func (e *Engine) conflict(detail string) Result {
	return Result{Outcome: Conflict, Status: http.StatusConflict, RetryAfter: e.o.RetryAfter, Detail: detail}
}

func (e *Engine) unavailable(err error) Result {
	return Result{Outcome: Unavailable, Status: http.StatusServiceUnavailable, RetryAfter: e.o.RetryAfter,
		Detail: "the idempotency store is unavailable; nothing was forwarded, retry later", Err: err}
}

// release drops a claim so that the next delivery is forwarded. Losing
// ownership in between is fine: someone else settles the key.
//
// It runs on its own deadline, detached from ctx: a release is most needed
// when the delivery was cut (shutdown abandoned it, the provider hung up),
// and a release under that cancelled context would fail and leave the claim
// to make every retry wait for the lease.
func (e *Engine) release(ctx context.Context, v via, ref Ref, owner string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.o.OpTimeout)
	defer cancel()
	var err, ledgerErr, screenErr error
	rctx, span := e.o.Tracer.Start(ctx, "hookstamp.release")
	mine := func(err error) error {
		if errors.Is(err, ErrNotOwner) {
			return nil
		}
		return err
	}
	switch v {
	case viaScreen, viaScreenNoLedger:
		screenErr = mine(e.o.Screen.Release(rctx, ref, owner))
	case viaBoth:
		// The ledger row first: a repeat woken by the screen's release
		// must not find it still pending.
		ledgerErr = mine(e.o.Ledger.Release(rctx, ref, owner))
		screenErr = mine(e.o.Screen.Release(rctx, ref, owner))
	case viaLedgerLostScreen:
		ledgerErr = mine(e.o.Ledger.Release(rctx, ref, owner))
		e.tidyScreen(ctx, ref, owner, nil)
	case viaLedger:
		ledgerErr = mine(e.o.Ledger.Release(rctx, ref, owner))
	}
	err = errors.Join(ledgerErr, screenErr)
	endSpan(span, err)
	if err != nil {
		// Each store's failure under its own dependency.
		if ledgerErr != nil {
			e.depError("ledger", "release", ledgerErr)
		}
		if screenErr != nil {
			e.depError("screen", "release", screenErr)
		}
		e.o.Logger.WarnContext(ctx, "release failed; the claim expires with its lease",
			"route", ref.Route, "key", ref.Key, "err", err)
	}
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

// refill puts a record the ledger confirmed into the screen, over the
// caller's claim. The record was read, not written: if an operator deleted
// it meanwhile and another delivery claimed the key, the screen keeps that
// claim (Entry.Refill).
func (e *Engine) refill(ctx context.Context, ref Ref, owner string, ent *Entry) {
	e.complete(ctx, ref, owner, asRefill(ent))
}

// asRefill is a copy of ent marked Refill (ent may be shared: the claim
// that read it still returns it).
func asRefill(ent *Entry) *Entry {
	r := *ent
	r.Refill = true
	return &r
}

// settleScreen ends the screen's side of a claim whose ledger side is
// settled: the screen gets ent as the record, or, with ent nil, drops the
// claim (a release of v, which also releases a pending ledger row of
// owner's). A screen claim whose answer was lost is settled in the
// background (tidyScreen); a claim the screen never held needs nothing.
func (e *Engine) settleScreen(ctx context.Context, v via, ref Ref, owner string, ent *Entry) {
	switch {
	case v == viaLedgerLostScreen:
		e.tidyScreen(ctx, ref, owner, ent)
	case !v.screen():
	case ent != nil:
		e.complete(ctx, ref, owner, ent)
	default:
		e.release(ctx, v, ref, owner)
	}
}

// Forget removes a key from the in-process cache and the screen; the admin
// API calls it after deleting the ledger row (and, before deleting it,
// CancelCommitRetry).
func (e *Engine) Forget(ctx context.Context, ref Ref) error {
	if c := e.o.Cache; c != nil {
		c.Delete(ref)
	}
	if e.o.Screen == nil {
		return nil
	}
	if err := e.o.Screen.Forget(ctx, ref); err != nil {
		return fmt.Errorf("forget %q in screen: %w", ref.Key, err)
	}
	return nil
}

// forgetDone drops the screen's done entry of ref, leaving a claim alone.
func (e *Engine) forgetDone(ctx context.Context, ref Ref) error {
	if e.o.Screen == nil {
		return nil
	}
	if err := e.o.Screen.ForgetDone(ctx, ref); err != nil {
		return fmt.Errorf("forget the done entry of %q in screen: %w", ref.Key, err)
	}
	return nil
}

func (e *Engine) depError(dep, op string, err error) {
	if e.o.Hooks.DependencyError != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrNotOwner) {
		e.o.Hooks.DependencyError(dep, op)
	}
}

func (e *Engine) hook(f func(string), route string) {
	if f != nil {
		f(route)
	}
}

func (e *Engine) hookDelta(f func(string, int), route string, d int) {
	if f != nil {
		f(route, d)
	}
}

// EntryOf is the screen entry of a done record.
func EntryOf(rec *Record) *Entry {
	return &Entry{Response: rec.Response, BodyCached: true, Fingerprint: rec.Fingerprint,
		TraceID: rec.TraceID, SpanID: rec.SpanID}
}

// matches reports whether fp, the fingerprint of the record (or claim)
// holding d's key, is that of a retry of d. A missing fingerprint (mode
// none, on either side) matches.
func (d *Delivery) matches(fp []byte) bool {
	if fp == nil || d.Fingerprint == nil || bytes.Equal(fp, d.Fingerprint) {
		return true
	}
	if d.Also == nil {
		return false
	}
	for _, a := range d.Also() {
		if bytes.Equal(fp, a) {
			return true
		}
	}
	return false
}

func newOwner() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func endSpan(span trace.Span, err error, attrs ...attribute.KeyValue) {
	if len(attrs) > 0 && span.IsRecording() {
		span.SetAttributes(attrs...)
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
