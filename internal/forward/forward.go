// Package forward sends one delivery to the upstream and returns its complete
// response (SPEC §1 FORWARD, §4, §6).
//
// A delivery is written at most once per call, and Do reports whether
// anything reached the upstream: ErrUnreachable before the first byte
// (safe to release), ErrTimeout or ErrNoAnswer after (ambiguous).
// net/http's Transport silently re-sends requests it deems replayable on a
// reused connection, so the Forwarder keeps its own HTTP/1.1 connections
// (pool.go) and parses answers with http.ReadResponse.
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
	// MaxResponseBody is the largest response body read; a larger one fails
	// with ErrResponseTooLarge. Default 10 MiB.
	MaxResponseBody int64
	// DialTimeout bounds the TCP connect (and so does the request's
	// Timeout). Default 5s.
	DialTimeout time.Duration
	// TLSHandshakeTimeout bounds the TLS handshake. Default 5s.
	TLSHandshakeTimeout time.Duration
	// TLSConfig is used for https upstreams; nil means the system roots.
	TLSConfig *tls.Config
	// MaxIdleConnsPerHost is how many keep-alive connections to one
	// upstream are kept; it should cover the concurrent forwards. Default 256.
	MaxIdleConnsPerHost int
	// MaxConnsPerHost caps the connections to one upstream; forwards beyond
	// it wait within their Timeout. Default 0: no cap.
	MaxConnsPerHost int
	// IdleConnTimeout closes connections idle this long. The default, 4s,
	// is below common upstreams' keep-alive (5s), so that the gateway closes
	// them: an upstream closing one as a delivery is written on it is an
	// ambiguous failure.
	IdleConnTimeout time.Duration
	// InjectTrace, if not nil, is called last on every outgoing request's
	// headers with its context, to add trace context; it may overwrite any
	// header.
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
	// ClientIP becomes the whole X-Forwarded-For value; "" sends none.
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

	pools sync.Map // "scheme://host:port" → *hostPool
}

type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// New returns a Forwarder with its own HTTP/1.1 connections. Proxy settings
// from the environment are ignored: a proxy's own retries would void the
// one-forward guarantee.
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

// Do sends r once and returns the upstream's complete response, whatever
// its status. Errors match ErrUnreachable, ErrTimeout, ErrNoAnswer or
// ErrResponseTooLarge or ErrUnreadableAnswer (with which the Response has
// Status and the Header that fit, Body nil: see HeadOnly), or ctx.Err()
// too when ctx ended; a request that cannot be built matches none.
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
		// upstream.url's credentials replace the provider's Authorization.
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
	stop := context.AfterFunc(tctx, func() { _ = c.nc.SetDeadline(aLongTimeAgo) })
	mark := c.cc.written.Load()
	resp, reuse, err := f.roundTrip(tctx, c, r, u, h)
	// Before the connection is closed: closing TLS writes close_notify.
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
	case (errors.Is(err, errUnreadableHead) || errors.Is(err, errBrokenBody)) && resp != nil:
		// The upstream answered, and may have acted: reported as no
		// answer, the provider's retry would be forwarded again.
		return resp, fmt.Errorf("forward %s %s: %w: status %d: %w", r.Method, u.Host, ErrUnreadableAnswer, resp.Status, err)
	}
	if err != nil {
		return nil, x.failure(ctx, tctx, sent, err)
	}
	return resp, nil
}

// aLongTimeAgo is a deadline in the past: it unblocks any I/O at once.
var aLongTimeAgo = time.Unix(1, 0)

// roundTrip writes the request on c and reads the complete answer. reuse
// says whether c can carry another request.
func (f *Forwarder) roundTrip(ctx context.Context, c *conn, r *Request, u *url.URL, h http.Header) (_ *Response, reuse bool, _ error) {
	if err := writeRequest(c.bw, r, u, h); err != nil {
		if resp, aerr := f.earlyAnswer(ctx, c, r); resp != nil {
			return resp, false, aerr
		}
		return nil, false, err
	}
	return f.readAnswer(c, r)
}

// earlyAnswerWait bounds how long a failed write waits for an answer that
// may already have been sent (earlyAnswer).
const earlyAnswerWait = time.Second

// earlyAnswer reads, after the request could not be written whole, an
// answer the upstream may have sent already: one refusing a delivery from
// its headers alone (401, 413) closes without reading the body. That
// answer is its word on the delivery, not "no answer".
func (f *Forwarder) earlyAnswer(ctx context.Context, c *conn, r *Request) (*Response, error) {
	wait := time.Now().Add(earlyAnswerWait)
	if d, ok := ctx.Deadline(); ok && d.Before(wait) {
		wait = d
	}
	_ = c.nc.SetReadDeadline(wait)
	if ctx.Err() != nil {
		return nil, nil // Do's AfterFunc may have set the deadline first
	}
	resp, _, err := f.readAnswer(c, r)
	if resp == nil || resp.Status < 200 || err != nil && !answered(err) {
		return nil, nil
	}
	return resp, err
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
			// ReadResponse returns once a head ends: a whole one in
			// c.lim.head is one it refused.
			if out := unreadableAnswer(c.lim.head); out != nil {
				return out, false, fmt.Errorf("%w: %w", errUnreadableHead, err)
			}
			return nil, false, err
		}
		// A 101 was never asked for: no final answer will come.
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return nil, false, errSwitchedProtocols
		}
		// ReadResponse takes any three digits; below 100 is no answer
		// (RFC 9110 §15), and "000" would reach the provider as a 200.
		if resp.StatusCode < 100 {
			return nil, false, fmt.Errorf("%w %03d", errInvalidStatus, resp.StatusCode)
		}
		if resp.StatusCode >= 200 {
			break
		}
	}
	c.lim.left = -1 // the body is bounded by MaxResponseBody
	if resp.Close && resp.Header["Connection"] == nil {
		// ReadResponse drops "Connection: close", and with it the names
		// of the hop-by-hop headers it lists.
		if v := connectionOf(c.lim.head); len(v) > 0 {
			resp.Header["Connection"] = v
		}
	}
	// Closing resp.Body early would read the rest of a too-large body:
	// every path but the full read discards the connection instead.
	removeHopByHop(resp.Header)
	removeInvalidNames(resp.Header)
	out := &Response{Status: resp.StatusCode, Header: resp.Header}
	body, err := readBody(resp, f.maxBody)
	if err == errTooLarge {
		return out, false, err
	}
	if err == nil {
		err = resp.Body.Close()
	}
	if err != nil {
		return out, false, fmt.Errorf("%w: %w", errBrokenBody, err)
	}
	out.Body = body
	framed := resp.ContentLength >= 0 || slices.Contains(resp.TransferEncoding, "chunked") || resp.Body == http.NoBody
	return out, framed && !resp.Close && !bodylessAnnouncingBody(resp, r.Method) && c.br.Buffered() == 0, nil
}

// bodylessAnnouncingBody reports a 204, or a 304 to other than GET or HEAD,
// whose head announces a body (RFC 9110 §8.6). ReadResponse reads none, but
// one written anyway would be read as the next delivery's answer on a
// pooled connection.
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

// writeRequest writes one HTTP/1.1 request with its body and flushes it,
// framed by Content-Length (never chunked), even an empty one for methods
// that carry content.
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
// new connection. Under TLS 1.3 the client certificate is checked after
// the client's side of the handshake, so the refusal arrives as the answer
// to a request the application never got. Only handshake alerts on a
// connection's first exchange count.
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

// readBody reads the whole response body, at most limit bytes, into an
// array of its size: it is recorded and cached as it is.
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
		// Reading to EOF lets the connection be reused.
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
