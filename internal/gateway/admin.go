package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/admin"
	"github.com/hookstamp/hookstamp/internal/config"
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
	// screen only). It is not the screen's: that one is traced, and a
	// flush every 100ms would fill traces with root spans; and a slow
	// statistics flush must not take connections from claims.
	redis redis.UniversalClient
	inval *invalidations

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
	rc := g.cfg.Screen.Redis
	uo := &redis.UniversalOptions{
		Addrs: rc.Addrs, Username: rc.Username, Password: rc.Password, DB: rc.DB,
		DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		PoolTimeout: 2 * time.Second, ContextTimeoutEnabled: true, PoolSize: 4,
	}
	if rc.TLS {
		uo.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	a.redis = redis.NewUniversalClient(uo)
	g.closers = append(g.closers, a.redis.Close)
	rs, err := stats.NewRedis(stats.RedisOptions{
		Client: a.redis, Prefix: g.cfg.Screen.Prefix, Routes: g.routeNames(), Now: g.now, Logger: g.log,
	})
	if err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	a.stats = rs
	g.closers = append(g.closers, rs.Close)
	// Every replica publishes its deletes, whether or not it keeps a cache
	// itself (one with local_cache: 0 may be the one serving the admin
	// API); the replicas with a cache subscribe.
	a.inval = &invalidations{client: a.redis, channel: g.cfg.Screen.Prefix + "invalidate"}
	if cache != nil {
		a.inval.subscribe(cache, g.log)
		g.closers = append(g.closers, a.inval.close)
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
	checks := []admin.Check{{Name: "ledger", Ping: g.ledger.Ready}} // the table too: without it every delivery is refused
	switch s := g.screen.(type) {
	case *redisscreen.Screen:
		checks = append(checks, admin.Check{Name: "screen", Ping: s.Ping})
	case nil:
	default:
		// The memory screen is this process: it answers while we do.
		checks = append(checks, admin.Check{Name: "screen", Ping: func(context.Context) error { return nil }})
	}
	checks = append(checks, g.tlsCheck()...)
	a := &g.admin
	a.ln = ln
	a.srv = admin.New(admin.Options{
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
	return nil
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
		if perr := inv.publish(ctx, ref); perr != nil {
			err = errors.Join(err, perr)
		}
	}
	return err
}

// invalidations carries operators' deletes to the in-process caches of
// every replica sharing the Redis screen, over one pub/sub channel
// ({prefix}invalidate). A message is the route name, NUL, and the key
// (route names never contain NUL).
//
// Pub/sub delivers at most once: a DELETE published while a replica's
// subscription is down is lost to it. So from the moment the subscription
// is found down until a (re)subscription is confirmed the replica's cache
// is off (idempotency.Cache.Suspend: repeats read the screen or the
// ledger, which the DELETE did reach), every (re)subscription clears it,
// and cached entries expire anyway (idempotency.DefaultCacheMaxAge). A
// subscription whose connection hangs (a partition resets nothing) is
// found by a ping after a few silent seconds: with no pong within five
// more, the cache is turned off and a new subscription made.
type invalidations struct {
	client  redis.UniversalClient
	channel string
	// silence is how long the subscription may stay quiet before a ping
	// (invalidationSilence), pongWait how long the pong may take (five
	// seconds).
	silence, pongWait time.Duration

	// The subscription (subscribe): only a replica with a cache has one.
	mu     sync.Mutex // guards ps against close
	ps     *redis.PubSub
	done   chan struct{}
	stop   chan struct{}
	closed atomic.Bool
	once   sync.Once
}

// subscribe clears keys from cache as other replicas publish their deletes.
func (inv *invalidations) subscribe(cache *idempotency.Cache, log *slog.Logger) {
	if inv.silence <= 0 {
		inv.silence = invalidationSilence
	}
	if inv.pongWait <= 0 {
		inv.pongWait = 5 * time.Second
	}
	inv.done, inv.stop = make(chan struct{}), make(chan struct{})
	subscribed := make(chan struct{})
	var once sync.Once
	// Not subscribed yet: a delete published now would not reach us.
	cache.Suspend()
	ps := inv.resubscribe(nil)
	go func() {
		defer close(inv.done)
		pinged := false
		// down: the operator was told the subscription is down, once an
		// outage. Not cache.Suspended: the cache is off from the start, and
		// a subscription refused then (an ACL user without the channel)
		// would never be logged, its cause with it.
		down := false
		var reloaded time.Time // the cluster's layout last reloaded
		for {
			wait := inv.silence
			if pinged {
				wait = inv.pongWait
			}
			msg, err := ps.ReceiveTimeout(context.Background(), wait)
			if inv.closed.Load() {
				return
			}
			var ne net.Error
			timeout := err != nil && errors.As(err, &ne) && ne.Timeout()
			switch {
			case err != nil && pinged && timeout:
				// No pong: the connection hangs. Deletes published
				// meanwhile are lost to this replica, and will be until
				// a new subscription is confirmed.
				log.Warn("cache invalidations: the subscription does not answer; subscribing anew", "channel", inv.channel)
				cache.Suspend()
				down = true
				ps, pinged = inv.resubscribe(ps), false
				continue
			case err != nil:
				if !timeout && !down {
					// A broken connection (go-redis reconnects and
					// resubscribes on the next receive), or a refused
					// subscription: deletes cannot reach this replica
					// until a subscription is confirmed, so its cache
					// answers nothing meanwhile.
					log.Warn("cache invalidations: the subscription is down; the local cache is off until it is back",
						"channel", inv.channel, "err", err)
					cache.Suspend()
					down = true
				}
				var refused redis.Error
				if errors.As(err, &refused) {
					// Redis refused a command on the subscription (the
					// SUBSCRIBE itself: an ACL user without the channel,
					// a busy script). go-redis sends it again only on a
					// new connection, so without a new subscription the
					// cache would stay off for as long as this one lasts,
					// long after the cause is gone (the ACL granted).
					select {
					case <-time.After(inv.silence):
					case <-inv.stop:
						return
					}
					ps, pinged = inv.resubscribe(ps), false
					continue
				}
				if cc, ok := inv.client.(*redis.ClusterClient); ok && !timeout && time.Since(reloaded) >= time.Second {
					// The node holding the subscription may be gone for
					// good (failed over): go-redis redials the slot's
					// master it last knew, and learns of the new one only
					// at its periodic reload (a minute), the cache off
					// meanwhile.
					cc.ReloadState(context.Background())
					reloaded = time.Now()
				}
				// A silent spell, or a broken connection: make sure the
				// connection answers.
				pinged = ps.Ping(context.Background()) == nil
				select {
				case <-time.After(100 * time.Millisecond):
				case <-inv.stop:
					return
				}
				continue
			}
			pinged = false
			switch m := msg.(type) {
			case *redis.Subscription:
				// (Re)subscribed: deletes published while the subscription
				// was down were lost, so nothing cached before can be trusted.
				if m.Kind == "subscribe" {
					cache.Resume()
					down = false
					once.Do(func() { close(subscribed) })
				}
			case *redis.Message:
				route, key, ok := strings.Cut(m.Payload, "\x00")
				if !ok {
					log.Warn("ignored a malformed cache invalidation", "channel", inv.channel)
					continue
				}
				cache.Delete(idempotency.Ref{Route: route, Key: key})
			}
		}
	}()
	// Serve once subscribed, so that the first Clear comes before the
	// first delivery: one that began before a Clear cannot cache what it
	// reads or records (idempotency.Ticket), and repeats waiting for it
	// in-process would then each go to Redis. Bounded: with Redis down
	// the gateway serves anyway, and the cache is cleared once subscribed.
	select {
	case <-subscribed:
	case <-time.After(subscribeWait):
		log.Warn("cache invalidations: not subscribed yet; serving anyway", "channel", inv.channel)
	}
}

// invalidationSilence is how long the subscription stays quiet before it
// is pinged. A hung connection is found only by the missing pong, and until
// then the replica replays from its cache records that other replicas'
// DELETEs removed (the provider's redelivery answered, never forwarded):
// a few seconds, not a minute, for one PING per replica now and then.
const invalidationSilence = 5 * time.Second

// subscribeWait bounds how long start-up waits for the first subscription.
const subscribeWait = 2 * time.Second

// resubscribe closes old (if any) and subscribes anew. Subscribe does not
// fail when Redis is down: go-redis keeps reconnecting and resubscribing
// in the background.
func (inv *invalidations) resubscribe(old *redis.PubSub) *redis.PubSub {
	if old != nil {
		_ = old.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ps := inv.client.Subscribe(ctx, inv.channel)
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.closed.Load() {
		_ = ps.Close() // close ran meanwhile: the loop's next receive ends it
	}
	inv.ps = ps
	return ps
}

func (inv *invalidations) publish(ctx context.Context, ref idempotency.Ref) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := inv.client.Publish(ctx, inv.channel, ref.Route+"\x00"+ref.Key).Err(); err != nil {
		return fmt.Errorf("publish cache invalidation of %q: %w", ref.Key, err)
	}
	return nil
}

func (inv *invalidations) close() error {
	var err error
	inv.once.Do(func() {
		inv.closed.Store(true)
		close(inv.stop)
		inv.mu.Lock()
		err = inv.ps.Close()
		inv.mu.Unlock()
		<-inv.done
	})
	return err
}
