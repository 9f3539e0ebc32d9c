package sqlledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// addAttemptSQL numbers the attempt itself when the caller passes NULL:
// one past the record's last. Two writers numbering the same record at
// once meet on the primary key; the loser writes nothing (DO NOTHING keeps
// a caller's transaction usable on PostgreSQL) and numbers again.
const addAttemptSQL = insertAttemptSQL +
	`VALUES (?, ?, COALESCE(CAST(? AS INTEGER), ` +
	`(SELECT MAX(attempt) + 1 FROM hookstamp_attempts WHERE route = ? AND "key" = ?), 1), ?, ?, ?, ?, ?, ?) ` +
	`ON CONFLICT (route, "key", attempt) DO NOTHING`

// insertAttemptSQL starts every statement that records attempts.
const insertAttemptSQL = `INSERT INTO hookstamp_attempts (route, "key", attempt, started_at, duration_ms, status, error, replica, expires_at) `

const attemptsSQL = `SELECT attempt, started_at, duration_ms, status, error, replica, expires_at ` +
	`FROM hookstamp_attempts WHERE route = ? AND "key" = ? ORDER BY attempt`

const deleteAttemptsSQL = `DELETE FROM hookstamp_attempts WHERE route = ? AND "key" = ?`

// attemptArgs is an attempt as its columns bind, times on the database's
// clock; nil pointers bind NULL.
type attemptArgs struct {
	number  *int64 // nil: the ledger numbers it
	started time.Time
	ms      int64
	status  *int64
	err     string
	replica string
	expires *time.Time
}

// attemptArgsOf returns nil for a nil a.
func attemptArgsOf(a *idempotency.Attempt, shift time.Duration) *attemptArgs {
	if a == nil {
		return nil
	}
	out := &attemptArgs{started: toDB(a.StartedAt, shift), ms: a.Duration.Milliseconds(), err: a.Error, replica: a.Replica}
	if a.Attempt > 0 {
		n := int64(a.Attempt)
		out.number = &n
	}
	if a.Status > 0 {
		s := int64(a.Status)
		out.status = &s
	}
	if !a.ExpiresAt.IsZero() {
		e := toDB(a.ExpiresAt, shift)
		out.expires = &e
	}
	return out
}

// args binds addAttemptSQL for r.
func (a *attemptArgs) args(r idempotency.Ref) []any {
	return []any{r.Route, r.Key, a.number, r.Route, r.Key, a.started, a.ms, a.status, a.err, a.replica, a.expires}
}

// AddAttempt records one forward of ref's delivery. a.Attempt 0 numbers
// it one past the record's last attempt; a number already taken is an
// error. A record need not exist yet (a synchronous forward is recorded
// before its commit, or its claim is released without one); an async
// delivery's must (AddDeliveryAttempt).
func (l *Ledger) AddAttempt(ctx context.Context, a idempotency.Attempt) error {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return fmt.Errorf("add attempt %s: %w", ref(a.Ref), err)
	}
	db, err := l.w.DB()
	if err != nil {
		return l.fail(fmt.Sprintf("add attempt %s", ref(a.Ref)), err)
	}
	return l.AddAttemptTx(ctx, db, a)
}

// AddAttemptTx is AddAttempt through ex, for a caller that records the
// attempt in the transaction that settles its delivery.
func (l *Ledger) AddAttemptTx(ctx context.Context, ex Execer, a idempotency.Attempt) error {
	shift, err := l.clock.shift(ctx)
	if err != nil {
		return fmt.Errorf("add attempt %s: %w", ref(a.Ref), l.fail("clock", err))
	}
	return l.addAttemptArgs(ctx, ex, a.Ref, attemptArgsOf(&a, shift))
}

// addAttemptArgs records aa as r's attempt through ex, numbered again
// while concurrent writers take the number it computed.
func (l *Ledger) addAttemptArgs(ctx context.Context, ex Execer, r idempotency.Ref, aa *attemptArgs) error {
	args := aa.args(r)
	q := l.d.rebind(addAttemptSQL)
	what := fmt.Sprintf("add attempt %s", ref(r))
	return numbered(what, aa.number, func() (bool, error) {
		res, err := ex.ExecContext(ctx, q, args...)
		if err != nil {
			return false, l.fail(what, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return false, l.fail(what, err)
		}
		return n == 0, nil
	})
}

// recordKeySQL finds the record an attempt belongs to (createdRange).
const recordKeySQL = `SELECT 1 FROM hookstamp_records WHERE route = ? AND "key" = ? AND created_at BETWEEN ? AND ?`

// AddDeliveryAttempt is AddAttempt for an async delivery, whose attempts
// belong to the record created names (Delivery.Created): once it is gone
// (deleted by an operator, and perhaps stored again by another delivery)
// nothing is recorded, and ErrNotFound returned. Such an attempt would
// never be swept, and a later record of the key would take it for its
// own.
func (l *Ledger) AddDeliveryAttempt(ctx context.Context, a idempotency.Attempt, created time.Time) error {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return fmt.Errorf("add attempt %s: %w", ref(a.Ref), err)
	}
	err := l.inTx(ctx, func(tx *sql.Tx) error { return l.addDeliveryAttemptTx(ctx, tx, a, created) })
	if err != nil {
		return l.fail(fmt.Sprintf("add attempt %s", ref(a.Ref)), err)
	}
	return nil
}

// addDeliveryAttemptTx is AddDeliveryAttempt in tx. The record is read
// first and kept until tx ends (keyShareSQL): a Delete either comes
// before, or deletes the attempt with the record; and an insert that
// writes nothing still means only that its number was taken.
func (l *Ledger) addDeliveryAttemptTx(ctx context.Context, tx *sql.Tx, a idempotency.Attempt, created time.Time) error {
	var found int
	args := append([]any{a.Route, a.Key}, createdRange(created)...)
	err := tx.QueryRowContext(ctx, l.d.rebind(recordKeySQL+l.d.keyShareSQL), args...).Scan(&found)
	if errors.Is(err, sql.ErrNoRows) {
		return idempotency.ErrNotFound
	}
	if err != nil {
		return err
	}
	return l.AddAttemptTx(ctx, tx, a)
}

// maxNumbering bounds numbered's tries. A number is taken only by a writer
// that recorded its attempt, so each writer is done within as many tries
// as writers number the record at once; the bound only stops a loop that
// would never end.
const maxNumbering = 64

// numbered runs write, which records an attempt, until it is recorded:
// a write that found its number taken (by a concurrent writer) is run
// again when the ledger numbers the attempt, and an error when the caller
// did (number not nil).
func numbered(what string, number *int64, write func() (taken bool, err error)) error {
	for range maxNumbering {
		taken, err := write()
		if err != nil || !taken {
			return err
		}
		if number != nil {
			return fmt.Errorf("%s: attempt %d is recorded already", what, *number)
		}
	}
	return fmt.Errorf("%s: numbering kept colliding after %d tries", what, maxNumbering)
}

// Attempts returns ref's attempts in order; none is not an error.
func (l *Ledger) Attempts(ctx context.Context, r idempotency.Ref) ([]idempotency.Attempt, error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return nil, fmt.Errorf("attempts %s: %w", ref(r), err)
	}
	shift, err := l.clock.shift(ctx)
	if err != nil {
		return nil, fmt.Errorf("attempts %s: %w", ref(r), l.fail("clock", err))
	}
	rows, err := l.r.WithContext(ctx).Raw(attemptsSQL, r.Route, r.Key).Rows()
	if err != nil {
		return nil, l.fail(fmt.Sprintf("attempts %s", ref(r)), err)
	}
	defer rows.Close()
	var out []idempotency.Attempt
	for rows.Next() {
		a := idempotency.Attempt{Ref: r}
		var (
			started time.Time
			ms      int64
			status  sql.NullInt64
			expires sql.NullTime
		)
		if err := rows.Scan(&a.Attempt, &started, &ms, &status, &a.Error, &a.Replica, &expires); err != nil {
			return nil, l.fail(fmt.Sprintf("attempts %s", ref(r)), err)
		}
		a.StartedAt = started.UTC().Add(-shift)
		a.Duration = time.Duration(ms) * time.Millisecond
		a.Status = int(status.Int64)
		if expires.Valid {
			a.ExpiresAt = expires.Time.UTC().Add(-shift)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, l.fail(fmt.Sprintf("attempts %s", ref(r)), err)
	}
	return out, nil
}
