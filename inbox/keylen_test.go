package inbox_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/hookstamp/hookstamp/inbox"
	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// keyOf is a key of n bytes, multi-byte characters included.
func keyOf(n int) string {
	key := "evt_ü" + strings.Repeat("x", n)
	return key[:n]
}

// The longest key a route may forward is applied once and replayed: the
// inbox answered 400 over 255 bytes, final under the gateway's default
// record.statuses, so the event was never applied and every retry was
// answered 400.
func TestMiddlewareHoldsTheGatewaysLongestKey(t *testing.T) {
	if inbox.MaxKeyLen < config.MaxKeyLength {
		t.Fatalf("inbox.MaxKeyLen %d < the gateway's key.max_length bound %d", inbox.MaxKeyLen, config.MaxKeyLength)
	}
	eachBackend(t, func(t *testing.T, db *gorm.DB) {
		h := &payments{}
		srv := httptest.NewServer(newInbox(t, db, inbox.Options{}).Middleware(h))
		defer srv.Close()
		for _, n := range []int{256, config.MaxKeyLength} {
			key := keyOf(n)
			first := post(t, srv.URL, key)
			if again := post(t, srv.URL, key); first.status != http.StatusCreated || again.body != first.body {
				t.Fatalf("%d-byte key: %d %q, then %d %q; want 201 replayed", n, first.status, first.body, again.status, again.body)
			}
			wantCounts(t, db, inbox.DefaultTable, key, 1, 1)
		}
		if a := post(t, srv.URL, keyOf(inbox.MaxKeyLen+1)); a.status != http.StatusBadRequest {
			t.Errorf("key over MaxKeyLen: %d %q, want 400", a.status, a.body)
		}
	})
}

// oldTable is the inbox table as versions before the key column's
// widening created it.
var oldTable = map[string]string{
	"postgres": `CREATE TABLE hookstamp_inbox (consumer VARCHAR(100) NOT NULL, "key" VARCHAR(255) NOT NULL,
		status INTEGER NOT NULL, headers TEXT NOT NULL, body BYTEA NOT NULL,
		created_at TIMESTAMPTZ NOT NULL, expires_at TIMESTAMPTZ NOT NULL, PRIMARY KEY (consumer, "key"));
		CREATE INDEX hookstamp_inbox_expires_at ON hookstamp_inbox (expires_at)`,
	"mysql": "CREATE TABLE hookstamp_inbox (consumer VARBINARY(100) NOT NULL, `key` VARBINARY(255) NOT NULL," +
		" status INT NOT NULL, headers TEXT NOT NULL, body LONGBLOB NOT NULL," +
		" created_at DATETIME(6) NOT NULL, expires_at DATETIME(6) NOT NULL, PRIMARY KEY (consumer, `key`)," +
		" INDEX hookstamp_inbox_expires_at (expires_at)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
}

// Replicas starting together on a table of an earlier version, and each
// migrating it (New does on PostgreSQL; on MariaDB, where widening copies
// a table holding keys, Migrate does), widen its key column once between
// them, and the keys it held are still honoured.
func TestNewWidensAnOldTable(t *testing.T) {
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			for _, stmt := range strings.Split(oldTable[db.Dialector.Name()], ";") {
				mustExec(t, db, stmt)
			}
			mustExec(t, db, "INSERT INTO hookstamp_inbox VALUES ('default', 'evt_60', 201, '{}', 'booked', '2026-01-01', '2099-01-01')")
			replicas := make([]*gorm.DB, 6)
			for i := range replicas {
				replicas[i] = db.Session(&gorm.Session{NewDB: true})
			}
			var wg sync.WaitGroup
			errs := make(chan error, len(replicas))
			for _, r := range replicas {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ib, err := inbox.New(r, inbox.Options{})
					if err == nil {
						err = ib.Migrate(context.Background())
					}
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
			}
			ib := newInbox(t, db, inbox.Options{})
			srv := httptest.NewServer(ib.Middleware(&payments{}))
			defer srv.Close()
			if a := post(t, srv.URL, "evt_60"); a.status != http.StatusCreated || a.body != "booked" {
				t.Errorf("a key recorded before: %d %q, want its 201 replayed", a.status, a.body)
			}
			key := keyOf(inbox.MaxKeyLen)
			if ran, err := ib.Once(context.Background(), key, func(tx *gorm.DB) error { return book(tx, key) }); !ran || err != nil {
				t.Fatalf("%d-byte key: ran=%v err=%v", len(key), ran, err)
			}
			wantCounts(t, db, inbox.DefaultTable, key, 1, 1)
		})
	}
}

// An application whose user may not alter the old table still starts and
// serves the keys it holds; a longer one is answered 503, not a final
// 400, so that the sender retries until a migration role has widened the
// column.
func TestNewOnAnOldTableItMayNotWiden(t *testing.T) {
	dsn := testenv.Postgres(t)
	owner := openDB(t, postgres.Open(dsn))
	for _, stmt := range strings.Split(oldTable["postgres"], ";") {
		mustExec(t, owner, stmt)
	}
	role, as := pgRole(t, owner, dsn)
	mustExec(t, owner, "GRANT SELECT, INSERT, UPDATE, DELETE ON hookstamp_inbox, payments TO "+role)
	mustExec(t, owner, "GRANT USAGE ON ALL SEQUENCES IN SCHEMA "+schemaOf(t, owner)+" TO "+role)
	app := as(url.Values{"search_path": {schemaOf(t, owner)}})

	ib := newInbox(t, app, inbox.Options{})
	long := keyOf(300)
	if ran, err := ib.Once(context.Background(), long, func(*gorm.DB) error { return nil }); ran || !errors.Is(err, inbox.ErrKeyTooLong) {
		t.Errorf("300-byte key: ran=%v err=%v, want ErrKeyTooLong", ran, err)
	}
	srv := httptest.NewServer(ib.Middleware(&payments{}))
	defer srv.Close()
	if a := post(t, srv.URL, long); a.status != http.StatusServiceUnavailable {
		t.Errorf("300-byte key: %d %q, want 503", a.status, a.body)
	}
	if a := post(t, srv.URL, keyOf(255)); a.status != http.StatusCreated {
		t.Errorf("255-byte key: %d %q, want 201", a.status, a.body)
	}

	newInbox(t, owner, inbox.Options{}) // the migration role
	srv.Config.Handler = newInbox(t, app, inbox.Options{}).Middleware(&payments{})
	if a := post(t, srv.URL, long); a.status != http.StatusCreated {
		t.Errorf("300-byte key once widened: %d %q, want 201", a.status, a.body)
	}
	wantCounts(t, owner, inbox.DefaultTable, long, 1, 1)
}

// oldMariaDB is a MariaDB database holding the inbox table of an earlier
// version.
func oldMariaDB(tb testing.TB) *gorm.DB {
	tb.Helper()
	db := openDB(tb, mysql.Open(testenv.MySQL(tb)))
	mustExec(tb, db, oldTable["mysql"])
	return db
}

// New on MariaDB leaves a table holding keys narrow: widening copies it,
// holding up every key's insert meanwhile, and an application's start is
// no moment for that. Longer keys are refused (503 in the middlewares)
// until Migrate, called at a quiet moment, widens it.
func TestNewLeavesAMariaDBTableWithKeysToMigrate(t *testing.T) {
	db := oldMariaDB(t)
	mustExec(t, db, "INSERT INTO hookstamp_inbox VALUES ('default', 'evt_62', 201, '{}', 'booked', '2026-01-01', '2099-01-01')")
	ib := newInbox(t, db, inbox.Options{})
	ctx := context.Background()
	long := keyOf(300)
	pay := func(tx *gorm.DB) error { return book(tx, long) }
	if ran, err := ib.Once(ctx, long, pay); ran || !errors.Is(err, inbox.ErrKeyTooLong) {
		t.Fatalf("300-byte key after New: ran=%v err=%v, want ErrKeyTooLong", ran, err)
	}
	pool, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	pool.SetMaxOpenConns(1) // Migrate's connection is the one asked next
	if err := ib.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	var wait int
	if err := db.Raw("SELECT @@SESSION.lock_wait_timeout = @@GLOBAL.lock_wait_timeout").Scan(&wait).Error; err != nil || wait != 1 {
		t.Errorf("the pooled connection's lock_wait_timeout after Migrate: restored=%d err=%v, want its own again", wait, err)
	}
	if ran, err := newInbox(t, db, inbox.Options{}).Once(ctx, long, pay); !ran || err != nil {
		t.Fatalf("300-byte key after Migrate: ran=%v err=%v, want true, nil", ran, err)
	}
	wantCounts(t, db, inbox.DefaultTable, long, 1, 1)
}

// A replica starting on an empty table of an earlier version while an old
// replica's handler holds a key (uncommitted, so the table looks empty)
// waits no more than two seconds for it, and neither does any other key's
// insert, queued behind the ALTER meanwhile: the ALTER waited up to
// lock_wait_timeout, a day by default, and the whole inbox with it. New
// then starts with the narrow column.
func TestNewOnMariaDBWhileAnOldReplicaHoldsAKey(t *testing.T) {
	db := oldMariaDB(t)
	holder := db.Begin()
	t.Cleanup(func() { holder.Rollback() })
	mustExec(t, holder, "INSERT INTO hookstamp_inbox VALUES ('default', 'evt_63', 0, '', '', NOW(6), NOW(6) + INTERVAL 1 DAY)")

	started := make(chan error, 1)
	go func() {
		_, err := inbox.New(db.Session(&gorm.Session{NewDB: true}), inbox.Options{})
		started <- err
	}()
	waitFor(t, "New's ALTER to wait for the held key", func() bool {
		var n int64
		db.Raw("SELECT count(*) FROM information_schema.processlist WHERE info LIKE 'ALTER TABLE%' AND state LIKE 'Waiting for table metadata lock' AND db = DATABASE()").Scan(&n)
		return n > 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.WithContext(ctx).Exec("INSERT INTO hookstamp_inbox VALUES ('default', 'evt_64', 0, '', '', NOW(6), NOW(6) + INTERVAL 1 DAY)").Error; err != nil {
		t.Errorf("another key's insert while New widened: %v", err)
	}
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("New: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("New still waiting for the held key")
	}
}

// Migrate on MariaDB fails when another process's migration holds the
// lock past the wait: it ran anyway, GET_LOCK's timeout ignored, and two
// processes could copy the table at once.
func TestMigrateWithoutTheLockFails(t *testing.T) {
	db := oldMariaDB(t)
	mustExec(t, db, "INSERT INTO hookstamp_inbox VALUES ('default', 'evt_65', 201, '{}', 'booked', '2026-01-01', '2099-01-01')")
	pool, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	other, err := pool.Conn(ctx) // another process migrating
	if err != nil {
		t.Fatal(err)
	}
	var got int
	if err := other.QueryRowContext(ctx, "SELECT GET_LOCK('hookstamp_inbox_migrate', 10)").Scan(&got); err != nil || got != 1 {
		t.Fatalf("take the migration lock: %d, %v", got, err)
	}
	t.Cleanup(func() {
		_, _ = other.ExecContext(ctx, "DO RELEASE_LOCK('hookstamp_inbox_migrate')")
		other.Close()
	})
	inbox.SetMigrateLockWait(t, time.Second)

	if err := newInbox(t, db, inbox.Options{}).Migrate(ctx); err == nil {
		t.Error("Migrate without the lock: nil error")
	}
	var width int
	if err := db.Raw("SELECT character_maximum_length FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = 'hookstamp_inbox' AND column_name = 'key'").Scan(&width).Error; err != nil {
		t.Fatal(err)
	}
	if width != 255 {
		t.Errorf("key column: %d bytes, want 255 (widened without the lock)", width)
	}
}
