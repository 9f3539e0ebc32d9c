// Package forward sends one delivery to the upstream and returns its complete
// response (SPEC §1 FORWARD, §4, §6).
//
// Its one promise beyond a plain HTTP client is that a delivery is written to
// the upstream at most once per call, and that Do reports precisely whether
// anything reached the upstream: failures before the first byte was written
// are ErrUnreachable (safe to release, never ambiguous); failures after are
// ErrTimeout or ErrNoAnswer (the upstream may have acted on the delivery).
// net/http's Transport cannot promise the first: it silently re-sends a
// request on a reused keep-alive connection when it considers the request
// replayable (an Idempotency-Key header or a GET with a rewindable body), and
// it spends two goroutines per connection. The Forwarder therefore keeps its
// own HTTP/1.1 connections (pool.go) and writes each request once, on one
// connection, from the caller's goroutine; answers are parsed with
// net/http's own http.ReadResponse.
package forward

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
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
	// X-Forwarded-For/-Proto/-Host and Forwarded are dropped, and so, unless
	// TrustedPeer, is every other header a proxy in front would have set
	// (X-Forwarded-*, X-Real-IP, X-Original-URL, …); everything else is
	// forwarded.
	Header http.Header
	Body   []byte
	// ClientIP becomes the whole X-Forwarded-For value; "" sends none. The
	// caller decides it: the peer address, or, when the peer is one of
	// server.trusted_proxies, the client address (or chain) it reports.
	ClientIP string
	// TrustedPeer is set when the request came from one of
	// server.trusted_proxies: the proxy headers it sent (X-Forwarded-Port,
	// -Prefix, X-Real-IP, …) are passed on. false drops them.
	TrustedPeer bool
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

// Forwarder sends deliveries upstream over its own connection pool (see
// pool.go). It is safe for concurrent use.
type Forwarder struct {
	maxBody     int64
	injectTrace func(context.Context, http.Header)
	dialTCP     dialFunc
	tlsConfig   *tls.Config
	tlsTimeout  time.Duration
	maxIdle     int
	maxConns    int
	idleTimeout time.Duration

	// pools maps "scheme://host:port" to its *hostPool. A sync.Map: every
	// forward looks its pool up, and a pool is added once per upstream.
	pools sync.Map
}

type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// New returns a Forwarder with its own HTTP/1.1 connections. Proxy settings
// from the environment are ignored on purpose: an HTTPS_PROXY meant for the
// host's egress would silently route deliveries through a proxy, whose own
// retries and timeouts would void the one-forward guarantee.
func New(opts Options) *Forwarder {
	opts = opts.withDefaults()
	dialer := &net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 30 * time.Second}
	return &Forwarder{
		maxBody:     opts.MaxResponseBody,
		injectTrace: opts.InjectTrace,
		dialTCP:     dialer.DialContext,
		tlsConfig:   opts.TLSConfig,
		tlsTimeout:  opts.TLSHandshakeTimeout,
		maxIdle:     opts.MaxIdleConnsPerHost,
		maxConns:    opts.MaxConnsPerHost,
		idleTimeout: opts.IdleConnTimeout,
	}
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
	f.pools.Range(func(_, p any) bool {
		p.(*hostPool).closeIdle()
		return true
	})
}

// Do sends r once and returns the upstream's complete response, whatever its
// status: a 503 is a Response, not an error. Errors match one of
// ErrUnreachable, ErrTimeout, ErrNoAnswer, ErrResponseTooLarge (errors.Is),
// except for a request that cannot be built (bad method or URL); when ctx
// itself ended, the error also matches ctx.Err().
//
// With ErrResponseTooLarge, Do also returns the Response with Status and
// Header (Body nil): the upstream did answer, only the body (and, past
// 1 MiB of head, the header fields that did not fit) was not kept.
func (f *Forwarder) Do(ctx context.Context, r *Request) (*Response, error) {
	u, err := url.Parse(r.URL)
	if err != nil {
		return nil, fmt.Errorf("forward: build request: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("forward: build request: unsupported URL %q (want http:// or https:// with a host)", r.URL)
	}
	if !validMethod(r.Method) {
		return nil, fmt.Errorf("forward: build request: invalid method %q", r.Method)
	}
	tctx := ctx
	if r.Timeout > 0 {
		var cancel context.CancelFunc
		tctx, cancel = context.WithTimeout(ctx, r.Timeout)
		defer cancel()
	}
	x := exchange{method: r.Method, host: u.Host}
	h := outgoingHeader(r)
	if u.User != nil {
		// Credentials in upstream.url are the gateway's to its upstream,
		// sent as Basic auth (as net/http's Client does); they replace an
		// Authorization the provider sent to the gateway.
		pw, _ := u.User.Password()
		h["Authorization"] = []string{"Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw))}
	}
	if f.injectTrace != nil {
		f.injectTrace(tctx, h)
	}
	if err := checkHeader(h); err != nil {
		return nil, x.failure(ctx, tctx, false, err) // refused before writing
	}

	p := f.pool(u.Scheme, hostPort(u), u.Hostname())
	c, err := p.get(tctx)
	if err != nil {
		return nil, x.failure(ctx, tctx, false, err)
	}
	// The caller's context ends the exchange by ending the connection's
	// I/O; a connection it touched is not reused.
	stop := context.AfterFunc(tctx, func() { _ = c.nc.SetDeadline(aLongTimeAgo) })
	mark := c.cc.written.Load()
	resp, reuse, err := f.roundTrip(tctx, c, r, u, h)
	// Read before the connection may be closed: closing a TLS connection
	// writes its close_notify alert.
	sent := c.cc.written.Load() != mark && !refusedByTLS(c, err)
	if !stop() {
		reuse = false
	}
	if reuse {
		p.put(c)
	} else {
		p.discard(c)
	}
	switch {
	case err == errTooLarge:
		return resp, fmt.Errorf("forward %s %s: %w: status %d, over %d bytes",
			r.Method, u.Host, ErrResponseTooLarge, resp.Status, f.maxBody)
	case err == errHeadTooLarge && resp != nil:
		return resp, fmt.Errorf("forward %s %s: %w: status %d, headers over %d bytes",
			r.Method, u.Host, ErrResponseTooLarge, resp.Status, maxResponseHead)
	}
	if err != nil {
		return nil, x.failure(ctx, tctx, sent, err)
	}
	return resp, nil
}

// aLongTimeAgo is a deadline in the past: setting it unblocks any I/O at
// once.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip writes the request on c and reads the complete answer. reuse
// says whether c can carry another request.
func (f *Forwarder) roundTrip(ctx context.Context, c *conn, r *Request, u *url.URL, h http.Header) (_ *Response, reuse bool, _ error) {
	if err := writeRequest(c.bw, r, u, h); err != nil {
		if resp, ok := f.earlyAnswer(ctx, c, r); ok {
			return resp, false, nil
		}
		return nil, false, err
	}
	return f.readAnswer(c, r)
}

// earlyAnswerWait bounds how long a failed write waits for an answer that
// may already have been sent (earlyAnswer).
const earlyAnswerWait = time.Second

// earlyAnswer reads, after the request could not be written whole, a final
// answer the upstream may have sent already: an upstream can refuse a
// delivery from its headers alone (401 for a bad signature, 413) and close
// without reading a large body, which makes the write fail. That answer is
// the upstream's word on the delivery; reporting "no answer" instead would
// hold the key (record.ambiguous: hold) or have the provider retry a
// delivery the upstream refused.
func (f *Forwarder) earlyAnswer(ctx context.Context, c *conn, r *Request) (*Response, bool) {
	wait := time.Now().Add(earlyAnswerWait)
	if d, ok := ctx.Deadline(); ok && d.Before(wait) {
		wait = d
	}
	_ = c.nc.SetReadDeadline(wait)
	if ctx.Err() != nil {
		return nil, false // ended: Do's AfterFunc may have set the deadline before us
	}
	resp, _, err := f.readAnswer(c, r)
	return resp, err == nil && resp.Status >= 200
}

// readAnswer reads the complete answer to the request just written on c.
func (f *Forwarder) readAnswer(c *conn, r *Request) (_ *Response, reuse bool, _ error) {
	req := &http.Request{Method: r.Method} // ReadResponse needs the method (HEAD)
	var resp *http.Response
	c.lim.left = maxResponseHead - int64(c.br.Buffered())
	buffered, _ := c.br.Peek(c.br.Buffered())
	c.lim.head = append(c.lim.head[:0], buffered...)
	defer func() {
		if cap(c.lim.head) > 16<<10 {
			c.lim.head = nil // an answer with huge headers: do not keep its buffer
		}
	}()
	for {
		var err error
		if resp, err = http.ReadResponse(c.br, req); err != nil {
			if out := truncatedAnswer(c.lim.head); out != nil && errors.Is(err, errHeadTooLarge) {
				return out, false, errHeadTooLarge
			}
			return nil, false, err
		}
		// A 101 was never asked for (Upgrade is not forwarded): the
		// connection is not HTTP any more and no final answer will come,
		// as with a malformed answer (ErrNoAnswer: sent, ambiguous).
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return nil, false, errSwitchedProtocols
		}
		// http.ReadResponse takes any three digits. A status below 100 is
		// no answer (RFC 9110 §15): passed on, "000" would reach the
		// provider as fasthttp's default 200 (a delivery lost as a
		// success) and "099" as a status line its client cannot parse.
		if resp.StatusCode < 100 {
			return nil, false, fmt.Errorf("%w %03d", errInvalidStatus, resp.StatusCode)
		}
		// 1xx answers are interim (RFC 9110 §15.2): the final one follows.
		if resp.StatusCode >= 200 {
			break
		}
	}
	c.lim.left = -1 // the body is bounded by MaxResponseBody
	if resp.Close && resp.Header["Connection"] == nil {
		// http.ReadResponse deletes a Connection header that says
		// "close", and with it the other headers it names as hop-by-hop.
		if v := connectionOf(c.lim.head); len(v) > 0 {
			resp.Header["Connection"] = v
		}
	}
	// resp.Body is closed only once read to its end: closing it earlier
	// would read the rest of the body (all of a too-large one) to keep
	// the connection usable. On every other path the connection is
	// discarded instead, which ends the body too.
	removeHopByHop(resp.Header)
	out := &Response{Status: resp.StatusCode, Header: resp.Header}
	body, err := readBody(resp, f.maxBody)
	if err != nil {
		return out, false, err
	}
	if err := resp.Body.Close(); err != nil {
		return out, false, err
	}
	out.Body = body
	// Reusable only if the answer had its own framing (a length, chunks,
	// or no body by definition), the upstream keeps the connection open,
	// and nothing more than the answer arrived or was announced.
	framed := resp.ContentLength >= 0 || slices.Contains(resp.TransferEncoding, "chunked") || resp.Body == http.NoBody
	return out, framed && !resp.Close && !bodylessAnnouncingBody(resp, r.Method) && c.br.Buffered() == 0, nil
}

// bodylessAnnouncingBody reports an answer that has no body by its status
// but whose head announces one all the same (Transfer-Encoding, or a
// Content-Length other than 0): a 204, which a server must not send so
// (RFC 9110 §8.6, RFC 9112 §6.1), or a 304 to anything but a GET or HEAD
// (to those, its length fields describe the representation a conditional
// GET would have got, RFC 9110 §8.6, and announce nothing). ReadResponse
// rightly reads no body after either, but an upstream that announced one
// is likely to write it, and bytes arriving after the connection was
// pooled would be read as the start of the next delivery's answer, past
// the idle check: that delivery, processed, would fail as "no answer" and
// be sent again.
func bodylessAnnouncingBody(resp *http.Response, method string) bool {
	switch {
	case resp.StatusCode == http.StatusNoContent:
	case resp.StatusCode == http.StatusNotModified && method != http.MethodGet && method != http.MethodHead:
	default:
		return false
	}
	if len(resp.TransferEncoding) > 0 {
		return true
	}
	cl, ok := resp.Header["Content-Length"]
	return ok && (len(cl) != 1 || textproto.TrimString(cl[0]) != "0")
}

// connectionOf returns the Connection field values of the final answer in
// head, the bytes read up to and past its header section (interim 1xx
// answers first), or nil.
func connectionOf(head []byte) []string {
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return nil
		}
		h, err := tp.ReadMIMEHeader()
		if err != nil {
			return nil
		}
		_, status, _ := strings.Cut(line, " ")
		if code, _ := strconv.Atoi(status[:min(3, len(status))]); code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
			continue
		}
		return h["Connection"]
	}
}

// writeRequest writes one HTTP/1.1 request with its body and flushes it.
// Headers go out as net/http writes them (sorted, one line per value). A
// body, even an empty one for methods that carry content, is framed by
// Content-Length: no chunked encoding, so the upstream always knows the
// request's length.
func writeRequest(w *bufio.Writer, r *Request, u *url.URL, h http.Header) error {
	w.WriteString(r.Method)
	w.WriteByte(' ')
	w.WriteString(u.RequestURI())
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(u.Host)
	w.WriteString("\r\n")
	if len(r.Body) > 0 || !bodyless(r.Method) {
		w.WriteString("Content-Length: ")
		w.WriteString(strconv.Itoa(len(r.Body)))
		w.WriteString("\r\n")
	}
	if err := h.WriteSubset(w, notWritten); err != nil {
		return err
	}
	w.WriteString("\r\n")
	w.Write(r.Body)
	return w.Flush()
}

// notWritten are the headers writeRequest sets itself, or never sends.
var notWritten = map[string]bool{"Host": true, "Content-Length": true, "Transfer-Encoding": true}

// bodyless methods carry no content unless they are given some.
func bodyless(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodDelete, http.MethodOptions, http.MethodTrace, http.MethodConnect:
		return true
	}
	return false
}

// validMethod: a method is an RFC 9110 token.
func validMethod(m string) bool {
	return m != "" && strings.IndexFunc(m, func(r rune) bool { return !httpguts.IsTokenRune(r) }) < 0
}

// checkHeader refuses what cannot be written as a header field (a name
// that is not a token, a value with CR, LF or NUL), as net/http does.
func checkHeader(h http.Header) error {
	for name, values := range h {
		if !httpguts.ValidHeaderFieldName(name) {
			return fmt.Errorf("invalid header field name %q", name)
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("invalid header field value for %q", name)
			}
		}
	}
	return nil
}

// hostPort is u's host with its port, the scheme's default when absent.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// refusedByTLS reports whether err is the upstream's TLS layer refusing a
// new connection. Under TLS 1.3 a server checks the client's certificate
// after the client has finished its side of the handshake, so the refusal
// (certificate_required, bad_certificate, unknown_ca…) arrives as the
// answer to the request already written: the request never reached the
// application, which a TLS server cannot hand data before it accepted the
// handshake. Only handshake alerts, and only on a connection's first
// exchange, count.
func refusedByTLS(c *conn, err error) bool {
	var oe *net.OpError
	if c.reused || !errors.As(err, &oe) || oe.Op != "remote error" || oe.Err == nil {
		return false
	}
	switch strings.TrimPrefix(oe.Err.Error(), "tls: ") {
	case "bad certificate", "unsupported certificate", "revoked certificate", "expired certificate",
		"unknown certificate", "unknown certificate authority", "certificate required", "access denied",
		"handshake failure", "insufficient security", "protocol version not supported":
		return true
	}
	return false
}

// exchange names one forward in errors.
type exchange struct{ method, host string }

// failure classifies a failed exchange: sent says whether any byte of the
// request may have reached the upstream.
func (x exchange) failure(ctx, tctx context.Context, sent bool, err error) error {
	kind := ErrNoAnswer
	switch {
	case !sent:
		kind = ErrUnreachable
	case tctx.Err() == context.DeadlineExceeded:
		kind = ErrTimeout
	}
	if ctx.Err() != nil {
		return fmt.Errorf("forward %s %s: %w: %w: %w", x.method, x.host, kind, ctx.Err(), err)
	}
	return fmt.Errorf("forward %s %s: %w: %w", x.method, x.host, kind, err)
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
