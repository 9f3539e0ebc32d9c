// Package admin is hookstamp's operator listener (SPEC §8): health and
// readiness for orchestrators, /metrics for Prometheus, and under /admin/ the
// API to inspect, forget and resolve records and to read duplicate
// statistics.
//
// It is plain net/http: it is the operator plane, not the hot path. The
// paths under /admin/routes/ are parsed by hand rather than by ServeMux
// patterns because a record key is any string — it may contain "/", "..",
// "//" or "%" — and ServeMux would clean or split it. The key is the rest of
// the path after /records/ (before /resolve for POST), percent-decoded
// exactly once: send "/" in a key as %2F, "%" as %25, a space as %20.
//
// /admin/* needs Authorization: Bearer <admin.token>. The token is compared
// in constant time on SHA-256 digests, so neither its bytes nor its length
// leak through timing. With no token configured /admin/* answers 404: the
// API is off. A browser's request from another origin gets 403 whatever
// its token.
package admin

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/stats"
	"github.com/hookstamp/hookstamp/internal/throttle"
)

// Ledger is what the admin API needs of the durable ledger
// (*sqlledger.Ledger).
type Ledger interface {
	// Lookup returns the record for ref, or idempotency.ErrNotFound.
	Lookup(ctx context.Context, ref idempotency.Ref) (*idempotency.Record, error)
	// Delete removes the record whatever its state; ErrNotFound if none.
	Delete(ctx context.Context, ref idempotency.Ref) error
	// Held lists route's held records, oldest first, at most limit.
	Held(ctx context.Context, route string, limit int) ([]idempotency.Record, error)
	// CountHeldByRoute counts the held records of every route that has
	// some.
	CountHeldByRoute(ctx context.Context) (map[string]int, error)
	// Resolve settles a held record: nil deletes it, otherwise it becomes
	// done with rec's response. ErrNotFound when ref is not held.
	Resolve(ctx context.Context, ref idempotency.Ref, rec *idempotency.Record) error
	// List pages a route's records, newest first, without bodies.
	List(ctx context.Context, q idempotency.ListQuery) (idempotency.RecordPage, error)
	// Request returns the request stored with ref's record (nil if none).
	Request(ctx context.Context, ref idempotency.Ref) (*idempotency.Request, error)
	// Attempts returns ref's attempts in order.
	Attempts(ctx context.Context, ref idempotency.Ref) ([]idempotency.Attempt, error)
}

// Stats answers GET /admin/stats (a stats.Memory or stats.Redis).
type Stats interface {
	Query(ctx context.Context, window time.Duration, topN int) (stats.Snapshot, error)
}

// Check is one dependency that /readyz asks.
type Check struct {
	// Name is the dependency's member in the /readyz answer ("ledger").
	Name string
	// Ping returns nil when the dependency answers. Its error is never
	// shown (driver errors can carry DSNs with passwords), unless Show.
	Ping func(ctx context.Context) error
	// Show puts Ping's error in the answer as it is: for checks whose
	// errors carry no secret and say more than "unreachable" (a listener
	// without a usable certificate).
	Show bool
}

// Options configure a Server. Zero values take the defaults named.
type Options struct {
	// Token is admin.token. Empty turns /admin/* off (404).
	Token string
	// Routes are the configured route names; any other is 404.
	Routes []string
	// Ledger is required for the record endpoints.
	Ledger Ledger
	// Forget removes a key from the screen and from the in-process cache
	// of every replica, after its ledger row is gone (Engine.Forget plus
	// the cross-replica invalidation). Nil: nothing to forget.
	Forget func(ctx context.Context, ref idempotency.Ref) error
	// Deleting is told before a key's ledger row is deleted, so that this
	// replica stops retrying a failed commit of that key first
	// (Engine.CancelCommitRetry): a retry landing after the DELETE would
	// write the record back. Nil: nothing to stop.
	Deleting func(ref idempotency.Ref)
	// HeldChanged is told when a held key leaves the held state through
	// this API (delta -1), for the hookstamp_held_keys gauge. Nil: ignored.
	HeldChanged func(route string, delta int)
	// Queue fills a record's next_attempt_at (async routes); nil: never
	// shown.
	Queue Queue
	// Redeliver delivers stored requests again (redeliver, dead/redrive)
	// on the routes in Stores; nil or a route not in it answers 409: no
	// worker would deliver what it queued. It also releases held
	// deliveries whose provider was acknowledged, on any route: the queue
	// adopts the jobs of a route storing no requests now. Nil: such a
	// release answers 409.
	Redeliver Redeliverer
	// Stores names the routes storing requests now (record.request, or
	// async), each with its retention: a record queued again is kept that
	// long at least.
	Stores map[string]time.Duration
	// Secrets are where each route's deliveries carry its verify secret
	// itself, which a stored request shows redacted.
	Secrets map[string]Secret
	// Async names the async routes, whose records always show a
	// next_attempt_at (null when none is due).
	Async map[string]bool
	// Stats answers /admin/stats; nil answers 404.
	Stats Stats
	// Metrics serves /metrics; nil answers 404.
	Metrics http.Handler
	// Checks are the dependencies /readyz asks, concurrently.
	Checks []Check
	// Draining reports that the webhook listener is shutting down: /readyz
	// then answers 503 with "server": {"ok": false, "error": "shutting
	// down"}, so that a load balancer stops sending deliveries to a
	// replica that no longer accepts them. Nil: never.
	Draining func() bool
	// ReadyTimeout bounds each readiness check (2s).
	ReadyTimeout time.Duration
	// TopN is how many keys and sources /admin/stats lists per route
	// unless ?top= says otherwise (10).
	TopN int
	// Logger receives the operator actions (delete, resolve) and failures
	// (slog.Default).
	Logger *slog.Logger
	// Hosts are the host names, besides addresses and localhost, under
	// which a browser may call /admin/* (Hosts); others get 421 before
	// their token is looked at, so that a page rebound to the listener
	// cannot make the operator's address wait with wrong tokens.
	// Requests no browser sent are taken under any name.
	Hosts []string
	// Console builds the handler of /ui/ (the operator console) from the
	// server, whose exported methods are the API's operations. Nil, or no
	// Token: /ui/ answers 404.
	Console func(*Server) http.Handler
	// Now is the gateway's clock, the one its ledger writes by
	// (time.Now): a resolve whose read-back fails answers with it.
	Now func() time.Time
}

// writeTimeout is how long the listener gives a request to be answered.
const writeTimeout = 60 * time.Second

// Server is the admin listener's HTTP handler and server.
type Server struct {
	o      Options
	routes map[string]bool
	token  [32]byte // SHA-256 of Options.Token
	srv    *http.Server
	ui     http.Handler // nil: no console
	hosts  Hosts
	// wrong slows down addresses sending wrong tokens; the console's
	// sign-in shares it (Throttle).
	wrong *throttle.Throttle
}

// Throttle is the table of wrong tokens per address, for the console's
// sign-in to share: guesses split between the two count together.
func (s *Server) Throttle() *throttle.Throttle { return s.wrong }

// New returns a Server; call Serve to listen, or use it as an http.Handler.
func New(o Options) *Server {
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 2 * time.Second
	}
	if o.TopN <= 0 {
		o.TopN = 10
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Server{o: o, routes: make(map[string]bool, len(o.Routes)), token: digest(o.Token), wrong: throttle.New(o.Now), hosts: NewHosts(o.Hosts)}
	for _, r := range o.Routes {
		s.routes[r] = true
	}
	if o.Console != nil && o.Token != "" {
		s.ui = o.Console(s)
	}
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	return s
}

// Serve answers on ln until Shutdown; it returns nil after Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.srv.Serve(problemListener{ln}); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops accepting and waits for the requests being answered
// until ctx is done.
func (s *Server) Shutdown(ctx context.Context) error {
	return s.srv.Shutdown(ctx)
}

// ServeHTTP dispatches on the path. See the package doc for how record
// keys are taken from it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		if allow(w, r, http.MethodGet, http.MethodHead) {
			s.healthz(w, r)
		}
		return
	case "/readyz":
		if allow(w, r, http.MethodGet, http.MethodHead) {
			s.readyz(w, r)
		}
		return
	case "/metrics":
		if s.o.Metrics == nil {
			problem(w, http.StatusNotFound, "metrics are off (telemetry.metrics.prometheus: false)")
			return
		}
		if allow(w, r, http.MethodGet, http.MethodHead) {
			s.o.Metrics.ServeHTTP(w, r)
		}
		return
	}
	path := r.URL.EscapedPath()
	if path == "/ui" || strings.HasPrefix(path, "/ui/") {
		if s.ui == nil {
			problem(w, http.StatusNotFound, "the console is off: admin.token is not set, or admin.console is false")
			return
		}
		s.ui.ServeHTTP(w, r)
		return
	}
	if path != "/admin" && !strings.HasPrefix(path, "/admin/") {
		problem(w, http.StatusNotFound, "no such endpoint")
		return
	}
	if s.admit(w, r, path) {
		s.adminAPI(w, r, strings.TrimPrefix(path, "/admin"))
	}
}

// admit reports whether r may call the admin API, and answers it when not:
// the API is on, a browser calls it under a known host and from its own
// origin, and r carries the token from an address not made to wait.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, path string) bool {
	if s.o.Token == "" {
		problem(w, http.StatusNotFound, "the admin API is off: admin.token is not set")
		return false
	}
	if fromBrowser(r) && !s.hosts.Known(r.Host) {
		s.o.Logger.WarnContext(r.Context(), "admin: a browser's request for an unknown host name refused", "host", r.Host, "remote", r.RemoteAddr)
		problem(w, http.StatusMisdirectedRequest, "a browser may call the admin API only under the admin listener's address, localhost, or a name in admin.console_hosts")
		return false
	}
	if crossOrigin(r) {
		// A page of another site can make the operator's browser call
		// the API, without the token but perhaps with credentials it
		// keeps for the listener (a proxy's Basic authentication).
		s.o.Logger.WarnContext(r.Context(), "admin: a browser's request from another origin refused", "origin", r.Header.Get("Origin"), "remote", r.RemoteAddr)
		problem(w, http.StatusForbidden, "a browser may call the admin API only from the admin listener's own origin")
		return false
	}
	if len(r.Header.Values("Authorization")) > 1 {
		// Which one a proxy in front checked, and which one the gateway
		// would, is not known: net/http's Get reads the first.
		problem(w, http.StatusBadRequest, "the request has more than one Authorization field")
		return false
	}
	// An address made to wait is refused whatever its token, so that its
	// guesses meanwhile tell it nothing.
	if wait := s.wrong.Wait(r.RemoteAddr); wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		problem(w, http.StatusTooManyRequests, "too many wrong tokens from this address; retry later")
		return false
	}
	if !s.authorized(r) {
		if r.Header.Get("Authorization") == "" {
			// No guess at the token: counted, it would let any page that
			// can make a browser send requests here lock the operator's
			// address out.
			s.o.Logger.InfoContext(r.Context(), "admin: no bearer token", "remote", r.RemoteAddr, "path", path)
		} else {
			s.wrong.Failed(r.RemoteAddr)
			s.o.Logger.WarnContext(r.Context(), "admin: wrong bearer token", "remote", r.RemoteAddr, "path", path)
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="hookstamp admin"`)
		problem(w, http.StatusUnauthorized, "a valid bearer token is required")
		return false
	}
	return true
}

// adminAPI serves /admin/*, path being the escaped path after "/admin".
func (s *Server) adminAPI(w http.ResponseWriter, r *http.Request, path string) {
	if path == "/stats" {
		if allow(w, r, http.MethodGet, http.MethodHead) {
			s.stats(w, r)
		}
		return
	}
	rest, ok := strings.CutPrefix(path, "/routes/")
	if !ok {
		problem(w, http.StatusNotFound, "no such endpoint")
		return
	}
	routeSeg, rest, _ := strings.Cut(rest, "/")
	route, err := unescape(routeSeg)
	if err != nil {
		problem(w, http.StatusBadRequest, "the route name is not validly percent-encoded")
		return
	}
	if !s.routes[route] {
		problem(w, http.StatusNotFound, "no route of that name is configured")
		return
	}
	if ep, ok := routeEndpoints[rest]; ok {
		if allow(w, r, ep.methods...) {
			ep.serve(s, w, r, route)
		}
		return
	}
	escKey, ok := strings.CutPrefix(rest, "records/")
	if !ok {
		problem(w, http.StatusNotFound, "no such endpoint")
		return
	}
	s.recordAPI(w, r, route, escKey)
}

// routeEndpoints are a route's endpoints other than a record's, by their
// path after /admin/routes/{route}/.
var routeEndpoints = map[string]struct {
	methods []string
	serve   func(*Server, http.ResponseWriter, *http.Request, string)
}{
	"held":         {[]string{http.MethodGet, http.MethodHead}, (*Server).held},
	"records":      {[]string{http.MethodGet, http.MethodHead}, (*Server).listRecords},
	"dead/redrive": {[]string{http.MethodPost}, (*Server).redrive},
}

// recordAPI serves /admin/routes/{route}/records/*, escKey being the
// escaped path after "records/".
func (s *Server) recordAPI(w http.ResponseWriter, r *http.Request, route, escKey string) {
	resolve, redeliver := false, false
	if r.Method == http.MethodPost {
		// Only POST has the /resolve and /redeliver suffixes; a GET or
		// DELETE of a key ending in one takes it as part of the key.
		escKey, redeliver = strings.CutSuffix(escKey, "/redeliver")
		if !redeliver {
			escKey, resolve = strings.CutSuffix(escKey, "/resolve")
		}
		if !resolve && !redeliver {
			w.Header().Set("Allow", "GET, HEAD, DELETE")
			problem(w, http.StatusMethodNotAllowed, "POST is for .../records/{key}/resolve or .../redeliver")
			return
		}
	}
	key, err := unescape(escKey)
	if err != nil {
		problem(w, http.StatusBadRequest, "the key is not validly percent-encoded")
		return
	}
	if key == "" {
		problem(w, http.StatusNotFound, "no key in the path")
		return
	}
	ref := idempotency.Ref{Route: route, Key: key}
	// No delivery can have a key that is not UTF-8 or holds a NUL (ingress
	// answers invalid_key), and PostgreSQL refuses such text: there is no
	// record, rather than a ledger failure to retry.
	none := !utf8.ValidString(key) || strings.IndexByte(key, 0) >= 0
	switch {
	case none && r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	case none && (r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodPost):
		problem(w, http.StatusNotFound, "no record for this key on this route")
	case r.Method == http.MethodGet, r.Method == http.MethodHead:
		s.getRecord(w, r, ref)
	case r.Method == http.MethodDelete:
		s.deleteRecord(w, r, ref)
	case redeliver:
		s.redeliver(w, r, ref)
	case r.Method == http.MethodPost:
		s.resolve(w, r, ref)
	default:
		// POST only where the path ends in /resolve (a GET of such a
		// path reads the key ending in "/resolve").
		if strings.HasSuffix(escKey, "/resolve") {
			w.Header().Set("Allow", "GET, HEAD, DELETE, POST")
		} else {
			w.Header().Set("Allow", "GET, HEAD, DELETE")
		}
		problem(w, http.StatusMethodNotAllowed, "method not allowed")
	}
}

// allow answers 405 unless r's method is one of methods.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	problem(w, http.StatusMethodNotAllowed, "method not allowed")
	return false
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
