package loadbench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// What a system asked its stores to write, from the servers' own
// counters: the rows the ledger inserted, updated or deleted in the
// system's schema (pg_stat_user_tables), and the commands Redis ran, by
// name (INFO commandstats, which counts the commands a script calls as
// well as the script). The Redis counters are the whole server's: another
// client busy during a window shows up in it.

// StoreSample is the counters at one moment.
type StoreSample struct {
	LedgerRows uint64
	Redis      map[string]uint64 // calls by command name
}

// redisScripts run a Lua script (one round trip each).
var redisScripts = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall"}

// StoreDelta is what happened between two samples.
type StoreDelta struct {
	LedgerRows, RedisWrites, RedisScripts, RedisPublishes, RedisCommands uint64
}

// delta is what happened from a to b; writes are the Redis commands that
// change data (redisWriteCommands).
func (a StoreSample) delta(b StoreSample, writes map[string]bool) StoreDelta {
	d := StoreDelta{LedgerRows: sub(b.LedgerRows, a.LedgerRows)}
	for name, n := range b.Redis {
		k := sub(n, a.Redis[name])
		d.RedisCommands += k
		switch {
		case name == "publish":
			d.RedisPublishes += k
		case writes[name]:
			d.RedisWrites += k
		case slices.Contains(redisScripts, name):
			d.RedisScripts += k
		}
	}
	// A script is counted apart from the commands it runs.
	d.RedisCommands -= d.RedisScripts
	return d
}

func (d *StoreDelta) add(o StoreDelta) {
	d.LedgerRows += o.LedgerRows
	d.RedisWrites += o.RedisWrites
	d.RedisScripts += o.RedisScripts
	d.RedisPublishes += o.RedisPublishes
	d.RedisCommands += o.RedisCommands
}

func sub(b, a uint64) uint64 {
	if b < a {
		return 0 // a CONFIG RESETSTAT between the samples
	}
	return b - a
}

// storeStats reads the counters.
type storeStats struct {
	pg     *pgxpool.Pool
	redis  *redis.Client
	writes map[string]bool // the Redis commands that change data
}

func newStoreStats(ctx context.Context, pg *Postgres, redisAddr string) (*storeStats, error) {
	s := &storeStats{pg: pg.admin, redis: redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 1})}
	var err error
	if s.writes, err = redisWriteCommands(ctx, s.redis); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// redisWriteCommands asks the server which of its commands change data:
// those COMMAND flags "write". A list kept by hand missed HINCRBY, ZADD,
// ZINCRBY, ZPOPMIN… Subcommands (commandstats' "xgroup|create") are not
// in the reply as go-redis reads it; none of hookstamp's writes is one.
func redisWriteCommands(ctx context.Context, c *redis.Client) (map[string]bool, error) {
	cmds, err := c.Command(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("redis COMMAND, for which commands write: %w", err)
	}
	return writeCommands(cmds), nil
}

func writeCommands(cmds map[string]*redis.CommandInfo) map[string]bool {
	writes := map[string]bool{}
	for name, info := range cmds {
		if slices.Contains(info.Flags, "write") {
			writes[strings.ToLower(name)] = true
		}
	}
	return writes
}

func (s *storeStats) close() { _ = s.redis.Close() }

// sample reads the counters; schema "" skips the ledger's. A counter that
// cannot be read stays zero (then the delta is too).
func (s *storeStats) sample(ctx context.Context, schema string) StoreSample {
	var out StoreSample
	if schema != "" {
		_ = s.pg.QueryRow(ctx, `SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint
			FROM pg_stat_user_tables WHERE schemaname = $1`, schema).Scan(&out.LedgerRows)
	}
	if info, err := s.redis.Info(ctx, "commandstats").Result(); err == nil {
		out.Redis = parseCommandStats(info)
	}
	return out
}

// parseCommandStats reads "cmdstat_NAME:calls=N,..." lines.
func parseCommandStats(info string) map[string]uint64 {
	m := map[string]uint64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		if n, err := strconv.ParseUint(calls, 10, 64); err == nil {
			m[name] = n
		}
	}
	return m
}
