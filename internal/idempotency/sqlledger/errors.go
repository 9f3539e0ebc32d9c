package sqlledger

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// fail wraps err with what was being done, and with ErrUnavailable when the
// database could not be reached or did not answer in time. Logic errors (a
// bad statement, a constraint) are not ErrUnavailable: retrying them later
// would not help, and on_unavailable: pass must not hide them.
func (l *Ledger) fail(what string, err error) error {
	if l.unavailable(err) {
		return fmt.Errorf("%s: %w: %w", what, idempotency.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// errDBClosedText is database/sql's error for a call on a closed *sql.DB.
// database/sql exports no sentinel for it, so it is the one error matched by
// text; Close sets l.closed first, so only calls racing Close can meet it.
const errDBClosedText = "sql: database is closed"

func (l *Ledger) unavailable(err error) bool {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, sql.ErrConnDone), errors.Is(err, driver.ErrBadConn),
		errors.Is(err, errClosed), err.Error() == errDBClosedText:
		return true
	}
	return l.d.unavailable(err) || transportError(err)
}

// transportError reports network failures under any driver: dial errors,
// resets, timeouts, a connection closed under a statement.
func transportError(err error) bool {
	var ne net.Error
	switch {
	case errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ETIMEDOUT):
		return true
	}
	return false
}

// unreadableTable: the database answers, and the ledger's table cannot be
// read (not migrated, or no grant on it).
type unreadableTable struct{ err error }

func (e unreadableTable) Error() string { return TableName + " cannot be read: " + e.err.Error() }
func (e unreadableTable) Unwrap() error { return e.err }

// ReadyText is what /readyz shows of it: the cause without the driver's
// words, which may quote the DSN.
func (unreadableTable) ReadyText() string {
	return "the database answers, but table " + TableName + " cannot be read: run gateway migrate, or check the role's grants"
}
