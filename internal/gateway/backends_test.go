package gateway

import (
	"testing"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// backend is one pair of ledger and screen drivers the end-to-end suite
// runs against: the embedded default, the PostgreSQL ledger alone, and the
// production pair (PostgreSQL + Redis).
type backend struct {
	name   string
	ledger string // sqlite | postgres
	screen string // memory | redis
}

var backends = []backend{
	{name: "sqlite+memory", ledger: "sqlite", screen: "memory"},
	{name: "postgres+memory", ledger: "postgres", screen: "memory"},
	{name: "postgres+redis", ledger: "postgres", screen: "redis"},
}

// stores are one test's own ledger (a SQLite file or a PostgreSQL schema)
// and, for the Redis screen, its own key prefix on the shared Redis. Every
// gateway configured from the same stores shares them, as replicas (or a
// restarted process) do.
type stores struct {
	backend
	dsn       string
	redisAddr string
	prefix    string
}

func (be backend) open(tb testing.TB) *stores {
	tb.Helper()
	s := &stores{backend: be}
	switch be.ledger {
	case "postgres":
		s.dsn = testenv.Postgres(tb)
	default:
		s.dsn = dbPath(tb)
	}
	if be.screen == "redis" {
		s.redisAddr, s.prefix = testenv.RedisPrefix(tb)
	}
	return s
}

// config is gwConfig on these stores. A test that chose another screen in
// top (e.g. driver none) keeps it.
func (s *stores) config(tb testing.TB, upstreamURL, route, top string) *config.Config {
	tb.Helper()
	dsn := s.dsn
	if s.ledger != config.StoreSQLite {
		dsn = "unused.db" // gwConfig writes driver sqlite, which refuses a postgres:// DSN
	}
	cfg := gwConfig(tb, upstreamURL, dsn, route, top)
	cfg.Store.Driver, cfg.Store.DSN = s.ledger, s.dsn
	if s.screen == "redis" && cfg.Screen.Driver == config.ScreenMemory {
		cfg.Screen.Driver = config.ScreenRedis
		cfg.Screen.Redis.Addrs = []string{s.redisAddr}
		cfg.Screen.Prefix = s.prefix
	}
	return cfg
}

// eachBackend runs f once per backend, as parallel subtests.
func eachBackend(t *testing.T, f func(t *testing.T, s *stores)) {
	t.Helper()
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			f(t, be.open(t))
		})
	}
}
