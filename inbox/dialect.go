package inbox

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"
)

// dialect holds what differs between the databases: the table's DDL, the
// bounded sweep, and which errors mean "the key is taken" or "try again".
type dialect struct {
	name string
	// exists reports whether the table and its index exist, and the key
	// column's width, reading the catalog only: DDL on them, even IF NOT
	// EXISTS, may need privileges the application's user lacks, and take
	// locks. nil where it needs neither (SQLite).
	exists func(db *gorm.DB, table string) (found, error)
	// lock serialises the processes creating the table, until the
	// transaction ends (or unlock, when not nil), or fails; nil where the
	// DDL is safe against itself.
	lock   func(tx *gorm.DB, table string) error
	unlock func(table string) string
	// widenKey returns the statements that widen a narrower key column
	// to MaxKeyLen bytes, in a transaction, waiting no more than two
	// seconds for the transactions holding keys (every insert queues
	// behind the waiting ALTER); and those that restore the session's
	// settings after, whatever happened.
	widenKey func(table string, quote func(string) string) (widen, restore []string)
	// widenCopies: widening copies the table, holding up its writes
	// meanwhile (MySQL/MariaDB: no in-place change of a key column's
	// type).
	widenCopies bool
	// createTable and createIndex create them when missing; createIndex
	// is nil where createTable declares the index.
	createTable, createIndex func(table string, quote func(string) string) string
	// sweepSQL deletes at most N expired rows of one consumer; arguments:
	// consumer, now, N.
	sweepSQL func(table string, quote func(string) string) string
	// retryable: a deadlock, a serialization failure, a busy database —
	// the transaction was rolled back and may simply be tried again. A
	// lock wait timeout is not: it comes after the whole wait the
	// application allows a statement, spent waiting for the copy that
	// holds the key, and a retry would wait as long again.
	retryable func(error) bool
	// endsOnError: a statement's error can roll the whole transaction
	// back while the client still holds it open, so the key's row is
	// looked for before COMMIT. pin: the transaction runs on a pinned
	// connection with autocommit off, so that statements after such a
	// rollback do not commit one by one (MySQL; SQLite has no such
	// setting).
	endsOnError, pin bool
	// aborted reports whether err is a statement refused because an
	// earlier one failed the transaction (PostgreSQL's 25P02); nil where a
	// failed statement leaves the transaction going.
	aborted func(error) bool
}

// migrateLockWait is how long Migrate waits for another process's
// migration on MySQL/MariaDB: one copying a large table.
var migrateLockWait = 600 * time.Second

func dialectOf(db *gorm.DB) (*dialect, error) {
	switch name := db.Dialector.Name(); name {
	case "postgres":
		return &postgresDialect, nil
	case "mysql":
		return &mysqlDialect, nil
	case "sqlite", "sqlite3":
		return &sqliteDialect, nil
	default:
		return nil, fmt.Errorf("inbox: unsupported database %q (want postgres, sqlite or mysql)", name)
	}
}

// splitTable parts a table name into its schema (empty when none) and
// name.
func splitTable(table string) (schema, name string) {
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		return table[:i], table[i+1:]
	}
	return "", table
}

// indexName names the expiry index after the table (without its schema:
// PostgreSQL puts an index in its table's schema).
func indexName(table string) string {
	_, name := splitTable(table)
	return name + "_expires_at"
}

var postgresDialect = dialect{
	name: "postgres",
	exists: func(db *gorm.DB, table string) (found, error) {
		// A scan of the catalog, not to_regclass: that reads the session's
		// cache, which waiting for an advisory lock does not refresh, and
		// misses a table the lock's holder created meanwhile. The index is
		// looked for in its table's schema.
		schema, name := splitTable(table)
		visible, args := "pg_table_is_visible(c.oid)", []any{name}
		if schema != "" {
			visible, args = "n.nspname = ?", append(args, schema)
		}
		// atttypmod is a varchar's width + 4, -1 for text.
		var s found
		err := db.Raw(`WITH t AS (SELECT c.oid, c.relnamespace FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.relname = ? AND `+visible+`)
			SELECT EXISTS (SELECT FROM t), EXISTS (SELECT FROM pg_class i JOIN t USING (relnamespace) WHERE i.relname = ?),
				coalesce((SELECT greatest(a.atttypmod - 4, 0) FROM pg_attribute a JOIN t ON a.attrelid = t.oid WHERE a.attname = 'key'), 0)`,
			append(args, indexName(table))...).Row().Scan(&s.table, &s.index, &s.keyWidth)
		return s, err
	},
	// CREATE TABLE IF NOT EXISTS is not safe against itself in PostgreSQL
	// (two can race on the catalog). The lock's key names the table
	// whatever the search_path: a qualified name as it is, an unqualified
	// one with the schema it is created in. current_schema() is NULL when
	// the search_path names no existing schema, and a NULL key takes no
	// lock.
	lock: func(tx *gorm.DB, table string) error {
		key := "coalesce(current_schema(), '') || '." + table + "'"
		if schema, _ := splitTable(table); schema != "" {
			key = "'" + table + "'"
		}
		return tx.Exec("SELECT pg_advisory_xact_lock(hashtext(" + key + "))").Error
	},
	createTable: func(table string, q func(string) string) string {
		return "CREATE TABLE IF NOT EXISTS " + q(table) + ` (
			consumer VARCHAR(100) NOT NULL,
			"key" VARCHAR(2048) NOT NULL,
			status INTEGER NOT NULL,
			headers TEXT NOT NULL,
			body BYTEA NOT NULL,
			created_at TIMESTAMPTZ NOT NULL,
			expires_at TIMESTAMPTZ NOT NULL,
			PRIMARY KEY (consumer, "key"))`
	},
	createIndex: func(table string, q func(string) string) string {
		return "CREATE INDEX IF NOT EXISTS " + q(indexName(table)) + " ON " + q(table) + " (expires_at)"
	},
	// Widening a varchar rewrites nothing, but takes the table's
	// exclusive lock, queued behind every transaction holding a key and
	// ahead of every insert: the wait is bounded.
	widenKey: func(table string, q func(string) string) (widen, restore []string) {
		return []string{"SET LOCAL lock_timeout = '2s'",
			"ALTER TABLE " + q(table) + ` ALTER COLUMN "key" TYPE VARCHAR(2048)`}, nil
	},
	sweepSQL: func(table string, q func(string) string) string {
		// SKIP LOCKED: a row a live transaction is writing is left for the
		// next sweep instead of waited on.
		return "DELETE FROM " + q(table) + ` WHERE (consumer, "key") IN (SELECT consumer, "key" FROM ` + q(table) +
			` WHERE consumer = ? AND expires_at < ? LIMIT ? FOR UPDATE SKIP LOCKED)`
	},
	retryable: func(err error) bool {
		var e interface{ SQLState() string }
		if !errors.As(err, &e) {
			return false
		}
		switch e.SQLState() {
		case "40001", "40P01": // serialization failure, deadlock
			return true
		}
		return false
	},
	aborted: func(err error) bool {
		var e interface{ SQLState() string }
		return errors.As(err, &e) && e.SQLState() == "25P02" // in_failed_sql_transaction
	},
}

var mysqlDialect = dialect{
	name: "mysql",
	exists: func(db *gorm.DB, table string) (found, error) {
		database, name := splitTable(table)
		var col struct{ N, Width int }
		err := db.Raw("SELECT count(*) AS n, coalesce(max(character_maximum_length), 0) AS width FROM information_schema.columns "+
			"WHERE table_schema = coalesce(nullif(?, ''), DATABASE()) AND table_name = ? AND column_name = 'key'",
			database, name).Scan(&col).Error
		return found{table: col.N > 0, index: col.N > 0, keyWidth: col.Width}, err // the index comes with the table
	},
	// ALTER TABLE is safe against itself, but a second one would copy the
	// table again. A named lock is the session's: it is released
	// explicitly, before the connection goes back to the pool. GET_LOCK
	// gives up after its wait (0) or on an error (NULL), and the
	// migration must not then run without it.
	lock: func(tx *gorm.DB, _ string) error {
		var got sql.NullInt64
		if err := tx.Raw("SELECT GET_LOCK('hookstamp_inbox_migrate', ?)", migrateLockWait.Seconds()).Row().Scan(&got); err != nil {
			return err
		}
		if got.Int64 != 1 {
			return fmt.Errorf("lock hookstamp_inbox_migrate not taken in %v (another process migrating)", migrateLockWait)
		}
		return nil
	},
	unlock: func(string) string { return "DO RELEASE_LOCK('hookstamp_inbox_migrate')" },
	// lock_wait_timeout (a day by default) bounds the ALTER's wait for
	// the metadata lock; a session setting, as neither MySQL's SET_VAR
	// hint nor MariaDB's SET STATEMENT and WAIT are on both, restored
	// before the connection goes back to the pool. ALGORITHM=INPLACE is
	// refused ("Cannot change column type"): the copy goes on under
	// LOCK=SHARED, reads allowed, writes held up.
	widenKey: func(table string, q func(string) string) (widen, restore []string) {
		return []string{"SET @hookstamp_lock_wait = @@SESSION.lock_wait_timeout, SESSION lock_wait_timeout = 2",
				"ALTER TABLE " + q(table) + " MODIFY `key` VARBINARY(2048) NOT NULL, ALGORITHM=COPY, LOCK=SHARED"},
			[]string{"SET SESSION lock_wait_timeout = @hookstamp_lock_wait, @hookstamp_lock_wait = NULL"}
	},
	widenCopies: true,
	createTable: func(table string, q func(string) string) string {
		// The index is declared inside CREATE TABLE: MySQL has no CREATE
		// INDEX IF NOT EXISTS. The key is binary because every _bin
		// collation of utf8mb4 but MySQL 8's 0900 one pads: "a" and "a "
		// would be one key.
		return "CREATE TABLE IF NOT EXISTS " + q(table) + ` (
			consumer VARBINARY(100) NOT NULL,
			` + "`key`" + ` VARBINARY(2048) NOT NULL,
			status INT NOT NULL,
			headers TEXT NOT NULL,
			body LONGBLOB NOT NULL,
			created_at DATETIME(6) NOT NULL,
			expires_at DATETIME(6) NOT NULL,
			PRIMARY KEY (consumer, ` + "`key`" + `),
			INDEX ` + q(indexName(table)) + ` (expires_at)
		) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
	},
	sweepSQL: func(table string, q func(string) string) string {
		return "DELETE FROM " + q(table) + " WHERE consumer = ? AND expires_at < ? ORDER BY expires_at LIMIT ?"
	},
	retryable: func(err error) bool {
		var e *mysql.MySQLError
		if !errors.As(err, &e) {
			return false
		}
		return e.Number == 1213 // ER_LOCK_DEADLOCK
	},
	endsOnError: true,
	pin:         true,
}

var sqliteDialect = dialect{
	name: "sqlite",
	createTable: func(table string, q func(string) string) string {
		return "CREATE TABLE IF NOT EXISTS " + q(table) + ` (
			consumer TEXT NOT NULL,
			"key" TEXT NOT NULL,
			status INTEGER NOT NULL,
			headers TEXT NOT NULL,
			body BLOB NOT NULL,
			created_at DATETIME NOT NULL,
			expires_at DATETIME NOT NULL,
			PRIMARY KEY (consumer, "key"))`
	},
	createIndex: func(table string, q func(string) string) string {
		// SQLite takes the schema on the index's name, and refuses it on
		// the table the index is ON.
		schema, name := splitTable(table)
		index := indexName(name)
		if schema != "" {
			index = schema + "." + index
		}
		return "CREATE INDEX IF NOT EXISTS " + q(index) + " ON " + q(name) + " (expires_at)"
	},
	sweepSQL: func(table string, q func(string) string) string {
		return "DELETE FROM " + q(table) + " WHERE rowid IN (SELECT rowid FROM " + q(table) +
			" WHERE consumer = ? AND expires_at < ? LIMIT ?)"
	},
	retryable: func(err error) bool {
		// modernc.org/sqlite (and the GORM drivers built on it) report
		// the result code through Code(); the primary code is its low byte.
		var e interface{ Code() int }
		if !errors.As(err, &e) {
			return false
		}
		switch e.Code() & 0xff {
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
			return true
		}
		return false
	},
	endsOnError: true,
}

// duplicate reports whether err is the unique index refusing the key.
func (d *dialect) duplicate(db *gorm.DB, err error) bool {
	if errors.Is(err, gorm.ErrDuplicatedKey) { // the application's gorm.Config.TranslateError
		return true
	}
	if t, ok := db.Dialector.(gorm.ErrorTranslator); ok {
		return errors.Is(t.Translate(err), gorm.ErrDuplicatedKey)
	}
	return false
}
