package idempotency

import (
	"net/http"
	"time"
)

// Outcome is how one request on a route ended (SPEC §2): the outcome label,
// span attribute and Hookstamp-Outcome header.
type Outcome string

// Outcomes. Every request that reaches a route ends in exactly one.
const (
	Forwarded   Outcome = "forwarded"
	Replayed    Outcome = "replayed"
	Released    Outcome = "released"
	Conflict    Outcome = "conflict"
	Mismatch    Outcome = "mismatch"
	MissingKey  Outcome = "missing_key"
	InvalidKey  Outcome = "invalid_key"
	Unverified  Outcome = "unverified"
	TooLarge    Outcome = "too_large"
	Passthrough Outcome = "passthrough"
	Shadowed    Outcome = "shadowed"
	HeldKey     Outcome = "held"
	Unavailable Outcome = "unavailable"
	// Challenge is a provider's handshake (Zoom's url_validation, Lark's
	// url_verification) that hookstamp verified and answered itself:
	// nothing was forwarded or claimed.
	Challenge Outcome = "challenge"
	// Accepted: an async route's first delivery, stored and acknowledged.
	Accepted Outcome = "accepted"
)

// Outcomes lists every outcome, for metrics initialisation and stats.
var Outcomes = []Outcome{Forwarded, Replayed, Released, Conflict, Mismatch, MissingKey,
	InvalidKey, Unverified, TooLarge, Passthrough, Shadowed, HeldKey, Unavailable, Challenge, Accepted}

// ShadowWould lists what enforce mode answers a repeat that shadow mode
// forwards (Result.Would), for metrics initialisation: a repeat of a
// recorded delivery is replayed, of a different one under its key a
// mismatch, of one in flight a conflict, of a held key held.
var ShadowWould = []Outcome{Replayed, Mismatch, Conflict, HeldKey}

// IsDuplicate reports whether the outcome is a repeat intercepted (or, in
// shadow mode, one that would have been).
func (o Outcome) IsDuplicate() bool {
	switch o {
	case Replayed, Conflict, Mismatch, Shadowed:
		return true
	}
	return false
}

// Upstream is the upstream's complete answer to a forward.
type Upstream struct {
	Status int
	Header http.Header
	Body   []byte
	// BodyOmitted: the body was larger than the gateway reads; the
	// delivery is settled like any other, without it.
	BodyOmitted bool
}

// Result is what the state machine decided for one delivery.
type Result struct {
	Outcome Outcome
	// Upstream is set when the upstream answered this delivery.
	Upstream *Upstream
	// Replay is the recorded response for Replayed.
	Replay *Response
	// Answer is hookstamp's own answer to a handshake (Challenge).
	Answer *Response
	// Ack is an async route's acknowledgement, for Accepted.
	Ack *Response
	// Status is hookstamp's own status when there is no upstream answer.
	Status int
	// Detail explains a problem answer; never request bytes or secrets.
	Detail string
	// RetryAfter is set on conflict, held and unavailable answers.
	RetryAfter time.Duration
	// OriginalTraceID and OriginalSpanID name the recorded delivery, for
	// span links.
	OriginalTraceID string
	OriginalSpanID  string
	TakenOver       bool
	// Would is, for Shadowed, the outcome enforce mode would have
	// answered: one of ShadowWould.
	Would Outcome
	// Err is the underlying failure, for logs (never sent to the provider).
	Err error
}

// Refusal is an answer hookstamp makes itself rather than the upstream's
// (SPEC §2): the one place that picks its status. retryAfter is kept on the
// outcomes a provider should retry (conflict, held, unavailable).
func Refusal(o Outcome, detail string, err error, retryAfter time.Duration) Result {
	r := Result{Outcome: o, Detail: detail, Err: err}
	switch o {
	case Unverified:
		r.Status = http.StatusUnauthorized
	case InvalidKey, MissingKey:
		r.Status = http.StatusBadRequest
	case TooLarge:
		r.Status = http.StatusRequestEntityTooLarge
	case Mismatch:
		r.Status = http.StatusUnprocessableEntity
	case Conflict, HeldKey:
		r.Status, r.RetryAfter = http.StatusConflict, retryAfter
	case Unavailable:
		r.Status, r.RetryAfter = http.StatusServiceUnavailable, retryAfter
	}
	return r
}
