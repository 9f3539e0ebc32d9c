// Package console is hookstamp's operator console (SPEC §12): web pages
// at /ui/ on the admin listener to watch duplicates and the queue and to
// act on held, dead and recorded events.
//
// Every page is rendered on the server from templates embedded in the
// binary, with charts drawn as inline SVG: no script runs in the browser,
// nothing is loaded from another host, and the Content-Security-Policy
// says so. What the console shows and does goes through the admin API's
// own operations (the exported methods of *admin.Server), never a second
// implementation of them.
//
// Signing in takes the admin token and gives a session cookie; sessions
// live in this process's memory (see docs/decisions.md). Every form
// carries the session's CSRF token, and every POST is checked for it and
// refused when a browser says it comes from another origin.
package console

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/hookstamp/hookstamp/internal/admin"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/throttle"
)

// Admin is what the console needs of the admin API (*admin.Server).
type Admin interface {
	Stats(ctx context.Context, window time.Duration, topN int) (admin.StatsAnswer, error)
	HeldRecords(ctx context.Context, route string, limit int) ([]admin.Record, bool, error)
	HeldCounts(ctx context.Context) (map[string]int, error)
	Resolve(ctx context.Context, ref idempotency.Ref, req admin.ResolveRequest) (admin.Record, error)
	Delete(ctx context.Context, ref idempotency.Ref) error
	Discard(ctx context.Context, ref idempotency.Ref) error
}

// Route is what the console shows of a configured route.
type Route struct {
	Name string
	// StoresRequests: record.request is on (always for async routes), so
	// the route's events are in the event log.
	StoresRequests bool
	// Async: delivery: async, so it has a queue.
	Async bool
}

// Options configure a Console. Zero values take the defaults named.
type Options struct {
	// Token is admin.token, the sign-in secret. Required.
	Token string
	// Admin serves the operations. Required.
	Admin Admin
	// EventLog lists and shows records with their requests and attempts;
	// nil: the event pages say it is not available.
	EventLog EventLog
	// Queue delivers stored requests again; nil: no async delivery, no
	// redeliver.
	Queue Queue
	// Depths counts the queued and dead deliveries of each route that
	// has any, async or not (the hookstamp_queue_depth gauges' source);
	// nil: unknown.
	Depths func(ctx context.Context) (map[string]Depth, error)
	// Routes are the configured routes, in the order shown.
	Routes []Route
	// TraceURL is admin.trace_url ("" = trace ids are not links).
	TraceURL string
	// SessionTTL is how long a sign-in lasts (8h).
	SessionTTL time.Duration
	// Refresh is how often the overview reloads itself (10s).
	Refresh time.Duration
	// Logger receives sign-ins, refusals and failures (slog.Default).
	Logger *slog.Logger
	// SecureCookies marks every cookie Secure, the request over TLS or
	// not (admin.secure_cookies).
	SecureCookies bool
	// Hosts are the host names, besides IP addresses and localhost, that
	// requests may name in Host (admin.console_hosts, admin.listen's
	// host); case and a final dot do not matter.
	Hosts []string
	// Throttle counts wrong tokens per address; the admin API's, so that
	// guesses split between the two count together (nil: one of its own).
	Throttle *throttle.Throttle
	// Now is the clock of sessions and sign-in backoff (time.Now).
	Now func() time.Time
}

// Console is the http.Handler of /ui/.
type Console struct {
	o        Options
	token    [32]byte // SHA-256 of Options.Token
	sessions *sessions
	throttle *throttle.Throttle
	hosts    admin.Hosts
	pages    pages
	mux      *http.ServeMux
}

// New returns the console.
func New(o Options) *Console {
	if o.SessionTTL <= 0 {
		o.SessionTTL = 8 * time.Hour
	}
	if o.Refresh <= 0 {
		o.Refresh = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.EventLog == nil {
		o.EventLog = noEventLog{}
	}
	if o.Throttle == nil {
		o.Throttle = throttle.New(o.Now)
	}
	c := &Console{
		o: o, token: digest(o.Token), pages: parsed,
		sessions: newSessions(o.SessionTTL, o.Now),
		throttle: o.Throttle, hosts: admin.NewHosts(o.Hosts),
	}
	c.routes()
	return c
}

// ServeHTTP answers /ui/ with the security headers every page carries,
// for the host names it knows (admin.Hosts: against DNS rebinding).
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	secure(w.Header())
	if !c.hosts.Known(r.Host) {
		c.o.Logger.WarnContext(r.Context(), "console: request for an unknown host name refused", "host", r.Host, "remote", r.RemoteAddr)
		c.fail(w, r, nil, http.StatusMisdirectedRequest,
			"The console does not answer to this host name. Open it at the admin listener's address (e.g. http://127.0.0.1:9090/ui/), or add the name to admin.console_hosts.")
		return
	}
	c.mux.ServeHTTP(w, r)
}

// routes registers the pages. Keys travel in query strings and form
// fields, never in paths: a key may hold "/" or "..", which a path
// pattern would clean or split.
func (c *Console) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	m.Handle("GET /ui/static/", staticFiles())
	m.HandleFunc("GET /ui/login", c.loginPage)
	m.Handle("POST /ui/login", c.postOnly(http.HandlerFunc(c.login)))
	m.Handle("POST /ui/logout", c.signedIn(c.logout))
	m.Handle("GET /ui/{$}", c.signedIn(c.overview))
	m.Handle("GET /ui/events", c.signedIn(c.events))
	m.Handle("GET /ui/event", c.signedIn(c.event))
	m.Handle("GET /ui/held", c.signedIn(c.held))
	m.Handle("GET /ui/dead", c.signedIn(c.dead))
	m.Handle("GET /ui/confirm", c.signedIn(c.confirm))
	m.Handle("POST /ui/act", c.signedIn(c.act))
	m.Handle("/ui/", c.signedIn(func(w http.ResponseWriter, r *http.Request, _ *session) {
		c.fail(w, r, nil, http.StatusNotFound, "There is no such page in the console.")
	}))
	c.mux = m
}

// route returns the configured route named name.
func (c *Console) route(name string) (Route, bool) {
	for _, rt := range c.o.Routes {
		if rt.Name == name {
			return rt, true
		}
	}
	return Route{}, false
}
