package ingress

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookstamp/hookstamp/internal/extract"
	"github.com/hookstamp/hookstamp/internal/forward"
	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// Engine is the state machine, as the ingress uses it: Handle for a
// delivery to deduplicate, Passthrough for a request the route does not
// deduplicate.
type Engine interface {
	Handle(ctx context.Context, p *idempotency.Policy, d idempotency.Delivery, fwd idempotency.ForwardFunc) idempotency.Result
	Passthrough(ctx context.Context, fwd idempotency.ForwardFunc) idempotency.Result
}

// Forwarder sends one request upstream.
type Forwarder interface {
	Do(ctx context.Context, r *forward.Request) (*forward.Response, error)
}

// Event describes one finished request on a route, for metrics and logs.
type Event struct {
	Route  string
	Method string
	Key    string // empty when no key was extracted
	Source string
	Result *idempotency.Result
	// Duration is how long the request took from when the handler began
	// (reading a body past fasthttp's 8 KiB prefetch included).
	Duration time.Duration
}

// Options configure a Server.
type Options struct {
	Routes    []*Route
	Engine    Engine
	Forwarder Forwarder
	// BodyLimit is server.body_limit in bytes (larger: 413 too_large);
	// 0 is Fiber's default, 4 MiB.
	BodyLimit    int
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	// TrustedProxies are the peers whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
	// Middleware runs before the gateway handler (e.g. the OTel server span).
	Middleware []fiber.Handler
	// Observe is called once per finished route request (nil = none).
	Observe func(ctx context.Context, ev *Event)
	// ObserveUpstream is called after every forward to the upstream of
	// route with its duration, failures included (nil = none).
	ObserveUpstream func(ctx context.Context, route string, d time.Duration)
	// Around runs answer as the Middleware would have run the handler, for
	// requests fasthttp refuses before any middleware ran (a header it
	// cannot read), so that they get their server span too (nil = answer
	// alone).
	Around func(c *fiber.Ctx, answer func(*fiber.Ctx) error) error
	Logger *slog.Logger
}

// Server is the webhook-facing HTTP server.
type Server struct {
	o      Options
	app    *fiber.App
	router *router

	// abandon is cancelled when shutdown gives up waiting: forwards still
	// in flight are cut and their claims released.
	abandon  context.Context
	cancel   context.CancelFunc
	inflight sync.WaitGroup
	// drainMu orders every handler's inflight.Add before Shutdown's Wait
	// (a WaitGroup's rule); once draining, handlers refuse (enter).
	drainMu  sync.RWMutex
	draining bool
	bufs     sync.Pool // keys
	bodies   sync.Pool // request bodies (readBody)

	lnMu sync.Mutex
	ln   *connListener // set by Serve
}

// MaxHeaderBytes bounds the request line and headers of one request
// (fasthttp's read buffer, held per connection); larger ones get 431 before
// any route sees them. Fiber's 4 KiB default is too tight for a provider's
// headers after a CDN and a service mesh have added theirs (a mesh's client
// certificate header alone can pass 2 KiB); 16 KiB is the common ceiling
// (Node.js, HAProxy). Signature headers are capped separately, at
// verify.MaxHeaderLen.
const MaxHeaderBytes = 16 << 10

// New builds the server; call Serve to start it.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.BodyLimit <= 0 {
		o.BodyLimit = fiber.DefaultBodyLimit // as Fiber would; readBody reads it
	}
	s := &Server{o: o, router: newRouter(o.Routes)}
	s.abandon, s.cancel = context.WithCancel(context.Background())
	s.bufs.New = func() any { b := make([]byte, 0, 256); return &b }
	s.bodies.New = func() any { b := make([]byte, 0, 4<<10); return &b }
	methods := requestMethods(o.Routes)
	s.app = fiber.New(fiber.Config{
		RequestMethods:        methods,
		BodyLimit:             o.BodyLimit,
		StreamRequestBody:     true, // read by readBody, as it arrives
		ReadBufferSize:        MaxHeaderBytes,
		ReadTimeout:           o.ReadTimeout,
		WriteTimeout:          o.WriteTimeout,
		IdleTimeout:           2 * time.Minute,
		DisableStartupMessage: true,
		ErrorHandler:          s.errorHandler,
		// Keys and bodies are copied out where they outlive the handler.
		Immutable: false,
		// A body is forwarded, fingerprinted and verified as sent: fasthttp
		// would otherwise parse a multipart one and rebuild it from the
		// parsed form (part headers lost, fields in map order), and refuse
		// one it cannot parse with a bare 400.
		DisablePreParseMultipartForm: true,
	})
	// Every request's context descends from abandon (its values, such as
	// the server span, are added by the middleware below): cutting
	// abandoned deliveries at shutdown costs nothing per request.
	s.app.Use(func(c *fiber.Ctx) error {
		c.SetUserContext(s.abandon)
		return c.Next()
	})
	for _, m := range o.Middleware {
		s.app.Use(m)
	}
	s.app.All("/*", s.handle)
	srv := s.app.Server()
	srv.HeaderReceived = s.headerReceived
	srv.Handler = refuseUnknownMethods(methods, srv.Handler)
	// Answers given while draining say "Connection: close": fasthttp
	// closes the connection after them anyway, and a client that was told
	// to keep it (a provider's pool, the load balancer's) would send its
	// next delivery into the closed socket — a failure after sending, which
	// a balancer does not retry on another replica — instead of dialling
	// one that serves.
	srv.CloseOnShutdown = true
	return s
}

// App exposes the Fiber app (tests use app.Test).
func (s *Server) App() *fiber.App { return s.app }

// Serve accepts connections on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	cl := newConnListener(ln)
	s.lnMu.Lock()
	s.ln = cl
	s.lnMu.Unlock()
	return s.app.Listener(cl)
}

// Shutdown stops accepting, waits for in-flight deliveries until ctx is
// done, then abandons the rest: their forwards are cut and their claims
// released (SPEC §6) before Shutdown returns.
func (s *Server) Shutdown(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- s.app.Shutdown() }()
	// Connections that never carried a request would hold the drain for
	// read_timeout (see connListener). Closing them once is not enough:
	// one accepted just before the listener closed may be registered after
	// the first pass.
	s.lnMu.Lock()
	cl := s.ln
	s.lnMu.Unlock()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var err error
wait:
	for {
		if cl != nil {
			cl.closeUnused()
		}
		select {
		case err = <-done:
			break wait
		case <-ctx.Done():
			s.cancel()
			err = ctx.Err()
			break wait
		case <-tick.C:
		}
	}
	// Handlers that were cut settle their claims within OpTimeout. Any
	// that begins from now on refuses (enter).
	s.drainMu.Lock()
	s.draining = true
	s.drainMu.Unlock()
	waited := make(chan struct{})
	go func() { s.inflight.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		s.o.Logger.Error("shutdown: deliveries still settling after abandon; their claims expire with their lease")
	}
	s.cancel()
	return err
}

// Conns reports how many client connections are open and how many of them
// have sent anything (tests use it to know a connection was accepted).
func (s *Server) Conns() (open, used int) {
	s.lnMu.Lock()
	cl := s.ln
	s.lnMu.Unlock()
	if cl == nil {
		return 0, 0
	}
	return cl.counts()
}

// enter counts a request in flight, unless Shutdown has stopped waiting
// for them.
func (s *Server) enter() bool {
	s.drainMu.RLock()
	defer s.drainMu.RUnlock()
	if s.draining {
		return false
	}
	s.inflight.Add(1)
	return true
}

func (s *Server) handle(c *fiber.Ctx) error {
	start := time.Now()
	if !s.enter() {
		// It arrived (its header, and a body's first 8 KiB) after
		// shutdown_timeout ran out: the process is about to exit. Taken on,
		// it would meet closed stores; refused, the provider retries it at
		// another replica.
		c.Context().SetConnectionClose()
		return errShuttingDown
	}
	defer s.inflight.Done()
	chunked, declared, status, problem := framing(&c.Request().Header)
	if problem != "" {
		c.Context().SetConnectionClose()
		return writeProblem(c, status, "", problem, 0)
	}
	fields := 0
	if chunked {
		fields = c.Request().Header.Len()
	}
	release, err := s.readBody(c.Context(), declared)
	if err != nil {
		return err // errorHandler: 413 too_large on the route, 408, 400
	}
	defer release()
	if chunked {
		if c.Request().Header.Len() != fields {
			// Trailer fields, read with the last chunk, after framing
			// checked the header: fasthttp unfolds a folded trailer line
			// in its read buffer as it does a header line (obsFolded),
			// and what follows on the connection would be misread. No
			// webhook sends trailers: nothing behind them is read.
			c.Context().SetConnectionClose()
		}
		dropTrailers(&c.Request().Header) // read with the last chunk
	}

	route, rest := s.router.match(c.Method(), string(c.Request().URI().Path()))
	if route == nil {
		return writeProblem(c, http.StatusNotFound, "", "no route is configured for this path", 0)
	}
	c.Locals(routeLocal{}, route)
	ctx := c.UserContext() // descends from s.abandon

	ev := Event{Route: route.Name, Method: Method(c)}
	res := s.decide(ctx, c, route, rest, &ev)
	ev.Result = &res
	ev.Duration = time.Since(start)
	annotateSpan(ctx, &ev)
	if s.o.Observe != nil {
		s.o.Observe(ctx, &ev)
	}
	return answer(c, &res)
}

// decide runs the checks of SPEC §1 in order — method, signature, key,
// fingerprint — and hands the delivery to the state machine.
func (s *Server) decide(ctx context.Context, c *fiber.Ctx, route *Route, rest string, ev *Event) idempotency.Result {
	fwd := func(ctx context.Context) (*idempotency.Upstream, error) {
		return s.forward(ctx, c, route, rest, ev.Key)
	}
	dedups := route.dedups(c.Method())
	if !dedups && route.Verifier == nil {
		return s.o.Engine.Passthrough(ctx, fwd)
	}
	req := newFastRequest(c)
	// The sender is known before the signature is checked, so that the
	// log line of a forgery names who sent it.
	ev.Source = s.source(c, route)
	if refused := s.unverified(route, req, ev); refused != nil {
		return *refused
	}
	if !dedups {
		return s.o.Engine.Passthrough(ctx, fwd)
	}

	bp := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(bp)
	key, err := route.Extractor.Key(req, (*bp)[:0])
	switch {
	case errors.Is(err, extract.ErrInvalidKey):
		// The refused key is logged and put on the span (SPEC §7: keys
		// logged), so that an operator can tell which event was refused.
		ev.Key = loggable(key)
		return idempotency.Result{Outcome: idempotency.InvalidKey, Status: http.StatusBadRequest,
			Detail: "invalid idempotency key: " + safeDetail(err.Error()), Err: err}
	case err != nil || len(key) == 0:
		// No key. A body the JSON sources could not parse says why.
		if !route.KeyRequired {
			return s.o.Engine.Passthrough(ctx, fwd)
		}
		detail := "no idempotency key found in the configured sources"
		if errors.Is(err, extract.ErrMalformedBody) {
			detail = "no idempotency key found: the body is not valid JSON"
		}
		return idempotency.Result{Outcome: idempotency.MissingKey, Status: http.StatusBadRequest, Detail: detail, Err: err}
	}
	*bp = key[:0]
	ev.Key = string(key)
	d := idempotency.Delivery{
		Ref:    idempotency.Ref{Route: route.Name, Key: ev.Key},
		Source: ev.Source,
	}
	if refused := fingerprint(route, req, &d); refused != nil {
		return *refused
	}
	return s.o.Engine.Handle(ctx, route.Policy, d, fwd)
}

// unverified checks the signature of a request on a route that verifies
// them, and returns its refusal, or nil. A route that verifies signatures
// verifies every request it forwards, deduplicated or not: a method it
// passes through would otherwise reach the upstream unverified.
func (s *Server) unverified(route *Route, req fastRequest, ev *Event) *idempotency.Result {
	if route.Verifier == nil {
		return nil
	}
	err := route.Verifier.Verify(req)
	if err == nil {
		return nil
	}
	// The key the request names is logged and put on the span (SPEC §7:
	// keys logged), never claimed: an operator whose secret is wrong
	// learns which events to have resent.
	ev.Key = s.refusedKey(route, req)
	return &idempotency.Result{Outcome: idempotency.Unverified, Status: http.StatusUnauthorized,
		Detail: "signature verification failed: " + safeDetail(err.Error()), Err: err}
}

// fingerprint sets d's fingerprint as the route's settings say, or
// returns the refusal of a body whose fingerprint would be ambiguous.
func fingerprint(route *Route, req fastRequest, d *idempotency.Delivery) *idempotency.Result {
	fp := route.Fingerprinter
	if fp == nil {
		return nil
	}
	if spec := fp.Duplicate(req); spec != "" {
		// Digested by its first member and read by the application by
		// its last, the field would hide a change from the fingerprint.
		return &idempotency.Result{Outcome: idempotency.InvalidKey, Status: http.StatusBadRequest,
			Detail: "the JSON body names a member on the path of fingerprint field " + spec +
				" more than once: which one the application reads is not known, so the delivery is not deduplicated",
			Err: extract.ErrDuplicateMember}
	}
	d.Fingerprint = fp.Fingerprint(req)
	if fp.Mode() == extract.FingerprintFields {
		// Only digested when the fingerprint does not match: a mismatch
		// is rare, the body's digest is not free.
		d.Also = func() [][]byte { return fp.Also(req) }
	}
	return nil
}

// refusedKey is the key a refused request names, for its log line and span
// only ("" when it names none).
func (s *Server) refusedKey(route *Route, req extract.Request) string {
	if route.Extractor == nil {
		return ""
	}
	bp := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(bp)
	key, _ := route.Extractor.Key(req, (*bp)[:0])
	if key != nil {
		*bp = key[:0]
	}
	return loggable(key)
}

// loggable is a key that may be invalid, as a log line and a span attribute
// carry it: slog escapes its control characters, and bytes that are not
// UTF-8 are replaced, as an OTLP export refuses them. It names no record.
func loggable(key []byte) string {
	return strings.ToValidUTF8(string(key), "\uFFFD")
}

// forward copies the request out of fasthttp's buffers (the transport may
// still hold the body after a timeout) and sends it upstream.
func (s *Server) forward(ctx context.Context, c *fiber.Ctx, route *Route, rest, key string) (*idempotency.Upstream, error) {
	fr := c.Request()
	hdr := make(http.Header, fr.Header.Len()) // sized: a map for 16 was 9% of a delivery's allocations
	cookie := false
	fr.Header.VisitAll(func(k, v []byte) {
		name := string(k)
		switch name {
		case "Host", "Content-Length":
			return
		case "Cookie":
			cookie = true
			return
		}
		hdr[name] = append(hdr[name], string(v))
	})
	if cookie {
		// fasthttp hands Cookie back rebuilt from its parse: lines merged,
		// spaces moved, quotes stripped from values. The upstream gets the
		// lines as sent (SPEC §4), from the header block as received (a
		// chunked body's trailers are not in it, and are no headers).
		fr.Header.VisitAllInOrder(func(k, v []byte) {
			if string(k) == "Cookie" {
				hdr["Cookie"] = append(hdr["Cookie"], string(v))
			}
		})
	}
	req := &forward.Request{
		Method:      Method(c),
		URL:         forward.JoinURL(route.UpstreamURL, escapedRest(rest, fr.URI().Path(), fr.URI().PathOriginal()), escapeRaw(fr.URI().QueryString(), true)),
		Header:      hdr,
		Body:        append([]byte(nil), fr.Body()...),
		ClientIP:    s.clientIP(c),
		TrustedPeer: s.trustedPeer(c),
		Proto:       s.scheme(c),
		Host:        string(fr.Host()),
		KeyHeader:   route.KeyHeader,
		Key:         key,
		Timeout:     route.UpstreamTimeout,
	}
	sent := time.Now()
	resp, err := s.o.Forwarder.Do(ctx, req)
	if s.o.ObserveUpstream != nil {
		s.o.ObserveUpstream(ctx, route.Name, time.Since(sent))
	}
	if errors.Is(err, forward.ErrResponseTooLarge) && resp != nil {
		// The upstream answered: settle the delivery on its status (never
		// release a processed event because its answer was big).
		return &idempotency.Upstream{Status: resp.Status, Header: resp.Header, BodyOmitted: true}, nil
	}
	if err != nil {
		return nil, err
	}
	return &idempotency.Upstream{Status: resp.Status, Header: resp.Header, Body: resp.Body}, nil
}

// clientIP is the peer address, or — when the peer is a trusted proxy —
// the right-most X-Forwarded-For entry (of all its lines) that is not a
// trusted proxy. When every entry is in a trusted range (a sender inside
// the network the proxies serve: trusted_proxies 10.0.0.0/8, a caller at
// 10.1.2.3), the sender is the left-most entry the walk reached, as nginx's
// real_ip_recursive has it, not the proxy the request last came through.
func (s *Server) clientIP(c *fiber.Ctx) string {
	peer, ok := netip.AddrFromSlice(c.Context().RemoteIP())
	if !ok {
		return ""
	}
	peer = peer.Unmap()
	if !s.trusted(peer) {
		return peer.String()
	}
	// Every X-Forwarded-For line, in order: they are one list (RFC 9110
	// §5.3), and a proxy that adds a line of its own (HAProxy's option
	// forwardfor) rather than appending to the sender's puts its entry in
	// the last one, not the first.
	var parts []string
	for _, line := range c.Request().Header.PeekAll(fiber.HeaderXForwardedFor) {
		parts = append(parts, strings.Split(string(line), ",")...)
	}
	sender := peer
	for i := len(parts) - 1; i >= 0; i-- {
		a, err := xffAddr(strings.TrimSpace(parts[i]))
		if err != nil {
			break
		}
		a = a.Unmap()
		if !s.trusted(a) {
			return a.String()
		}
		sender = a
	}
	return sender.String()
}

// xffAddr parses one X-Forwarded-For entry: an address, or an address and
// port ("203.0.113.7:52011", "[2001:db8::7]:52011"), which some proxies
// write.
func xffAddr(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a, nil
	}
	ap, err := netip.ParseAddrPort(s)
	return ap.Addr(), err
}

// scheme is the scheme the request arrived with: the connection's own, or
// — when the peer is a trusted proxy — its X-Forwarded-Proto. Fiber's
// Protocol believes that header from any peer, and the upstream would get
// a sender's claim as the gateway's word.
func (s *Server) scheme(c *fiber.Ctx) string {
	if c.Context().IsTLS() {
		return "https"
	}
	if peer, ok := netip.AddrFromSlice(c.Context().RemoteIP()); ok && s.trusted(peer.Unmap()) {
		// The last entry of all the lines: as for X-Forwarded-For, a
		// trusted proxy that adds a line of its own puts its word last.
		if lines := c.Request().Header.PeekAll(fiber.HeaderXForwardedProto); len(lines) > 0 {
			p := lines[len(lines)-1]
			if i := bytes.LastIndexByte(p, ','); i >= 0 {
				p = p[i+1:]
			}
			if string(bytes.TrimSpace(p)) == "https" {
				return "https"
			}
		}
	}
	return "http"
}

// trustedPeer reports whether the request's peer is a trusted proxy.
func (s *Server) trustedPeer(c *fiber.Ctx) bool {
	peer, ok := netip.AddrFromSlice(c.Context().RemoteIP())
	return ok && s.trusted(peer.Unmap())
}

func (s *Server) trusted(a netip.Addr) bool {
	for _, p := range s.o.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// escapedRest is a prefix route's rest of the path as the sender escaped
// it, so that "a%2Fb" reaches the upstream as one segment, not as "a/b".
// rest is the tail of the decoded, normalized path the route matched. The
// received path is used only when it is a plain escaping of that path;
// when normalizing changed it (dot segments, doubled slashes), the decoded
// rest is escaped anew, so that what the upstream sees is what was matched.
//
// Bytes the sender left unescaped that a path must not carry raw (a space,
// "|", UTF-8) are escaped; its own escapes are kept as they are.
func escapedRest(rest string, decoded, raw []byte) string {
	if rest == "" {
		return ""
	}
	if unescaped, err := url.PathUnescape(string(raw)); err != nil || unescaped != string(decoded) {
		// raw is not an escaping of the matched path: normalizing changed it.
		return (&url.URL{Path: rest}).EscapedPath()
	}
	// Every "%XY" of raw decodes to one byte, every other byte to itself:
	// skip as many decoded bytes as the prefix took.
	i := 0
	for range len(decoded) - len(rest) {
		if raw[i] == '%' {
			i += 2
		}
		i++
	}
	return escapeRaw(raw[i:], false)
}

// escapeRaw is raw as sent, its escapes ("%XY") kept, with every byte a
// URI path (or, with query, a query) must not carry raw — a space, a
// control, "|", a byte of UTF-8, a "%" that starts no escape — escaped.
// fasthttp accepts such bytes in a request line; written into the
// upstream's request line as they are, they would break it.
func escapeRaw(raw []byte, query bool) string {
	safe := func(c byte) bool { return pathSafe(c) || (query && c == '?') }
	escape := false
	for j := 0; j < len(raw) && !escape; j++ {
		escape = !safe(raw[j]) && !(raw[j] == '%' && isEscape(raw[j:]))
	}
	if !escape {
		return string(raw)
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(raw) + 16)
	for j := 0; j < len(raw); j++ {
		switch c := raw[j]; {
		case c == '%' && isEscape(raw[j:]):
			b.Write(raw[j : j+3])
			j += 2
		case safe(c):
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

// isEscape reports whether s starts with "%" and two hex digits.
func isEscape(s []byte) bool {
	return len(s) >= 3 && s[0] == '%' && isHex(s[1]) && isHex(s[2])
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// pathSafe reports whether c may appear raw in a URI path (RFC 3986
// pchar and "/").
func pathSafe(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@/", c) >= 0
}

// source identifies the sender for the top-duplicate-sources statistics.
// A header value is attacker-controlled: it is bounded and made printable.
func (s *Server) source(c *fiber.Ctx, route *Route) string {
	if route.SourceHeader == "" {
		return s.clientIP(c)
	}
	v := c.Request().Header.Peek(route.SourceHeader)
	if len(v) == 0 {
		return "unknown"
	}
	return safeDetail(string(v[:min(len(v), 128)]))
}

// errShuttingDown refuses a request that arrived after Shutdown stopped
// waiting for handlers (see enter).
var errShuttingDown = fiber.NewError(http.StatusServiceUnavailable, "the gateway is shutting down")

// errorHandler answers Fiber's own errors (body too large, bad requests)
// and the handler's refusals as problem documents, with the route's
// outcome where one applies.
func (s *Server) errorHandler(c *fiber.Ctx, err error) error {
	if s.o.Around != nil && !trace.SpanContextFromContext(c.UserContext()).IsValid() {
		// Refused while reading, before the middleware: no span yet.
		return s.o.Around(c, func(c *fiber.Ctx) error { return s.errorHandler(c, err) })
	}
	var fe *fiber.Error
	status := http.StatusInternalServerError
	if errors.As(err, &fe) {
		status = fe.Code
	}
	method := c.Method()
	route, _ := s.router.match(method, string(c.Request().URI().Path()))
	var outcome idempotency.Outcome
	var retryAfter time.Duration
	detail := http.StatusText(status)
	switch {
	case status == http.StatusRequestEntityTooLarge:
		detail = "the request body is larger than the gateway's body limit"
		// server.body_limit holds on every path, routed or not.
		outcome = idempotency.TooLarge
	case errors.Is(err, errShuttingDown):
		// SPEC §2's unavailable: 503 + Retry-After, nothing forwarded.
		detail, outcome, retryAfter = fe.Message, idempotency.Unavailable, time.Second
	}
	if route != nil && outcome != "" {
		c.Locals(routeLocal{}, route) // names the span
		res := idempotency.Result{Outcome: outcome, Status: status}
		ev := Event{Route: route.Name, Method: method, Result: &res}
		if outcome == idempotency.TooLarge {
			// Named from its headers and query (SPEC §7: keys logged), so
			// that the event can be resent once the limit is raised.
			ev.Key = s.refusedKey(route, bodiless{newFastRequest(c)})
		}
		if t := c.Context().Time(); !t.IsZero() {
			ev.Duration = time.Since(t)
		} // else refused while fasthttp read it: when it began is unknown
		annotateSpan(c.UserContext(), &ev)
		if s.o.Observe != nil {
			s.o.Observe(c.UserContext(), &ev)
		}
	}
	return writeProblem(c, status, outcome, detail, retryAfter)
}

// routeLocal is the fiber.Ctx local holding the matched *Route.
type routeLocal struct{}

// SpanName names a request's server span after its route: the method and
// the configured path ("POST /webhooks/stripe", "POST /hooks/*"), or the
// method alone when no route matched. Raw paths are not used: they are
// unbounded.
func SpanName(c *fiber.Ctx) string {
	r, ok := c.Locals(routeLocal{}).(*Route)
	if !ok {
		return Method(c)
	}
	if r.Prefix {
		return c.Method() + " " + r.Path + "*"
	}
	return c.Method() + " " + r.Path
}

// maxKeyAttr bounds the hookstamp.key span attribute: the ceiling of
// key.max_length (config.MaxKeyLength), so the attribute is the whole key
// — a trace is found by the key it carries — yet bounded if that changes.
const maxKeyAttr = 2048

// annotateSpan adds route, key and outcome to the request's server span
// (SPEC §7), and links a replay, or a mismatch, to the span of the original
// delivery whose record answered it.
func annotateSpan(ctx context.Context, ev *Event) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String("hookstamp.route", ev.Route),
		attribute.String("hookstamp.outcome", string(ev.Result.Outcome)),
	}
	if ev.Key != "" {
		attrs = append(attrs, attribute.String("hookstamp.key", truncateUTF8(ev.Key, maxKeyAttr)))
	}
	r := ev.Result
	if r.OriginalTraceID != "" {
		attrs = append(attrs, attribute.String("hookstamp.original_trace_id", r.OriginalTraceID))
		tid, terr := trace.TraceIDFromHex(r.OriginalTraceID)
		sid, serr := trace.SpanIDFromHex(r.OriginalSpanID)
		if terr == nil && serr == nil {
			span.AddLink(trace.Link{
				SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, Remote: true}),
				Attributes:  []attribute.KeyValue{attribute.String("hookstamp.link", "original_delivery")},
			})
		}
	}
	span.SetAttributes(attrs...)
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
