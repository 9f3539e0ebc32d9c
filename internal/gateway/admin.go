package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/admin"
	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/console"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/redisscreen"
	"github.com/hookstamp/hookstamp/internal/ingress"
	"github.com/hookstamp/hookstamp/internal/stats"
)

// adminParts are the admin listener and what feeds it: the duplicate
// statistics, and the invalidation that makes an operator's DELETE reach
// the in-process cache of every replica.
type adminParts struct {
	stats recorder
	cache *idempotency.Cache
	// redis is the client of the statistics and invalidations (redis
	// screen only).
	redis redis.UniversalClient
	inval *redisscreen.Invalidations

	srv *admin.Server
	ln  net.Listener
}

// recorder is what the gateway needs of the statistics: Record from
// Observe, Query for the admin API (stats.Memory, stats.Redis).
type recorder interface {
	Record(ctx context.Context, route string, o idempotency.Outcome, key, source string)
	admin.Stats
}

// adminCloseTimeout bounds the admin listener's shutdown.
const adminCloseTimeout = 5 * time.Second

// initAdmin builds the statistics recorder (in Redis when the screen is,
// so that every replica counts into the same numbers) and, with a Redis
// screen and a local cache, the invalidation subscription. New calls it
// once the engine exists; cache is the engine's local cache (nil = off).
// Statistics are recorded whether or not this replica serves the admin
// API: another replica may.
func (g *Gateway) initAdmin(cache *idempotency.Cache) error {
	a := &g.admin
	a.cache = cache
	if g.cfg.Screen.Driver != config.ScreenRedis {
		a.stats = stats.NewMemory(stats.MemoryOptions{Now: g.now})
		return nil
	}
	// Not the screen's client: that one is traced, and a flush every
	// 100ms would fill traces with root spans; and a slow statistics flush
	// must not take connections from claims.
	ro := g.redisOptions()
	ro.OpTimeout, ro.PoolSize = 2*time.Second, 4
	client, err := redisscreen.NewClient(ro)
	if err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	a.redis = client
	g.closers = append(g.closers, a.redis.Close)
	rs, err := stats.NewRedis(stats.RedisOptions{
		Client: a.redis, Prefix: g.cfg.Screen.Prefix, Routes: g.routeNames(), Now: g.now, Logger: g.log,
	})
	if err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	a.stats = rs
	g.closers = append(g.closers, rs.Close)
	a.inval = redisscreen.NewInvalidations(a.redis, g.cfg.Screen.Prefix)
	if cache != nil {
		a.inval.Subscribe(cache, g.log)
		g.closers = append(g.closers, a.inval.Close)
	}
	return nil
}

// recordStats counts a finished request for /admin/stats (Observe).
func (g *Gateway) recordStats(ctx context.Context, ev *ingress.Event) {
	if s := g.admin.stats; s != nil {
		s.Record(ctx, ev.Route, ev.Result.Outcome, ev.Key, ev.Source)
	}
}

func (g *Gateway) routeNames() []string {
	names := make([]string, len(g.cfg.Routes))
	for i, r := range g.cfg.Routes {
		names[i] = r.Name
	}
	return names
}

// verifySecrets are where the routes verified by scheme token carry the
// token, for the event log to redact.
func (g *Gateway) verifySecrets() map[string]admin.Secret {
	out := map[string]admin.Secret{}
	for _, rc := range g.cfg.Routes {
		if rc.Verify.Scheme == config.SchemeToken {
			out[rc.Name] = admin.Secret{Header: rc.Verify.Header, JSON: rc.Verify.JSON}
		}
	}
	return out
}

// startAdmin listens on admin.listen ("" = no admin listener) and serves
// the admin API in the background; closeAll shuts it down first.
func (g *Gateway) startAdmin() error {
	addr := g.cfg.Admin.Listen
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("admin.listen %s: %w", addr, err)
	}
	checks := []admin.Check{{Name: "ledger", Ping: g.ledgerReady}}
	if g.screenPing != nil {
		checks = append(checks, admin.Check{Name: "screen", Ping: g.screenPing})
	}
	checks = append(checks, g.tlsCheck()...)
	a := &g.admin
	a.ln = ln
	var (
		q  admin.Queue
		rd admin.Redeliverer
	)
	if g.queue.q != nil {
		// Redeliveries need a route storing requests (Stores); the release
		// of a held delivery acknowledged to its provider does not: the
		// queue adopts the jobs of routes storing none now.
		rd = g.ledger
	}
	if g.queue.storing() {
		q = g.queue.q
	}
	a.srv = admin.New(admin.Options{
		Queue:       q,
		Redeliver:   rd,
		Stores:      g.queue.stores,
		Async:       g.queue.async,
		Secrets:     g.verifySecrets(),
		Token:       g.cfg.Admin.Token,
		Routes:      g.routeNames(),
		Ledger:      g.ledger,
		Forget:      g.forget,
		Deleting:    g.engine.CancelCommitRetry,
		HeldChanged: g.tel.AddHeld,
		Stats:       a.stats,
		Metrics:     g.tel.MetricsHandler(),
		Checks:      checks,
		Draining:    g.draining.Load,
		Console:     g.console,
		Hosts:       consoleHosts(g.cfg.Admin),
		Logger:      g.log,
		Now:         g.now,
	})
	go func() {
		if err := a.srv.Serve(ln); err != nil {
			g.log.Error("admin listener stopped", "err", err)
		}
	}()
	g.closers = append(g.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), adminCloseTimeout)
		defer cancel()
		return a.srv.Shutdown(ctx)
	})
	if g.cfg.Admin.Token == "" {
		g.log.Warn("admin.token is empty: the admin API (/admin/*) is off; /healthz, /readyz and /metrics still answer",
			"addr", ln.Addr().String())
	}
	g.log.Info("admin listener serving", "addr", ln.Addr().String())
	if g.cfg.Admin.Token != "" && g.cfg.Admin.Console {
		g.log.Info("operator console: sign in with admin.token", "url", "http://"+ln.Addr().String()+"/ui/")
	}
	return nil
}

// console builds the operator console over the admin API's operations
// (admin.console, with a token).
func (g *Gateway) console(ops *admin.Server) http.Handler {
	if !g.cfg.Admin.Console {
		return nil
	}
	routes := make([]console.Route, len(g.cfg.Routes))
	for i, r := range g.cfg.Routes {
		routes[i] = console.Route{Name: r.Name, StoresRequests: r.StoresRequests(), Async: r.Delivery == config.DeliveryAsync}
	}
	o := console.Options{
		Token: g.cfg.Admin.Token, Admin: ops, EventLog: ops, Routes: routes, TraceURL: g.cfg.Admin.TraceURL,
		Logger: g.log.With("component", "console"), Now: g.now, Throttle: ops.Throttle(), SecureCookies: g.cfg.Admin.SecureCookies,
		Hosts: consoleHosts(g.cfg.Admin), Depths: g.queueDepths,
	}
	if g.queue.storing() {
		o.Queue = ops
	}
	return console.New(o)
}

// consoleHosts are the host names the console answers to besides IP
// addresses and localhost: admin.console_hosts, and the name admin.listen
// binds to.
func consoleHosts(a config.Admin) []string {
	hosts := slices.Clone(a.ConsoleHosts)
	if host, _, err := net.SplitHostPort(a.Listen); err == nil && host != "" {
		hosts = append(hosts, host)
	}
	return hosts
}

// AdminAddr is the address the admin listener is bound to ("" when off or
// not started).
func (g *Gateway) AdminAddr() string {
	if g.admin.ln == nil {
		return ""
	}
	return g.admin.ln.Addr().String()
}

// forget drops a key from the screen and this process's cache, then tells
// the other replicas to drop it from theirs (admin DELETE and resolve).
func (g *Gateway) forget(ctx context.Context, ref idempotency.Ref) error {
	err := g.engine.Forget(ctx, ref)
	if inv := g.admin.inval; inv != nil {
		if perr := inv.Publish(ctx, ref); perr != nil {
			err = errors.Join(err, perr)
		}
	}
	return err
}

// answerReplaced drops the earlier answer of a record a redelivery gave a
// new one from the screen and every replica's cache, as a delete does, so
// that the next repeat reads the new answer from the ledger and refills
// them; their tombstones keep out a refill of the old answer read before.
// An async route's repeats get its acknowledgement whatever the answer,
// but the route may be switched to sync within screen.ttl.
func (g *Gateway) answerReplaced(ctx context.Context, ref idempotency.Ref) {
	if err := g.forget(ctx, ref); err != nil {
		g.log.ErrorContext(ctx, "a redelivery's new answer is recorded, but repeats may still be replayed the earlier one until screen.ttl: the screen or the other replicas were not told",
			"route", ref.Route, "key", ref.Key, "err", err)
	}
}

// queueDepths is what the console shows of each async route's queue.
func (g *Gateway) queueDepths(ctx context.Context) (map[string]console.Depth, error) {
	stats, err := g.ledger.QueueStats(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]console.Depth, len(stats))
	for r, s := range stats {
		out[r] = console.Depth{Queued: s.Queued, Dead: s.Dead, Redelivering: s.Redelivering, OldestQueued: s.OldestQueued}
	}
	return out, nil
}

// ledgerReady is the ledger's /readyz check: it answers, its table can be
// read (without it every delivery is refused), and, while the engine
// knows its writes failing, it takes a probe write. A probe that fails for
// another reason than a refused write (a schema without hookstamp_meta, a
// role that may not write it) tells nothing: ready, as before the probe.
func (g *Gateway) ledgerReady(ctx context.Context) error {
	if err := g.ledger.Ready(ctx); err != nil {
		return err
	}
	if !g.engine.WritesFailing() {
		return nil
	}
	if err := g.engine.ProbeWrites(ctx); errors.Is(err, idempotency.ErrUnavailable) {
		return refusingWrites{err}
	}
	return nil
}

// refusingWrites: the ledger answers reads and refuses writes.
type refusingWrites struct{ error }

func (e refusingWrites) Unwrap() error { return e.error }

// ReadyText implements the admin listener's summary of an error.
func (refusingWrites) ReadyText() string { return "refusing writes" }
