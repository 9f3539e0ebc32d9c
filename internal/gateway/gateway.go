// Package gateway wires hookstamp together: configuration → ledger →
// screen → state machine → forwarder → HTTP server, and takes it apart in
// reverse order. cmd/gateway runs it; end-to-end tests start it on ":0"
// with temporary databases.
package gateway

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/forward"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/ingress"
	"github.com/hookstamp/hookstamp/internal/telemetry"
)

// Options are what the configuration file does not say.
type Options struct {
	// Logger receives the gateway's logs (slog.Default when nil).
	Logger *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Version is reported by telemetry.
	Version string
	// Telemetry replaces parts of the configured telemetry (tests: an
	// in-memory span exporter).
	Telemetry telemetry.Overrides
	// ACMERoots verify the ACME CA's HTTPS certificate (nil = the system's
	// roots; tests: their own CA's).
	ACMERoots *x509.CertPool
	// ACMERenewCheck is how often ACME certificates are checked for
	// renewal (10 minutes when 0; tests: short-lived certificates).
	ACMERenewCheck time.Duration
	// TLSReloadInterval is how often certificate files are read for a
	// change (1s when 0).
	TLSReloadInterval time.Duration
	// QueuePollInterval, when set, replaces every route's
	// async.poll_interval; RescueMargin is what the queue adds to
	// upstream.timeout before a job whose replica died is delivered again
	// (the queue's default when 0). Tests set both short.
	QueuePollInterval time.Duration
	RescueMargin      time.Duration
	// PrefixCheck is how often the Redis screen's prefix marker is
	// checked and set again if lost (DefaultPrefixCheck when 0).
	PrefixCheck time.Duration
}

// Gateway is one running hookstamp process.
type Gateway struct {
	cfg *config.Config
	log *slog.Logger
	now func() time.Time

	tel    *telemetry.Telemetry
	ledger *sqlledger.Ledger
	screen idempotency.Screen
	// screenPing answers /readyz's screen check (nil: no screen).
	screenPing func(context.Context) error
	// guard claims a Redis screen's prefix for the ledger (nil: another
	// screen); the engine calls the screen through it.
	guard       *prefixGuard
	prefixCheck time.Duration
	closers     []func() error // screens and others, closed in reverse order
	engine      *idempotency.Engine
	fwd         *forward.Forwarder
	server      *ingress.Server
	admin       adminParts // admin.go: admin listener, stats, cache invalidation
	queue       queueParts // queue.go: delivery of stored requests
	tls         tlsParts   // tls.go: certificate, redirect listener

	ln       net.Listener
	serveErr chan error
	draining atomic.Bool        // Shutdown has begun: /readyz answers 503
	stop     context.CancelFunc // stops background loops (sweeper)
	bg       sync.WaitGroup
}

// New builds every component from cfg; nothing listens until Start.
func New(ctx context.Context, cfg *config.Config, o Options) (_ *Gateway, err error) {
	g := &Gateway{cfg: cfg, log: o.Logger, now: o.Now, prefixCheck: cmp.Or(o.PrefixCheck, DefaultPrefixCheck)}
	if g.log == nil {
		g.log = slog.Default()
	}
	if g.now == nil {
		g.now = time.Now
	}
	defer func() {
		if err != nil {
			g.closeAll()
		}
	}()

	// Telemetry first: the ledger and screen get its instrumentations.
	g.log = telemetry.WithTraceContext(g.log)
	g.tel, err = telemetry.SetupWith(ctx, cfg.Telemetry, o.Version, g.log, o.Telemetry)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	if err := g.openLedger(ctx); err != nil {
		return nil, err
	}
	if err := g.openScreen(ctx); err != nil {
		return nil, err
	}
	g.fwd = forward.New(forward.Options{InjectTrace: g.tel.InjectTrace, MaxResponseBody: maxResponseBody(cfg)})
	g.closers = append(g.closers, func() error { g.fwd.Close(); return nil })
	cache := idempotency.NewCache(g.localCacheBytes(), int(cfg.Screen.MaxCachedBody), g.localCacheMaxAge())
	if g.engine, err = idempotency.New(g.engineOptions(cache)); err != nil {
		return nil, err
	}
	g.probeWrites(ctx)

	routes, err := buildRoutes(cfg)
	if err != nil {
		return nil, err
	}
	if err := g.initMetrics(); err != nil {
		return nil, err
	}
	if err := g.openQueue(routes, o); err != nil {
		return nil, err
	}
	if err := g.initAdmin(cache); err != nil {
		return nil, err
	}
	if err := g.initServer(ctx, routes, o); err != nil {
		return nil, err
	}
	return g, nil
}

// probeWrites marks a ledger that refuses writes already (a full disk, a
// read-only standby) before the first delivery, which would otherwise be
// forwarded and then fail to commit. Not a reason to refuse to start:
// deliveries recorded before are still replayed, and the mark clears
// when a write succeeds.
func (g *Gateway) probeWrites(ctx context.Context) {
	_ = g.engine.ProbeWrites(ctx) // the engine logs the refusal; the ledger bounds the wait
}

// openLedger opens the store and, with store.auto_migrate, brings its
// tables and the queue's up to date.
func (g *Gateway) openLedger(ctx context.Context) error {
	var err error
	g.ledger, err = sqlledger.Open(ctx, sqlledger.Options{
		Driver:       g.cfg.Store.Driver,
		DSN:          g.cfg.Store.DSN,
		MaxOpenConns: g.cfg.Store.MaxOpenConns,
		Logger:       g.log,
		Plugins:      g.tel.GormPlugins(),
		Now:          g.now, // the engine's clock: the ledger maps it onto the database's
	})
	if err != nil {
		return fmt.Errorf("open ledger: %w", err)
	}
	if !g.cfg.Store.AutoMigrate {
		return nil
	}
	return MigrateStore(ctx, g.ledger)
}

// engineOptions are the state machine's: the screen and ledger opened
// before it, the fail modes and lifetimes of the configuration.
func (g *Gateway) engineOptions(cache *idempotency.Cache) idempotency.Options {
	cfg := g.cfg
	eo := idempotency.Options{
		Screen:            g.screen,
		Ledger:            g.ledger,
		Lease:             cfg.Screen.Lease,
		TTL:               cfg.Screen.TTL,
		ScreenUnavailable: failMode(cfg.Screen.OnUnavailable),
		LedgerUnavailable: failMode(cfg.Store.OnUnavailable),
		// A shared screen can fail for one replica and not another; with
		// on_unavailable store, screen claims must then be visible in the
		// ledger (TestPartialScreenOutage). And in every mode Redis can
		// lose a claim while its delivery is in flight (eviction,
		// FLUSHALL, a restart): the pending row is what stops a repeat
		// from being forwarded beside it, since lease takeover is the one
		// place the upstream may see a second copy (SPEC §1).
		ConfirmByClaim: cfg.Screen.Driver == config.ScreenRedis,
		Classify: func(err error) (int, bool) {
			return forward.StatusFor(err), forward.Ambiguous(err)
		},
		Cache:   cache,
		Now:     g.now,
		Logger:  g.log,
		Tracer:  g.tel.Tracer(),
		Hooks:   g.tel.Hooks(),
		Replica: replicaName(),
	}
	switch {
	case g.screen == nil:
		eo.Screen = nil // a nil *Screen in the interface would not be nil
	case g.guard != nil:
		eo.Screen = guardedScreen{s: g.screen, g: g.guard}
	}
	if hasAsync(cfg) {
		eo.Queue = g.ledger
	}
	return eo
}

// initServer builds the webhook server: its routes, trusted proxies and
// TLS.
func (g *Gateway) initServer(ctx context.Context, routes []*ingress.Route, o Options) error {
	cfg := g.cfg
	var trusted []netip.Prefix
	for _, c := range cfg.Server.TrustedProxies {
		p, err := config.ParseTrustedProxy(c)
		if err != nil {
			return fmt.Errorf("server.trusted_proxies: %w", err)
		}
		trusted = append(trusted, p)
	}
	tlsConfig, err := g.initTLS(ctx, o)
	if err != nil {
		return err
	}
	g.server = ingress.New(ingress.Options{
		Routes:         routes,
		Engine:         g.engine,
		Forwarder:      g.fwd,
		BodyLimit:      int(cfg.Server.BodyLimit),
		ReadTimeout:    cfg.Server.ReadTimeout,
		WriteTimeout:   cfg.Server.WriteTimeout,
		MaxConns:       cfg.Server.MaxConns,
		TrustedProxies: trusted,
		Observer:       observer{g.tel, g},
		Logger:         g.log,
		TLS:            tlsConfig,
	})
	return nil
}

// initMetrics creates the metric series of every route at zero, makes
// hookstamp_held_keys count the ledger's held rows at each scrape (right
// after a restart, and across replicas) and hookstamp_dependency_up run
// /readyz's checks of the ledger and the screen.
func (g *Gateway) initMetrics() error {
	names := make([]string, len(g.cfg.Routes))
	for i, r := range g.cfg.Routes {
		names[i] = r.Name
	}
	deps := []string{"ledger"}
	if g.screen != nil {
		deps = append(deps, "screen")
	}
	g.tel.Init(names, deps...)
	g.tel.CountHeldWith(g.ledger.CountHeldByRoute)
	checks := []telemetry.DependencyCheck{{Name: "ledger", Check: g.ledgerReady}}
	if g.screen != nil {
		checks = append(checks, telemetry.DependencyCheck{Name: "screen", Check: g.screenPing})
	}
	return g.tel.ObserveDependencies(checks)
}

func failMode(s string) idempotency.FailMode {
	switch s {
	case "pass":
		return idempotency.FailPass
	case "store":
		return idempotency.FailStore
	}
	return idempotency.FailReject
}

// Start listens on server.listen and serves in the background.
func (g *Gateway) Start() error {
	if err := g.startAdmin(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", g.cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", g.cfg.Server.Listen, err)
	}
	g.ln = ln
	g.serveErr = make(chan error, 1)
	go func() { g.serveErr <- g.server.Serve(ln) }()

	ctx, cancel := context.WithCancel(context.Background())
	g.stop = cancel
	if err := g.startTLS(ctx); err != nil {
		return err
	}
	g.startQueue(ctx)
	if g.guard != nil {
		g.bg.Add(1)
		go func() { defer g.bg.Done(); g.watchPrefix(ctx, g.prefixCheck) }()
	}
	g.retry(ctx, g.warnUnconfigured, func(err error, wait time.Duration) {
		g.log.Debug("routes not configured: ledger not read; trying again", "err", err, "in", wait)
	})
	if g.cfg.Store.SweepInterval > 0 {
		g.bg.Add(1)
		go func() { defer g.bg.Done(); g.sweep(ctx) }()
	}
	g.log.Info("hookstamp serving", "addr", ln.Addr().String(), "routes", len(g.cfg.Routes),
		"store", g.cfg.Store.Driver, "screen", g.cfg.Screen.Driver, "tls", g.tls.mgr != nil)
	return nil
}

// Addr is the address the webhook listener is bound to.
func (g *Gateway) Addr() string {
	if g.ln == nil {
		return ""
	}
	return g.ln.Addr().String()
}

// URL is the base URL of the webhook listener.
func (g *Gateway) URL() string {
	if g.tls.mgr != nil {
		return "https://" + g.Addr()
	}
	return "http://" + g.Addr()
}

// Ledger exposes the ledger (tests and the admin API read it).
func (g *Gateway) Ledger() *sqlledger.Ledger { return g.ledger }

// Telemetry exposes the telemetry: its MetricsHandler serves /metrics, and
// AddHeld follows operators' resolutions of held keys.
func (g *Gateway) Telemetry() *telemetry.Telemetry { return g.tel }

// Run serves until ctx is done, then shuts down within
// server.shutdown_timeout.
func (g *Gateway) Run(ctx context.Context) error { return g.RunAbandoning(ctx, nil) }

// RunAbandoning is Run, and closing abandon while it drains ends the drain
// at once, as server.shutdown_timeout running out does: forwards still in
// flight are cut and their claims released (or held on a hold route). An
// operator's second SIGTERM uses it; a SIGKILL instead would leave those
// claims to expire with their lease, and the provider's retries would get
// 409 until then.
func (g *Gateway) RunAbandoning(ctx context.Context, abandon <-chan struct{}) error {
	if err := g.Start(); err != nil {
		g.closeAll()
		return err
	}
	select {
	case <-ctx.Done():
	case err := <-g.serveErr:
		g.closeAll()
		return fmt.Errorf("serve: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), g.cfg.Server.ShutdownTimeout)
	defer cancel()
	if abandon != nil {
		go func() {
			select {
			case <-abandon:
				cancel()
			case <-sctx.Done():
			}
		}()
	}
	return g.Shutdown(sctx)
}

// Shutdown drains in-flight deliveries until ctx is done, releases the
// claims of those it abandons, then closes everything in reverse order.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.draining.Store(true)
	queueStopped := make(chan struct{})
	go func() { defer close(queueStopped); g.stopQueue(ctx) }()
	err := g.server.Shutdown(ctx)
	<-queueStopped
	// The drain ran out (shutdown_timeout) or was cut (a second signal):
	// abandoning deliveries is what it is for, not a failure.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		g.log.Warn("shutdown: abandoned in-flight deliveries; their claims were released")
		err = nil
	}
	g.closeAll()
	return err
}

func (g *Gateway) closeAll() {
	g.stopQueueNow()
	if g.stop != nil {
		g.stop()
	}
	g.bg.Wait()
	if g.engine != nil {
		g.engine.Close() // its background calls use the screen closed below
	}
	for i := len(g.closers) - 1; i >= 0; i-- {
		if err := g.closers[i](); err != nil {
			g.log.Warn("close", "err", err)
		}
	}
	g.closers = nil
	if g.ledger != nil {
		if err := g.ledger.Close(); err != nil {
			g.log.Warn("close ledger", "err", err)
		}
		g.ledger = nil
	}
	if g.tel != nil {
		// Last, so that the spans of everything closed above are flushed.
		ctx, cancel := context.WithTimeout(context.Background(), telemetry.ShutdownTimeout)
		defer cancel()
		if err := g.tel.Shutdown(ctx); err != nil {
			g.log.Warn("flush telemetry", "err", err)
		}
	}
}

// sweep deletes expired ledger rows in bounded batches.
func (g *Gateway) sweep(ctx context.Context) {
	t := time.NewTicker(g.cfg.Store.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := g.ledger.SweepAll(ctx, g.now(), 1000)
		if err != nil && ctx.Err() == nil {
			g.log.Warn("sweep expired records", "err", err)
		} else if n > 0 {
			g.log.Debug("swept expired records", "rows", n)
		}
	}
}

// observer is the server's ingress.Observer: the telemetry, with the
// statistics and the log line beside its metrics of a finished request.
type observer struct {
	*telemetry.Telemetry
	g *Gateway
}

func (o observer) Observe(ctx context.Context, ev *ingress.Event) { o.g.observe(ctx, ev) }

// observe counts every finished request in the metrics and logs the
// non-routine outcomes (SPEC §7): keys, never bodies.
func (g *Gateway) observe(ctx context.Context, ev *ingress.Event) {
	g.tel.Observe(ctx, ev)
	g.recordStats(ctx, ev)
	o := ev.Result.Outcome
	if o == idempotency.Forwarded || o == idempotency.Replayed {
		return
	}
	level := slog.LevelInfo
	switch o {
	case idempotency.Unavailable, idempotency.HeldKey:
		level = slog.LevelWarn
	}
	source := ev.Source
	if source == "" {
		source = "unknown" // as the source label of hookstamp_duplicates_total
	}
	attrs := []any{"route", ev.Route, "outcome", string(o), "method", ev.Method, "source", source}
	if ev.Key != "" {
		attrs = append(attrs, "key", ev.Key)
	}
	if ev.Result.Would != "" {
		attrs = append(attrs, "would", string(ev.Result.Would))
	}
	switch r := ev.Result; {
	case r.Status != 0:
		attrs = append(attrs, "status", r.Status)
	case r.Upstream != nil:
		attrs = append(attrs, "status", r.Upstream.Status)
	case r.Ack != nil:
		attrs = append(attrs, "status", r.Ack.Status)
	}
	if ev.Result.Err != nil {
		attrs = append(attrs, "err", ev.Result.Err.Error())
	}
	g.log.Log(ctx, level, "delivery", attrs...)
}

// maxResponseBody is what the forwarder reads of an answer: the largest
// record.max_body, so that each route records the bodies it asks for, and
// at least the forwarder's default, up to which an answer too large to
// record still reaches its provider whole.
func maxResponseBody(cfg *config.Config) int64 {
	n := int64(forward.DefaultMaxResponseBody)
	for _, r := range cfg.Routes {
		n = max(n, int64(r.Record.MaxBody))
	}
	return n
}

// localCacheMaxAge is how long the local cache keeps an entry: with the
// memory screen on SQLite the gateway is one process, every delete reaches
// its cache, and the cache is where its done records live, for screen.ttl
// as a screen keeps them. Otherwise a replica may miss another's delete,
// and idempotency.DefaultCacheMaxAge bounds how long it replays it.
func (g *Gateway) localCacheMaxAge() time.Duration {
	if g.cfg.Screen.Driver == config.ScreenMemory && g.cfg.Store.Driver == config.StoreSQLite {
		return g.cfg.Screen.TTL
	}
	return 0
}

// localCacheBytes is the in-process cache's budget (screen.local_cache),
// or 0 when nothing could carry an operator's DELETE to other replicas'
// caches: with screen "none", replicas share the ledger but no channel
// (that is Redis pub/sub's job with the Redis screen), and they would go
// on replaying a deleted record for up to idempotency.DefaultCacheMaxAge.
// That holds on SQLite too: screen "none" is how several processes on one
// host share a SQLite file and agree on claims through it. Only the memory
// screen is one process's by contract, and its deletes reach its own cache.
func (g *Gateway) localCacheBytes() int {
	n := int(g.cfg.Screen.LocalCache)
	if n > 0 && g.cfg.Screen.Driver == config.ScreenNone {
		g.log.Info("screen.local_cache is off: with screen.driver none, nothing would carry an operator's DELETE to other replicas' caches")
		return 0
	}
	return n
}

// replicaName names this process in the attempts it records and to
// River, whose client IDs must differ between the processes on one
// database (leader election) and hold at most 100 bytes.
func replicaName() string {
	host, _ := os.Hostname()
	return replicaNameOf(host, os.Getpid())
}

// replicaNameOf is host/pid, host cut to 80 bytes: two processes on one
// host are two replicas.
func replicaNameOf(host string, pid int) string {
	if len(host) > 80 {
		host = host[:80]
	}
	return fmt.Sprintf("%s/%d", host, pid)
}
