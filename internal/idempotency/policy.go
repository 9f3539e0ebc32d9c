package idempotency

import (
	"net/http"
	"time"
)

// Policy is the per-route behaviour of the state machine, built from the
// route's configuration in main.
type Policy struct {
	// Route is the route name; it namespaces keys.
	Route string
	// Shadow forwards every delivery; repeats that would have been replayed
	// (or rejected) are forwarded and end as Shadowed.
	Shadow bool
	// RejectInflight answers a repeat of an in-flight delivery with 409 at
	// once; otherwise (inflight: wait) the repeat waits up to WaitTimeout.
	RejectInflight bool
	WaitTimeout    time.Duration
	// ReplayOnMismatch replays the recorded answer to a repeat whose
	// fingerprint differs (on_mismatch: replay) instead of answering 422.
	ReplayOnMismatch bool
	// Final reports whether an upstream status is recorded. It must never be
	// true for 408, 425, 429 or 5xx; config validation guarantees it.
	Final func(status int) bool
	// KeepHeaders are the canonical names of response headers recorded for
	// replay (record.headers). Set-Cookie is refused by configuration.
	KeepHeaders []string
	// MaxBody is record.max_body: larger bodies are recorded without body
	// (0: every non-empty body).
	MaxBody int
	// HoldAmbiguous is record.ambiguous: hold.
	HoldAmbiguous bool
	// Retention is the ledger row lifetime.
	Retention time.Duration
}

// DefaultFinal is the default record.statuses: 2xx and 4xx except 408, 425
// and 429.
func DefaultFinal(status int) bool {
	if NeverFinal(status) {
		return false
	}
	return status >= 200 && status < 300 || status >= 400 && status < 500
}

// NeverFinal reports the statuses that are never recorded, whatever the
// configuration says: the upstream asked to be retried (408, 425, 429) or
// failed (5xx).
func NeverFinal(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusTooEarly ||
		status == http.StatusTooManyRequests || status >= 500
}

// recordResponse keeps what a replay needs from an upstream answer.
func (p *Policy) recordResponse(up *Upstream) Response {
	r := Response{Status: up.Status}
	for _, name := range p.KeepHeaders {
		vals := up.Header.Values(name)
		if len(vals) == 0 {
			continue
		}
		if r.Headers == nil {
			r.Headers = make(map[string]string, len(p.KeepHeaders))
		}
		if len(vals) == 1 {
			r.Headers[name] = vals[0]
		} else {
			r.Headers[name] = joinValues(vals)
		}
	}
	if up.BodyOmitted || len(up.Body) > p.MaxBody {
		r.BodyOmitted = true
	} else {
		r.Body = up.Body
	}
	return r
}

func joinValues(vals []string) string {
	n := 0
	for _, v := range vals {
		n += len(v) + 2
	}
	b := make([]byte, 0, n)
	for i, v := range vals {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = append(b, v...)
	}
	return string(b)
}
