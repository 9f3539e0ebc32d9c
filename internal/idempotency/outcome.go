package idempotency

import (
	"net/http"
	"time"
)

// Outcome is how one request on a route ended (SPEC §2). It is the `outcome`
// label of metrics, the hookstamp.outcome span attribute and the
// Hookstamp-Outcome response header.
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
)

// Outcomes lists every outcome, for metrics initialisation and stats.
var Outcomes = []Outcome{Forwarded, Replayed, Released, Conflict, Mismatch, MissingKey,
	InvalidKey, Unverified, TooLarge, Passthrough, Shadowed, HeldKey, Unavailable}

// IsDuplicate reports whether the outcome is a repeat intercepted (or, in
// shadow mode, a repeat that would have been): what hookstamp_duplicates_total
// and the top-keys statistics count.
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
	// BodyOmitted: the body was larger than the gateway reads; the answer
	// and the record carry status and headers only. The upstream did
	// answer, so the delivery is settled like any other.
	BodyOmitted bool
}

// Result is what the state machine decided for one delivery. The ingress
// turns it into an HTTP answer; telemetry turns it into spans and metrics.
type Result struct {
	Outcome Outcome
	// Upstream is set when the upstream answered this delivery (forwarded,
	// released with an upstream status, passthrough, shadowed).
	Upstream *Upstream
	// Replay is the recorded response for Replayed.
	Replay *Response
	// Status is the status hookstamp answers with itself when there is no
	// upstream answer to pass on (conflict 409, mismatch 422, unavailable 503,
	// held 409 or 502/504, released 502/504).
	Status int
	// Detail explains a problem answer to the provider. It never contains
	// request bytes or secrets.
	Detail string
	// RetryAfter is set on conflict, held and unavailable answers.
	RetryAfter time.Duration
	// OriginalTraceID and OriginalSpanID identify the original delivery of a
	// replay (or of the record a mismatch was checked against), for span links.
	OriginalTraceID string
	OriginalSpanID  string
	// TakenOver is true when this delivery took over an expired claim.
	TakenOver bool
	// Err is the underlying failure, for logs (never sent to the provider).
	Err error
}
