package sqlledger

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// Batching: concurrent deliveries' ledger calls are queued and run by a few
// workers as ONE statement (PostgreSQL: arrays unnested) or, for SQLite
// commits, one transaction: one round trip and one WAL flush for a burst.
// Callers observe no difference: each returns after the statement holding
// its row completed (durably, for writes) with its own row's result; a
// Lookup's statement starts after its call (read-your-writes holds); a row
// the database refuses fails alone (the batch is retried row by row).
// Rows are written in byRef order, so overlapping batches wait for each
// other instead of deadlocking. A lone call is never delayed.

// batcher queues jobs of one kind and runs them in batches.
type batcher[J any] struct {
	jobs    chan J
	max     int
	run     func([]J)
	drain   func(J) // fails a job still queued at close
	stop    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup
}

func newBatcher[J any](workers, max int, run func([]J), drain func(J)) *batcher[J] {
	b := &batcher[J]{jobs: make(chan J, workers*max), max: max, run: run, drain: drain, stop: make(chan struct{})}
	for range workers {
		b.wg.Add(1)
		go b.work()
	}
	return b
}

// errBatcherClosed: the ledger was closed before the job was queued.
var errBatcherClosed = errors.New("batcher closed")

// enqueue hands j to the workers.
func (b *batcher[J]) enqueue(ctx context.Context, j J) error {
	select {
	case b.jobs <- j:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-b.stop:
		return errBatcherClosed
	}
}

func (b *batcher[J]) work() {
	defer b.wg.Done()
	batch := make([]J, 0, b.max)
	for {
		batch = batch[:0]
		select {
		case j := <-b.jobs:
			batch = append(batch, j)
		case <-b.stop:
			for {
				select {
				case j := <-b.jobs:
					b.drain(j)
				default:
					return
				}
			}
		}
	fill:
		for len(batch) < b.max {
			select {
			case j := <-b.jobs:
				batch = append(batch, j)
			default:
				break fill
			}
		}
		b.run(batch)
	}
}

func (b *batcher[J]) close() {
	b.stopped.Do(func() { close(b.stop) })
	b.wg.Wait()
}

// wait returns the job's result, or a failure if the caller's ctx ends
// first (the statement may still complete; repeats find its row or none).
// A non-nil of names the record in the error, formatted only on failure.
func wait[R any](ctx context.Context, l *Ledger, what string, of *idempotency.Ref, done chan R, failed func(error) R) R {
	select {
	case r := <-done:
		return r
	case <-ctx.Done():
		if of != nil {
			what += " " + ref(*of)
		}
		return failed(l.fail(what+": wait", ctx.Err()))
	}
}

// batchCtx is the context a batch runs under: the first caller's, for its
// trace (a batch's statement hangs under one delivery's span), bounded by
// the ledger's own timeout rather than any caller's cancellation.
func (l *Ledger) batchCtx(first context.Context) (context.Context, context.CancelFunc) {
	return l.op(context.WithoutCancel(first))
}

// pgArray binds a Go slice as ONE PostgreSQL array parameter, which GORM's
// Raw would expand into a list; pgx encodes it through ArrayGetter.
type pgArray[T any] []T

var errPgxOnly = errors.New("sqlledger: array parameters need the pgx driver")

// Value makes pgArray a driver.Valuer, which GORM binds as one parameter;
// pgx never calls it (ArrayGetter wins).
func (a pgArray[T]) Value() (driver.Value, error) { return nil, errPgxOnly }

func (a pgArray[T]) Dimensions() []pgtype.ArrayDimension { return pgtype.FlatArray[T](a).Dimensions() }
func (a pgArray[T]) Index(i int) any                     { return a[i] }
func (a pgArray[T]) IndexType() any                      { var v T; return v }

// --- commits ---

// commitRow is one Commit's row.
type commitRow struct {
	ref       idempotency.Ref
	state     string
	fp        []byte
	status    int64
	headers   string
	body      []byte
	omitted   bool
	traceID   string
	spanID    string
	source    string
	created   time.Time
	completed time.Time
	expires   time.Time
	owner     string
	now       time.Time
	req       requestColumns
	att       *attemptArgs // nil: no attempt to add
}

func (r *commitRow) args() []any {
	args := []any{r.ref.Route, r.ref.Key, r.state, nullBytes(r.fp), r.status, r.headers, nullBytes(r.body), r.omitted,
		r.traceID, r.spanID, r.source, r.created, r.completed, r.expires}
	args = append(args, r.req.args()...)
	return append(args, r.owner, r.now)
}

type commitJob struct {
	ctx  context.Context
	row  commitRow
	done chan error // buffered: a worker never blocks on a caller that left
}

// commitBatchSQL is commitSQL for many rows (PostgreSQL): inserted when the
// key has no row, or replacing a pending row owned by that row's owner or
// whose lease expired before that row's now. RETURNING names the rows
// written; any other lost to another owner (ErrNotOwner). A key may appear
// once per statement (ON CONFLICT DO UPDATE cannot touch a row twice).
// The rows written that carry an attempt (att_started not NULL) get it as
// their next attempt in the same statement. The attempt's insert has no
// ON CONFLICT: a number another writer takes meanwhile (a stale owner's
// AddAttempt) fails the whole statement, nothing written, and runCommits
// commits each row alone, numbering its attempt again. Skipped, the record
// would be done without the forward that produced its answer.
const commitBatchSQL = `WITH t AS (SELECT * FROM unnest(?::text[], ?::text[], ?::text[], ?::bytea[], ?::bigint[], ?::text[], ?::bytea[], ?::boolean[], ` +
	`?::text[], ?::text[], ?::text[], ?::timestamptz[], ?::timestamptz[], ?::timestamptz[], ?::text[], ?::timestamptz[], ` +
	`?::text[], ?::text[], ?::text[], ?::bytea[], ` +
	`?::bigint[], ?::timestamptz[], ?::bigint[], ?::bigint[], ?::text[], ?::text[], ?::timestamptz[]) ` +
	`AS t(route, "key", state, fingerprint, status, headers, body, body_omitted, trace_id, span_id, source, created_at, completed_at, expires_at, owner, now, ` +
	`request_method, request_path, request_headers, request_body, ` +
	`att_number, att_started, att_ms, att_status, att_error, att_replica, att_expires)), ` +
	`w AS (INSERT INTO hookstamp_records AS r ` +
	`(route, "key", state, owner, lease_until, fingerprint, status, headers, body, body_omitted, trace_id, span_id, source, created_at, completed_at, expires_at, ` +
	`request_method, request_path, request_headers, request_body, acked) ` +
	`SELECT route, "key", state, NULL, NULL, fingerprint, status, headers, body, body_omitted, trace_id, span_id, source, created_at, completed_at, expires_at, ` +
	`request_method, request_path, request_headers, request_body, false FROM t ` +
	`ON CONFLICT (route, "key") DO UPDATE SET state = excluded.state, owner = NULL, lease_until = NULL, acked = false, ` +
	`fingerprint = excluded.fingerprint, status = excluded.status, headers = excluded.headers, body = excluded.body, ` +
	`body_omitted = excluded.body_omitted, trace_id = excluded.trace_id, span_id = excluded.span_id, ` +
	`source = excluded.source, completed_at = excluded.completed_at, expires_at = excluded.expires_at, ` +
	`request_method = excluded.request_method, request_path = excluded.request_path, ` +
	`request_headers = excluded.request_headers, request_body = excluded.request_body ` +
	`WHERE r.state = 'pending' AND EXISTS (SELECT 1 FROM t WHERE t.route = r.route AND t."key" = r."key" ` +
	`AND (r.owner = t.owner OR r.lease_until < t.now)) ` +
	`RETURNING r.route, r."key"), ` +
	`a AS (` + insertAttemptSQL +
	`SELECT t.route, t."key", COALESCE(t.att_number, ` +
	`(SELECT MAX(x.attempt) + 1 FROM hookstamp_attempts x WHERE x.route = t.route AND x."key" = t."key"), 1), ` +
	`t.att_started, t.att_ms, t.att_status, t.att_error, t.att_replica, t.att_expires ` +
	`FROM t JOIN w ON w.route = t.route AND w."key" = t."key" WHERE t.att_started IS NOT NULL) ` +
	`SELECT route, "key" FROM w`

func (l *Ledger) newCommitter(workers, max int) *batcher[*commitJob] {
	return newBatcher(workers, max, l.runCommits, func(j *commitJob) { j.done <- l.check() })
}

// runCommits writes one batch of commits.
func (l *Ledger) runCommits(batch []*commitJob) {
	ctx, cancel := l.batchCtx(batch[0].ctx)
	defer cancel()
	if len(batch) == 1 {
		batch[0].done <- l.execCommit(ctx, &batch[0].row)
		return
	}
	var err error
	results := make([]error, len(batch))
	// settled marks the rows whose result is known even if err is not nil:
	// those of the rounds commitStatements wrote before one failed.
	settled := make([]bool, len(batch))
	if l.d.name == DriverPostgres {
		err = l.commitStatements(ctx, batch, results, settled)
	} else {
		err = l.commitTransaction(ctx, batch, results)
	}
	for i, j := range batch {
		switch {
		case err == nil || settled[i]:
			j.done <- results[i]
		case l.unavailable(err):
			j.done <- l.fail(fmt.Sprintf("commit %s", ref(j.row.ref)), err)
		default:
			// One row the database refused must not fail the others:
			// commit them one by one.
			jctx, jcancel := l.op(context.WithoutCancel(j.ctx))
			j.done <- l.execCommit(jctx, &j.row)
			jcancel()
		}
	}
}

// commitTransaction runs a batch's statements in order in one transaction
// (SQLite: one fsync), through database/sql with commitSQL prepared once:
// GORM would prepare it on each transaction again.
func (l *Ledger) commitTransaction(ctx context.Context, batch []*commitJob, results []error) error {
	stmt, err := l.sqliteCommitStmt(ctx)
	if err != nil {
		return err
	}
	return l.inTx(ctx, func(tx *sql.Tx) error {
		s := tx.StmtContext(ctx, stmt)
		for i, j := range batch {
			res, err := s.ExecContext(ctx, j.row.args()...)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			if n == 0 {
				results[i] = fmt.Errorf("commit %s: %w", ref(j.row.ref), idempotency.ErrNotOwner)
				continue
			}
			if a := j.row.att; a != nil {
				if err := l.addAttemptArgs(ctx, tx, j.row.ref, a); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// sqliteCommitStmt returns commitSQL prepared on the writer, preparing it
// the first time.
func (l *Ledger) sqliteCommitStmt(ctx context.Context) (*sql.Stmt, error) {
	l.commitStmtMu.Lock()
	defer l.commitStmtMu.Unlock()
	if l.commitStmt != nil {
		return l.commitStmt, nil
	}
	db, err := l.w.DB()
	if err != nil {
		return nil, err
	}
	stmt, err := db.PrepareContext(ctx, commitSQL)
	if err != nil {
		return nil, err
	}
	l.commitStmt = stmt
	return stmt, nil
}

// commitStatements writes a batch with commitBatchSQL, one statement per
// round of distinct keys (a key's second commit finds the first's row). On
// an error the rounds written stand, their rows marked settled.
func (l *Ledger) commitStatements(ctx context.Context, batch []*commitJob, results []error, settled []bool) error {
	pending := make([]int, len(batch))
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		round, later := distinctRound(pending, func(i int) idempotency.Ref { return batch[i].row.ref })
		slices.SortStableFunc(round, func(a, b int) int { return byRef(batch[a].row.ref, batch[b].row.ref) })
		rows, err := l.w.WithContext(ctx).Raw(commitBatchSQL, commitBatchArgs(batch, round)...).Rows()
		if err != nil {
			return err
		}
		written := make(map[idempotency.Ref]bool, len(round))
		for rows.Next() {
			var r idempotency.Ref
			if err := rows.Scan(&r.Route, &r.Key); err != nil {
				rows.Close()
				return err
			}
			written[r] = true
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return err
		}
		for _, i := range round {
			if !written[batch[i].row.ref] {
				results[i] = fmt.Errorf("commit %s: %w", ref(batch[i].row.ref), idempotency.ErrNotOwner)
			}
			settled[i] = true
		}
		pending = later
	}
	return nil
}

// commitBatchArgs binds commitBatchSQL for the rows of batch at round.
func commitBatchArgs(batch []*commitJob, round []int) []any {
	n := len(round)
	var (
		routes, keys, states, headers, traces, spans, sources, owners = make(pgArray[string], n), make(pgArray[string], n),
			make(pgArray[string], n), make(pgArray[string], n), make(pgArray[string], n), make(pgArray[string], n),
			make(pgArray[string], n), make(pgArray[string], n)
		fps, bodies                = make(pgArray[[]byte], n), make(pgArray[[]byte], n)
		statuses                   = make(pgArray[int64], n)
		omitted                    = make(pgArray[bool], n)
		created, completed, expire = make(pgArray[time.Time], n), make(pgArray[time.Time], n), make(pgArray[time.Time], n)
		nows                       = make(pgArray[time.Time], n)
		methods, paths, reqHeaders = make(pgArray[*string], n), make(pgArray[*string], n), make(pgArray[*string], n)
		reqBodies                  = make(pgArray[[]byte], n)
		att                        = newAttemptArrays(n)
	)
	for k, i := range round {
		r := &batch[i].row
		routes[k], keys[k], states[k], fps[k], statuses[k], headers[k], bodies[k], omitted[k] =
			r.ref.Route, r.ref.Key, r.state, nonEmpty(r.fp), r.status, r.headers, nonEmpty(r.body), r.omitted
		traces[k], spans[k], sources[k], created[k], completed[k], expire[k], owners[k], nows[k] =
			r.traceID, r.spanID, r.source, r.created, r.completed, r.expires, r.owner, r.now
		methods[k], paths[k], reqHeaders[k], reqBodies[k] = r.req.method, r.req.path, r.req.headers, nonEmpty(r.req.body)
		att.set(k, r.att)
	}
	args := []any{routes, keys, states, fps, statuses, headers, bodies, omitted,
		traces, spans, sources, created, completed, expire, owners, nows, methods, paths, reqHeaders, reqBodies}
	return append(args, att.args()...)
}

// attemptArrays are the att_ columns of commitBatchSQL.
type attemptArrays struct {
	started, expires   pgArray[*time.Time]
	number, ms, status pgArray[*int64]
	errText, replicas  pgArray[string]
}

func newAttemptArrays(n int) *attemptArrays {
	return &attemptArrays{started: make(pgArray[*time.Time], n), expires: make(pgArray[*time.Time], n),
		number: make(pgArray[*int64], n), ms: make(pgArray[*int64], n), status: make(pgArray[*int64], n),
		errText: make(pgArray[string], n), replicas: make(pgArray[string], n)}
}

// set fills row k from a; a nil a leaves the row's attempt NULL.
func (arr *attemptArrays) set(k int, a *attemptArgs) {
	if a == nil {
		return
	}
	arr.number[k], arr.started[k], arr.ms[k], arr.status[k] = a.number, &a.started, &a.ms, a.status
	arr.errText[k], arr.replicas[k], arr.expires[k] = a.err, a.replica, a.expires
}

func (arr *attemptArrays) args() []any {
	return []any{arr.number, arr.started, arr.ms, arr.status, arr.errText, arr.replicas, arr.expires}
}

// byRef orders refs by route, then key: the order batch statements write
// rows in.
func byRef(a, b idempotency.Ref) int {
	if c := strings.Compare(a.Route, b.Route); c != 0 {
		return c
	}
	return strings.Compare(a.Key, b.Key)
}

// distinctRound splits idx into the first occurrence of each ref, in
// order, and the rest.
func distinctRound(idx []int, refOf func(int) idempotency.Ref) (round, rest []int) {
	seen := make(map[idempotency.Ref]bool, len(idx))
	for _, i := range idx {
		r := refOf(i)
		if seen[r] {
			rest = append(rest, i)
			continue
		}
		seen[r] = true
		round = append(round, i)
	}
	return round, rest
}

// --- claims ---

type claimJob struct {
	ctx  context.Context
	req  *idempotency.ClaimRequest
	now  time.Time // lease and expiry are computed from it
	done chan claimInsert
	// state: the caller leaving and the worker answering race to move it
	// from claimWaiting. A worker that loses deletes the row it made, which
	// nobody holds.
	state atomic.Int32
}

// claimJob states.
const (
	claimWaiting int32 = iota
	claimAnswered
	claimAbandoned
)

// answerClaim hands r to j's caller, or, if the caller left, undoes the
// row r made for it.
func (l *Ledger) answerClaim(j *claimJob, r claimInsert) {
	if j.state.CompareAndSwap(claimWaiting, claimAnswered) {
		j.done <- r
		return
	}
	if r.inserted {
		ctx, cancel := l.op(context.WithoutCancel(j.ctx))
		defer cancel()
		// A failure leaves the row to expire with its lease.
		_ = l.w.WithContext(ctx).Exec(releaseSQL, j.req.Route, j.req.Key, j.req.Owner).Error
	}
}

// waitClaim returns j's result, or a failure if the caller's ctx ends
// first and the worker has not answered yet (see claimJob.state).
func (l *Ledger) waitClaim(ctx context.Context, j *claimJob) claimInsert {
	select {
	case r := <-j.done:
		return r
	case <-ctx.Done():
		if j.state.CompareAndSwap(claimWaiting, claimAbandoned) || j.state.Load() == claimAbandoned {
			return claimInsert{err: l.fail("insert: wait", ctx.Err())}
		}
		return <-j.done // answered as the caller gave up: the result stands
	}
}

// claimInsert is what a batched claim insert did for one row.
type claimInsert struct {
	inserted bool
	err      error
}

// claimBatchSQL is claimInsertSQL for many rows (PostgreSQL). Owners are
// unique per delivery, so RETURNING owner names exactly the claims that
// made their row, even when two claims of one key share the batch (ON
// CONFLICT DO NOTHING keeps the first and skips the other).
const claimBatchSQL = `INSERT INTO hookstamp_records ` +
	`(route, "key", state, owner, lease_until, fingerprint, status, headers, body, body_omitted, trace_id, span_id, source, created_at, completed_at, expires_at, acked) ` +
	`SELECT route, "key", 'pending', owner, lease_until, fingerprint, 0, '{}', NULL, false, '', '', source, created_at, NULL, expires_at, NULL ` +
	`FROM unnest(?::text[], ?::text[], ?::text[], ?::timestamptz[], ?::bytea[], ?::text[], ?::timestamptz[], ?::timestamptz[]) ` +
	`AS t(route, "key", owner, lease_until, fingerprint, source, created_at, expires_at) ` +
	`ON CONFLICT (route, "key") DO NOTHING RETURNING owner`

func (l *Ledger) newClaimer(workers, max int) *batcher[*claimJob] {
	return newBatcher(workers, max, l.runClaims, func(j *claimJob) { l.answerClaim(j, claimInsert{err: l.check()}) })
}

// runClaims makes the pending rows of one batch of claims. Claims whose
// caller has already left are dropped: a row made for them would be a
// claim nobody holds.
func (l *Ledger) runClaims(batch []*claimJob) {
	live := batch[:0]
	for _, j := range batch {
		if j.ctx.Err() != nil {
			j.state.CompareAndSwap(claimWaiting, claimAbandoned)
		}
		if j.state.Load() != claimAbandoned {
			live = append(live, j)
		}
	}
	if batch = live; len(batch) == 0 {
		return
	}
	ctx, cancel := l.batchCtx(batch[0].ctx)
	defer cancel()
	if len(batch) == 1 {
		ok, err := l.insertClaim(ctx, batch[0].req, batch[0].now)
		l.answerClaim(batch[0], claimInsert{inserted: ok, err: err})
		return
	}
	slices.SortStableFunc(batch, func(a, b *claimJob) int { return byRef(a.req.Ref, b.req.Ref) })
	n := len(batch)
	routes, keys, owners, sources := make(pgArray[string], n), make(pgArray[string], n), make(pgArray[string], n), make(pgArray[string], n)
	leases, created, expires := make(pgArray[time.Time], n), make(pgArray[time.Time], n), make(pgArray[time.Time], n)
	fps := make(pgArray[[]byte], n)
	for i, j := range batch {
		r := j.req
		routes[i], keys[i], owners[i], sources[i], fps[i] = r.Route, r.Key, r.Owner, r.Source, nonEmpty(r.Fingerprint)
		leases[i], created[i], expires[i] = dbTime(j.now.Add(r.Lease)), j.now, dbTime(j.now.Add(r.Retention))
	}
	made, err := l.claimStatement(ctx, routes, keys, owners, leases, fps, sources, created, expires)
	switch {
	case err == nil:
		for _, j := range batch {
			l.answerClaim(j, claimInsert{inserted: made[j.req.Owner]})
		}
	case l.unavailable(err):
		for _, j := range batch {
			l.answerClaim(j, claimInsert{err: l.fail("insert", err)})
		}
	default:
		for _, j := range batch {
			jctx, jcancel := l.op(context.WithoutCancel(j.ctx))
			ok, err := l.insertClaim(jctx, j.req, j.now)
			l.answerClaim(j, claimInsert{inserted: ok, err: err})
			jcancel()
		}
	}
}

func (l *Ledger) claimStatement(ctx context.Context, args ...any) (map[string]bool, error) {
	rows, err := l.w.WithContext(ctx).Raw(claimBatchSQL, args...).Rows()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	made := map[string]bool{}
	for rows.Next() {
		var owner string
		if err := rows.Scan(&owner); err != nil {
			return nil, err
		}
		made[owner] = true
	}
	return made, rows.Err()
}

// --- lookups ---

type lookupJob struct {
	ctx  context.Context
	ref  idempotency.Ref
	done chan lookupResult
}

type lookupResult struct {
	rec *idempotency.Record
	err error
}

// lookupBatchSQL reads many rows in one statement (PostgreSQL); pairs
// nobody asked for are ignored. It is planned for its arrays every time
// (lookupExecMode): a generic plan cached while the table was small would
// scan it whole as it grows.
const lookupBatchSQL = selectColumns + `WHERE route = ANY($1::text[]) AND "key" = ANY($2::text[])`

// lookupExecMode runs a statement as an unnamed prepared statement with a
// cached description: one round trip, and a plan made for its arguments.
const lookupExecMode = pgx.QueryExecModeCacheDescribe

func (l *Ledger) newLookups(workers, max int) *batcher[*lookupJob] {
	return newBatcher(workers, max, l.runLookups, func(j *lookupJob) { j.done <- lookupResult{err: l.check()} })
}

// runLookups reads one batch of lookups.
func (l *Ledger) runLookups(batch []*lookupJob) {
	ctx, cancel := l.batchCtx(batch[0].ctx)
	defer cancel()
	if len(batch) == 1 {
		rec, err := l.lookup(ctx, batch[0].ref)
		batch[0].done <- lookupResult{rec: rec, err: err}
		return
	}
	var routes, keys pgArray[string]
	seenR, seenK := map[string]bool{}, map[string]bool{}
	for _, j := range batch {
		if !seenR[j.ref.Route] {
			seenR[j.ref.Route] = true
			routes = append(routes, j.ref.Route)
		}
		if !seenK[j.ref.Key] {
			seenK[j.ref.Key] = true
			keys = append(keys, j.ref.Key)
		}
	}
	found, err := l.lookupStatement(ctx, routes, keys)
	switch {
	case err == nil:
		for _, j := range batch {
			rec, ok := found[j.ref]
			if !ok {
				j.done <- lookupResult{err: idempotency.ErrNotFound}
				continue
			}
			if len(batch) > 1 {
				cp := *rec // each caller owns its record
				rec = &cp
			}
			j.done <- lookupResult{rec: rec}
		}
	case l.unavailable(err):
		for _, j := range batch {
			j.done <- lookupResult{err: l.fail("select", err)}
		}
	default:
		for _, j := range batch {
			jctx, jcancel := l.op(context.WithoutCancel(j.ctx))
			rec, err := l.lookup(jctx, j.ref)
			j.done <- lookupResult{rec: rec, err: err}
			jcancel()
		}
	}
}

func (l *Ledger) lookupStatement(ctx context.Context, routes, keys pgArray[string]) (map[idempotency.Ref]*idempotency.Record, error) {
	rows, err := l.r.WithContext(ctx).Raw(lookupBatchSQL, lookupExecMode, routes, keys).Rows()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := make(map[idempotency.Ref]*idempotency.Record, len(keys))
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		found[rec.Ref] = rec
	}
	return found, rows.Err()
}
