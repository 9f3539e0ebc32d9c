package gateway

import (
	"context"
	"fmt"
	"strings"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency/memscreen"
	"github.com/hookstamp/hookstamp/internal/idempotency/redisscreen"
)

// openScreen builds the screen screen.driver names, and its /readyz check;
// with "none" there is neither (claims are pending rows in the ledger).
// A Redis screen's prefix is claimed for the ledger (prefix.go): another
// deployment's claim refuses the start.
func (g *Gateway) openScreen(ctx context.Context) error {
	cfg := g.cfg
	switch cfg.Screen.Driver {
	case config.ScreenMemory:
		// Done records are kept once, in the engine's local cache (which
		// repeats consult first), not twice in one process; with the cache
		// off, the screen keeps them.
		// Claims in this process's memory: a second process on the same
		// SQLite file would forward the same deliveries beside it.
		release, err := g.ledger.LockAlone()
		if err != nil {
			return fmt.Errorf("screen.driver memory is one process's, and %w; for several processes on one SQLite file use screen.driver none", err)
		}
		g.closers = append(g.closers, release)
		s := memscreen.New(memscreen.Options{MaxCachedBody: int(cfg.Screen.MaxCachedBody), NoDone: g.localCacheBytes() > 0})
		g.screen = s
		// The memory screen is this process: it answers while we do.
		g.screenPing = func(context.Context) error { return nil }
		g.closers = append(g.closers, func() error { s.Close(); return nil })
	case config.ScreenRedis:
		o := g.redisOptions()
		o.MaxCachedBody = int(cfg.Screen.MaxCachedBody)
		s, err := redisscreen.New(o)
		if err != nil {
			return fmt.Errorf("open redis screen: %w", err)
		}
		g.screen = s
		g.closers = append(g.closers, s.Close)
		if err := g.openPrefixGuard(); err != nil {
			return err
		}
		if err := g.guard.claimAtStart(ctx); err != nil {
			return err
		}
		g.screenPing = func(ctx context.Context) error {
			if err := s.Ping(ctx); err != nil {
				return err
			}
			return g.guard.ready(ctx)
		}
		if p := cfg.Screen.Prefix; p != "" && !strings.HasSuffix(p, ":") {
			// Keys are {prefix}{route}:{key}: "shop" with route "1" and
			// "shop1:" with route "stripe" both name shop1:stripe:evt_1.
			g.log.Warn("screen.prefix does not end in \":\": two deployments sharing this Redis can name the same screen keys, and one would replay the other's answers",
				"prefix", p)
		}
		if err := g.tel.InstrumentRedis(s.Client()); err != nil {
			return fmt.Errorf("trace redis screen: %w", err)
		}
	case config.ScreenNone:
	default:
		return fmt.Errorf("screen.driver %q: unknown", cfg.Screen.Driver)
	}
	return nil
}

// redisOptions are the connection settings of screen.redis, for every
// Redis client the gateway makes: the screen's, and the one of the
// statistics and cache invalidations.
func (g *Gateway) redisOptions() redisscreen.Options {
	rc := g.cfg.Screen.Redis
	return redisscreen.Options{
		Addrs:    rc.Addrs,
		Username: rc.Username,
		Password: rc.Password,
		DB:       rc.DB,
		TLS:      rc.TLS,
		Prefix:   g.cfg.Screen.Prefix,
	}
}
