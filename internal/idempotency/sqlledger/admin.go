package sqlledger

import (
	"context"
	"fmt"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// The held-key statements name state = 'held' literally so that PostgreSQL
// and SQLite can use the partial index idx_hookstamp_records_held.
const (
	deleteSQL      = `DELETE FROM hookstamp_records WHERE route = ? AND "key" = ?`
	heldSQL        = selectColumns + `WHERE route = ? AND state = 'held' ORDER BY created_at, "key" LIMIT ?`
	countHeldSQL   = `SELECT COUNT(*) FROM hookstamp_records WHERE route = ? AND state = 'held'`
	countHeldByRSQ = `SELECT route, COUNT(*) FROM hookstamp_records WHERE state = 'held' GROUP BY route`
	releaseHeldSQL = `DELETE FROM hookstamp_records WHERE route = ? AND "key" = ? AND state = 'held' AND COALESCE(acked, false) = false`
	resolveHeldSQL = `UPDATE hookstamp_records SET state = 'done', status = ?, headers = ?, body = ?, body_omitted = ?, completed_at = ? ` +
		`WHERE route = ? AND "key" = ? AND state = 'held'`
)

// Delete removes the record for ref whatever its state (operator forget:
// the next delivery is forwarded). ErrNotFound if there is none.
func (l *Ledger) Delete(ctx context.Context, r idempotency.Ref) error {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return fmt.Errorf("delete %s: %w", ref(r), err)
	}
	return l.deleteWithAttempts(ctx, "delete", r, deleteSQL)
}

// Held lists the held records of route, oldest first, at most limit of them
// (DefaultHeldLimit when limit <= 0).
func (l *Ledger) Held(ctx context.Context, route string, limit int) ([]idempotency.Record, error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return nil, fmt.Errorf("held %q: %w", route, err)
	}
	if limit <= 0 {
		limit = DefaultHeldLimit
	}
	shift, err := l.clock.shift(ctx)
	if err != nil {
		return nil, l.fail(fmt.Sprintf("held %q: clock", route), err)
	}
	rows, err := l.r.WithContext(ctx).Raw(heldSQL, route, limit).Rows()
	if err != nil {
		return nil, l.fail(fmt.Sprintf("held %q", route), err)
	}
	defer rows.Close()
	var out []idempotency.Record
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			return nil, l.fail(fmt.Sprintf("held %q", route), err)
		}
		fromDB(rec, shift)
		out = append(out, *rec)
	}
	if err := rows.Err(); err != nil {
		return nil, l.fail(fmt.Sprintf("held %q", route), err)
	}
	return out, nil
}

// CountHeld returns the number of held records of route.
func (l *Ledger) CountHeld(ctx context.Context, route string) (int, error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return 0, fmt.Errorf("count held %q: %w", route, err)
	}
	var n int64
	if err := l.r.WithContext(ctx).Raw(countHeldSQL, route).Row().Scan(&n); err != nil {
		return 0, l.fail(fmt.Sprintf("count held %q", route), err)
	}
	return int(n), nil
}

// CountHeldByRoute returns the number of held records of every route that
// has some (for the hookstamp_held_keys gauge).
func (l *Ledger) CountHeldByRoute(ctx context.Context) (map[string]int, error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return nil, fmt.Errorf("count held: %w", err)
	}
	rows, err := l.r.WithContext(ctx).Raw(countHeldByRSQ).Rows()
	if err != nil {
		return nil, l.fail("count held", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var route string
		var n int64
		if err := rows.Scan(&route, &n); err != nil {
			return nil, l.fail("count held", err)
		}
		out[route] = int(n)
	}
	if err := rows.Err(); err != nil {
		return nil, l.fail("count held", err)
	}
	return out, nil
}

// Resolve settles a held record: rec == nil deletes it (the next delivery
// is forwarded), otherwise it becomes done with rec's Response and
// CompletedAt (Options.Now when zero), keeping the rest. ErrNotFound when
// ref has no held record, or, for rec == nil, only an acknowledged one
// (Acked): its provider will not send it again, so deleting it would lose
// the delivery; Requeue releases it.
func (l *Ledger) Resolve(ctx context.Context, r idempotency.Ref, rec *idempotency.Record) error {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return fmt.Errorf("resolve %s: %w", ref(r), err)
	}
	db := l.w.WithContext(ctx)
	if rec == nil {
		return l.deleteWithAttempts(ctx, "resolve", r, releaseHeldSQL)
	}
	headers, err := encodeHeaders(rec.Headers)
	if err != nil {
		return fmt.Errorf("resolve %s: %w", ref(r), err)
	}
	completed := rec.CompletedAt
	if completed.IsZero() {
		completed = l.now()
	}
	body := nullBytes(rec.Body)
	if rec.BodyOmitted {
		body = nil
	}
	shift, err := l.clock.shift(ctx)
	if err != nil {
		return l.fail(fmt.Sprintf("resolve %s: clock", ref(r)), err)
	}
	res := db.Exec(resolveHeldSQL, rec.Status, headers, body, rec.BodyOmitted, toDB(completed, shift), r.Route, r.Key)
	if res.Error != nil {
		return l.fail(fmt.Sprintf("resolve %s", ref(r)), res.Error)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("resolve %s: no held record: %w", ref(r), idempotency.ErrNotFound)
	}
	return nil
}

// Sweep deletes at most batch records (DefaultSweepBatch when batch <= 0)
// whose expires_at is before now, with their attempts, in one short
// statement or transaction, and returns how many records it deleted.
// Expired rows are deleted in every state but queued: a queued
// delivery waits however long its route is down. It also deletes at most
// batch expired attempts that have no record (sweepOrphans).
func (l *Ledger) Sweep(ctx context.Context, now time.Time, batch int) (int, error) {
	if batch <= 0 {
		batch = DefaultSweepBatch
	}
	n, _, err := l.sweepAt(ctx, now, batch)
	return n, err
}

// SweepAll calls Sweep until a batch comes back short, or ctx is done, and
// returns the total deleted. Each batch is its own statement (and
// OpTimeout), so writers wait at most one batch.
//
// Between full batches it rests SweepRest times as long as the batch took,
// so that a backlog is worked off without taking the database from the
// deliveries (docs/performance.md).
func (l *Ledger) SweepAll(ctx context.Context, now time.Time, batch int) (int, error) {
	if batch <= 0 {
		batch = DefaultSweepBatch
	}
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, l.fail("sweep", err)
		}
		start := time.Now()
		n, orphans, err := l.sweepAt(ctx, now, batch)
		total += n
		if err != nil || (n < batch && orphans < batch) {
			return total, err
		}
		l.rest(ctx, time.Duration(SweepRest*float64(time.Since(start))))
	}
}

// SweepRest is how long SweepAll rests after a full batch, as a multiple
// of the time the batch took.
const SweepRest = 4

// sleepCtx waits d or until ctx is done (Ledger.rest).
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
