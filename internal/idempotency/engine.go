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
	FailReject FailMode = iota // 503 + Retry-After, nothing forwarded
	FailPass                   // forward without deduplication (passthrough)
	FailStore                  // (screen only) claim in the ledger instead
)

// ForwardFunc sends the delivery upstream once and returns its complete
// answer, or a transport error that Options.Classify understands.
type ForwardFunc func(ctx context.Context) (*Upstream, error)

// Delivery is what the state machine needs to know about one request.
type Delivery struct {
	Ref
	// Fingerprint is the digest of what the delivery means; nil = none.
	Fingerprint []byte
	// Also returns the digests of the route's earlier fingerprint settings
	// (extract.Fingerprinter.Also): a record holding one is a retry's, not
	// a key reuse. Called only on a mismatch; nil = none.
	Also func() [][]byte
	// Source is the sender (routes[].source), for duplicate statistics.
	Source string
	// Request is stored with the record, and each forward recorded as an
	// attempt (record.request); nil = neither.
	Request *Request
	// StoreRequest, when set, makes Request on first need: a repeat that
	// waits for its first delivery, or is answered from the cache or the
	// screen, never copies it.
	StoreRequest func() *Request

	ticket Ticket // taken before anything is read, for every Cache.Put
}

// Hooks receive events that are not outcomes, for metrics; nil fields are
// ignored.
type Hooks struct {
	Takeover        func(route string) // an expired claim was taken over
	CommitFailure   func(route string) // a final answer was not committed
	DependencyError func(dependency, op string)
	// HeldChanged: a key became held (+1) or was resolved through the
	// admin API (-1).
	HeldChanged func(route string, delta int)
}

// Options configure an Engine. Zero values take the defaults named.
type Options struct {
	Screen Screen        // the fast claim store; nil: every claim is a ledger row
	Ledger Ledger        // the durable source of truth; required
	Lease  time.Duration // of an in-flight claim (screen.lease; 30s)
	TTL    time.Duration // of a done screen entry (screen.ttl; 24h)
	// ScreenUnavailable is screen.on_unavailable (FailStore by default:
	// FailStore is the zero value only if set explicitly; see New).
	ScreenUnavailable FailMode
	// LedgerUnavailable is store.on_unavailable (FailReject or FailPass).
	LedgerUnavailable FailMode
	// Classify maps a ForwardFunc error to the status the provider gets and
	// whether the effect upstream is unknown. Nil: 502, not ambiguous.
	Classify func(error) (status int, ambiguous bool)
	Cache    *Cache // screen.local_cache; nil = off
	// Queue stores the deliveries of async routes; required when a
	// Policy has an Ack.
	Queue Queue
	// ConfirmByClaim confirms a screen's grant with a ledger claim instead
	// of a lookup, so that a replica that fell back to a ledger claim
	// (FailStore) sees it. Set it when replicas share a screen that can
	// fail for some of them only; it costs a ledger write per first
	// delivery.
	ConfirmByClaim bool
	// BreakerFailures failed screen claims in a row make claims skip the
	// screen for BreakerCooldown, then one probes it (see breaker).
	BreakerFailures int
	BreakerCooldown time.Duration
	// OpTimeout bounds the commit and release that follow a forward; they
	// run even when the provider has gone away (5s).
	OpTimeout time.Duration
	// CommitRetryFor is how long a commit that could not reach the ledger
	// is retried in the background (DefaultCommitRetryFor; negative: not).
	CommitRetryFor time.Duration
	RetryAfter     time.Duration    // of conflict, held and unavailable answers (1s)
	Now            func() time.Time // the clock of ledger leases and expiry (time.Now)
	Tracer         trace.Tracer     // spans of each step (no-op by default)
	Hooks          Hooks
	Logger         *slog.Logger // failures, with keys but never bodies (slog.Default)
	// Replica names this process in the attempts it records ("").
	Replica string
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
	flights    *flights // nil without a screen
	// Background retries of failed commits (recommit.go).
	retryMu     sync.Mutex
	retryClosed bool
	retrying    map[Ref]*commitRetry
	retryBytes  int          // sum of retrying's sizes
	retryCount  atomic.Int64 // len(retrying), read without retryMu
	retryStop   chan struct{}
	retries     sync.WaitGroup
	attempts    AttemptRecorder // the ledger's, if it keeps attempts
	// writesFailing: the last ledger write failed to reach it (writefail.go).
	writesFailing atomic.Bool
	// writesWarned: when the last "refused a write" warning was logged
	// (unix nanoseconds); writesLogged: it was, for the outage now marked.
	writesWarned atomic.Int64
	writesLogged atomic.Bool
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
	e.attempts, _ = o.Ledger.(AttemptRecorder)
	return e, nil
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

// Handle decides what happens to one delivery, calling fwd at most once,
// as SPEC §1 says: acquire the key; replay a recorded key, answer a held
// one 409, wait for (or 409) a delivery in flight and try again; forward a
// claimed delivery and settle it.
func (e *Engine) Handle(ctx context.Context, p *Policy, d Delivery, fwd ForwardFunc) Result {
	d.ticket = e.o.Cache.Ticket()
	var deadline time.Time // of a repeat's wait for its first delivery
	gone := false          // a record the screen remembered was gone once
	for attempt := 0; ; attempt++ {
		// After a wait, the delivery waited for may have been cached.
		if r, ok := e.cached(ctx, p, d, fwd); ok {
			return r
		}
		if attempt == 0 && p.Ack != nil {
			if r, ok := e.intake(ctx, p, d, fwd); ok {
				return r
			}
		}
		claimedAt := time.Now()
		// A new owner for each attempt: a screen claim of an earlier one
		// whose answer was lost may still be being released in the
		// background, and must not release this attempt's claim.
		c, stop := e.acquire(ctx, p, d, fwd, newOwner())
		if stop != nil {
			return *stop
		}
		switch c.Status {
		case Acquired, TakenOver:
			if p.Ack != nil && !c.pass {
				if r, ok := c.enqueue(ctx, p, d); ok {
					return r
				}
				continue
			}
			c.expires = claimedAt.Add(e.o.Lease)
			fctx, cancel := c.withinLease(ctx, p)
			defer cancel()
			return c.forward(fctx, p, d, fwd)
		case Done:
			if r, ok := e.replayFound(ctx, p, d, fwd, c.Entry); ok {
				return r
			}
			if gone {
				return e.unavailable(fmt.Errorf("replay of %q: the record keeps vanishing", d.Key))
			}
			gone = true // the screen was cleared: claim afresh
		case Held, InFlight:
			if p.Shadow {
				return e.shadow(ctx, fwd, shadowClaimed(p, d, &c))
			}
			if !d.matches(c.Fingerprint) && !p.ReplayOnMismatch {
				// A screen claim can be a refused copy's that landed late,
				// after its own sender fell back to the ledger: the ledger
				// decides whether this delivery is the recorded one.
				if r, ok := e.settledInLedger(ctx, p, d, fwd, &c); ok {
					return r
				}
				return e.mismatch(nil) // key reuse
			}
			if c.Status == Held && acknowledged(p, c.Entry) {
				return e.ackReplay(p, c.Entry)
			}
			if c.Status == Held {
				return e.held()
			}
			if r, ok := e.inFlight(ctx, p, d, fwd, &c, &deadline, attempt); ok {
				return r
			}
		default:
			return e.unavailable(fmt.Errorf("claim %q: unexpected status %v", d.Key, c.Status))
		}
	}
}

// shadowClaimed is what enforce mode answers a repeat whose claim found
// its key held or in flight, as the claim shows it (enforce may also ask
// the ledger, or wait for the first delivery: shadow does neither).
func shadowClaimed(p *Policy, d Delivery, c *claim) Outcome {
	switch {
	case !d.matches(c.Fingerprint) && !p.ReplayOnMismatch:
		return Mismatch
	case c.Status == Held && acknowledged(p, c.Entry):
		return Replayed
	case c.Status == Held:
		return HeldKey
	}
	return Conflict
}

// withRequest makes d's stored request if the route stores one and it is
// not made yet.
func (d *Delivery) withRequest() {
	if d.Request == nil && d.StoreRequest != nil {
		d.Request = d.StoreRequest()
	}
}

// Forget removes a key from the in-process cache and the screen, after the
// admin API deleted its ledger row.
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

// tookOver counts a claim of ref taken over after its owner's lease
// expired and names it in the log: the upstream may get the delivery a
// second time (the one documented second copy), and the metric alone
// does not say which key.
func (e *Engine) tookOver(ctx context.Context, ref Ref) {
	e.hook(e.o.Hooks.Takeover, ref.Route)
	e.o.Logger.WarnContext(ctx, "claim taken over after its owner's lease expired: the upstream may get this delivery a second time, with the same key",
		"route", ref.Route, "key", ref.Key)
}

func (e *Engine) hookDelta(f func(string, int), route string, d int) {
	if f != nil {
		f(route, d)
	}
}

// EntryOf is the screen entry of a record: its answer, or, marked Async
// (never replayed as an answer of the upstream), a record whose provider
// was acknowledged instead: one stored by an async intake (Acked; queued
// and dead rows always are). A held row's entry is Async only if acked:
// it holds no answer to replay either way (status 0). A row written by a
// release that did not know acked carries AckUnknown.
func EntryOf(rec *Record) *Entry {
	return &Entry{Response: rec.Response, BodyCached: true, Fingerprint: rec.Fingerprint,
		TraceID: rec.TraceID, SpanID: rec.SpanID,
		Async:      rec.Acked || rec.State == StateQueued || rec.State == StateDead,
		AckUnknown: rec.AckUnknown}
}

// acknowledged reports whether a repeat on p's route gets the route's
// acknowledgement: the route is async and the delivery ent stands for was
// acknowledged, or was written by a release that did not record it, which
// acknowledged every repeat on an async route. A record made while the
// route was synchronous keeps its recorded answer, or stays held.
func acknowledged(p *Policy, ent *Entry) bool {
	return p.Ack != nil && ent != nil && (ent.Async || ent.AckUnknown)
}

// matches reports whether fp, of the record or claim holding d's key, is a
// retry's of d; a missing fingerprint matches.
func (d *Delivery) matches(fp []byte) bool {
	return sameEvent(fp, d.Fingerprint, d.Also)
}

// sameEvent reports whether fingerprint fp is own's event's: equal, one of
// also's, or either missing.
func sameEvent(fp, own []byte, also func() [][]byte) bool {
	if fp == nil || own == nil || bytes.Equal(fp, own) {
		return true
	}
	if also == nil {
		return false
	}
	for _, a := range also() {
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
