package idempotency

import (
	"bytes"
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
	// Resend, when non-nil, is the body with which the upstream asks the
	// provider to send the delivery again (Alipay's "fail"; compared
	// without case or surrounding space). Such an answer is released like
	// a non-final status, never recorded.
	Resend []byte
	// KeepHeaders are the canonical names of response headers recorded for
	// replay (record.headers). Set-Cookie is refused by configuration.
	// Content-Encoding is recorded whether listed or not (bodyHeaders).
	KeepHeaders []string
	// MaxBody is record.max_body: larger bodies are recorded without body
	// (0: every non-empty body).
	MaxBody int
	// HoldAmbiguous is record.ambiguous: hold.
	HoldAmbiguous bool
	// Retention is the ledger row lifetime.
	Retention time.Duration
	// UpstreamTimeout is upstream.timeout: the engine keeps the commit's
	// reserve at the end of a claim's lease out of it (withinLease). 0
	// leaves the reserve as it is.
	UpstreamTimeout time.Duration
}

// final reports whether the upstream's answer is recorded.
func (p *Policy) final(up *Upstream) bool {
	if !p.Final(up.Status) {
		return false
	}
	return p.Resend == nil || up.BodyOmitted || !bytes.EqualFold(bytes.TrimSpace(up.Body), p.Resend)
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

// bodyHeaders are kept with every record whatever record.headers says:
// they tell how the recorded body bytes are encoded (gzip, br), and a
// replay of those bytes without them would be another answer.
var bodyHeaders = []string{"Content-Encoding"}

// recordResponse keeps what a replay needs from an upstream answer.
func (p *Policy) recordResponse(up *Upstream) Response {
	r := Response{Status: up.Status}
	for _, name := range p.KeepHeaders {
		r.keepHeader(up.Header, name, len(p.KeepHeaders)+len(bodyHeaders))
	}
	if up.BodyOmitted || len(up.Body) > p.MaxBody {
		// No body bytes, so nothing for bodyHeaders to describe (even
		// listed in record.headers): an empty body marked gzip is not gzip.
		r.BodyOmitted = true
		for _, name := range bodyHeaders {
			delete(r.Headers, name)
		}
		return r
	}
	for _, name := range bodyHeaders {
		if _, kept := r.Headers[name]; !kept { // unless record.headers lists it too
			r.keepHeader(up.Header, name, len(bodyHeaders))
		}
	}
	r.Body = up.Body
	return r
}

// keepHeader records header name of h, if h has it; size sizes the map.
func (r *Response) keepHeader(h http.Header, name string, size int) {
	vals := h.Values(name)
	if len(vals) == 0 {
		return
	}
	if r.Headers == nil {
		r.Headers = make(map[string]string, size)
	}
	if len(vals) == 1 {
		r.Headers[name] = vals[0]
	} else {
		r.Headers[name] = joinValues(vals)
	}
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
