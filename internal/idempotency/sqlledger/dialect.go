package sqlledger

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/libtnb/sqlite"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	sqlite3 "modernc.org/sqlite/lib"

	gosqlite "modernc.org/sqlite"

	"github.com/hookstamp/hookstamp/internal/pgdsn"
)

// What differs between SQLite and PostgreSQL. Times are bound in UTC at
// microsecond precision: SQLite stores them as text in one fixed format,
// which in UTC sorts in time order, so comparisons hold there too.

type dialect struct {
	name string
	// sweepSQL deletes at most N expired rows but queued ones, and their
	// attempts; arguments: now, N, now. Its rows name the records deleted
	// (SQLite, whose attempts sweepSQLite deletes in the same transaction)
	// or count them (PostgreSQL, which deletes the attempts in the
	// statement). Its state term is the predicate of the index it walks,
	// idx_hookstamp_records_sweep (records.go), word for word.
	sweepSQL string
	// migrateLockSQL is run first in the migration transaction so that
	// replicas starting together do not race on CREATE TABLE; "" = none.
	migrateLockSQL string
	// concurrentIndexes: indexes of existing tables are built without
	// holding off writes (buildIndexes).
	concurrentIndexes bool
	// unavailable reports whether a driver-specific error means the
	// database could not be reached or did not answer in time.
	unavailable func(error) bool
	// prefixSQL keeps the keys starting with a prefix (List), its
	// arguments made by prefixArgs.
	prefixSQL  string
	prefixArgs func(prefix string) []any
	// insertedSQL follows RETURNING in the intake's upsert: true for a new
	// row, false for one written over a pending row. insertedArg: it takes
	// the new row's created_at as its argument.
	insertedSQL string
	insertedArg bool
	// keyShareSQL ends a read of a record that a DELETE must wait for
	// until the reading transaction ends. SQLite needs none: its writer
	// transactions (BEGIN IMMEDIATE) already exclude each other.
	keyShareSQL string
}

var sqliteDialect = dialect{
	name: DriverSQLite,
	// rowid exists because the table is not WITHOUT ROWID; the writer is one
	// connection, so the statement is atomic and short.
	sweepSQL: `DELETE FROM hookstamp_records WHERE rowid IN (` +
		`SELECT rowid FROM hookstamp_records WHERE expires_at < ? AND state <> 'queued' LIMIT ?) AND expires_at < ? AND state <> 'queued' RETURNING route, "key"`,
	// The migration transaction starts with BEGIN IMMEDIATE (_txlock), which
	// already takes SQLite's write lock.
	migrateLockSQL: "",
	unavailable:    sqliteUnavailable,
	// SQLite's LIKE ignores case.
	prefixSQL:  ` AND substr("key", 1, ?) = ?`,
	prefixArgs: substrPrefix,
	// The upsert's update keeps created_at, which for a pending row
	// precedes its expired lease and so the intake's own.
	insertedSQL: `created_at = ?`,
	insertedArg: true,
}

var postgresDialect = dialect{
	name: DriverPostgres,
	// SKIP LOCKED: rows that a concurrent commit or claim is writing are left
	// for the next batch instead of waiting on them.
	// Statements in WITH run to completion whether or not the query reads
	// them, so the attempts go in the same statement.
	sweepSQL: `WITH d AS (DELETE FROM hookstamp_records WHERE (route, "key") IN (` +
		`SELECT route, "key" FROM hookstamp_records WHERE expires_at < ? AND state <> 'queued' LIMIT ? FOR UPDATE SKIP LOCKED) ` +
		`AND expires_at < ? AND state <> 'queued' ` +
		`RETURNING route, "key"), ` +
		`a AS (DELETE FROM hookstamp_attempts t USING d WHERE t.route = d.route AND t."key" = d."key") ` +
		`SELECT COUNT(*) FROM d`,
	// A transaction-scoped advisory lock, per schema: released at COMMIT or
	// ROLLBACK, even when the migrating process dies.
	migrateLockSQL:    "SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.hookstamp_records'))",
	concurrentIndexes: true,
	unavailable:       postgresUnavailable,
	// LIKE, whose selectivity the planner estimates from the key's
	// statistics: a common prefix walks the log index, a rare one is
	// found by a scan instead of walking the route's whole history.
	prefixSQL:  ` AND "key" LIKE ? ESCAPE '\'`,
	prefixArgs: func(p string) []any { return []any{likePrefix(p)} },
	// A row's xmax stays 0 until an update or a lock: the upsert's update
	// sets it.
	insertedSQL: `xmax = 0`,
	// The weakest lock a DELETE waits for: a settlement's UPDATE does not.
	keyShareSQL: ` FOR KEY SHARE`,
}

// sqlitePools opens SQLite as one writer connection (writes never meet
// SQLITE_BUSY; reopened after SQLITE_READONLY, unfit.go) and a pool of read-only connections beside it (WAL); an
// in-memory database gets the writer only. Both prepare their statements
// once per connection, which SQLite would otherwise compile every call.
func sqlitePools(o Options, cfg func() *gorm.Config) (w, r *gorm.DB, err error) {
	cfg = prepared(cfg)
	if err := CheckSQLiteDSN(o.DSN); err != nil {
		return nil, nil, err
	}
	path, file, query, memory := splitSQLiteDSN(o.DSN)
	if !memory {
		if dir := filepath.Dir(file); dir != "." && dir != "" {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return nil, nil, fmt.Errorf("create directory for %s: %w", file, err)
			}
		}
	}
	busy := "busy_timeout(" + strconv.FormatInt(o.OpTimeout.Milliseconds(), 10) + ")"
	// Ours come first so that pragmas in the user's DSN win.
	writerQ := url.Values{"_pragma": {busy, "journal_mode(WAL)", "synchronous(FULL)"}, "_txlock": {"immediate"}}
	w, err = openSQLiteWriter(joinSQLiteDSN(path, writerQ, query), cfg(), o.OpTimeout)
	if err != nil {
		return nil, nil, err
	}
	wdb, err := w.DB()
	if err != nil {
		return nil, nil, err
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxLifetime(0)
	wdb.SetConnMaxIdleTime(0)
	if memory {
		return w, w, nil
	}
	readerQ := url.Values{"_pragma": {busy, "query_only(1)"}}
	r, err = gorm.Open(sqlite.Open(joinSQLiteDSN(path, readerQ, query)), cfg())
	if err != nil {
		_ = wdb.Close()
		return nil, nil, err
	}
	rdb, err := r.DB()
	if err != nil {
		_ = wdb.Close()
		return nil, nil, err
	}
	rdb.SetMaxOpenConns(o.MaxOpenConns)
	rdb.SetMaxIdleConns(o.MaxOpenConns)
	rdb.SetConnMaxIdleTime(5 * time.Minute)
	return w, r, nil
}

// openSQLiteWriter opens the writer, again while SQLite answers
// SQLITE_BUSY, for up to within. Two processes opening one fresh file
// both switch it to WAL; each can hold the read lock the other's switch
// waits for, and SQLite then answers BUSY at once rather than call the
// busy handler, which could only deadlock.
func openSQLiteWriter(dsn string, cfg *gorm.Config, within time.Duration) (*gorm.DB, error) {
	// GORM logs a failed open as an error; the caller reports the last.
	logs := cfg.Logger
	cfg.Logger = logs.LogMode(logger.Silent)
	deadline := time.Now().Add(within)
	for wait := time.Millisecond; ; wait = min(2*wait, 64*time.Millisecond) {
		db, err := gorm.Open(sqlite.New(sqlite.Config{DriverName: sqliteWriterDriver, DSN: dsn}), cfg)
		if err == nil {
			db.Logger = logs
			return db, nil
		}
		if db != nil {
			if sdb, derr := db.DB(); derr == nil {
				_ = sdb.Close()
			}
		}
		if !sqliteBusy(err) || time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(wait/2 + rand.N(wait)) // jittered: the two would retry in step
	}
}

// sqliteBusy: SQLite found the file locked.
func sqliteBusy(err error) bool {
	var se *gosqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// prepared is cfg with PrepareStmt on, never expiring: an expiring cache
// starts a GORM goroutine that outlives Close.
func prepared(cfg func() *gorm.Config) func() *gorm.Config {
	return func() *gorm.Config {
		c := cfg()
		c.PrepareStmt = true
		c.PrepareStmtTTL = 10 * 365 * 24 * time.Hour
		return c
	}
}

// splitSQLiteDSN separates "path?query" (or "file:path?query") into the
// path as SQLite opens it, the file on disk, and the query, and tells whether
// the database lives in memory.
// CheckSQLiteDSN refuses the driver's parameters that change how times
// are written. SQLite compares the times the ledger stores as text:
// written another way by a later start, they would no longer compare (a
// delivery's job would no longer find its record).
func CheckSQLiteDSN(dsn string) error {
	_, _, query, _ := splitSQLiteDSN(dsn)
	q, _ := url.ParseQuery(query)
	for _, k := range []string{"_time_format", "_time_integer_format", "_timezone"} {
		if q.Has(k) {
			return fmt.Errorf("sqlite dsn: %s is not supported: the ledger's times are stored one way", k)
		}
	}
	return nil
}

func splitSQLiteDSN(dsn string) (path, file, query string, memory bool) {
	path, query, _ = strings.Cut(dsn, "?")
	q, _ := url.ParseQuery(query)
	file = strings.TrimPrefix(path, "file:")
	if strings.HasPrefix(file, "///") { // file:///abs/path
		file = file[2:]
	}
	memory = file == ":memory:" || file == "" || q.Get("mode") == "memory"
	return path, file, query, memory
}

func joinSQLiteDSN(path string, ours url.Values, theirs string) string {
	q := ours.Encode()
	if theirs != "" {
		q += "&" + theirs
	}
	return path + "?" + q
}

// postgresPool opens PostgreSQL through pgx. pgx caches prepared statements
// per connection by SQL text (QueryExecModeCacheStatement), so the ledger's
// fixed statements are parsed and planned once per connection without GORM's
// PrepareStmt layer.
func postgresPool(o Options, cfg func() *gorm.Config) (*gorm.DB, error) {
	c := cfg()
	// Open must not need the database: the gateway starts, reports not
	// ready, and answers 503 until PostgreSQL is back.
	c.DisableAutomaticPing = true
	// A connection whose session refuses writes is not reused (unfit.go).
	db, err := gorm.Open(postgres.New(postgres.Config{
		DSN: pgdsn.WithConnectTimeout(o.DSN, o.OpTimeout),
		OptionOpenDB: []stdlib.OptionOpenDB{
			stdlib.OptionBeforeConnect(markUnfitSessions), stdlib.OptionResetSession(dropUnfitSessions),
		},
	}), c)
	if err != nil {
		return nil, err
	}
	sdb, err := db.DB()
	if err != nil {
		return nil, err
	}
	sdb.SetMaxOpenConns(o.MaxOpenConns)
	sdb.SetMaxIdleConns(o.MaxOpenConns)
	sdb.SetConnMaxIdleTime(5 * time.Minute)
	sdb.SetConnMaxLifetime(time.Hour)
	return db, nil
}

// sqliteUnavailable: the file is locked past busy_timeout, cannot be opened
// or written (I/O error, disk full, read-only), or the call was interrupted
// by the operation's deadline.
func sqliteUnavailable(err error) bool {
	var se *gosqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff { // primary result code
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL,
		sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_NOMEM,
		sqlite3.SQLITE_INTERRUPT, sqlite3.SQLITE_PROTOCOL:
		return true
	}
	return false
}

// postgresUnavailable: pgx could not connect, lost the connection, timed
// out, or the server refused work for reasons that pass (SQLSTATE classes
// 08 connection exception, 53 insufficient resources, 57 operator
// intervention such as admin shutdown or statement timeout, 58 system error,
// 40 transaction rollback such as a deadlock or serialization failure), or
// refused a write because it is read-only (25006: a hot standby the DSN's
// host points at during a failover, default_transaction_read_only).
func postgresUnavailable(err error) bool {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) || errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && len(pe.Code) == 5 {
		if pe.Code == "25006" { // read_only_sql_transaction
			return true
		}
		switch pe.Code[:2] {
		case "08", "53", "57", "58", "40":
			return true
		}
	}
	return false
}

// rebind writes q's ? placeholders as PostgreSQL's $1, $2, … for
// statements run through database/sql rather than GORM (Execer). The
// ledger's statements hold no ? inside literals.
func (d dialect) rebind(q string) string {
	if d.name != DriverPostgres {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	for _, c := range q {
		if c != '?' {
			b.WriteRune(c)
			continue
		}
		n++
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}
