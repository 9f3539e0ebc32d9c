package sqlledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// ErrNoRequest: the record keeps no request to deliver again.
var ErrNoRequest = errors.New("no request stored")

// Stored is an async delivery as its worker reads it.
type Stored struct {
	State     idempotency.State
	Request   *idempotency.Request // nil when none is stored
	CreatedAt time.Time
	// createdInDB is CreatedAt as the database holds it (Is).
	createdInDB time.Time
	// shift maps the database's clock onto the replica's (QueuedAt).
	shift   time.Duration
	TraceID string
	SpanID  string
	// Attempts is the highest attempt number recorded so far.
	Attempts int
}

const storedSQL = `SELECT state, created_at, trace_id, span_id, request_method, request_path, request_headers, request_body, ` +
	`(SELECT COALESCE(MAX(a.attempt), 0) FROM hookstamp_attempts a WHERE a.route = r.route AND a."key" = r."key") ` +
	`FROM hookstamp_records r WHERE route = ? AND "key" = ?`

// Stored reads ref's state and stored request, or ErrNotFound.
func (l *Ledger) Stored(ctx context.Context, r idempotency.Ref) (*Stored, error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return nil, fmt.Errorf("read stored %s: %w", ref(r), err)
	}
	shift, err := l.clock.shift(ctx)
	if err != nil {
		return nil, fmt.Errorf("read stored %s: %w", ref(r), l.fail("clock", err))
	}
	db, err := l.r.DB()
	if err != nil {
		return nil, l.fail("read stored "+ref(r), err)
	}
	var (
		s                  Stored
		state              string
		method, path, hdrs sql.NullString
		body               []byte
	)
	err = db.QueryRowContext(ctx, l.d.rebind(storedSQL), r.Route, r.Key).Scan(&state, &s.CreatedAt, &s.TraceID, &s.SpanID,
		&method, &path, &hdrs, &body, &s.Attempts)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("read stored %s: %w", ref(r), idempotency.ErrNotFound)
	}
	if err != nil {
		return nil, l.fail("read stored "+ref(r), err)
	}
	s.createdInDB, s.shift = s.CreatedAt, shift
	s.State, s.CreatedAt = idempotency.State(state), s.CreatedAt.UTC().Add(-shift) // max_age and the lag are on the replica's clock
	if method.Valid {
		h, err := decodeRequestHeaders(hdrs.String)
		if err != nil {
			return nil, fmt.Errorf("read stored %s: %w", ref(r), err)
		}
		s.Request = &idempotency.Request{Method: method.String, Path: path.String, Headers: h, Body: body}
	}
	return &s, nil
}

// Settlement is what one attempt of an async delivery ended in.
type Settlement struct {
	idempotency.Ref
	// State is StateDone (Response recorded), StateDead or StateHeld; ""
	// leaves the record queued for its next attempt.
	State    idempotency.State
	Response idempotency.Response
	Attempt  idempotency.Attempt
	// Job is the delivery job (River's id) the settlement ends, deleted
	// in its transaction; 0 for none, as for a retry, whose job runs
	// again.
	Job int64
	// Created is the job's record (Delivery.Created): a record of the key
	// created at another time is another delivery's, and gets nothing
	// from this attempt. Zero: any record of the key.
	Created time.Time
	// KeepUntil: a dead or held record is kept at least until then. A
	// queued record is never swept, so one whose delivery outlived its
	// retention would be swept the moment it ended, its request gone
	// before an operator could redrive it. On a retry (State ""), a done
	// record being redelivered is kept until then: it is not queued, and
	// swept before its next attempt, that attempt would never come.
	KeepUntil time.Time
	// Again: an earlier Settle of it failed with the ledger unavailable,
	// which may have been after its commit, the reply lost. Settle then
	// looks for its attempt first and, found, stores nothing twice.
	Again bool
}

// Is reports whether s is the record a job was queued for
// (Delivery.Created); any record of the key is, for a zero time. One that
// is not was stored after the job's own was deleted, with a job of its
// own.
func (s *Stored) Is(created time.Time) bool {
	return created.IsZero() || s.createdInDB.Equal(created)
}

// QueuedAt is when the delivery was last queued, on the replica's clock:
// its intake, or requeued (Delivery.Requeued) when an operator queued it
// again since.
func (s *Stored) QueuedAt(requeued time.Time) time.Time {
	return queuedAt(s.CreatedAt, requeued, s.shift)
}

// queuedAt is when a delivery created at intake (on the replica's clock)
// was last queued, requeued being a job's Delivery.Requeued (on the
// database's, shift ahead).
func queuedAt(intake, requeued time.Time, shift time.Duration) time.Time {
	if at := requeued.Add(-shift); at.After(intake) {
		return at
	}
	return intake
}

// createdRange bounds the created_at of the record created names (Is):
// both ends created, which times at microsecond precision compare exactly;
// any, for a zero time.
func createdRange(created time.Time) []any {
	if created.IsZero() {
		return []any{time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)}
	}
	return []any{dbTime(created), dbTime(created)}
}

// settledSQL finds a settlement's attempt: the same record, replica and
// error, started within sameStart of it (the clock's offset, measured
// again between two tries, may move its time on the database's clock).
const settledSQL = `SELECT COUNT(*) FROM hookstamp_attempts WHERE route = ? AND "key" = ? AND replica = ? AND error = ? ` +
	`AND started_at BETWEEN ? AND ?`

const sameStart = 50 * time.Millisecond

// keptSQL moves a record's expiry to Settlement.KeepUntil when that is
// later; keptRetrySQL does it for a retry.
const (
	keptSQL      = `expires_at = CASE WHEN expires_at < ? THEN ? ELSE expires_at END `
	keptRetrySQL = `UPDATE hookstamp_records SET ` + keptSQL + `WHERE route = ? AND "key" = ? AND created_at BETWEEN ? AND ?`
)

// settleSQL by Settlement.State: the final answer replaces a queued row's
// (or, redelivered, a done row's); dead and held end a queued row only.
var settleSQL = map[idempotency.State]string{
	idempotency.StateDone: `UPDATE hookstamp_records SET state = 'done', status = ?, headers = ?, body = ?, body_omitted = ?, completed_at = ? ` +
		`WHERE route = ? AND "key" = ? AND state IN ('queued', 'done') AND created_at BETWEEN ? AND ?`,
	idempotency.StateDead: `UPDATE hookstamp_records SET state = 'dead', completed_at = ?, ` + keptSQL +
		`WHERE route = ? AND "key" = ? AND state = 'queued' AND created_at BETWEEN ? AND ?`,
	idempotency.StateHeld: `UPDATE hookstamp_records SET state = 'held', completed_at = ?, ` + keptSQL +
		`WHERE route = ? AND "key" = ? AND state = 'queued' AND created_at BETWEEN ? AND ?`,
}

// deleteJobSQL ends a settled delivery's River job: deleted, not marked
// completed, as the record and its attempts keep the delivery's history
// (docs/decisions.md, Store-and-forward). A job no longer running
// (rescued meanwhile) is left alone. River's executor still completes the
// job after the run; its drivers update no row for a job deleted
// meanwhile, by design.
const deleteJobSQL = `DELETE FROM river_job WHERE id = ? AND state = 'running'`

// settleAtOnceSQL is settleSQL with its attempt and the job's deletion,
// as one PostgreSQL statement (data-modifying CTEs): one round trip and
// no BEGIN or COMMIT. The attempt is numbered from the statement's
// snapshot, so a number taken by a writer that commits meanwhile fails
// the whole statement on the primary key instead of being skipped.
var settleAtOnceSQL = func() map[idempotency.State]string {
	m := make(map[idempotency.State]string, len(settleSQL))
	for st, q := range settleSQL {
		m[st] = `WITH u AS (` + q + ` RETURNING route, "key"), ` +
			`a AS (` + insertAttemptSQL +
			`SELECT u.route, u."key", COALESCE(CAST(? AS INTEGER), ` +
			`(SELECT MAX(x.attempt) + 1 FROM hookstamp_attempts x WHERE x.route = u.route AND x."key" = u."key"), 1), ` +
			`?, ?, ?, ?, ?, ? FROM u), ` +
			`j AS (` + deleteJobSQL + `) SELECT COUNT(*) FROM u`
	}
	return m
}()

// Settle records an attempt and what it ended in, deletes s.Job and runs
// then (nil for none; a retry's note on its job) in the same
// transaction, so that a record is settled exactly when its job ends. A
// final settlement of a record changed meanwhile (deleted, or resolved by
// an operator) records no attempt; the job is deleted and then runs all
// the same. A retry of a record deleted meanwhile writes nothing and
// returns ErrNotFound: its delivery is over. It reports whether a final
// settlement was written to the record.
func (l *Ledger) Settle(ctx context.Context, s *Settlement, now time.Time, then func(context.Context, *sql.Tx) error) (bool, error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return false, fmt.Errorf("settle %s: %w", ref(s.Ref), err)
	}
	shift, err := l.clock.shift(ctx)
	if err != nil {
		return false, fmt.Errorf("settle %s: %w", ref(s.Ref), l.fail("clock", err))
	}
	if s.Again {
		// A final settlement's attempt is stored only with its record.
		if found, err := l.settled(ctx, s, shift); err != nil || found {
			return found && s.State != "", err
		}
	}
	now = toDB(now, shift)
	var args []any
	switch s.State {
	case idempotency.StateDone:
		headers, err := encodeHeaders(s.Response.Headers)
		if err != nil {
			return false, fmt.Errorf("settle %s: %w", ref(s.Ref), err)
		}
		body := nullBytes(s.Response.Body)
		if s.Response.BodyOmitted {
			body = nil
		}
		args = append([]any{s.Response.Status, headers, body, s.Response.BodyOmitted, now, s.Route, s.Key}, createdRange(s.Created)...)
	case idempotency.StateDead, idempotency.StateHeld:
		keep := dbTime(toDB(s.KeepUntil, shift))
		args = append([]any{now, keep, keep, s.Route, s.Key}, createdRange(s.Created)...)
	}
	var kept []any // a retry's KeepUntil
	if s.State == "" && !s.KeepUntil.IsZero() {
		keep := dbTime(toDB(s.KeepUntil, shift))
		kept = append([]any{keep, keep, s.Route, s.Key}, createdRange(s.Created)...)
	}
	if args != nil && s.Job != 0 && then == nil && l.d.name == DriverPostgres {
		return l.settleAtOnce(ctx, s, args, shift)
	}
	var wrote bool
	err = l.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if wrote, err = l.settleTx(ctx, tx, s, args, kept); err != nil {
			return err
		}
		if s.Job != 0 {
			if _, err := tx.ExecContext(ctx, l.d.rebind(deleteJobSQL), s.Job); err != nil {
				return err
			}
		}
		if then == nil {
			return nil
		}
		return then(ctx, tx)
	})
	if err != nil {
		return false, l.fail("settle "+ref(s.Ref), err)
	}
	return wrote, nil
}

// settleTx writes s in tx: a retry's attempt (args nil) and its record's
// expiry moved to kept (nil: left), or a final settlement bound to args
// with its attempt, nothing when the record has nothing left to settle.
// It reports whether it wrote a final settlement.
func (l *Ledger) settleTx(ctx context.Context, tx *sql.Tx, s *Settlement, args, kept []any) (bool, error) {
	if args == nil {
		if err := l.addDeliveryAttemptTx(ctx, tx, s.Attempt, s.Created); err != nil || kept == nil {
			return false, err
		}
		_, err := tx.ExecContext(ctx, l.d.rebind(keptRetrySQL), kept...)
		return false, err
	}
	res, err := tx.ExecContext(ctx, l.d.rebind(settleSQL[s.State]), args...)
	if err != nil {
		return false, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err
	}
	// The UPDATE holds the record until tx ends, as addDeliveryAttemptTx
	// would.
	return true, l.AddAttemptTx(ctx, tx, s.Attempt)
}

// settled reports whether s's attempt is stored already.
func (l *Ledger) settled(ctx context.Context, s *Settlement, shift time.Duration) (bool, error) {
	db, err := l.w.DB()
	if err != nil {
		return false, l.fail("settle "+ref(s.Ref), err)
	}
	at := toDB(s.Attempt.StartedAt, shift)
	var n int
	if err := db.QueryRowContext(ctx, l.d.rebind(settledSQL), s.Route, s.Key, s.Attempt.Replica, s.Attempt.Error,
		at.Add(-sameStart), at.Add(sameStart)).Scan(&n); err != nil {
		return false, l.fail("settle "+ref(s.Ref), err)
	}
	return n > 0, nil
}

// settleAtOnce is Settle's final settlement on PostgreSQL, in one
// statement; one whose attempt number was taken meanwhile wrote nothing
// and runs again. It reports whether the record was written.
func (l *Ledger) settleAtOnce(ctx context.Context, s *Settlement, args []any, shift time.Duration) (bool, error) {
	db, err := l.w.DB()
	if err != nil {
		return false, l.fail("settle "+ref(s.Ref), err)
	}
	a := attemptArgsOf(&s.Attempt, shift)
	args = append(args, a.number, a.started, a.ms, a.status, a.err, a.replica, a.expires, s.Job)
	q := l.d.rebind(settleAtOnceSQL[s.State])
	what := "settle " + ref(s.Ref)
	var n int
	err = numbered(what, a.number, func() (bool, error) {
		err := db.QueryRowContext(ctx, q, args...).Scan(&n)
		if attemptTaken(err) {
			return true, nil
		}
		if err != nil {
			return false, l.fail(what, err)
		}
		return false, nil
	})
	return n > 0, err
}

// attemptTaken reports a PostgreSQL statement refused on
// hookstamp_attempts' primary key.
func attemptTaken(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && pe.TableName == "hookstamp_attempts"
}

// Requeue queues ref's stored request again (redeliver, SPEC §11): a dead
// row is revived (queued); a done row stays done until the new final
// answer replaces its answer; a queued row, or a done one whose
// redelivery waits or runs, has its job already. A row
// queued again is kept at least until keep: a done one is not safe from
// the sweeper while its job waits. With held set (the release of a held
// row whose provider was acknowledged) it revives a held row and nothing
// else. A revived row is
// acked: repeats on an async route get the acknowledgement from then on,
// as they do while it is queued. It reports whether a
// job was inserted;
// ErrNotFound without a row, ErrNoRequest when no request is stored,
// ErrNotOwner for a row no delivery may be queued for (pending; held
// without held; any other with it).
func (l *Ledger) Requeue(ctx context.Context, r idempotency.Ref, held bool, keep time.Time) (bool, error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return false, fmt.Errorf("requeue %s: %w", ref(r), err)
	}
	shift, err := l.clock.shift(ctx)
	if err != nil {
		return false, fmt.Errorf("requeue %s: %w", ref(r), l.fail("clock", err))
	}
	kept := toDB(keep, shift)
	queued := false
	err = l.inTx(ctx, func(tx *sql.Tx) error {
		var state string
		var method sql.NullString
		var created time.Time
		lock := ""
		if l.d.name == DriverPostgres {
			lock = " FOR UPDATE"
		}
		err := tx.QueryRowContext(ctx, l.d.rebind(`SELECT state, request_method, created_at FROM hookstamp_records WHERE route = ? AND "key" = ?`+lock),
			r.Route, r.Key).Scan(&state, &method, &created)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return idempotency.ErrNotFound
		case err != nil:
			return err
		case !method.Valid:
			return ErrNoRequest
		}
		if held != (state == string(idempotency.StateHeld)) {
			// A release of a row resolved meanwhile, or released twice,
			// must not deliver it again.
			return idempotency.ErrNotOwner
		}
		switch idempotency.State(state) {
		case idempotency.StateQueued:
			return nil
		case idempotency.StateDead, idempotency.StateHeld:
			if _, err := tx.ExecContext(ctx, l.d.rebind(`UPDATE hookstamp_records SET state = 'queued', completed_at = NULL, acked = true, `+keptSQL+
				`WHERE route = ? AND "key" = ?`), kept, kept, r.Route, r.Key); err != nil {
				return err
			}
		case idempotency.StateDone:
			// A redelivery already queued or under way: a second job
			// would send the request twice at once.
			if pending, err := l.jobs.PendingTx(ctx, tx, r); err != nil || pending {
				return err
			}
			if _, err := tx.ExecContext(ctx, l.d.rebind(`UPDATE hookstamp_records SET `+keptSQL+`WHERE route = ? AND "key" = ?`),
				kept, kept, r.Route, r.Key); err != nil {
				return err
			}
		default:
			return idempotency.ErrNotOwner
		}
		queued = true
		return l.jobs.InsertTx(ctx, tx, []Delivery{{Ref: r, Created: created, Requeued: toDB(l.now(), shift)}})
	})
	switch {
	case errors.Is(err, idempotency.ErrNotFound), errors.Is(err, ErrNoRequest), errors.Is(err, idempotency.ErrNotOwner):
		return false, fmt.Errorf("requeue %s: %w", ref(r), err)
	case err != nil:
		return false, l.fail("requeue "+ref(r), err)
	}
	return queued, nil
}

// Redrive queues dead rows of route again, with their jobs, and returns
// how many it queued. Each is kept at least until keep, as Requeue keeps
// one. The rows of keys, when given, are queued in one transaction.
// Every dead row of the route (keys nil) is queued in batches of
// Options.RedriveBatch, oldest first, each a transaction with its own
// OpTimeout, however many there are. A failed batch ends the redrive:
// the batches before it stay committed, their count returned with the
// error, and the rows left are still dead, for the next redrive. The
// batches take each row once, and no row created after the newest one
// dead at the start: one that dies again meanwhile waits for the next
// redrive, rather than keep this one going.
func (l *Ledger) Redrive(ctx context.Context, route string, keys []string, keep time.Time) (int, error) {
	if keys != nil {
		if len(keys) == 0 {
			return 0, nil
		}
		args := make([]any, len(keys))
		for i, k := range keys {
			args[i] = k
		}
		where := ` AND "key" IN (?` + repeat(",?", len(keys)-1) + `)`
		return l.redriveTx(ctx, route, keep, func(context.Context, *sql.Tx) (string, []any, error) { return where, args, nil })
	}
	w, err := l.walkDead(ctx, route)
	if err != nil {
		return 0, err
	}
	n := 0
	for !w.done {
		m, err := l.redriveTx(ctx, route, keep, w.pick)
		n += m
		if err != nil {
			return n, err
		}
		w.advance()
	}
	return n, nil
}

// redriveTx queues again, in one transaction, the dead rows of route that
// pick's condition (" AND …", with its arguments) selects.
func (l *Ledger) redriveTx(ctx context.Context, route string, keep time.Time, pick func(context.Context, *sql.Tx) (string, []any, error)) (int, error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return 0, fmt.Errorf("redrive %q: %w", route, err)
	}
	shift, err := l.clock.shift(ctx)
	if err != nil {
		return 0, fmt.Errorf("redrive %q: %w", route, l.fail("clock", err))
	}
	kept := toDB(keep, shift)
	n := 0
	err = l.inTx(ctx, func(tx *sql.Tx) error {
		where, picked, err := pick(ctx, tx)
		if err != nil {
			return err
		}
		q := `UPDATE hookstamp_records SET state = 'queued', completed_at = NULL, acked = true, ` + keptSQL + `WHERE route = ? AND state = 'dead'` + where
		args := append([]any{kept, kept, route}, picked...)
		rows, err := tx.QueryContext(ctx, l.d.rebind(q+` RETURNING "key", created_at`), args...)
		if err != nil {
			return err
		}
		var ds []Delivery
		now := toDB(l.now(), shift)
		for rows.Next() {
			d := Delivery{Ref: idempotency.Ref{Route: route}, Requeued: now}
			if err := rows.Scan(&d.Key, &d.Created); err != nil {
				rows.Close()
				return err
			}
			ds = append(ds, d)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		n = len(ds)
		if n == 0 {
			return nil
		}
		return l.jobs.InsertTx(ctx, tx, ds)
	})
	if err != nil {
		return 0, l.fail(fmt.Sprintf("redrive %q", route), err)
	}
	return n, nil
}

// position is a row's place in a route's rows ordered by (created_at,
// key), created_at as read from the database: written back unchanged, it
// compares equal to the row's own (a row written with a finer time than
// Ledger writes has one).
type position struct {
	at  time.Time
	key string
}

// deadWalk is a redrive of every dead row of a route, batch by batch, in
// position order: after is the last place the committed batches reached,
// last the newest row dead when the walk began.
type deadWalk struct {
	route  string
	batch  int
	rebind func(string) string
	after  position
	last   position
	// end is where the batch pick made ends; nil: at last, the walk's
	// final batch.
	end  *position
	done bool
}

// walkDead starts a walk of route's dead rows, done at once when there
// are none.
func (l *Ledger) walkDead(ctx context.Context, route string) (*deadWalk, error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return nil, fmt.Errorf("redrive %q: %w", route, err)
	}
	w := &deadWalk{route: route, batch: l.redriveBatch, rebind: l.d.rebind,
		after: position{at: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)}}
	db, err := l.w.DB()
	if err != nil {
		return nil, l.fail(fmt.Sprintf("redrive %q", route), err)
	}
	err = db.QueryRowContext(ctx, l.d.rebind(`SELECT created_at, "key" FROM hookstamp_records WHERE route = ? AND state = 'dead' `+
		`ORDER BY created_at DESC, "key" DESC LIMIT 1`), route).Scan(&w.last.at, &w.last.key)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		w.done = true
	case err != nil:
		return nil, l.fail(fmt.Sprintf("redrive %q", route), err)
	}
	return w, nil
}

// deadBetweenSQL selects a route's dead rows after one position and up
// to another.
const deadBetweenSQL = ` AND (created_at, "key") > (?, ?) AND (created_at, "key") <= (?, ?)`

// pick is redriveTx's condition for the walk's next batch: the rows after
// the batches committed, up to the batch's last row.
func (w *deadWalk) pick(ctx context.Context, tx *sql.Tx) (string, []any, error) {
	between := func(upto position) []any { return []any{w.after.at, w.after.key, upto.at, upto.key} }
	var end position
	err := tx.QueryRowContext(ctx, w.rebind(`SELECT created_at, "key" FROM hookstamp_records WHERE route = ? AND state = 'dead'`+
		deadBetweenSQL+` ORDER BY created_at, "key" LIMIT 1 OFFSET ?`), append(append([]any{w.route}, between(w.last)...), w.batch-1)...).Scan(&end.at, &end.key)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		w.end = nil
		return deadBetweenSQL, between(w.last), nil
	case err != nil:
		return "", nil, err
	}
	w.end = &end
	return deadBetweenSQL, between(end), nil
}

// advance moves the walk past the batch pick made, once it is committed.
func (w *deadWalk) advance() {
	if w.end == nil {
		w.done = true
		return
	}
	w.after = *w.end
}

func repeat(s string, n int) string {
	b := make([]byte, 0, len(s)*n)
	for range n {
		b = append(b, s...)
	}
	return string(b)
}

// QueueStat is one route's async deliveries by state.
type QueueStat struct {
	// Queued counts the deliveries waiting: queued rows, and done ones
	// an operator's redelivery waits or runs for.
	Queued, Dead int
	// Redelivering counts those done ones, of Queued.
	Redelivering int
	// OldestQueued is when the oldest waiting delivery was queued: its
	// intake, or an operator's redelivery or redrive since; zero when
	// none waits.
	OldestQueued time.Time
}

// WaitingJobs is what a Jobs may also answer, for QueueStats.
type WaitingJobs interface {
	// Waiting returns the delivery jobs that wait or run for a queued or
	// done record, each once, for the record it was queued for.
	Waiting(ctx context.Context, db *sql.DB) ([]WaitingJob, error)
}

// WaitingJob is a delivery job that waits or runs, with its record.
type WaitingJob struct {
	idempotency.Ref
	// State is the record's: queued, or done for a redelivery.
	State idempotency.State
	// Created is the record's created_at, as the database holds it;
	// Requeued is the job's Delivery.Requeued, on the database's clock
	// too.
	Created, Requeued time.Time
}

// QueueStats counts the queued and dead rows of every route that has any
// (hookstamp_queue_depth, hookstamp_queue_oldest_seconds), and, when its
// Jobs answer WaitingJobs, the done rows a redelivery waits for; the
// oldest waiting one is then dated from when it was last queued.
func (l *Ledger) QueueStats(ctx context.Context) (map[string]QueueStat, error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return nil, fmt.Errorf("queue stats: %w", err)
	}
	shift, err := l.clock.shift(ctx)
	if err != nil {
		return nil, fmt.Errorf("queue stats: %w", l.fail("clock", err))
	}
	db, err := l.r.DB()
	if err != nil {
		return nil, l.fail("queue stats", err)
	}
	rows, err := db.QueryContext(ctx, `SELECT route, state, COUNT(*), MIN(created_at) FROM hookstamp_records `+
		`WHERE state IN ('queued', 'dead') GROUP BY route, state`)
	if err != nil {
		return nil, l.fail("queue stats", err)
	}
	defer rows.Close()
	out := map[string]QueueStat{}
	for rows.Next() {
		var route, state string
		var n int
		var oldest time.Time
		if err := rows.Scan(&route, &state, &n, &oldest); err != nil {
			return nil, l.fail("queue stats", err)
		}
		s := out[route]
		if state == string(idempotency.StateDead) {
			s.Dead = n
		} else {
			s.Queued, s.OldestQueued = n, oldest.UTC().Add(-shift)
		}
		out[route] = s
	}
	if err := rows.Err(); err != nil {
		return nil, l.fail("queue stats", err)
	}
	w, ok := l.jobs.(WaitingJobs)
	if !ok {
		return out, nil
	}
	jobs, err := w.Waiting(ctx, db)
	if err != nil {
		return nil, l.fail("queue stats", err)
	}
	// A queued row's created_at is its intake: one redriven or released
	// has waited only since its job was inserted. Every queued row has a
	// job from its intake on (one transaction); the rows' own MIN stands
	// for a route whose jobs were not found.
	since := map[string]time.Time{}
	for _, j := range jobs {
		s := out[j.Route]
		if j.State == idempotency.StateDone {
			s.Queued++
			s.Redelivering++
		}
		at := queuedAt(j.Created.UTC().Add(-shift), j.Requeued, shift)
		if o, ok := since[j.Route]; !ok || at.Before(o) {
			since[j.Route] = at
		}
		out[j.Route] = s
	}
	for route, at := range since {
		s := out[route]
		s.OldestQueued = at
		out[route] = s
	}
	return out, nil
}
