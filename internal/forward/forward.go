// Package forward sends one delivery to the upstream and returns its complete
// response (SPEC §1 FORWARD, §4, §6).
//
// Its one promise beyond a plain HTTP client is that a delivery is written to
// the upstream at most once per call: net/http's Transport silently re-sends a
// request on a reused keep-alive connection when it considers the request
// replayable, and a request carrying an Idempotency-Key header (or any GET)
// counts as replayable when its body can be rewound. The state machine counts
// forwards per claim, so Do builds every request so that net/http can never
// replay it, and reports precisely whether anything reached the upstream:
// failures before the first byte was written are ErrUnreachable (safe to
// release, never ambiguous); failures after are ErrTimeout or ErrNoAnswer
// (the upstream may have acted on the delivery).
package forward

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"time"
)

// Defaults applied by New to zero Options fields.
const (
	DefaultMaxResponseBody     = 10 << 20
	DefaultDialTimeout         = 5 * time.Second
	DefaultTLSHandshakeTimeout = 5 * time.Second
	DefaultMaxIdleConnsPerHost = 256
	DefaultIdleConnTimeout     = 4 * time.Second
)

// Options tunes a Forwarder. The zero value is usable: every zero field takes
// its documented default.
type Options struct {
	// MaxResponseBody is the largest upstream response body read into memory;
	// a larger one fails with ErrResponseTooLarge. Default 10 MiB.
	MaxResponseBody int64

	// DialTimeout bounds the TCP connect. Default 5s. The request's own
	// Timeout bounds it too.
	DialTimeout time.Duration

	// TLSHandshakeTimeout bounds the TLS handshake with https upstreams.
	// Default 5s.
	TLSHandshakeTimeout time.Duration

	// TLSConfig is used for https upstreams (custom roots, client
	// certificates). Nil means the system roots.
	TLSConfig *tls.Config

	// MaxIdleConnsPerHost is how many keep-alive connections to one upstream
	// are kept for reuse. It should cover the concurrent forwards to that
	// upstream, or bursts open and close connections. Default 256.
	MaxIdleConnsPerHost int

	// MaxConnsPerHost caps the connections to one upstream, idle or busy;
	// forwards beyond it wait for a connection (within their Timeout).
	// Default 0: no cap.
	MaxConnsPerHost int

	// IdleConnTimeout closes keep-alive connections idle this long. The
	// default, 4s, is below the keep-alive timeout of common upstream servers
	// (Node.js, uvicorn, Apache: 5s) so that the gateway, not the upstream,
	// closes idle connections: an upstream closing a connection just as a
	// delivery is written on it is an ambiguous failure (ErrNoAnswer).
	IdleConnTimeout time.Duration

	// InjectTrace, if not nil, is called last on every outgoing request's
	// headers with the request's context, to add trace context (W3C
	// traceparent). It may overwrite any header. With OpenTelemetry:
	//
	//	func(ctx context.Context, h http.Header) {
	//		otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(h))
	//	}
	InjectTrace func(ctx context.Context, h http.Header)
}

// Request is one delivery to forward. Do does not modify it.
type Request struct {
	Method string
	// URL is the full upstream URL, path suffix and query included (JoinURL).
	URL string
	// Header holds the client's headers. Hop-by-hop headers and client-sent
	// X-Forwarded-*/Forwarded are dropped; everything else is forwarded.
	Header http.Header
	Body   []byte
	// ClientIP becomes the whole X-Forwarded-For value; "" sends none. The
	// caller decides it: the peer address, or, when the peer is one of
	// server.trusted_proxies, the client address (or chain) it reports.
	ClientIP string
	// Proto is the scheme the client used ("http" or "https"), sent as
	// X-Forwarded-Proto; "" sends none.
	Proto string
	// Host is the Host the client used, sent as X-Forwarded-Host; "" sends
	// none. The upstream request's own Host is the upstream URL's host.
	Host string
	// KeyHeader names the header carrying Key upstream (e.g.
	// "Idempotency-Key"); it replaces any client-sent value. Nothing is set
	// when KeyHeader or Key is "".
	KeyHeader string
	Key       string
	// Timeout bounds the whole exchange: connect, send, and reading the full
	// response. 0 means only ctx bounds it.
	Timeout time.Duration
}

// Response is the upstream's complete answer.
type Response struct {
	Status int
	// Header is the upstream's response header without hop-by-hop headers.
	Header http.Header
	Body   []byte
}

// Forwarder sends deliveries upstream over its own connection pool. It is
// safe for concurrent use.
type Forwarder struct {
	transport   *http.Transport
	maxBody     int64
	injectTrace func(context.Context, http.Header)
}

// New returns a Forwarder with its own HTTP/1.1 Transport. Proxy settings
// from the environment are ignored on purpose: an HTTPS_PROXY meant for the
// host's egress would silently route deliveries through a proxy, whose own
// retries and timeouts would void the one-forward guarantee.
func New(opts Options) *Forwarder {
	opts = opts.withDefaults()
	dialer := &net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 30 * time.Second}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	t := &http.Transport{
		Proxy:               nil,
		DialContext:         countingDialer(dialer.DialContext),
		TLSClientConfig:     opts.TLSConfig,
		TLSHandshakeTimeout: opts.TLSHandshakeTimeout,
		Protocols:           protocols,
		MaxIdleConnsPerHost: opts.MaxIdleConnsPerHost,
		MaxConnsPerHost:     opts.MaxConnsPerHost,
		IdleConnTimeout:     opts.IdleConnTimeout,
		// The body is recorded and replayed byte for byte: never ask for
		// gzip on the client's behalf nor decompress the upstream's answer.
		DisableCompression: true,
	}
	return &Forwarder{transport: t, maxBody: opts.MaxResponseBody, injectTrace: opts.InjectTrace}
}

func (o Options) withDefaults() Options {
	if o.MaxResponseBody <= 0 {
		o.MaxResponseBody = DefaultMaxResponseBody
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.TLSHandshakeTimeout <= 0 {
		o.TLSHandshakeTimeout = DefaultTLSHandshakeTimeout
	}
	if o.MaxIdleConnsPerHost <= 0 {
		o.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	if o.IdleConnTimeout <= 0 {
		o.IdleConnTimeout = DefaultIdleConnTimeout
	}
	return o
}

// Close closes the idle connections. In-flight forwards are not affected;
// the Forwarder stays usable.
func (f *Forwarder) Close() {
	f.transport.CloseIdleConnections()
}

// Do sends r once and returns the upstream's complete response, whatever its
// status: a 503 is a Response, not an error. Errors match one of
// ErrUnreachable, ErrTimeout, ErrNoAnswer, ErrResponseTooLarge (errors.Is),
// except for a request that cannot be built (bad method or URL); when ctx
// itself ended, the error also matches ctx.Err().
//
// With ErrResponseTooLarge, Do also returns the Response with Status and
// Header (Body nil): the upstream did answer, only the body was not kept.
func (f *Forwarder) Do(ctx context.Context, r *Request) (*Response, error) {
	tctx := ctx
	if r.Timeout > 0 {
		var cancel context.CancelFunc
		tctx, cancel = context.WithTimeout(ctx, r.Timeout)
		defer cancel()
	}
	var w wire
	tctx = httptrace.WithClientTrace(tctx, &httptrace.ClientTrace{GotConn: w.gotConn})

	req, err := http.NewRequestWithContext(tctx, r.Method, r.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("forward: build request: %w", err)
	}
	// No GetBody, and never nil or http.NoBody, even when empty: net/http
	// then has no way to replay the request (see Request.isReplayable).
	// An empty body goes out chunked (one zero-size chunk) for POST, PUT,
	// PATCH and unknown methods; GET-like methods go without a body.
	req.Body = io.NopCloser(bytes.NewReader(r.Body))
	req.ContentLength = int64(len(r.Body))
	req.GetBody = nil
	req.Header = outgoingHeader(r)
	if f.injectTrace != nil {
		f.injectTrace(tctx, req.Header)
	}

	// The Transport directly, not an http.Client: a 3xx is the upstream's
	// answer to relay, never a redirect to follow, and there is no cookie jar.
	resp, err := f.transport.RoundTrip(req)
	if err != nil {
		return nil, failure(ctx, tctx, req, w.sent(), err)
	}
	defer resp.Body.Close()

	removeHopByHop(resp.Header)
	out := &Response{Status: resp.StatusCode, Header: resp.Header}
	body, err := readBody(resp, f.maxBody)
	if err == errTooLarge {
		return out, fmt.Errorf("forward %s %s: %w: status %d, over %d bytes",
			req.Method, req.URL.Host, ErrResponseTooLarge, resp.StatusCode, f.maxBody)
	}
	if err != nil {
		return nil, failure(ctx, tctx, req, true, err) // an answer began: it was sent
	}
	out.Body = body
	return out, nil
}

// failure classifies a failed exchange: sent says whether any byte of the
// request may have reached the upstream.
func failure(ctx, tctx context.Context, req *http.Request, sent bool, err error) error {
	kind := ErrNoAnswer
	switch {
	case !sent:
		kind = ErrUnreachable
	case tctx.Err() == context.DeadlineExceeded:
		kind = ErrTimeout
	}
	if ctx.Err() != nil {
		return fmt.Errorf("forward %s %s: %w: %w: %w", req.Method, req.URL.Host, kind, ctx.Err(), err)
	}
	return fmt.Errorf("forward %s %s: %w: %w", req.Method, req.URL.Host, kind, err)
}

// readBody reads the whole response body, at most limit bytes. The body is
// recorded and cached as it is returned, so its backing array is sized to
// it: exactly, when the upstream sent Content-Length (the common case);
// otherwise it is copied out of the growing buffer once read.
func readBody(resp *http.Response, limit int64) ([]byte, error) {
	if resp.Body == http.NoBody {
		return nil, nil
	}
	if resp.ContentLength > limit {
		return nil, errTooLarge
	}
	if n := resp.ContentLength; n >= 0 {
		body := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, body); err != nil {
			return nil, err
		}
		// Nothing may follow the declared length; net/http enforces it,
		// and reading to EOF lets the connection be reused.
		var one [1]byte
		if m, err := resp.Body.Read(one[:]); m > 0 {
			return nil, fmt.Errorf("response body longer than its Content-Length %d", n)
		} else if err != nil && err != io.EOF {
			return nil, err
		}
		return body, nil
	}
	buf := bytes.NewBuffer(make([]byte, 0, bytes.MinRead))
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, limit+1)); err != nil {
		return nil, err
	}
	if int64(buf.Len()) > limit {
		return nil, errTooLarge
	}
	return bytes.Clone(buf.Bytes()), nil
}
