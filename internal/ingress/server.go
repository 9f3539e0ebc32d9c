package ingress

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/hookstamp/hookstamp/internal/extract"
	"github.com/hookstamp/hookstamp/internal/forward"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/verify"
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

// Observer is told what happens to requests: the gateway's telemetry is
// one. Its methods are called concurrently.
type Observer interface {
	// Around runs serve as one request, every request the server answers
	// (those fasthttp refuses before routing too), and answers an error
	// serve returns with c.App().ErrorHandler (the span of a request must
	// see its answer).
	Around(c *fiber.Ctx, serve func(*fiber.Ctx) error) error
	// Observe is called once per finished request on a route.
	Observe(ctx context.Context, ev *Event)
	// ObserveUpstream is called after every forward to the upstream of
	// route with its duration, failures included.
	ObserveUpstream(ctx context.Context, route string, d time.Duration)
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
	// MaxConns is server.max_conns; 0 is fasthttp's default, 262 144.
	MaxConns int
	// TrustedProxies are the peers whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
	// Observer is told what happens to every request (nil = nothing is).
	Observer Observer
	Logger   *slog.Logger
	// TLS, when not nil, makes Serve speak HTTPS (HTTP/1.1) with it.
	TLS *tls.Config
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

// MaxHeaderBytes bounds the request line and headers of one request;
// larger ones get 431. Fiber's 4 KiB is too tight for a provider's headers
// after a CDN and a service mesh added theirs; 16 KiB is the common ceiling
// (Node.js, HAProxy).
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
		Concurrency:           o.MaxConns,
		DisableStartupMessage: true,
		ErrorHandler:          s.errorHandler,
		// Keys and bodies are copied out where they outlive the handler.
		Immutable: false,
		// A body is forwarded, fingerprinted and verified as sent, never
		// rebuilt from a parsed multipart form.
		DisablePreParseMultipartForm: true,
	})
	// Every request's context descends from abandon: cutting abandoned
	// deliveries at shutdown costs nothing per request.
	s.app.Use(func(c *fiber.Ctx) error {
		c.SetUserContext(s.abandon)
		return c.Next()
	})
	if o.Observer != nil {
		s.app.Use(func(c *fiber.Ctx) error { return s.observed(c, (*fiber.Ctx).Next) })
	}
	s.app.All("/*", s.handle)
	srv := s.app.Server()
	srv.HeaderReceived = s.headerReceived
	srv.ErrorHandler = s.parseRefusals(srv.ErrorHandler)
	srv.Handler = refuseUnknownMethods(methods, srv.Handler)
	// Answers while draining say "Connection: close": a client told to keep
	// the connection would send its next delivery into the closed socket, a
	// failure after sending that a balancer does not retry elsewhere.
	srv.CloseOnShutdown = true
	return s
}

// App exposes the Fiber app (tests use app.Test).
func (s *Server) App() *fiber.App { return s.app }

// Serve accepts connections on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	cl := newConnListener(ln, s.o.TLS, s.o.Logger)
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
	// Unused connections would hold the drain for read_timeout; one
	// accepted just before the listener closed may show up later.
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
		// After shutdown_timeout ran out, it would meet closed stores;
		// refused, the provider retries it at another replica.
		c.Context().SetConnectionClose()
		return errShuttingDown
	}
	defer s.inflight.Done()
	chunked, declared, status, problem := framing(&c.Request().Header)
	if problem == "" {
		status, problem = versionNamed(c.Context())
	}
	if problem != "" {
		c.Context().SetConnectionClose()
		return writeProblem(c, status, "", problem, 0)
	}
	release, err := s.readBody(c.Context(), declared)
	if err != nil {
		return err // errorHandler: 413 too_large on the route, 408, 400
	}
	defer release()
	if chunked && dropTrailers(&c.Request().Header) {
		// Trailer fields were read after framing checked the header: a
		// folded one would be misread (obsFolded), so nothing after them is
		// read.
		c.Context().SetConnectionClose()
	}

	route, rest := s.router.match(c.Method(), string(c.Request().URI().Path()))
	if route == nil {
		return writeProblem(c, http.StatusNotFound, "", "no route is configured for this path", 0)
	}
	if problem := escapingRest(rest); problem != "" {
		// Not a delivery to the route: nothing about it is counted there.
		return writeProblem(c, http.StatusBadRequest, "", problem, 0)
	}
	c.Locals(routeLocal{}, route)
	ctx := c.UserContext() // descends from s.abandon

	ev := Event{Route: route.Name, Method: Method(c)}
	res := s.decide(ctx, c, route, rest, &ev)
	ev.Result = &res
	ev.Duration = time.Since(start)
	if s.o.Observer != nil {
		s.o.Observer.Observe(ctx, &ev)
	}
	return answer(c, &res)
}

// decide runs the checks of SPEC §1 in order — method, signature, key,
// fingerprint — and hands the delivery to the state machine.
func (s *Server) decide(ctx context.Context, c *fiber.Ctx, route *Route, rest string, ev *Event) idempotency.Result {
	fwd := func(ctx context.Context) (*idempotency.Upstream, error) {
		return s.forward(ctx, c, route, rest, ev.Key)
	}
	// The sender is known first, so that every log line names it: a
	// forgery's, a passthrough's.
	ev.Source = s.source(c, route)
	dedups := route.dedups(c.Method())
	if !dedups && route.Verifier == nil {
		return s.o.Engine.Passthrough(ctx, fwd)
	}
	req := newFastRequest(c)
	if res := s.challenge(route, req, ev); res != nil {
		return *res
	}
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
		// Logged (SPEC §7), so that the refused event can be told.
		ev.Key = loggable(key)
		reason := strings.TrimPrefix(err.Error(), extract.ErrInvalidKey.Error()+": ")
		return refuse(idempotency.InvalidKey, "invalid idempotency key: "+safeDetail(reason), err)
	case err != nil || len(key) == 0:
		// No key. A body the JSON sources could not parse says why.
		if !route.KeyRequired {
			return s.o.Engine.Passthrough(ctx, fwd)
		}
		detail := "no idempotency key found in the configured sources"
		if errors.Is(err, extract.ErrMalformedBody) {
			detail = "no idempotency key found: the body is not valid JSON"
		}
		return refuse(idempotency.MissingKey, detail, err)
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
	p := route.Policy
	if p.Ack != nil && route.Handshake != nil && route.Handshake(req) {
		p = route.SyncPolicy
	}
	if p.Ack != nil || route.StoreRequests {
		// What each attempt or redelivery sends again: the request as
		// this forward sends it, X-Forwarded-* as at intake. Stored as
		// the sender sent it, it would pass on at redelivery the
		// forwarding headers the forward dropped. Made when the delivery
		// is forwarded or stored: a repeat waiting for its first delivery
		// holds no second copy of its body.
		d.StoreRequest = func() *idempotency.Request { return s.stored(c, route, rest) }
	}
	return s.o.Engine.Handle(ctx, p, d, fwd)
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
	return s.refuseUnverified(route, req, ev, err)
}

// refuseUnverified is the refusal of a request whose signature failed.
func (s *Server) refuseUnverified(route *Route, req fastRequest, ev *Event, err error) *idempotency.Result {
	// The key the request names is logged and put on the span (SPEC §7:
	// keys logged), never claimed: an operator whose secret is wrong
	// learns which events to have resent.
	ev.Key = s.refusedKey(route, req)
	r := refuse(idempotency.Unverified, "signature verification failed: "+safeDetail(err.Error()), err)
	return &r
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
		r := refuse(idempotency.InvalidKey, "the JSON body names a member on the path of fingerprint field "+spec+
			" more than once, or in another case: which one the application reads is not known, so the delivery is not deduplicated",
			extract.ErrDuplicateMember)
		return &r
	}
	d.Fingerprint = fp.Fingerprint(req)
	if fp.Mode() == extract.FingerprintFields {
		// Digested only on a mismatch, which is rare.
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

// loggable is a key that may be invalid, fit for a log line and a span
// attribute: bytes that are not UTF-8 are replaced, as OTLP refuses them.
func loggable(key []byte) string {
	return strings.ToValidUTF8(string(key), "\uFFFD")
}

// forward sends the request upstream.
func (s *Server) forward(ctx context.Context, c *fiber.Ctx, route *Route, rest, key string) (*idempotency.Upstream, error) {
	req := s.outgoing(c, route, rest, key)
	sent := time.Now()
	resp, err := s.o.Forwarder.Do(ctx, req)
	if s.o.Observer != nil {
		s.o.Observer.ObserveUpstream(ctx, route.Name, time.Since(sent))
	}
	if forward.HeadOnly(resp, err) {
		// The upstream answered: settle on its status, never release a
		// processed event because its answer was big or malformed.
		return &idempotency.Upstream{Status: resp.Status, Header: resp.Header, BodyOmitted: true}, nil
	}
	if err != nil {
		return nil, err
	}
	return &idempotency.Upstream{Status: resp.Status, Header: resp.Header, Body: resp.Body}, nil
}

// stored is the request as record.request keeps it (SPEC §11), on every
// route: as the upstream gets it, without its key, trace context or
// credentials.
func (s *Server) stored(c *fiber.Ctx, route *Route, rest string) *idempotency.Request {
	st := forward.Store(s.outgoing(c, route, rest, ""))
	return &idempotency.Request{Method: st.Method, Path: st.Path, Headers: st.Header, Body: st.Body}
}

// outgoing copies the request out of fasthttp's buffers (the transport may
// still hold the body after a timeout) as the upstream is to get it.
func (s *Server) outgoing(c *fiber.Ctx, route *Route, rest, key string) *forward.Request {
	fr := c.Request()
	return &forward.Request{
		Method:      Method(c),
		URL:         upstreamURL(fr, route, rest),
		Header:      requestHeader(fr),
		Body:        append([]byte(nil), fr.Body()...),
		ClientIP:    s.clientIP(c),
		TrustedPeer: s.trustedPeer(c),
		Proto:       s.scheme(c),
		Host:        string(fr.Host()),
		KeyHeader:   route.KeyHeader,
		Key:         key,
		Timeout:     route.UpstreamTimeout,
	}
}

// clientIP is the peer address, or — when the peer is a trusted proxy —
// the right-most X-Forwarded-For entry (of all its lines) that is not a
// trusted proxy; when every entry is trusted, the left-most the walk
// reached, as nginx's real_ip_recursive has it.
func (s *Server) clientIP(c *fiber.Ctx) string {
	peer, ok := netip.AddrFromSlice(c.Context().RemoteIP())
	if !ok {
		return ""
	}
	peer = peer.Unmap()
	if !s.trusted(peer) {
		return peer.String()
	}
	// Every line, in order: they are one list (RFC 9110 §5.3), and a
	// proxy adding a line of its own puts its entry last.
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

// xffAddr parses one X-Forwarded-For entry: an address, with or without
// a port.
func xffAddr(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a, nil
	}
	ap, err := netip.ParseAddrPort(s)
	return ap.Addr(), err
}

// scheme is the scheme the request arrived with: the connection's own, or
// — when the peer is a trusted proxy — its X-Forwarded-Proto. Fiber's
// Protocol believes that header from any peer.
func (s *Server) scheme(c *fiber.Ctx) string {
	if c.Context().IsTLS() {
		return "https"
	}
	if peer, ok := netip.AddrFromSlice(c.Context().RemoteIP()); ok && s.trusted(peer.Unmap()) {
		// The last entry of all the lines, as for X-Forwarded-For.
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
// it, so that "a%2Fb" stays one segment. When normalizing changed the path
// (dot segments, doubled slashes), the decoded rest is escaped anew, so
// that the upstream sees what was matched. Bytes a path must not carry
// raw are escaped.
func escapedRest(rest string, decoded, raw []byte) string {
	if rest == "" {
		return ""
	}
	if unescaped, err := url.PathUnescape(string(raw)); err != nil || unescaped != string(decoded) {
		// raw is not an escaping of the matched path: normalizing changed it.
		return (&url.URL{Path: rest}).EscapedPath()
	}
	// Skip as many raw bytes as the prefix's decoded bytes took.
	i := 0
	for range len(decoded) - len(rest) {
		if raw[i] == '%' {
			i += 2
		}
		i++
	}
	return escapeRaw(raw[i:], false)
}

// escapeRaw is raw as sent, its escapes kept, with every byte a URI path
// (or, with query, a query) must not carry raw escaped: fasthttp accepts
// them in a request line, and they would break the upstream's.
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

// source identifies the sender for the statistics; a header value is
// bounded and made printable.
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
	if s.o.Observer != nil && c.Locals(observedLocal{}) == nil {
		// Refused while reading, before the middleware ran.
		return s.observed(c, func(c *fiber.Ctx) error { return s.errorHandler(c, err) })
	}
	var (
		fe     *fiber.Error
		u      *unreadable
		status = http.StatusInternalServerError
	)
	switch {
	case errors.As(err, &u):
		status = u.status
	case errors.As(err, &fe):
		status = fe.Code
	}
	detail := http.StatusText(status)
	if u != nil {
		detail = u.detail
	}
	method := c.Method()
	route, _ := s.router.match(method, string(c.Request().URI().Path()))
	var refusal idempotency.Result
	switch {
	case status == http.StatusRequestEntityTooLarge:
		// server.body_limit holds on every path, routed or not.
		refusal = refuse(idempotency.TooLarge, "the request body is larger than the gateway's body limit", nil)
	case errors.Is(err, errShuttingDown):
		refusal = refuse(idempotency.Unavailable, fe.Message, nil)
	}
	outcome, retryAfter := refusal.Outcome, time.Duration(0)
	if outcome != "" {
		status, detail, retryAfter = refusal.Status, refusal.Detail, refusal.RetryAfter
	}
	if route != nil {
		// Names the span, outcome or not: a body that stalled past
		// read_timeout (408) or could not be framed (400) is no delivery
		// (SPEC §2), and its span is where it shows by route.
		c.Locals(routeLocal{}, route)
	}
	if route != nil && outcome != "" {
		res := idempotency.Result{Outcome: outcome, Status: status}
		ev := Event{Route: route.Name, Method: method, Source: s.source(c, route), Result: &res}
		if outcome == idempotency.TooLarge {
			// Named from its headers and query (SPEC §7), so that the event
			// can be resent once the limit is raised.
			ev.Key = s.refusedKey(route, bodiless{newFastRequest(c)})
		}
		if t := c.Context().Time(); !t.IsZero() {
			ev.Duration = time.Since(t)
		} // else refused while fasthttp read it: when it began is unknown
		if s.o.Observer != nil {
			s.o.Observer.Observe(c.UserContext(), &ev)
		}
	}
	return writeProblem(c, status, outcome, detail, retryAfter)
}

// routeLocal is the fiber.Ctx local holding the matched *Route.
type routeLocal struct{}

// observedLocal is the fiber.Ctx local set once the Observer's Around runs
// the request.
type observedLocal struct{}

// observed runs serve through the Observer's Around.
func (s *Server) observed(c *fiber.Ctx, serve func(*fiber.Ctx) error) error {
	c.Locals(observedLocal{}, true)
	return s.o.Observer.Around(c, serve)
}

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

// challenge answers a provider's handshake on a route whose verifier knows
// one (verify.challenge): verified, it gets hookstamp's own answer and is
// neither forwarded nor claimed; forged, it is refused like any request.
// It returns nil for every other request.
func (s *Server) challenge(route *Route, req fastRequest, ev *Event) *idempotency.Result {
	ch, ok := route.Verifier.(verify.Challenger)
	if !ok {
		return nil
	}
	ans, err := ch.Challenge(req)
	switch {
	case err != nil:
		return s.refuseUnverified(route, req, ev, err)
	case ans == nil:
		return nil
	}
	return &idempotency.Result{Outcome: idempotency.Challenge, Status: http.StatusOK, Answer: &idempotency.Response{
		Status: http.StatusOK, Headers: map[string]string{fiber.HeaderContentType: ans.ContentType}, Body: ans.Body,
	}}
}
