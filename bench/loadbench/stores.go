package loadbench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// Postgres is the machine's PostgreSQL as the benchmark uses it: a schema
// of its own per system under test, all dropped at the end.
type Postgres struct {
	admin   *pgxpool.Pool
	dsn     string
	schemas []string
}

// OpenPostgres connects to the server of dsn (a URL).
func OpenPostgres(ctx context.Context, dsn string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 2
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, fmt.Errorf("PostgreSQL at %s: %w", dsn, err)
	}
	return &Postgres{admin: p, dsn: dsn}, nil
}

// Schema creates a schema with the ledger table (migrated by sqlledger, as
// the gateway would) and returns a DSN whose search_path is that schema.
func (p *Postgres) Schema(ctx context.Context, name string) (string, error) {
	if _, err := p.admin.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return "", err
	}
	p.schemas = append(p.schemas, name)
	sep := "?"
	if strings.Contains(p.dsn, "?") {
		sep = "&"
	}
	dsn := p.dsn + sep + "search_path=" + name
	l, err := sqlledger.Open(ctx, sqlledger.Options{Driver: sqlledger.DriverPostgres, DSN: dsn, MaxOpenConns: 2})
	if err != nil {
		return "", err
	}
	defer l.Close()
	if err := l.Migrate(ctx); err != nil {
		return "", err
	}
	return dsn, nil
}

// Prefill bulk-loads n done rows on route into schema (expired of them
// with expires_at in the past, for the sweeper), with random keys drawn
// like the benchmark's own, then rebuilds the indexes, vacuums and
// checkpoints: a ledger that has been in service for a while. Every index
// is dropped for the load and built again from its own definition, so
// that one added to the ledger later is as compact as in service, where
// rows arrive in created_at order, rather than split by 5 million inserts
// in random key order.
func (p *Postgres) Prefill(ctx context.Context, schema, route string, n, expired int) error {
	conn, err := p.admin.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET search_path = "+schema); err != nil {
		return fmt.Errorf("prefill %s: %w", schema, err)
	}
	indexes, err := secondaryIndexes(ctx, conn.Conn(), schema, "hookstamp_records")
	if err != nil {
		return fmt.Errorf("prefill %s: %w", schema, err)
	}
	stmts := []string{"ALTER TABLE hookstamp_records DROP CONSTRAINT hookstamp_records_pkey"}
	for name := range indexes {
		stmts = append(stmts, "DROP INDEX "+pgx.Identifier{name}.Sanitize())
	}
	stmts = append(stmts,
		fmt.Sprintf(`INSERT INTO hookstamp_records (route, "key", state, fingerprint, status, headers, body, body_omitted,
			trace_id, span_id, source, created_at, completed_at, expires_at)
			SELECT '%s', 'evt_' || substr(md5(i::text), 1, 24), 'done', decode(md5(i::text) || md5((-i)::text), 'hex'), 200,
			'{"Content-Type":"application/json"}', convert_to('{"received":true,"status":"processed"}', 'UTF8'), false,
			md5((i+1)::text), substr(md5((i+2)::text), 1, 16), '127.0.0.1', now() - interval '2 days', now() - interval '2 days',
			CASE WHEN i %% 5 = 0 AND i / 5 <= %d THEN now() - interval '1 hour' ELSE now() + interval '30 days' END
			FROM generate_series(1, %d) AS i`, route, expired, n),
		`ALTER TABLE hookstamp_records ADD CONSTRAINT hookstamp_records_pkey PRIMARY KEY (route, "key")`)
	for _, def := range indexes {
		stmts = append(stmts, def)
	}
	stmts = append(stmts,
		"VACUUM ANALYZE hookstamp_records",
		// Write the bulk load's dirty pages out now: otherwise the next
		// checkpoint does it during the first measured cell (seen: 520 ms
		// p99 and a third less throughput in the first B1 cell on the
		// 5-million-row ledger, none in the cells after it).
		"CHECKPOINT",
		"RESET search_path",
	)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("prefill %s: %s: %w", schema, firstLine(s), err)
		}
	}
	return nil
}

// secondaryIndexes are table's indexes other than its primary key, by
// name, each with the statement that creates it.
func secondaryIndexes(ctx context.Context, conn *pgx.Conn, schema, table string) (map[string]string, error) {
	rows, err := conn.Query(ctx, `SELECT i.indexname, i.indexdef FROM pg_indexes i
		WHERE i.schemaname = $1 AND i.tablename = $2 AND i.indexname <> $2 || '_pkey'`, schema, table)
	if err != nil {
		return nil, err
	}
	defs := map[string]string{}
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			return nil, err
		}
		defs[name] = def
	}
	return defs, rows.Err()
}

// CountExpired counts rows of schema whose expires_at has passed.
func (p *Postgres) CountExpired(ctx context.Context, schema string) (int64, error) {
	var n int64
	err := p.admin.QueryRow(ctx, "SELECT count(*) FROM "+schema+".hookstamp_records WHERE expires_at < now()").Scan(&n)
	return n, err
}

// CountQueued counts rows of schema waiting for delivery (delivery: async).
func (p *Postgres) CountQueued(ctx context.Context, schema string) (int64, error) {
	var n int64
	err := p.admin.QueryRow(ctx, "SELECT count(*) FROM "+schema+".hookstamp_records WHERE state = 'queued'").Scan(&n)
	return n, err
}

// Count counts rows of schema.
func (p *Postgres) Count(ctx context.Context, schema string) (int64, error) {
	var n int64
	err := p.admin.QueryRow(ctx, "SELECT count(*) FROM "+schema+".hookstamp_records").Scan(&n)
	return n, err
}

// Close drops every schema made and disconnects.
func (p *Postgres) Close(ctx context.Context) error {
	var errs []string
	for _, s := range p.schemas {
		if _, err := p.admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+s+" CASCADE"); err != nil {
			errs = append(errs, err.Error())
		}
	}
	p.admin.Close()
	if len(errs) > 0 {
		return fmt.Errorf("drop schemas: %s", strings.Join(errs, "; "))
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// PGInsert is L1: single-row INSERT transactions (autocommit, one round
// trip each, synchronous_commit as the server has it) of a ledger-shaped
// row into a copy of the ledger table, with the same indexes, through pgx
// with a prepared statement: the database's own rate for what the gateway
// must write per unique delivery, without the gateway.
type PGInsert struct {
	pool *pgxpool.Pool
}

const pgInsertSQL = `INSERT INTO hookstamp_records (route, "key", state, fingerprint, status, headers, body, body_omitted,
	trace_id, span_id, source, created_at, completed_at, expires_at)
	VALUES ('bench', $1, 'done', $2, 200, '{"Content-Type":"application/json"}', $3, false, $4, $5, '127.0.0.1', $6, $6, $7)`

// NewPGInsert opens a pool of conns connections on dsn.
func NewPGInsert(ctx context.Context, dsn string, conns int) (*PGInsert, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(conns)
	cfg.MinConns = int32(conns)
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &PGInsert{pool: pool}, nil
}

// Close closes the pool.
func (p *PGInsert) Close() { p.pool.Close() }

// NewWorker implements Doer.
func (p *PGInsert) NewWorker(seed uint64) Worker {
	return &pgWorker{p: p, r: newRand(seed), fp: make([]byte, 32)}
}

type pgWorker struct {
	p  *PGInsert
	r  *rand.Rand
	fp []byte
}

var receipt = []byte(`{"received":true,"status":"processed"}`)

func (w *pgWorker) Do(ctx context.Context) (string, bool) {
	key := UniqueKey(w.r, "evt_")
	for i := range w.fp {
		w.fp[i] = byte(w.r.Uint32())
	}
	now := time.Now().UTC()
	_, err := w.p.pool.Exec(ctx, pgInsertSQL, key, w.fp, receipt,
		"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", now, now.Add(720*time.Hour))
	return "", err == nil
}

// RedisSetNX is L2: unpipelined SET NX EX (one round trip each), on keys
// under the run's prefix.
type RedisSetNX struct {
	client *redis.Client
	prefix string
}

// NewRedisSetNX connects with a pool of conns connections.
func NewRedisSetNX(addr, prefix string, conns int) *RedisSetNX {
	return &RedisSetNX{client: redis.NewClient(&redis.Options{Addr: addr, PoolSize: conns, MinIdleConns: conns}), prefix: prefix + "l2:"}
}

// Close closes the client.
func (r *RedisSetNX) Close() error { return r.client.Close() }

// NewWorker implements Doer.
func (r *RedisSetNX) NewWorker(seed uint64) Worker { return &redisWorker{s: r, r: newRand(seed)} }

type redisWorker struct {
	s *RedisSetNX
	r *rand.Rand
}

func (w *redisWorker) Do(ctx context.Context) (string, bool) {
	ok, err := w.s.client.SetNX(ctx, UniqueKey(w.r, w.s.prefix), "1", time.Minute).Result()
	return "", err == nil && ok
}

// CleanRedis deletes every key under prefix (SCAN, never KEYS or FLUSH:
// the server is shared).
func CleanRedis(ctx context.Context, addr, prefix string) (int, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	n := 0
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			if err := c.Unlink(ctx, batch...).Err(); err != nil {
				return n, err
			}
			n += len(batch)
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return n, err
	}
	if len(batch) > 0 {
		if err := c.Unlink(ctx, batch...).Err(); err != nil {
			return n, err
		}
		n += len(batch)
	}
	return n, nil
}
