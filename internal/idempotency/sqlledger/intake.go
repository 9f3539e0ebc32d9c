package sqlledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// Jobs inserts delivery jobs inside the ledger's own transactions: the
// queue (River) beside the ledger in one database.
type Jobs interface {
	// InsertTx queues a delivery job for each record, in tx.
	InsertTx(ctx context.Context, tx *sql.Tx, ds []Delivery) error
	// PendingTx reports whether a delivery job of r's record waits or
	// runs, in tx: not one left by a deleted record of the key
	// (Delivery.Created).
	PendingTx(ctx context.Context, tx *sql.Tx, r idempotency.Ref) (bool, error)
}

// Delivery is a queued record as its job names it. Created is the
// record's created_at as the database holds it: a record of the key
// stored again after this one was deleted has another, and is not the
// job's (Stored.Is). Requeued is when an operator queued the record
// again (redeliver, redrive, release), on the database's clock as
// created_at is, for any replica to read (Stored.QueuedAt); zero for its
// intake.
type Delivery struct {
	idempotency.Ref
	Created  time.Time
	Requeued time.Time
}

var _ idempotency.Queue = (*Ledger)(nil)

// UseJobs makes Enqueue insert delivery jobs with j. Call it before the
// first Enqueue.
func (l *Ledger) UseJobs(j Jobs) { l.jobs = j }

// DB is the connection pool writes go through (SQLite: its one writer
// connection), for the queue to share the ledger's transactions.
func (l *Ledger) DB() (*sql.DB, error) { return l.w.DB() }

// enqueueSQL writes an async delivery's queued row with its request where
// the key has no row, or over a pending row owned by the caller or whose
// lease expired; like commitSQL, it never touches a settled row. The
// intake's own store (owner "") takes an expired claim over only when it
// holds the same fingerprint, or none: another one may be another event's
// or an earlier setting's digest of this one, which the claim path tells
// apart (ClaimRequest.MayTakeOver), and a caller with a claim has been
// through it.
const enqueueSQL = `INSERT INTO hookstamp_records ` +
	`(route, "key", state, owner, lease_until, fingerprint, status, headers, body, body_omitted, trace_id, span_id, source, ` +
	`created_at, completed_at, expires_at, request_method, request_path, request_headers, request_body, acked) ` +
	`VALUES (?, ?, 'queued', NULL, NULL, ?, 0, '{}', NULL, false, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, true) ` +
	`ON CONFLICT (route, "key") DO UPDATE SET state = 'queued', owner = NULL, lease_until = NULL, acked = true, ` +
	`fingerprint = excluded.fingerprint, trace_id = excluded.trace_id, span_id = excluded.span_id, source = excluded.source, ` +
	`expires_at = excluded.expires_at, request_method = excluded.request_method, request_path = excluded.request_path, ` +
	`request_headers = excluded.request_headers, request_body = excluded.request_body ` +
	`WHERE hookstamp_records.state = 'pending' AND (hookstamp_records.owner = ? OR (hookstamp_records.lease_until < ? ` +
	`AND (? <> '' OR hookstamp_records.fingerprint IS NULL OR excluded.fingerprint IS NULL ` +
	`OR hookstamp_records.fingerprint = excluded.fingerprint)))`

// intakeJob is one Enqueue waiting for its batch.
type intakeJob struct {
	ctx  context.Context
	ref  idempotency.Ref
	args []any
	done chan error
	// wrote is set once its transaction commits, before done is answered.
	wrote intakeWrite
}

// intakeWrite is what an intake's upsert did with its key's row.
type intakeWrite uint8

const (
	notWritten intakeWrite = iota // the key is settled, or another's live claim: ErrNotOwner
	inserted                      // a new row
	replaced                      // written over a pending row
)

// Enqueue stores an async delivery (idempotency.Queue): its queued row,
// request and job in one transaction, shared with concurrent Enqueues as
// commits share theirs (batch.go).
func (l *Ledger) Enqueue(ctx context.Context, rec *idempotency.Record, owner string, now time.Time) (replacedPending bool, err error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return false, fmt.Errorf("enqueue %s: %w", ref(rec.Ref), err)
	}
	if l.jobs == nil || rec.Request == nil {
		return false, fmt.Errorf("enqueue %s: no job queue or no request", ref(rec.Ref))
	}
	shift, err := l.clock.shift(ctx)
	if err != nil {
		return false, fmt.Errorf("enqueue %s: %w", ref(rec.Ref), l.fail("clock", err))
	}
	j, err := newIntakeJob(ctx, rec, owner, now, shift)
	if err != nil {
		return false, fmt.Errorf("enqueue %s: %w", ref(rec.Ref), err)
	}
	if l.intakes == nil {
		err := l.runIntake(ctx, []*intakeJob{j})
		return err == nil && j.wrote == replaced, err
	}
	// Read before the batch can run: once it has answered, it clears
	// j.done.
	done := j.done
	if err := l.intakes.enqueue(ctx, j); err != nil {
		return false, l.queueFailed(fmt.Sprintf("enqueue %s", ref(rec.Ref)), err)
	}
	// j.wrote is read only after done answered nil: a wait cut short by
	// ctx leaves the batch still running.
	err = wait(ctx, l, "enqueue", &rec.Ref, done, func(err error) error { return err })
	return err == nil && j.wrote == replaced, err
}

// newIntakeJob is rec's intake, its times moved to the database's clock
// by shift.
func newIntakeJob(ctx context.Context, rec *idempotency.Record, owner string, now time.Time, shift time.Duration) (*intakeJob, error) {
	hdr, err := EncodeRequestHeaders(rec.Request.Headers)
	if err != nil {
		return nil, err
	}
	now = toDB(now, shift)
	return &intakeJob{ctx: ctx, ref: rec.Ref, done: make(chan error, 1), args: []any{
		rec.Route, rec.Key, nullBytes(rec.Fingerprint), rec.TraceID, rec.SpanID, rec.Source, now, toDB(rec.ExpiresAt, shift),
		rec.Request.Method, rec.Request.Path, hdr, rec.Request.Body, owner, now, owner,
	}}, nil
}

func (l *Ledger) newIntaker(workers, max int) *batcher[*intakeJob] {
	return newBatcher(workers, max, l.runIntakes, func(j *intakeJob) { j.done <- l.check() })
}

// runIntakes stores one batch in one transaction; when the database
// refuses it for a reason other than an outage, each is stored alone so
// that one bad row fails alone.
func (l *Ledger) runIntakes(batch []*intakeJob) {
	ctx, cancel := l.batchCtx(batch[0].ctx)
	defer cancel()
	err := l.runIntake(ctx, batch)
	if err == nil || len(batch) == 1 || l.unavailable(err) {
		for _, j := range batch {
			if j.done != nil {
				j.done <- err
			}
		}
		return
	}
	for _, j := range batch {
		jctx, jcancel := l.op(context.WithoutCancel(j.ctx))
		j.done <- l.runIntake(jctx, []*intakeJob{j})
		jcancel()
	}
}

// runIntake writes batch's rows and jobs in one transaction. A row that
// finds the key settled by another owner gets ErrNotOwner and no job. Its
// error is the transaction's; each job's own is sent on its done channel
// only when the transaction commits.
func (l *Ledger) runIntake(ctx context.Context, batch []*intakeJob) error {
	// Rows are written in byRef order, as claims and commits write
	// theirs: overlapping transactions wait instead of deadlocking.
	slices.SortStableFunc(batch, func(a, b *intakeJob) int { return byRef(a.ref, b.ref) })
	results := make([]error, len(batch))
	var writes []intakeWritten
	err := l.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if writes, err = l.writeIntakes(ctx, tx, batch); err != nil {
			return err
		}
		var ds []Delivery
		for i, j := range batch {
			if writes[i].wrote == notWritten {
				results[i] = fmt.Errorf("enqueue %s: %w", ref(j.ref), idempotency.ErrNotOwner)
				continue
			}
			ds = append(ds, Delivery{Ref: j.ref, Created: writes[i].created})
		}
		if len(ds) == 0 {
			return nil
		}
		return l.jobs.InsertTx(ctx, tx, ds)
	})
	if err != nil {
		return l.fail("enqueue", err)
	}
	for i, j := range batch {
		j.wrote = writes[i].wrote
	}
	if len(batch) == 1 {
		return results[0]
	}
	for i, j := range batch {
		j.done <- results[i]
		j.done = nil
	}
	return nil
}

// intakeWritten is what an intake's upsert did, and the created_at of
// the row it wrote (a pending row written over keeps its own).
type intakeWritten struct {
	wrote   intakeWrite
	created time.Time
}

func newIntakeWritten(isNew bool, created time.Time) intakeWritten {
	if isNew {
		return intakeWritten{inserted, created}
	}
	return intakeWritten{replaced, created}
}

// writeIntakes writes batch's rows in tx and reports what each did: one
// statement on PostgreSQL when the keys are distinct, a statement each
// otherwise.
func (l *Ledger) writeIntakes(ctx context.Context, tx *sql.Tx, batch []*intakeJob) ([]intakeWritten, error) {
	writes := make([]intakeWritten, len(batch))
	if l.d.name == DriverPostgres && len(batch) > 1 && distinct(batch) {
		return writes, l.writeIntakeArrays(ctx, tx, batch, writes)
	}
	q := l.d.rebind(enqueueSQL + ` RETURNING ` + l.d.insertedSQL + `, created_at`)
	for i, j := range batch {
		args := j.args
		if l.d.insertedArg {
			args = append(args[:len(args):len(args)], j.args[enqueueCreatedAt])
		}
		var isNew bool
		var created time.Time
		switch err := tx.QueryRowContext(ctx, q, args...).Scan(&isNew, &created); {
		case errors.Is(err, sql.ErrNoRows):
			writes[i] = intakeWritten{wrote: notWritten}
		case err != nil:
			return nil, err
		default:
			writes[i] = newIntakeWritten(isNew, created)
		}
	}
	return writes, nil
}

// enqueueCreatedAt is the index of created_at in an intakeJob's args.
const enqueueCreatedAt = 6

func distinct(batch []*intakeJob) bool {
	for i := 1; i < len(batch); i++ {
		if batch[i].ref == batch[i-1].ref { // sorted
			return false
		}
	}
	return true
}

// enqueueBatchSQL is enqueueSQL for many rows (PostgreSQL), as
// commitBatchSQL is commitSQL's.
const enqueueBatchSQL = `WITH t AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[], $5::text[], $6::text[], ` +
	`$7::timestamptz[], $8::timestamptz[], $9::text[], $10::text[], $11::text[], $12::bytea[], $13::text[], $14::timestamptz[]) ` +
	`AS t(route, "key", fingerprint, trace_id, span_id, source, created_at, expires_at, request_method, request_path, ` +
	`request_headers, request_body, owner, now)) ` +
	`INSERT INTO hookstamp_records AS r ` +
	`(route, "key", state, owner, lease_until, fingerprint, status, headers, body, body_omitted, trace_id, span_id, source, ` +
	`created_at, completed_at, expires_at, request_method, request_path, request_headers, request_body, acked) ` +
	`SELECT route, "key", 'queued', NULL, NULL, fingerprint, 0, '{}', NULL, false, trace_id, span_id, source, ` +
	`created_at, NULL, expires_at, request_method, request_path, request_headers, request_body, true FROM t ` +
	`ON CONFLICT (route, "key") DO UPDATE SET state = 'queued', owner = NULL, lease_until = NULL, acked = true, ` +
	`fingerprint = excluded.fingerprint, trace_id = excluded.trace_id, span_id = excluded.span_id, source = excluded.source, ` +
	`expires_at = excluded.expires_at, request_method = excluded.request_method, request_path = excluded.request_path, ` +
	`request_headers = excluded.request_headers, request_body = excluded.request_body ` +
	`WHERE r.state = 'pending' AND EXISTS (SELECT 1 FROM t WHERE t.route = r.route AND t."key" = r."key" ` +
	`AND (r.owner = t.owner OR (r.lease_until < t.now ` +
	`AND (t.owner <> '' OR r.fingerprint IS NULL OR t.fingerprint IS NULL OR r.fingerprint = t.fingerprint)))) ` +
	`RETURNING r.route, r."key", r.xmax = 0, r.created_at`

// writeIntakeArrays writes batch (distinct keys) in one statement.
func (l *Ledger) writeIntakeArrays(ctx context.Context, tx *sql.Tx, batch []*intakeJob, writes []intakeWritten) error {
	n := len(batch)
	cols := make([][]any, 14)
	for c := range cols {
		cols[c] = make([]any, n)
	}
	for i, j := range batch {
		for c := range cols {
			cols[c][i] = j.args[c]
		}
	}
	args := []any{texts(cols[0]), texts(cols[1]), byteas(cols[2]), texts(cols[3]), texts(cols[4]), texts(cols[5]),
		times(cols[6]), times(cols[7]), texts(cols[8]), texts(cols[9]), texts(cols[10]), byteas(cols[11]), texts(cols[12]), times(cols[13])}
	rows, err := tx.QueryContext(ctx, enqueueBatchSQL, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	got := make(map[idempotency.Ref]intakeWritten, n)
	for rows.Next() {
		var r idempotency.Ref
		var isNew bool
		var created time.Time
		if err := rows.Scan(&r.Route, &r.Key, &isNew, &created); err != nil {
			return err
		}
		got[r] = newIntakeWritten(isNew, created)
	}
	for i, j := range batch {
		writes[i] = got[j.ref]
	}
	return rows.Err()
}

func texts(v []any) pgArray[string] {
	out := make(pgArray[string], len(v))
	for i, x := range v {
		out[i], _ = x.(string)
	}
	return out
}

func byteas(v []any) pgArray[[]byte] {
	out := make(pgArray[[]byte], len(v))
	for i, x := range v {
		b, _ := x.([]byte)
		out[i] = nonEmpty(b)
	}
	return out
}

func times(v []any) pgArray[time.Time] {
	out := make(pgArray[time.Time], len(v))
	for i, x := range v {
		out[i], _ = x.(time.Time)
	}
	return out
}
