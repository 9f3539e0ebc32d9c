package inbox_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/libtnb/sqlite"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/hookstamp/hookstamp/inbox"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A database the inbox runs on, each test in a schema or database of its
// own on the machine's real server.
type backend struct {
	name string
	open func(tb testing.TB) *gorm.DB
}

var backends = []backend{
	{"postgres", func(tb testing.TB) *gorm.DB { return openDB(tb, postgres.Open(testenv.Postgres(tb))) }},
	{"mariadb", func(tb testing.TB) *gorm.DB { return openDB(tb, mysql.Open(testenv.MySQL(tb))) }},
	{"sqlite", func(tb testing.TB) *gorm.DB {
		path := filepath.Join(tb.TempDir(), "app.db")
		return openDB(tb, sqlite.Open(path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"))
	}},
}

// eachBackend runs f as a subtest on every backend.
func eachBackend(t *testing.T, f func(t *testing.T, db *gorm.DB)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b.open(t)) })
	}
}

func openDB(tb testing.TB, d gorm.Dialector) *gorm.DB {
	tb.Helper()
	db := connect(tb, d)
	if err := db.AutoMigrate(&Payment{}); err != nil {
		tb.Fatalf("migrate payments: %v", err)
	}
	return db
}

// connect opens a pool, closed when the test ends, without the payments
// table of openDB: for a database user that may not create it.
func connect(tb testing.TB, d gorm.Dialector) *gorm.DB {
	tb.Helper()
	db, err := gorm.Open(d, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		tb.Fatalf("open %s: %v", d.Name(), err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		tb.Fatal(err)
	}
	// The machine's servers are shared by many tests at once.
	sqlDB.SetMaxOpenConns(20)
	tb.Cleanup(func() { sqlDB.Close() })
	return db
}

// Payment is the business write of the tests: one row per applied event.
type Payment struct {
	ID      uint   `gorm:"primaryKey"`
	EventID string `gorm:"size:2048;not null"`
	Cents   int
}

func book(tx *gorm.DB, key string) error {
	return tx.Create(&Payment{EventID: key, Cents: 1200}).Error
}

func newInbox(tb testing.TB, db *gorm.DB, o inbox.Options) *inbox.Inbox {
	tb.Helper()
	in, err := inbox.New(db, o)
	if err != nil {
		tb.Fatalf("inbox.New: %v", err)
	}
	return in
}

// counts is what the database holds: payments booked for key, and inbox
// rows of key (in table).
func counts(tb testing.TB, db *gorm.DB, table, key string) (payments, keys int64) {
	tb.Helper()
	if err := db.Model(&Payment{}).Where("event_id = ?", key).Count(&payments).Error; err != nil {
		tb.Fatal(err)
	}
	if err := db.Table(table).Where(map[string]any{"key": key}).Count(&keys).Error; err != nil {
		tb.Fatal(err)
	}
	return payments, keys
}

func wantCounts(tb testing.TB, db *gorm.DB, table, key string, payments, keys int64) {
	tb.Helper()
	p, k := counts(tb, db, table, key)
	if p != payments || k != keys {
		tb.Fatalf("key %q: %d payment(s) and %d inbox row(s), want %d and %d", key, p, k, payments, keys)
	}
}

// waitFor polls cond until it holds or 10s pass.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// holdKey runs ib.Once(key) in the background and returns once fn's
// transaction holds the key; it keeps holding it until letGo, then
// returns then(tx). done receives Once's error. letGo also runs when the
// test ends: a failed test must not leave the key locked.
func holdKey(tb testing.TB, ib *inbox.Inbox, key string, then func(tx *gorm.DB) error) (letGo func(), done <-chan error) {
	release := make(chan struct{})
	var once sync.Once
	letGo = func() { once.Do(func() { close(release) }) }
	tb.Cleanup(letGo)
	holding := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		_, err := ib.Once(context.Background(), key, func(tx *gorm.DB) error {
			close(holding)
			<-release
			return then(tx)
		})
		result <- err
	}()
	<-holding
	return letGo, result
}

// lockWaiters is the number of sessions waiting in an INSERT into table
// (PostgreSQL, MariaDB); -1 where the database cannot tell (SQLite).
func lockWaiters(tb testing.TB, db *gorm.DB, table string) int {
	tb.Helper()
	var n int64
	var err error
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	switch db.Dialector.Name() {
	case "postgres":
		err = db.WithContext(ctx).Raw(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE ?`,
			"%INSERT INTO%"+table+"%").Scan(&n).Error
	case "mysql":
		// information_schema.innodb_trx lags; an INSERT still executing
		// while the first copy holds the key is waiting on it.
		err = db.WithContext(ctx).Raw(`SELECT count(*) FROM information_schema.processlist WHERE command = 'Execute' AND info LIKE ?`,
			"INSERT INTO%"+table+"%").Scan(&n).Error
	default:
		return -1
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		tb.Fatalf("count lock waiters: %v", err)
	}
	return int(n)
}

// schemaOf names the schema (PostgreSQL), database (MySQL) or attached
// database (SQLite) the test's tables are created in.
func schemaOf(tb testing.TB, db *gorm.DB) string {
	tb.Helper()
	var name string
	switch db.Dialector.Name() {
	case "postgres":
		if err := db.Raw("SELECT current_schema()").Scan(&name).Error; err != nil {
			tb.Fatal(err)
		}
	case "mysql":
		if err := db.Raw("SELECT DATABASE()").Scan(&name).Error; err != nil {
			tb.Fatal(err)
		}
	default:
		name = "main"
	}
	return name
}
