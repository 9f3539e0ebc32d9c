package sqlledger

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// A record's attempts are deleted with it, in the same transaction or
// statement (SPEC §11). There is no foreign key: a synchronous forward's
// attempt is written before its record exists, and stays when its claim
// is released without one, so that the provider's retry shows it.

// sweepOrphansSQL deletes at most N attempts past their expires_at whose
// record never came (or went); arguments: now, N.
const sweepOrphansSQL = `DELETE FROM hookstamp_attempts WHERE (route, "key", attempt) IN (` +
	`SELECT a.route, a."key", a.attempt FROM hookstamp_attempts a WHERE a.expires_at < ? ` +
	`AND NOT EXISTS (SELECT 1 FROM hookstamp_records r WHERE r.route = a.route AND r."key" = a."key") LIMIT ?)`

// deleteWithAttempts runs recordSQL (arguments route, key) and deletes
// ref's attempts in one transaction; ErrNotFound, and nothing deleted,
// when recordSQL deleted no row.
func (l *Ledger) deleteWithAttempts(ctx context.Context, what string, r idempotency.Ref, recordSQL string) error {
	found := true
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, l.d.rebind(recordSQL), r.Route, r.Key)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			found = false
			return err
		}
		_, err = tx.ExecContext(ctx, l.d.rebind(deleteAttemptsSQL), r.Route, r.Key)
		return err
	})
	if err != nil {
		return l.fail(fmt.Sprintf("%s %s", what, ref(r)), err)
	}
	if !found {
		return fmt.Errorf("%s %s: %w", what, ref(r), idempotency.ErrNotFound)
	}
	return nil
}

// inTx runs fn in a transaction on the writer, through database/sql: a
// GORM transaction on SQLite's one writer connection would prepare its
// statements on the pool, which that transaction holds.
func (l *Ledger) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	db, err := l.w.DB()
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // a no-op once committed
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// sweepAt is one Sweep batch, reporting also the orphaned attempts
// deleted.
func (l *Ledger) sweepAt(ctx context.Context, now time.Time, batch int) (records, orphans int, err error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return 0, 0, fmt.Errorf("sweep: %w", err)
	}
	shift, err := l.clock.shift(ctx)
	if err != nil {
		return 0, 0, l.fail("sweep: clock", err)
	}
	now = toDB(now, shift)
	if l.d.name == DriverPostgres {
		err = l.w.WithContext(ctx).Raw(l.d.sweepSQL, now, batch, now).Row().Scan(&records)
	} else {
		records, err = l.sweepSQLite(ctx, now, batch)
	}
	if err != nil {
		return records, 0, l.fail("sweep", err)
	}
	res := l.w.WithContext(ctx).Exec(sweepOrphansSQL, now, batch)
	if res.Error != nil {
		return records, 0, l.fail("sweep attempts", res.Error)
	}
	return records, int(res.RowsAffected), nil
}

// sweepSQLite deletes a batch of expired records, then their attempts, in
// one transaction: SQLite has no DELETE in WITH.
func (l *Ledger) sweepSQLite(ctx context.Context, now time.Time, batch int) (int, error) {
	n := 0
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, l.d.sweepSQL, now, batch, now)
		if err != nil {
			return err
		}
		refs, err := scanRefs(rows)
		if err != nil {
			return err
		}
		n = len(refs)
		if n == 0 {
			return nil
		}
		del, err := tx.PrepareContext(ctx, deleteAttemptsSQL)
		if err != nil {
			return err
		}
		defer del.Close()
		for _, r := range refs {
			if _, err := del.ExecContext(ctx, r.Route, r.Key); err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}

// scanRefs reads (route, key) rows and closes them.
func scanRefs(rows *sql.Rows) ([]idempotency.Ref, error) {
	defer rows.Close()
	var refs []idempotency.Ref
	for rows.Next() {
		var r idempotency.Ref
		if err := rows.Scan(&r.Route, &r.Key); err != nil {
			return nil, err
		}
		refs = append(refs, r)
	}
	return refs, rows.Err()
}
