package inbox_test

import (
	"cmp"
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	mysqlerr "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/hookstamp/hookstamp/inbox"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// An application whose database user may only read and write the inbox
// table (a migration role created it) starts and records keys: New runs no
// DDL once the table and its index exist. The qualified table is reached
// with no default schema or database, so that its index is looked for in
// the table's schema.
func TestNewWithoutDDLPrivilege(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		dsn := testenv.Postgres(t)
		owner := openDB(t, postgres.Open(dsn))
		schema := schemaOf(t, owner)
		qualified := schema + "." + testenv.Name("inbox_")
		newInbox(t, owner, inbox.Options{})
		newInbox(t, owner, inbox.Options{Table: qualified})

		role, as := pgRole(t, owner, dsn)
		for _, table := range []string{schema + "." + inbox.DefaultTable, qualified} {
			mustExec(t, owner, "GRANT SELECT, INSERT, UPDATE, DELETE ON "+table+" TO "+role)
		}
		useInbox(t, as(url.Values{"search_path": {schema}}), inbox.DefaultTable)
		useInbox(t, as(url.Values{"search_path": {testenv.Name("none_")}}), qualified)
	})
	t.Run("mariadb", func(t *testing.T) {
		dsn := testenv.MySQL(t)
		owner := openDB(t, mysql.Open(dsn))
		database := schemaOf(t, owner)
		qualified := database + "." + testenv.Name("inbox_")
		newInbox(t, owner, inbox.Options{})
		newInbox(t, owner, inbox.Options{Table: qualified})

		user := testenv.Name("hs_app_")
		mustExec(t, owner, "CREATE USER '"+user+"'@'%'")
		t.Cleanup(func() {
			if err := owner.Exec("DROP USER '" + user + "'@'%'").Error; err != nil {
				t.Errorf("drop user %s: %v", user, err)
			}
		})
		for _, table := range []string{database + "." + inbox.DefaultTable, qualified} {
			mustExec(t, owner, "GRANT SELECT, INSERT, UPDATE, DELETE ON "+table+" TO '"+user+"'@'%'")
		}
		as := func(database string) *gorm.DB {
			cfg, err := mysqlerr.ParseDSN(dsn)
			if err != nil {
				t.Fatal(err)
			}
			cfg.User, cfg.Passwd, cfg.DBName = user, "", database
			return connect(t, mysql.Open(cfg.FormatDSN()))
		}
		useInbox(t, as(database), inbox.DefaultTable)
		useInbox(t, as(""), qualified)
	})
}

// pgRole creates a login role, dropped when the test ends, that may use
// the schema of dsn (a DSN from testenv.Postgres) and create nothing in it;
// as opens a pool of it with params (search_path, …) set in the DSN.
func pgRole(tb testing.TB, owner *gorm.DB, dsn string) (role string, as func(params url.Values) *gorm.DB) {
	tb.Helper()
	role = testenv.PostgresRole(tb, "hs_app_")
	mustExec(tb, owner, "GRANT USAGE ON SCHEMA "+schemaOf(tb, owner)+" TO "+role)
	return role, func(params url.Values) *gorm.DB {
		u, err := url.Parse(testenv.AsRole(tb, dsn, role))
		if err != nil {
			tb.Fatal(err)
		}
		q := u.Query()
		for k, v := range params {
			q[k] = v
		}
		u.RawQuery = q.Encode()
		return connect(tb, postgres.Open(u.String()))
	}
}

// useInbox starts an inbox on table and records, honours and sweeps a key.
func useInbox(tb testing.TB, db *gorm.DB, table string) {
	tb.Helper()
	ib := newInbox(tb, db, inbox.Options{Table: table})
	ctx := context.Background()
	for i, want := range []bool{true, false} {
		if ran, err := ib.Once(ctx, "evt_40", func(*gorm.DB) error { return nil }); ran != want || err != nil {
			tb.Fatalf("%s, call %d: ran=%v err=%v, want %v, nil", table, i+1, ran, err, want)
		}
	}
	if _, err := ib.Sweep(ctx); err != nil {
		tb.Fatalf("%s: sweep: %v", table, err)
	}
}

func mustExec(tb testing.TB, db *gorm.DB, stmt string) {
	tb.Helper()
	if err := db.Exec(stmt).Error; err != nil {
		tb.Fatalf("%s: %v", stmt, err)
	}
}

// A process starting while a key is held (a slow handler during a rolling
// deploy) neither waits for the holder nor makes the other keys wait: New
// on an existing table takes no lock on it. The index's CREATE INDEX IF NOT
// EXISTS did, and every INSERT queued behind it until the holder ended.
func TestNewWhileAKeyIsHeld(t *testing.T) {
	dsn := testenv.Postgres(t)
	db := openDB(t, postgres.Open(dsn))
	starting := openDB(t, postgres.Open(dsn))
	ib := newInbox(t, db, inbox.Options{})
	letGo, held := holdKey(t, ib, "evt_41", func(tx *gorm.DB) error { return book(tx, "evt_41") })

	started := make(chan error, 1)
	go func() {
		_, err := inbox.New(starting, inbox.Options{})
		started <- err
	}()
	select {
	case err := <-started:
		started <- err
	case <-time.After(5 * time.Second):
		t.Error("New waited for the transaction holding a key")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ran, err := ib.Once(ctx, "evt_42", func(tx *gorm.DB) error { return book(tx, "evt_42") }); !ran || err != nil {
		t.Errorf("Once on another key after New: ran=%v err=%v, want true, nil", ran, err)
	}
	letGo()
	if err := <-held; err != nil {
		t.Fatalf("the holder: %v", err)
	}
	if err := <-started; err != nil {
		t.Fatalf("New: %v", err)
	}
}

// An application starting while the migration role creates the table
// (both deployed at once) waits for the migration's lock, then finds the
// table there and runs no DDL of its own, which it may not: also when its
// transactions default to an isolation whose snapshot predates the wait.
func TestNewWhileMigrating(t *testing.T) {
	for _, isolation := range []string{"", "serializable"} {
		t.Run(cmp.Or(isolation, "default"), func(t *testing.T) {
			dsn := testenv.Postgres(t)
			owner := openDB(t, postgres.Open(dsn))
			schema := schemaOf(t, owner)
			table := schema + "." + testenv.Name("inbox_")
			role, as := pgRole(t, owner, dsn)
			params := url.Values{"search_path": {schema}}
			if isolation != "" {
				params.Set("default_transaction_isolation", isolation)
			}
			app := as(params)

			migration := owner.Begin()
			defer migration.Rollback()
			if _, err := inbox.New(migration, inbox.Options{Table: table}); err != nil {
				t.Fatalf("the migration's New: %v", err)
			}
			mustExec(t, migration, "GRANT SELECT, INSERT, UPDATE, DELETE ON "+table+" TO "+role)
			started := make(chan error, 1)
			go func() {
				_, err := inbox.New(app, inbox.Options{Table: table})
				started <- err
			}()
			waitFor(t, "the application's New to wait for the migration's lock", func() bool {
				var n int64
				if err := owner.Raw("SELECT count(*) FROM pg_stat_activity WHERE usename = ? AND wait_event = 'advisory'", role).Scan(&n).Error; err != nil {
					t.Fatal(err)
				}
				return n > 0
			})
			if err := migration.Commit().Error; err != nil {
				t.Fatalf("the migration's commit: %v", err)
			}
			if err := <-started; err != nil {
				t.Fatalf("the application's New: %v", err)
			}
			useInbox(t, app, table)
		})
	}
}

// Processes with different search_paths, half of them naming no existing
// schema, create a schema-qualified table together: they all take the lock
// the table's name gives. The lock's key held the current schema, which
// differed between them, and without one (NULL) no lock was taken: the
// CREATE TABLEs raced on the catalog (duplicate key in pg_type).
func TestConcurrentNewAcrossSearchPaths(t *testing.T) {
	dsn := testenv.Postgres(t)
	schema := schemaOf(t, openDB(t, postgres.Open(dsn)))
	pools := make([]*gorm.DB, 8)
	for i := range pools {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			q := u.Query()
			q.Set("search_path", testenv.Name("none_"))
			u.RawQuery = q.Encode()
		}
		pools[i] = connect(t, postgres.Open(u.String()))
	}
	for round := range 3 {
		table := schema + "." + testenv.Name("inbox_")
		start := make(chan struct{})
		errs := make(chan error, len(pools))
		var wg sync.WaitGroup
		for _, db := range pools {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := inbox.New(db, inbox.Options{Table: table})
				errs <- err
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("round %d: New: %v", round+1, err)
			}
		}
		useInbox(t, pools[round%len(pools)], table)
	}
}
