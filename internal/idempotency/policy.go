package idempotency

import (
	"bytes"
	"net/http"
	"strconv"
	"time"
)

// Policy is the per-route behaviour of the state machine, built from the
// route's configuration in main.
type Policy struct {
	Route string
	// Shadow forwards repeats too, as Shadowed.
	Shadow bool
	// RejectInflight answers a repeat of a delivery in flight 409 at once;
	// otherwise it waits up to WaitTimeout.
	RejectInflight bool
	WaitTimeout    time.Duration
	// ReplayOnMismatch: on_mismatch: replay, not 422.
	ReplayOnMismatch bool
	// Final reports whether an upstream status is recorded; never for
	// NeverFinal's (config validation guarantees it).
	Final func(status int) bool
	// Resend, when non-nil, is the body by which the upstream asks for the
	// delivery again (Alipay's "fail", without case or surrounding space):
	// such an answer is released, never recorded.
	Resend []byte
	// KeepHeaders are the canonical names in record.headers.
	KeepHeaders []string
	// MaxBody is record.max_body (0: no body is recorded).
	MaxBody       int
	HoldAmbiguous bool          // record.ambiguous: hold
	Retention     time.Duration // of a ledger row
	// UpstreamTimeout is upstream.timeout, which the commit's reserve at
	// the end of the lease leaves alone (withinLease); 0: unknown.
	UpstreamTimeout time.Duration
	// Ack, when not nil, makes the route async (SPEC §10): a claimed
	// delivery is stored and queued, and it and every repeat are answered
	// Ack, whatever became of the delivery.
	Ack *Response
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

// NeverFinal reports the statuses never recorded: the upstream asked to be
// retried (408, 425, 429) or failed (5xx).
func NeverFinal(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusTooEarly ||
		status == http.StatusTooManyRequests || status >= 500
}

// bodyHeaders are kept with every recorded body: without them its bytes
// would be another answer.
var bodyHeaders = []string{"Content-Encoding"}

// recordResponse keeps what a replay needs from an upstream answer.
func (p *Policy) recordResponse(up *Upstream) Response {
	r := Response{Status: up.Status}
	for _, name := range p.KeepHeaders {
		r.keepHeader(up.Header, name, len(p.KeepHeaders)+len(bodyHeaders))
	}
	if up.BodyOmitted || len(up.Body) > p.MaxBody {
		// An empty body marked gzip is not gzip.
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
	if n, err := strconv.Atoi(up.Header.Get("Content-Length")); err == nil && n > 0 && len(up.Body) == 0 {
		// An answer to HEAD: it declares the length of a body it does not
		// send, which a replay to HEAD declares too.
		if r.Headers == nil {
			r.Headers = make(map[string]string, 1)
		}
		r.Headers["Content-Length"] = strconv.Itoa(n)
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

// Settles reports whether an upstream answer ends a delivery: it is
// recorded (the queue's attempts decide with it as forwards do).
func (p *Policy) Settles(up *Upstream) bool { return p.final(up) }

// Recorded is what is kept of an upstream answer for replay.
func (p *Policy) Recorded(up *Upstream) Response { return p.recordResponse(up) }
