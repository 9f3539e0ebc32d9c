package sqlledger

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	gosqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Sessions unfit for work (docs/decisions.md, "A session that refuses
// writes is not reused"): some errors say that the connection's session,
// not the statement, is at fault, and that a new session would not be —
// PostgreSQL's default_transaction_read_only or statement_timeout are read
// when a session starts, and a SQLite connection opened while its file was
// read-only stays read-only. Such a connection is dropped by its pool
// before its next use, instead of failing every statement until the pool
// recycles it (up to an hour on PostgreSQL, never for SQLite's writer).
// The pool drops it: River, which shares the *sql.DB, gets fresh sessions
// too, and its own failures mark their connection as the ledger's do.

// unfitKey marks a PostgreSQL connection unfit, in pgconn's CustomData.
const unfitKey = "hookstamp.unfit"

// postgresUnfit: 25006 read_only_sql_transaction (the role's or database's
// default_transaction_read_only, or a hot standby), 57014 query_canceled
// (the role's statement_timeout, or an operator's pg_cancel_backend; pgx
// never sends a cancel for our own deadlines, it closes the connection).
func postgresUnfit(pe *pgconn.PgError) bool {
	return pe.Code == "25006" || pe.Code == "57014"
}

// markUnfitSessions is the pool's BeforeConnect: the new connection marks
// itself on an unfit error, and still closes at once on FATAL (pgx's own
// handler).
func markUnfitSessions(_ context.Context, cc *pgx.ConnConfig) error {
	next := cc.OnPgError
	cc.OnPgError = func(pc *pgconn.PgConn, pe *pgconn.PgError) bool {
		if postgresUnfit(pe) {
			pc.CustomData()[unfitKey] = true
		}
		return next == nil || next(pc, pe)
	}
	return nil
}

// dropUnfitSessions is the pool's ResetSession, called before a connection
// is reused: database/sql closes a marked one and takes another, which is
// safe since nothing has run on it for this call.
func dropUnfitSessions(_ context.Context, c *pgx.Conn) error {
	if c.PgConn().CustomData()[unfitKey] != nil {
		return driver.ErrBadConn
	}
	return nil
}

// sqliteUnfit: SQLITE_READONLY and its extended codes (the file was
// read-only when the connection opened it, or was replaced under it:
// SQLITE_READONLY_DBMOVED); a connection opened now may write.
func sqliteUnfit(err error) bool {
	var se *gosqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_READONLY
}

// sqliteWriterDriver is modernc's driver, its connections dropped by the
// pool once they have failed with sqliteUnfit. It opens the SQLite writer.
const sqliteWriterDriver = "hookstamp-sqlite-writer"

func init() { sql.Register(sqliteWriterDriver, unfitDriver{}) }

type unfitDriver struct{}

// sqliteConn is what database/sql uses of modernc's connection.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

type sqliteStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

func (unfitDriver) Open(name string) (driver.Conn, error) {
	c, err := (&gosqlite.Driver{}).Open(name)
	if err != nil {
		return nil, err
	}
	sc, ok := c.(sqliteConn)
	if !ok {
		_ = c.Close()
		return nil, fmt.Errorf("sqlite: %T lacks a method the ledger uses", c)
	}
	return &unfitConn{c: sc}, nil
}

// unfitConn is a modernc connection that is invalid once it has failed
// with sqliteUnfit. Writes that fail so fail at their first step, which
// modernc takes in Exec, Query and Begin (BEGIN IMMEDIATE): rows need no
// wrapping.
type unfitConn struct {
	c     sqliteConn
	unfit atomic.Bool
}

func (c *unfitConn) note(err error) {
	if err != nil && sqliteUnfit(err) {
		c.unfit.Store(true)
	}
}

func (c *unfitConn) Prepare(q string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), q)
}

func (c *unfitConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	s, err := c.c.PrepareContext(ctx, q)
	c.note(err)
	if err != nil {
		return nil, err
	}
	ss, ok := s.(sqliteStmt)
	if !ok {
		_ = s.Close()
		return nil, fmt.Errorf("sqlite: %T lacks a method the ledger uses", s)
	}
	return &unfitStmt{s: ss, c: c}, nil
}

func (c *unfitConn) Close() error { return c.c.Close() }

func (c *unfitConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *unfitConn) BeginTx(ctx context.Context, o driver.TxOptions) (driver.Tx, error) {
	t, err := c.c.BeginTx(ctx, o)
	c.note(err)
	return t, err
}

func (c *unfitConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	r, err := c.c.ExecContext(ctx, q, args)
	c.note(err)
	return r, err
}

func (c *unfitConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	r, err := c.c.QueryContext(ctx, q, args)
	c.note(err)
	return r, err
}

func (c *unfitConn) Ping(ctx context.Context) error { return c.c.Ping(ctx) }

func (c *unfitConn) ResetSession(ctx context.Context) error {
	if c.unfit.Load() {
		return driver.ErrBadConn
	}
	return c.c.ResetSession(ctx)
}

func (c *unfitConn) IsValid() bool { return !c.unfit.Load() && c.c.IsValid() }

type unfitStmt struct {
	s sqliteStmt
	c *unfitConn
}

func (s *unfitStmt) Close() error  { return s.s.Close() }
func (s *unfitStmt) NumInput() int { return s.s.NumInput() }

func (s *unfitStmt) Exec(args []driver.Value) (driver.Result, error) {
	r, err := s.s.Exec(args)
	s.c.note(err)
	return r, err
}

func (s *unfitStmt) Query(args []driver.Value) (driver.Rows, error) {
	r, err := s.s.Query(args)
	s.c.note(err)
	return r, err
}

func (s *unfitStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	r, err := s.s.ExecContext(ctx, args)
	s.c.note(err)
	return r, err
}

func (s *unfitStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	r, err := s.s.QueryContext(ctx, args)
	s.c.note(err)
	return r, err
}
