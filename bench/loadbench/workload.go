package loadbench

import (
	"context"
	"encoding/hex"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// Mix decides the key of each delivery: a fresh one (a unique delivery),
// or one already sent (a repeat). Repeats come from a fixed working set of
// pre-recorded keys (B2), or from the most recent unique keys this mix sent
// (B3, B3s, B4, B4s, B5): with RecentWindow of 256 and tens of requests in
// flight, a share of those repeats arrive while the first delivery of their
// key is still in flight, as a provider's timeout-retry does.
type Mix struct {
	// Unique is the share of unique deliveries (1 = all unique).
	Unique float64
	// Working is the fixed working set of repeats; nil = recent keys.
	Working []string
	recent  [RecentWindow]atomic.Pointer[string]
	next    atomic.Uint64
	// Prefix starts every unique key (runs and mixes stay apart).
	Prefix string
}

// RecentWindow is how many of the latest unique keys repeats draw from.
const RecentWindow = 256

// Key returns the next key and whether it is a repeat.
func (m *Mix) Key(r *rand.Rand) (string, bool) {
	if m.Unique < 1 && r.Float64() >= m.Unique {
		if len(m.Working) > 0 {
			return m.Working[r.IntN(len(m.Working))], true
		}
		n := m.next.Load()
		if n > 0 {
			back := uint64(r.IntN(int(min(n, RecentWindow))))
			if k := m.recent[(n-1-back)%RecentWindow].Load(); k != nil {
				return *k, true
			}
		}
	}
	k := UniqueKey(r, m.Prefix)
	if m.Working == nil && m.Unique < 1 {
		i := m.next.Add(1) - 1
		m.recent[i%RecentWindow].Store(&k)
	}
	return k, false
}

// UniqueKey is a Stripe-like event id: random, so that ledger inserts land
// all over the primary-key index as real event ids do.
func UniqueKey(r *rand.Rand, prefix string) string {
	var b [12]byte
	u1, u2 := r.Uint64(), r.Uint64()
	for i := range 8 {
		b[i] = byte(u1 >> (8 * i))
	}
	for i := range 4 {
		b[8+i] = byte(u2 >> (8 * i))
	}
	return prefix + hex.EncodeToString(b[:])
}

// AppendBody appends the delivery body of key: a small Stripe-shaped event.
// The body depends on the key only, so a repeat carries the same
// fingerprint as its first delivery.
func AppendBody(dst []byte, key string) []byte {
	dst = append(dst, `{"id":"`...)
	dst = append(dst, key...)
	dst = append(dst, `","object":"event","type":"payment_intent.succeeded","livemode":false,"data":{"object":{"id":"pi_3MtwBwLkdIwHu7ix28a3tqPa","amount":2000,"currency":"usd","status":"succeeded"}}}`...)
	return dst
}

// HTTPTarget sends deliveries of a Mix to one server over keep-alive
// connections (fasthttp).
type HTTPTarget struct {
	client    *fasthttp.HostClient
	url       string
	mix       *Mix
	closeEach bool // a new connection for every request (NewHTTPSTarget)
}

// NewHTTPTarget targets addr (host:port), path /hook.
func NewHTTPTarget(addr string, mix *Mix) *HTTPTarget {
	return &HTTPTarget{
		client: &fasthttp.HostClient{
			Addr:                     addr,
			MaxConns:                 2048,
			MaxIdleConnDuration:      5 * time.Minute,
			ReadTimeout:              30 * time.Second,
			WriteTimeout:             30 * time.Second,
			MaxConnWaitTimeout:       30 * time.Second,
			NoDefaultUserAgentHeader: true,
		},
		url: "http://" + addr + "/hook",
		mix: mix,
	}
}

// WithMix is the same target (and connections) with another mix.
func (t *HTTPTarget) WithMix(m *Mix) *HTTPTarget {
	return &HTTPTarget{client: t.client, url: t.url, mix: m, closeEach: t.closeEach}
}

// Close drops the idle connections.
func (t *HTTPTarget) Close() { t.client.CloseIdleConnections() }

// NewWorker implements Doer.
func (t *HTTPTarget) NewWorker(seed uint64) Worker {
	w := &httpWorker{t: t, r: newRand(seed), req: fasthttp.AcquireRequest(), resp: fasthttp.AcquireResponse()}
	w.req.SetRequestURI(t.url)
	w.req.Header.SetMethod(fasthttp.MethodPost)
	w.req.Header.SetContentType("application/json")
	if t.closeEach {
		w.req.SetConnectionClose()
	}
	return w
}

type httpWorker struct {
	t    *HTTPTarget
	r    *rand.Rand
	req  *fasthttp.Request
	resp *fasthttp.Response
	body []byte
}

func (w *httpWorker) Do(context.Context) (string, bool) {
	key, _ := w.t.mix.Key(w.r)
	w.body = AppendBody(w.body[:0], key)
	w.req.Header.Set("X-Event-Id", key)
	w.req.SetBodyRaw(w.body)
	if err := w.t.client.Do(w.req, w.resp); err != nil {
		return "", false
	}
	st := w.resp.StatusCode()
	return outcomeLabel(w.resp.Header.Peek("Hookstamp-Outcome")), st >= 200 && st < 300
}

// outcomeLabel returns a constant string for the outcome header (no
// allocation per request); B0 has none.
func outcomeLabel(b []byte) string {
	for _, o := range outcomeNames {
		if string(b) == o {
			return o
		}
	}
	if len(b) == 0 {
		return ""
	}
	return "other"
}

var outcomeNames = []string{"replayed", "forwarded", "conflict", "released", "passthrough", "unavailable", "mismatch", "held", "accepted"}

// Prerecord sends every key once (conc at a time) so that later deliveries
// of them are repeats of recorded deliveries.
func Prerecord(ctx context.Context, t *HTTPTarget, keys []string, conc int) (failed int) {
	var next atomic.Int64
	var fails atomic.Int64
	done := make(chan struct{})
	for range conc {
		go func() {
			defer func() { done <- struct{}{} }()
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI(t.url)
			req.Header.SetMethod(fasthttp.MethodPost)
			req.Header.SetContentType("application/json")
			var body []byte
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(keys) {
					return
				}
				body = AppendBody(body[:0], keys[i])
				req.Header.Set("X-Event-Id", keys[i])
				req.SetBodyRaw(body)
				if err := t.client.Do(req, resp); err != nil || resp.StatusCode() != 200 {
					fails.Add(1)
				}
			}
		}()
	}
	for range conc {
		<-done
	}
	return int(fails.Load())
}
