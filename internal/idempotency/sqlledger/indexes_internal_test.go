package sqlledger

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

const logIndex = "idx_hookstamp_records_log"

// insertUncommitted writes a ledger row in a transaction left open until
// the test ends or end is called: the writer a migration's index build
// must wait for. pid is its server process.
func insertUncommitted(t *testing.T, l *Ledger, key string) (pid int, end func()) {
	t.Helper()
	tx := l.w.Begin()
	if err := tx.Raw("SELECT pg_backend_pid()").Scan(&pid).Error; err != nil {
		t.Fatal(err)
	}
	err := tx.Exec(`INSERT INTO hookstamp_records (route, "key", state, status, headers, body_omitted, trace_id, span_id, source, created_at, expires_at) `+
		`VALUES ('stripe', ?, 'pending', 0, '{}', false, '', '', '', now(), now() + interval '1 hour')`, key).Error
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	end = func() { once.Do(func() { tx.Rollback() }) }
	t.Cleanup(end)
	return pid, end
}

// waitingFor reports whether a statement starting with prefix waits for a
// lock that server process pid holds.
func waitingFor(t *testing.T, l *Ledger, pid int, prefix string) bool {
	var n int
	if err := l.w.Raw(`SELECT count(*) FROM pg_stat_activity WHERE ? = ANY(pg_blocking_pids(pid)) AND query LIKE ?`, pid, prefix+"%").Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// ownConn takes a connection of l's pool for the test, given back when
// the test ends.
func ownConn(t *testing.T, l *Ledger) *sql.Conn {
	t.Helper()
	sdb, err := l.Writer()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := sdb.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func wantIndexes(t *testing.T, l *Ledger, want indexState, names ...string) {
	t.Helper()
	states, _, err := l.indexStates(context.Background(), TableName)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if states[name] != want {
			t.Errorf("index %s: state %d, want %d", name, states[name], want)
		}
	}
}

// A migration that adds an index to a ledger in service must not hold off
// its writes: it waits for the transactions already writing, while new
// deliveries are still claimed.
func TestMigrateBuildsIndexesWithoutBlockingWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openPG(t)
	if err := l.w.Exec("DROP INDEX " + logIndex).Error; err != nil {
		t.Fatal(err)
	}
	blocker, end := insertUncommitted(t, l, "writing-before-the-upgrade")
	upgrade := make(chan error, 1)
	go func() { upgrade <- l.Migrate(ctx) }()
	testenv.Eventually(t, 10*time.Second, "the index build waiting for the open writer", func() bool {
		return waitingFor(t, l, blocker, "CREATE INDEX")
	})

	claimCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := l.Claim(claimCtx, idempotency.ClaimRequest{Ref: idempotency.Ref{Route: "stripe", Key: "delivered-during-the-upgrade"}, Owner: "o", Lease: time.Minute, Retention: time.Hour}, time.Now())
	if err != nil {
		t.Fatalf("a delivery during the index build: %v", err)
	}
	if c.Status != idempotency.Acquired {
		t.Fatalf("claim during the index build: %v, want acquired", c.Status)
	}
	select {
	case err := <-upgrade:
		t.Fatalf("the migration ended (%v) before the writer it waits for", err)
	default:
	}

	end()
	select {
	case err := <-upgrade:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the migration did not end after the writer did")
	}
	wantIndexes(t, l, indexValid, logIndex)
}

// A concurrent build that failed leaves an invalid index, which queries
// ignore but which still costs every write: the next migration rebuilds it.
func TestMigrateRebuildsAnInvalidIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openPG(t)
	conn := ownConn(t, l)
	for _, s := range []string{"DROP INDEX " + logIndex, "SET statement_timeout = '200ms'"} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	_, end := insertUncommitted(t, l, "writing")
	if _, err := conn.ExecContext(ctx, `CREATE INDEX CONCURRENTLY `+logIndex+` ON hookstamp_records (route, created_at, "key")`); err == nil {
		t.Fatal("the interrupted build succeeded")
	}
	end()
	wantIndexes(t, l, indexBroken, logIndex)

	if err := l.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	wantIndexes(t, l, indexValid, logIndex)
}

// Replicas upgrading together build each missing index once, whichever
// starts it, and each waits until it is built.
func TestConcurrentMigrateBuildsMissingIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testenv.Postgres(t)
	first := openMigrated(t, Options{Driver: DriverPostgres, DSN: dsn, MaxOpenConns: 2})
	names := []string{logIndex, "idx_hookstamp_records_unsettled", "idx_hookstamp_records_held"}
	for _, name := range names {
		if err := first.w.Exec("DROP INDEX " + name).Error; err != nil {
			t.Fatal(err)
		}
	}
	replicas := make([]*Ledger, 3)
	for i := range replicas {
		l, err := Open(ctx, Options{Driver: DriverPostgres, DSN: dsn, MaxOpenConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		replicas[i] = l
	}
	errs := make([]error, len(replicas))
	var wg sync.WaitGroup
	for i, l := range replicas {
		wg.Go(func() {
			errs[i] = l.Migrate(ctx)
			if errs[i] == nil {
				// Each replica returns only once every index is usable.
				wantIndexes(t, l, indexValid, names...)
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}
}

// A ledger made by an earlier build lacks the newer columns and their
// indexes; a migration adds both, the rows kept.
func TestMigrateUpgradesAnOlderLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openPG(t)
	rec := &idempotency.Record{
		Ref: idempotency.Ref{Route: "stripe", Key: "kept"}, State: idempotency.StateDone, Fingerprint: []byte("0123456789abcdef0123456789abcdef"),
		Response:  idempotency.Response{Status: 200, Headers: map[string]string{}, Body: []byte("ok")},
		CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour),
	}
	if err := l.Commit(ctx, rec, "o", time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"ALTER TABLE hookstamp_records DROP COLUMN request_body",
		"ALTER TABLE hookstamp_records DROP COLUMN acked",
		"ALTER TABLE hookstamp_attempts DROP COLUMN expires_at", // and its index
	} {
		if err := l.w.Exec(s).Error; err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	m := l.w.Migrator()
	if !m.HasColumn(&recordRow{}, "request_body") || !m.HasColumn(&recordRow{}, "acked") || !m.HasColumn(&attemptRow{}, "expires_at") {
		t.Fatal("the migration did not add the dropped columns")
	}
	states, _, err := l.indexStates(ctx, AttemptsTable)
	if err != nil {
		t.Fatal(err)
	}
	if states["idx_hookstamp_attempts_expires_at"] != indexValid {
		t.Fatalf("idx_hookstamp_attempts_expires_at: state %d after the migration", states["idx_hookstamp_attempts_expires_at"])
	}
	// A row stored before acked existed reads as neither acknowledged nor
	// recorded synchronously: unknown, answered as that release did.
	if got, err := l.Lookup(ctx, rec.Ref); err != nil || got == nil || string(got.Response.Body) != "ok" || got.Acked || !got.AckUnknown {
		t.Fatalf("the record after the migration: %+v, %v", got, err)
	}
}

// A replica that finds another's build of the index replacing a retired
// one under way keeps the retired index until that build is done: the
// sweep has an index to walk throughout.
func TestMigrateKeepsARetiredIndexUntilItsReplacementIsBuilt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var out testenv.Buffer
	l := openPGWith(t, Options{Logger: slog.New(slog.NewTextHandler(&out, nil))})
	oldSweepIndex(t, l)
	// Taken before the writer starts, so given back after it ends: until
	// then the build on it cannot end.
	conn := ownConn(t, l)
	blocker, end := insertUncommitted(t, l, "writing-before-the-upgrade")
	built := make(chan error, 1)
	go func() {
		_, err := conn.ExecContext(ctx, "CREATE INDEX CONCURRENTLY "+sweepIndex+" ON hookstamp_records (expires_at) WHERE state <> 'queued'")
		built <- err
	}()
	testenv.Eventually(t, 10*time.Second, "the other replica's build waiting for the open writer", func() bool {
		return waitingFor(t, l, blocker, "CREATE INDEX")
	})

	var upgradeErr error
	upgraded := make(chan struct{})
	go func() {
		defer close(upgraded)
		upgradeErr = l.Migrate(ctx)
	}()
	t.Cleanup(func() { end(); <-upgraded })
	testenv.Eventually(t, 10*time.Second, "the migration waiting for the other build", func() bool {
		return strings.Contains(out.String(), "hookstamp_records indexes")
	})
	wantIndexes(t, l, indexValid, oldSweepIndexName)

	end()
	select {
	case <-upgraded:
	case <-time.After(10 * time.Second):
		t.Fatal("the migration did not end after the writer did")
	}
	if err := errors.Join(<-built, upgradeErr); err != nil {
		t.Fatal(err)
	}
	wantIndexes(t, l, indexValid, sweepIndex)
	if states, _, err := l.indexStates(ctx, TableName); err != nil || states[oldSweepIndexName] != indexMissing {
		t.Fatalf("%s after the migration: state %d, %v", oldSweepIndexName, states[oldSweepIndexName], err)
	}
}
