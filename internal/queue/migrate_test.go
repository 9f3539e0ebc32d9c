package queue_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/queue"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// Behind PgBouncer in transaction pooling mode a session's advisory lock
// stays with whichever server connection ran the SELECT that took it, and
// an unlock sent later may run on another one and do nothing: the lock
// then outlived the migration, and the next replica's start-up waited for
// it until it timed out. Each Migrate must leave no lock behind, and the
// next must go through, while other clients (a replica serving) keep the
// pooler's server connections changing hands.
func TestMigrateThroughPgBouncerLeavesNoLockBehind(t *testing.T) {
	pg := testenv.Postgres(t)
	b := testenv.StartPgBouncer(t, pg, 2)
	dsn := b.DSN + "&default_query_exec_mode=cache_describe"
	ctx := context.Background()
	// gateway migrate's pool.
	l, err := sqlledger.Open(ctx, sqlledger.Options{Driver: queue.DriverPostgres, DSN: dsn, MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if err := l.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	other, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, _ = other.ExecContext(qctx, "SELECT pg_sleep(0.001)")
				cancel()
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	direct, err := sql.Open("pgx", pg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.Close() })
	held := func() int {
		t.Helper()
		var n int
		err := direct.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted `+
			`AND objid::bigint = (hashtext(current_schema() || '.river_migration')::bigint & 4294967295)`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	for i := range 5 {
		mctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := queue.Migrate(mctx, l)
		cancel()
		if err != nil {
			t.Fatalf("Migrate #%d: %v", i+1, err)
		}
		if n := held(); n != 0 {
			t.Fatalf("after Migrate #%d the river_migration advisory lock is still held (%d in pg_locks)", i+1, n)
		}
	}
}

// A replica configured with store.max_open_conns: 1 migrates at start-up
// too: the transaction holding the lock must not leave River's migrations
// waiting for a connection, and the pool keeps its size afterwards.
func TestMigrateOnAPoolOfOneConnection(t *testing.T) {
	ctx := context.Background()
	l, err := sqlledger.Open(ctx, sqlledger.Options{Driver: queue.DriverPostgres, DSN: testenv.Postgres(t), MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if err := l.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := queue.Migrate(mctx, l); err != nil {
		t.Fatal(err)
	}
	db, err := l.DB()
	if err != nil {
		t.Fatal(err)
	}
	if n := db.Stats().MaxOpenConnections; n != 1 {
		t.Errorf("pool size after Migrate: %d, want 1", n)
	}
}

// Replicas starting together on an empty schema take turns: River's
// migrations each commit on their own, so two running at once would both
// apply the first.
func TestConcurrentMigrateTakesTurns(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.Postgres(t)
	ledgers := make([]*sqlledger.Ledger, 3)
	for i := range ledgers {
		l, err := sqlledger.Open(ctx, sqlledger.Options{Driver: queue.DriverPostgres, DSN: dsn, MaxOpenConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		ledgers[i] = l
	}
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	errs := make([]error, len(ledgers))
	var wg sync.WaitGroup
	for i, l := range ledgers {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = queue.Migrate(mctx, l) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}
}
