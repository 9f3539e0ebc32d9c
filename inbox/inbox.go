package inbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Options configure an Inbox. The zero value works.
type Options struct {
	// Consumer names the application (or the part of it) whose keys these
	// are; two consumers may record the same key independently. Give each
	// endpoint behind a hookstamp route of its own a Consumer of its own:
	// the gateway keeps each route's keys apart. Default "default".
	Consumer string
	// Table is the inbox table's name, optionally with its schema
	// (PostgreSQL), database (MySQL) or attached database (SQLite):
	// "app.inbox". Default "hookstamp_inbox".
	Table string
	// Retention is how long a recorded key is kept (and honoured) before
	// Sweep deletes it. It must outlast every provider's retries. Default
	// 720h (30 days).
	Retention time.Duration
	// Header is the request header the middleware reads the key from.
	// Default "Idempotency-Key" (the header hookstamp forwards the key in).
	Header string
	// Headers are the response headers the middleware records and replays
	// with the status and body. Default ["Content-Type"].
	Headers []string
	// Logger receives what the inbox cannot return to a caller: a failed
	// commit after the middleware's handler answered, a failed sweep.
	// Default slog.Default().
	Logger *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Defaults of Options.
const (
	DefaultConsumer  = "default"
	DefaultTable     = "hookstamp_inbox"
	DefaultRetention = 720 * time.Hour
	DefaultHeader    = "Idempotency-Key"
)

// MaxKeyLen is the longest key the table holds, in bytes: the longest
// hookstamp forwards (a route's key.max_length is at most 2048).
const MaxKeyLen = 2048

// maxConsumerLen is the consumer column's width.
const maxConsumerLen = 100

// Errors callers branch on.
var (
	// ErrNoKey: the key is empty.
	ErrNoKey = errors.New("inbox: empty key")
	// ErrKeyTooLong: the key is longer than MaxKeyLen bytes.
	ErrKeyTooLong = fmt.Errorf("inbox: key longer than %d bytes", MaxKeyLen)
	// ErrInvalidKey: the key is not valid UTF-8 or holds a control
	// character, which hookstamp never forwards (SPEC §2, invalid_key).
	ErrInvalidKey = errors.New("inbox: key not valid UTF-8 or holding a control character")
	// ErrRolledBack: the database rolled back the transaction holding the
	// key (a deadlock on MySQL/MariaDB; a ROLLBACK conflict clause or
	// RAISE(ROLLBACK) on SQLite) and the handler went on without returning
	// the error. Nothing is committed, except on SQLite, where what the
	// handler wrote after the rollback committed statement by statement.
	ErrRolledBack = errors.New("inbox: the database rolled the transaction back and the handler went on; key not recorded")
	// ErrHeldByHandler: Once was called, from a handler the middleware
	// runs, with the key the middleware holds for it; it would wait for
	// the handler's own transaction forever. Write through Tx instead.
	ErrHeldByHandler = errors.New("inbox: Once with the key the middleware holds for this handler; write through inbox.Tx")
)

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// Inbox records the keys of the events an application has applied.
// It is safe for concurrent use.
type Inbox struct {
	db    *gorm.DB
	quiet logger.Interface // for statements whose failure is an expected outcome
	d     *dialect
	o     Options
	gate  gate
	// SQL, built once for the table.
	insertSQL, answerSQL, selectSQL, heldSQL string
	keyLimit                                 int // the key column's width: MaxKeyLen unless Migrate could not widen it
}

// New returns an Inbox on db and creates its table when it is missing
// (Migrate). db is the application's own *gorm.DB on PostgreSQL, SQLite or
// MySQL/MariaDB.
func New(db *gorm.DB, o Options) (*Inbox, error) {
	if db == nil {
		return nil, errors.New("inbox: nil *gorm.DB")
	}
	if o.Consumer == "" {
		o.Consumer = DefaultConsumer
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.Header == "" {
		o.Header = DefaultHeader
	}
	if o.Headers == nil {
		o.Headers = []string{"Content-Type"}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	switch {
	case len(o.Consumer) > maxConsumerLen:
		return nil, fmt.Errorf("inbox: consumer %q longer than %d bytes", o.Consumer, maxConsumerLen)
	case !printable(o.Consumer):
		return nil, fmt.Errorf("inbox: consumer %q: %w", o.Consumer, ErrInvalidKey)
	case !tableName.MatchString(o.Table):
		return nil, fmt.Errorf("inbox: table %q: want letters, digits and underscores, optionally schema.table", o.Table)
	case o.Retention < 0:
		return nil, fmt.Errorf("inbox: negative retention %v", o.Retention)
	}
	d, err := dialectOf(db)
	if err != nil {
		return nil, err
	}
	in := &Inbox{db: db, quiet: db.Logger.LogMode(logger.Silent), d: d, o: o}
	t, k := in.quote(o.Table), in.quote("key")
	in.insertSQL = "INSERT INTO " + t + " (consumer, " + k + ", status, headers, body, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
	in.answerSQL = "UPDATE " + t + " SET status = ?, headers = ?, body = ? WHERE consumer = ? AND " + k + " = ? AND headers = ?"
	in.heldSQL = "SELECT count(*) FROM " + t + " WHERE consumer = ? AND " + k + " = ? AND headers = ?"
	in.selectSQL = "SELECT status, headers, body FROM " + t + " WHERE consumer = ? AND " + k + " = ?"
	in.keyLimit = MaxKeyLen
	if err := in.migrate(context.Background(), false); err != nil {
		// A table of an earlier version that this user may not widen
		// still serves the keys it holds; a longer one gets an error
		// (503 in the middlewares: the sender retries until it is).
		s, serr := in.exists(db)
		if serr != nil || !s.table || !s.index || !s.narrow() {
			return nil, err
		}
		o.Logger.Warn("inbox: keys longer than the table's key column are refused until Migrate widens it",
			"table", o.Table, "bytes", s.keyWidth, "err", err)
		in.keyLimit = s.keyWidth
	}
	return in, nil
}

// Migrate creates the inbox table and its index when they are missing,
// and widens a key column narrower than MaxKeyLen (a table of an earlier
// version, 255 bytes). New calls it; it is safe to run from several
// processes at once. When the table is as it should be it only looks it
// up: it takes no lock, and the application's database user needs no
// privilege to create or alter tables (a migration role may run New or
// Migrate first).
//
// Widening takes the table's lock, after waiting no more than two
// seconds for the transactions holding keys (or Migrate fails): on
// PostgreSQL for a moment; on MySQL/MariaDB for as long as it copies the
// table, holding up every key's insert meanwhile. New therefore widens a
// MySQL/MariaDB table only when it is empty, and leaves one holding keys
// to Migrate, called at a quiet moment.
func (in *Inbox) Migrate(ctx context.Context) error { return in.migrate(ctx, true) }

// migrate is Migrate; with copyRows false it leaves a table that widening
// would copy narrow when it holds rows.
func (in *Inbox) migrate(ctx context.Context, copyRows bool) error {
	db := in.db.WithContext(ctx)
	s, err := in.exists(db)
	if err == nil && !s.ready() {
		// Read committed, so that the check after the lock sees what the
		// lock's holder committed.
		err = db.Transaction(func(tx *gorm.DB) error { return in.create(tx, s, copyRows) },
			&sql.TxOptions{Isolation: sql.LevelReadCommitted})
	}
	if err != nil {
		return fmt.Errorf("inbox: migrate %s: %w", in.o.Table, err)
	}
	return nil
}

// found is what the catalog says of the inbox table.
type found struct {
	table, index bool
	keyWidth     int // the key column's width in bytes; 0: unbounded or unknown
}

func (s found) narrow() bool { return s.keyWidth > 0 && s.keyWidth < MaxKeyLen }
func (s found) ready() bool  { return s.table && s.index && !s.narrow() }

// create creates the table and the index, those of them found missing,
// and widens the key column (see migrate for copyRows), in tx.
func (in *Inbox) create(tx *gorm.DB, s found, copyRows bool) (err error) {
	if in.d.lock != nil {
		if err := in.d.lock(tx, in.o.Table); err != nil {
			return err
		}
		if in.d.unlock != nil {
			defer func() { err = errors.Join(err, tx.Exec(in.d.unlock(in.o.Table)).Error) }()
		}
		// Another process may have created them while this one waited.
		if s, err = in.exists(tx); err != nil {
			return err
		}
	}
	if !s.table {
		if err := tx.Exec(in.d.createTable(in.o.Table, in.quote)).Error; err != nil {
			return err
		}
	}
	if !s.index && in.d.createIndex != nil {
		if err := tx.Exec(in.d.createIndex(in.o.Table, in.quote)).Error; err != nil {
			return err
		}
	}
	if s.table && s.narrow() {
		if err := in.widen(tx, copyRows); err != nil {
			return fmt.Errorf("widen the key column (%d bytes) to %d: %w", s.keyWidth, MaxKeyLen, err)
		}
	}
	return nil
}

// errWidenCopies: New left a table with rows narrow, as widening it would
// copy it.
var errWidenCopies = errors.New("widening copies the table, holding up its writes meanwhile: call Migrate at a quiet moment")

// widen widens the key column in tx; one whose widening copies the table
// only when it is empty, unless copyRows.
func (in *Inbox) widen(tx *gorm.DB, copyRows bool) (err error) {
	if in.d.widenCopies && !copyRows {
		var rows bool
		if err := tx.Raw("SELECT EXISTS (SELECT 1 FROM " + in.quote(in.o.Table) + ")").Row().Scan(&rows); err != nil {
			return err
		}
		if rows {
			return errWidenCopies
		}
	}
	stmts, restore := in.d.widenKey(in.o.Table, in.quote)
	defer func() {
		for _, stmt := range restore {
			err = errors.Join(err, tx.Exec(stmt).Error)
		}
	}()
	for _, stmt := range stmts {
		if err := tx.Exec(stmt).Error; err != nil {
			return err
		}
	}
	return nil
}

func (in *Inbox) exists(db *gorm.DB) (found, error) {
	if in.d.exists == nil {
		return found{}, nil
	}
	return in.d.exists(db, in.o.Table)
}

// Once runs fn and records key in one transaction, and reports whether fn
// ran. A key already recorded runs nothing and returns false, nil; of
// concurrent calls with one key, one runs fn and the others return false,
// nil once it has committed (or run fn themselves if it rolled back). fn's
// error is returned as is, and nothing is recorded: the key and fn's writes
// roll back together. A panic in fn rolls back and panics again.
//
// fn must return the error of a statement that fails: the database may
// have rolled the whole transaction back (a deadlock on MySQL/MariaDB; a
// ROLLBACK conflict clause or RAISE(ROLLBACK) on SQLite). When it did and
// fn went on, Once commits nothing and returns ErrRolledBack.
//
// An error from the commit itself (ctx cancelled while COMMIT was on the
// wire, a connection lost) leaves the outcome unknown, as with any
// transaction; the key and fn's writes still committed or not together,
// so calling Once again is safe: it runs fn only if they did not.
func (in *Inbox) Once(ctx context.Context, key string, fn func(tx *gorm.DB) error) (ran bool, err error) {
	if in.holds(ctx, key) {
		return false, ErrHeldByHandler
	}
	if err := checkKey(key); err != nil {
		return false, err
	}
	leave, err := in.gate.enter(ctx, key)
	if err != nil {
		return false, fmt.Errorf("inbox: record %q: %w", key, err)
	}
	defer leave()
	c, err := in.claim(ctx, key)
	if err != nil || c == nil {
		return false, err
	}
	settled := false
	defer func() {
		if !settled {
			c.rollback()
		}
	}()
	if err := fn(c.tx); err != nil {
		return false, err
	}
	settled = true
	if err := in.stillHeld(c); err != nil {
		c.rollback()
		return false, err
	}
	if err := c.commit(); err != nil {
		return false, fmt.Errorf("inbox: commit %q: %w", key, err)
	}
	return true, nil
}

// claim is the transaction that holds a key: the key's row is its first
// insert, marked with a token of its own (in headers, until an answer
// replaces it). The token tells the row from one that another copy
// inserted after the database had rolled this transaction back.
type claim struct {
	tx         *gorm.DB
	key, token string
	end        gorm.TxCommitter
	conn       *sql.Conn // pinned (MySQL), autocommit off until released
}

func (c *claim) commit() error {
	err := c.end.Commit()
	c.release(err == nil)
	return err
}

func (c *claim) rollback() {
	c.release(c.end.Rollback() == nil)
}

// release gives the pinned connection back to the pool with autocommit on
// again, or closes it when the transaction's end failed: SET autocommit = 1
// would commit a transaction still open.
func (c *claim) release(ended bool) {
	if c.conn == nil {
		return
	}
	if ended {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.conn.ExecContext(ctx, "SET autocommit = 1")
		cancel()
		ended = err == nil
	}
	if !ended {
		_ = c.conn.Raw(func(any) error { return driver.ErrBadConn }) // closes it
	}
	c.conn.Close()
	c.conn = nil
}

// stillHeld returns ErrRolledBack when c's row is no longer in c's
// transaction, where the database can end a transaction on a statement's
// error while the client still holds it open. (PostgreSQL keeps a failed
// transaction open until ROLLBACK, and refuses its COMMIT.)
func (in *Inbox) stillHeld(c *claim) error {
	if !in.d.endsOnError {
		return nil
	}
	var n int64
	if err := c.tx.Raw(in.heldSQL, in.o.Consumer, c.key, c.token).Row().Scan(&n); err != nil {
		return fmt.Errorf("inbox: check %q: %w", c.key, err)
	}
	if n != 1 {
		return fmt.Errorf("inbox: %q: %w", c.key, ErrRolledBack)
	}
	return nil
}

// beginTx begins a transaction. On MySQL it runs on a connection of its
// own with autocommit off until it ends: a deadlock rolls the transaction
// back on the server while the client still holds it, and the statements
// a handler runs after that would commit one by one; with autocommit off
// they open a transaction that the claim's rollback ends.
func (in *Inbox) beginTx(ctx context.Context) (*claim, error) {
	db := in.db.WithContext(ctx)
	c := &claim{}
	if in.d.pin {
		pool, err := in.db.DB()
		if err != nil {
			return nil, err
		}
		if c.conn, err = pool.Conn(ctx); err != nil {
			return nil, err
		}
		if _, err := c.conn.ExecContext(ctx, "SET autocommit = 0"); err != nil {
			c.release(false)
			return nil, err
		}
		db.Statement.ConnPool = c.conn
	}
	c.tx = db.Begin()
	if c.tx.Error != nil {
		c.release(false)
		return nil, c.tx.Error
	}
	c.end, _ = c.tx.Statement.ConnPool.(gorm.TxCommitter)
	if c.end == nil {
		c.release(false)
		return nil, fmt.Errorf("connection pool %T ends no transaction", c.tx.Statement.ConnPool)
	}
	return c, nil
}

// claim begins a transaction and inserts key in it. It returns the open
// transaction, or nil when the key is already recorded. Deadlocks and busy
// databases are retried while ctx allows.
func (in *Inbox) claim(ctx context.Context, key string) (*claim, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if len(key) > in.keyLimit {
		return nil, fmt.Errorf("inbox: key of %d bytes, the table's key column holds %d until Migrate widens it: %w", len(key), in.keyLimit, ErrKeyTooLong)
	}
	start := time.Now()
	for attempt := 0; ; attempt++ {
		c, err := in.beginTx(ctx)
		if err != nil {
			return nil, fmt.Errorf("inbox: begin: %w", err)
		}
		c.key, c.token = key, "claim:"+strconv.FormatUint(rand.Uint64(), 36)
		now := in.o.Now().UTC().Truncate(time.Microsecond)
		err = c.tx.Session(&gorm.Session{Logger: in.quiet}).
			Exec(in.insertSQL, in.o.Consumer, key, 0, c.token, []byte{}, now, now.Add(in.o.Retention)).Error
		if err == nil {
			return c, nil
		}
		c.rollback()
		switch {
		case in.d.duplicate(in.db, err):
			return nil, nil
		case !in.d.retryable(err) || attempt >= maxAttempts || time.Since(start) >= retryBudget:
			return nil, fmt.Errorf("inbox: record %q: %w", key, err)
		}
		if err := backoff(ctx, attempt); err != nil {
			return nil, fmt.Errorf("inbox: record %q: %w", key, err)
		}
	}
}

// maxAttempts and retryBudget bound the retries of a deadlocked or busy
// insert (with backoff up to 100ms, about five seconds in all). The budget
// counts the tries too: on SQLite each one may wait out busy_timeout
// before it reports the database busy.
const (
	maxAttempts = 60
	retryBudget = 5 * time.Second
)

func backoff(ctx context.Context, attempt int) error {
	ceil := min(time.Millisecond<<min(attempt, 7), 100*time.Millisecond)
	t := time.NewTimer(ceil/2 + rand.N(ceil/2+1))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

type txKey struct{}

// held is the middleware's transaction, with the key it holds.
type held struct {
	tx                   *gorm.DB
	table, consumer, key string
}

// Tx is the transaction the middleware runs its handler in: the handler's
// business writes go through it, so that they commit or roll back with the
// key. It is nil outside such a handler.
func Tx(ctx context.Context) *gorm.DB {
	h, _ := ctx.Value(txKey{}).(held)
	return h.tx
}

func (in *Inbox) withTx(ctx context.Context, key string, tx *gorm.DB) context.Context {
	return context.WithValue(ctx, txKey{}, held{tx: tx, table: in.o.Table, consumer: in.o.Consumer, key: key})
}

// holds reports whether ctx is a middleware handler's holding key in
// in's table: a second insert of it would wait for that very transaction.
func (in *Inbox) holds(ctx context.Context, key string) bool {
	h, ok := ctx.Value(txKey{}).(held)
	return ok && h.key == key && h.consumer == in.o.Consumer && h.table == in.o.Table
}

func (in *Inbox) quote(name string) string {
	var b strings.Builder
	in.db.Dialector.QuoteTo(&b, name)
	return b.String()
}

// checkKey refuses a key before it reaches the database, where an invalid
// encoding or a NUL would fail the insert on one dialect and be stored on
// another.
func checkKey(key string) error {
	switch {
	case key == "":
		return ErrNoKey
	case len(key) > MaxKeyLen:
		return ErrKeyTooLong
	case !printable(key):
		return ErrInvalidKey
	}
	return nil
}

// printable reports whether s is valid UTF-8 without C0, DEL, C1 or the
// line and paragraph separators: the characters hookstamp's own key rule
// refuses.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false // a literal U+FFFD is valid, and hookstamp forwards it
	}
	for _, r := range s {
		switch {
		case r < 0x20, r >= 0x7f && r <= 0x9f, r == 0x2028, r == 0x2029:
			return false
		}
	}
	return true
}
