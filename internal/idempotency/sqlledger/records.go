package sqlledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// recordRow is the hookstamp_records schema (SPEC §5), for AutoMigrate only:
// statements are written out below so that each state change is one
// conditional statement.
//
// body_omitted is a column of its own because a NULL body would be
// ambiguous (empty response, or too large to record). The partial index
// idx_hookstamp_records_held covers only held rows, which are rare: listing
// and counting them per route stays cheap without taxing every write.
// idx_hookstamp_records_log pages the event log newest first (List);
// idx_hookstamp_records_unsettled does it for one of the states an
// operator looks for, which are few beside the done rows, and leaves out
// the pending rows that every ledger claim writes and its commit settles.
// idx_hookstamp_records_sweep leaves out the queued rows, which the sweep
// never deletes: a route whose outage outlasts its retention would put
// its expired queued rows at the front of every sweep batch's walk. Its
// predicate is the sweep's own term (dialect.go), which SQLite needs to
// find in a query before it uses a partial index.
type recordRow struct {
	Route       string     `gorm:"column:route;type:text;primaryKey;index:idx_hookstamp_records_held,priority:1,where:state = 'held';index:idx_hookstamp_records_log,priority:1;index:idx_hookstamp_records_unsettled,priority:1,where:state <> 'done' AND state <> 'pending'"`
	Key         string     `gorm:"column:key;type:text;primaryKey;index:idx_hookstamp_records_log,priority:3;index:idx_hookstamp_records_unsettled,priority:4"`
	State       string     `gorm:"column:state;type:text;not null;index:idx_hookstamp_records_unsettled,priority:2"`
	Owner       *string    `gorm:"column:owner;type:text"`
	LeaseUntil  *time.Time `gorm:"column:lease_until"`
	Fingerprint []byte     `gorm:"column:fingerprint"`
	Status      int        `gorm:"column:status;not null"`
	Headers     string     `gorm:"column:headers;type:text;not null"`
	Body        []byte     `gorm:"column:body"`
	BodyOmitted bool       `gorm:"column:body_omitted;not null"`
	TraceID     string     `gorm:"column:trace_id;type:text;not null"`
	SpanID      string     `gorm:"column:span_id;type:text;not null"`
	Source      string     `gorm:"column:source;type:text;not null"`
	CreatedAt   time.Time  `gorm:"column:created_at;not null;autoCreateTime:false;index:idx_hookstamp_records_held,priority:2;index:idx_hookstamp_records_log,priority:2;index:idx_hookstamp_records_unsettled,priority:3"`
	CompletedAt *time.Time `gorm:"column:completed_at"`
	ExpiresAt   time.Time  `gorm:"column:expires_at;not null;index:idx_hookstamp_records_sweep,where:state <> 'queued'"`
	// The stored request (SPEC §11); NULL method when none is stored.
	RequestMethod  *string `gorm:"column:request_method;type:text"`
	RequestPath    *string `gorm:"column:request_path;type:text"`
	RequestHeaders *string `gorm:"column:request_headers;type:text"`
	RequestBody    []byte  `gorm:"column:request_body"`
	// Acked: the row was stored by an async intake, or queued again by an
	// operator, so its provider got the route's acknowledgement rather
	// than the upstream's answer (true); or it was recorded by a
	// synchronous forward (false). NULL, the default: written by a
	// release that did not know the column (before an upgrade, or by a
	// replica not yet upgraded during one), which answered every repeat on
	// an async route with the acknowledgement; or a pending claim, which
	// its commit or the intake settles. Every write of a settled row here
	// names it, so that NULL stays the older releases' own.
	Acked *bool `gorm:"column:acked"`
}

// attemptRow is hookstamp_attempts (SPEC §11): one row per forward of a
// stored request, deleted with its record.
type attemptRow struct {
	Route      string    `gorm:"column:route;type:text;primaryKey"`
	Key        string    `gorm:"column:key;type:text;primaryKey"`
	Attempt    int       `gorm:"column:attempt;primaryKey;autoIncrement:false"`
	StartedAt  time.Time `gorm:"column:started_at;not null"`
	DurationMS int64     `gorm:"column:duration_ms;not null"`
	Status     *int      `gorm:"column:status"`
	Error      string    `gorm:"column:error;type:text;not null"`
	Replica    string    `gorm:"column:replica;type:text;not null"`
	// ExpiresAt is set on attempts that may outlive a claim released
	// without a record; the sweeper deletes them once no record came.
	ExpiresAt *time.Time `gorm:"column:expires_at;index:idx_hookstamp_attempts_expires_at,where:expires_at IS NOT NULL"`
}

// TableName implements GORM's tabler.
func (attemptRow) TableName() string { return AttemptsTable }

// TableName implements GORM's tabler.
func (recordRow) TableName() string { return TableName }

const selectColumns = `SELECT route, "key", state, owner, lease_until, fingerprint, status, headers, body, body_omitted, ` +
	`trace_id, span_id, source, created_at, completed_at, expires_at, acked FROM hookstamp_records `

const lookupSQL = selectColumns + `WHERE route = ? AND "key" = ?`

// claimInsertSQL makes a pending row unless the key has one. Its acked is
// NULL, named so: the claim's commit (false) or the intake (true) settles
// it, and a release that does not know the column, taking the claim over
// during a rolling update, leaves it NULL, which is what its row is.
const claimInsertSQL = `INSERT INTO hookstamp_records ` +
	`(route, "key", state, owner, lease_until, fingerprint, status, headers, body, body_omitted, trace_id, span_id, source, created_at, completed_at, expires_at, acked) ` +
	`VALUES (?, ?, 'pending', ?, ?, ?, 0, '{}', NULL, false, '', '', ?, ?, NULL, ?, NULL) ` +
	`ON CONFLICT (route, "key") DO NOTHING`

// takeoverSQL moves an expired pending row to a new owner; compare-and-swap
// on the previous owner (owner tokens are unique per delivery), so of two
// replicas taking over the same row only one wins.
const takeoverSQL = `UPDATE hookstamp_records SET owner = ?, lease_until = ?, fingerprint = ?, source = ?, expires_at = ? ` +
	`WHERE route = ? AND "key" = ? AND state = 'pending' AND owner = ? AND lease_until < ?`

// commitSQL writes a done or held row: inserted when the key has no row,
// or replacing a pending row owned by the caller or whose lease expired. A
// done or held row matches neither, so it never changes (0 rows affected).
// created_at stays the row's creation time. The record is a synchronous
// forward's, its provider given the upstream's answer: acked false, over a
// claim's NULL too.
const commitSQL = `INSERT INTO hookstamp_records ` +
	`(route, "key", state, owner, lease_until, fingerprint, status, headers, body, body_omitted, trace_id, span_id, source, created_at, completed_at, expires_at, ` +
	`request_method, request_path, request_headers, request_body, acked) ` +
	`VALUES (?, ?, ?, NULL, NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, false) ` +
	`ON CONFLICT (route, "key") DO UPDATE SET state = excluded.state, owner = NULL, lease_until = NULL, acked = false, ` +
	`fingerprint = excluded.fingerprint, status = excluded.status, headers = excluded.headers, body = excluded.body, ` +
	`body_omitted = excluded.body_omitted, trace_id = excluded.trace_id, span_id = excluded.span_id, ` +
	`source = excluded.source, completed_at = excluded.completed_at, expires_at = excluded.expires_at, ` +
	`request_method = excluded.request_method, request_path = excluded.request_path, ` +
	`request_headers = excluded.request_headers, request_body = excluded.request_body ` +
	`WHERE hookstamp_records.state = 'pending' AND (hookstamp_records.owner = ? OR hookstamp_records.lease_until < ?)`

// commitClaimedSQL is commitSQL without the insert: it turns a pending row
// owned by the owner (or whose lease expired) into the record, and writes
// nothing when the key has no row (Recommit).
const commitClaimedSQL = `UPDATE hookstamp_records SET state = ?, owner = NULL, lease_until = NULL, acked = false, ` +
	`fingerprint = ?, status = ?, headers = ?, body = ?, body_omitted = ?, trace_id = ?, span_id = ?, ` +
	`source = ?, completed_at = ?, expires_at = ?, ` +
	`request_method = ?, request_path = ?, request_headers = ?, request_body = ? ` +
	`WHERE route = ? AND "key" = ? AND state = 'pending' AND (owner = ? OR lease_until < ?)`

const releaseSQL = `DELETE FROM hookstamp_records WHERE route = ? AND "key" = ? AND state = 'pending' AND owner = ?`

// maxClaimAttempts bounds Claim's retries when the row changes between its
// statements (deleted, or taken over by another replica).
const maxClaimAttempts = 5

// Lookup returns the record for ref, or ErrNotFound. An expired row is
// returned until the sweeper deletes it. On PostgreSQL, concurrent lookups
// share one statement (batch.go).
func (l *Ledger) Lookup(ctx context.Context, r idempotency.Ref) (*idempotency.Record, error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return nil, fmt.Errorf("lookup %s: %w", ref(r), err)
	}
	shift, err := l.clock.shift(ctx)
	if err != nil {
		return nil, fmt.Errorf("lookup %s: %w", ref(r), l.fail("clock", err))
	}
	rec, err := l.find(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("lookup %s: %w", ref(r), err)
	}
	fromDB(rec, shift)
	return rec, nil
}

// find is lookup, in a batch with concurrent lookups on PostgreSQL.
func (l *Ledger) find(ctx context.Context, r idempotency.Ref) (*idempotency.Record, error) {
	if l.lookups == nil {
		return l.lookup(ctx, r)
	}
	j := &lookupJob{ctx: ctx, ref: r, done: make(chan lookupResult, 1)}
	if err := l.lookups.enqueue(ctx, j); err != nil {
		return nil, l.queueFailed("select", err)
	}
	res := wait(ctx, l, "select", nil, j.done, func(err error) lookupResult { return lookupResult{err: err} })
	return res.rec, res.err
}

// queueFailed classifies a failure to queue a batched call: the caller's
// ctx ended, or the ledger closed.
func (l *Ledger) queueFailed(what string, err error) error {
	if errors.Is(err, errBatcherClosed) {
		return l.check()
	}
	return l.fail(what+": queue", err)
}

// lookup returns the row for r, ErrNotFound, or an already classified error.
func (l *Ledger) lookup(ctx context.Context, r idempotency.Ref) (*idempotency.Record, error) {
	rows, err := l.r.WithContext(ctx).Raw(lookupSQL, r.Route, r.Key).Rows()
	if err != nil {
		return nil, l.fail("select", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, l.fail("select", err)
		}
		return nil, idempotency.ErrNotFound
	}
	rec, err := scanRecord(rows)
	if err != nil {
		return nil, l.fail("scan", err)
	}
	return rec, nil
}

// Claim makes a pending row for req.Owner with a lease, takes over a pending
// row whose lease expired before now, or reports what holds the key.
func (l *Ledger) Claim(ctx context.Context, req idempotency.ClaimRequest, now time.Time) (idempotency.Claim, error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return idempotency.Claim{}, fmt.Errorf("claim %s: %w", ref(req.Ref), err)
	}
	shift, err := l.clock.shift(ctx)
	if err != nil {
		return idempotency.Claim{}, fmt.Errorf("claim %s: %w", ref(req.Ref), l.fail("clock", err))
	}
	c, err := l.claim(ctx, req, toDB(now, shift))
	if err != nil {
		return idempotency.Claim{}, fmt.Errorf("claim %s: %w", ref(req.Ref), err)
	}
	return c, nil
}

// claim is Claim with now on the database's clock.
func (l *Ledger) claim(ctx context.Context, req idempotency.ClaimRequest, now time.Time) (idempotency.Claim, error) {
	lease, expires := dbTime(now.Add(req.Lease)), dbTime(now.Add(req.Retention))
	fp := nullBytes(req.Fingerprint)
	for range maxClaimAttempts {
		inserted, err := l.claimInsert(ctx, &req, now)
		if err != nil {
			return idempotency.Claim{}, err
		}
		if inserted {
			return idempotency.Claim{Status: idempotency.Acquired}, nil
		}
		rec, err := l.find(ctx, req.Ref)
		if errors.Is(err, idempotency.ErrNotFound) {
			continue // released or swept since the insert: try again
		}
		if err != nil {
			return idempotency.Claim{}, err
		}
		switch rec.State {
		case idempotency.StateDone, idempotency.StateQueued, idempotency.StateDead:
			return idempotency.Claim{Status: idempotency.Done, Fingerprint: rec.Fingerprint, Entry: idempotency.EntryOf(rec)}, nil
		case idempotency.StateHeld:
			return idempotency.Claim{Status: idempotency.Held, Fingerprint: rec.Fingerprint, Entry: idempotency.EntryOf(rec)}, nil
		}
		if !rec.LeaseUntil.Before(now) || !req.MayTakeOver(rec.Fingerprint) {
			return idempotency.Claim{Status: idempotency.InFlight, Owner: rec.Owner, Fingerprint: rec.Fingerprint}, nil
		}
		res := l.w.WithContext(ctx).Exec(takeoverSQL, req.Owner, lease, fp, req.Source, expires,
			req.Route, req.Key, rec.Owner, now)
		if res.Error != nil {
			return idempotency.Claim{}, l.fail("take over", res.Error)
		}
		if res.RowsAffected == 1 {
			return idempotency.Claim{Status: idempotency.TakenOver}, nil
		}
		// Another replica took it over, committed or released it: look again.
	}
	return idempotency.Claim{}, fmt.Errorf("row kept changing after %d attempts", maxClaimAttempts)
}

// claimInsert makes req's pending row unless the key has one, in a batch
// with concurrent claims on PostgreSQL; it reports whether it made it.
func (l *Ledger) claimInsert(ctx context.Context, req *idempotency.ClaimRequest, now time.Time) (bool, error) {
	if l.claims == nil {
		return l.insertClaim(ctx, req, now)
	}
	j := &claimJob{ctx: ctx, req: req, now: now, done: make(chan claimInsert, 1)}
	if err := l.claims.enqueue(ctx, j); err != nil {
		return false, l.queueFailed("insert", err)
	}
	res := l.waitClaim(ctx, j)
	return res.inserted, res.err
}

// insertClaim runs claimInsertSQL for one claim.
func (l *Ledger) insertClaim(ctx context.Context, req *idempotency.ClaimRequest, now time.Time) (bool, error) {
	lease, expires := dbTime(now.Add(req.Lease)), dbTime(now.Add(req.Retention))
	res := l.w.WithContext(ctx).Exec(claimInsertSQL, req.Route, req.Key, req.Owner, lease, nullBytes(req.Fingerprint), req.Source, now, expires)
	if res.Error != nil {
		return false, l.fail("insert", res.Error)
	}
	return res.RowsAffected == 1, nil
}

// Commit writes rec in one statement (idempotency.Ledger), setting
// completed_at to now. rec.ExpiresAt is required; a zero rec.CreatedAt
// means now.
func (l *Ledger) Commit(ctx context.Context, rec *idempotency.Record, owner string, now time.Time) error {
	ctx, cancel := l.op(ctx)
	defer cancel()
	row, err := l.commitRowOf(ctx, rec, owner, now)
	if err != nil {
		return err
	}
	if l.commits == nil {
		return l.execCommit(ctx, &row)
	}
	j := &commitJob{ctx: ctx, row: row, done: make(chan error, 1)}
	if err := l.commits.enqueue(ctx, j); err != nil {
		return l.queueFailed(fmt.Sprintf("commit %s", ref(rec.Ref)), err)
	}
	return wait(ctx, l, "commit", &rec.Ref, j.done, func(err error) error { return err })
}

// Recommit is Commit run as a statement of its own, never queued in a
// batch (idempotency.Recommitter). With claimed, it writes only over the
// pending row, whose absence means it was deleted (ErrNotOwner).
func (l *Ledger) Recommit(ctx context.Context, rec *idempotency.Record, owner string, now time.Time, claimed bool) error {
	ctx, cancel := l.op(ctx)
	defer cancel()
	row, err := l.commitRowOf(ctx, rec, owner, now)
	if err != nil {
		return err
	}
	if !claimed {
		return l.execCommit(ctx, &row)
	}
	args := append([]any{row.state, nullBytes(row.fp), row.status, row.headers, nullBytes(row.body),
		row.omitted, row.traceID, row.spanID, row.source, row.completed, row.expires}, row.req.args()...)
	args = append(args, row.ref.Route, row.ref.Key, row.owner, row.now)
	return l.writeCommit(ctx, &row, commitClaimedSQL, args)
}

// commitRowOf is the row Commit writes for rec.
func (l *Ledger) commitRowOf(ctx context.Context, rec *idempotency.Record, owner string, now time.Time) (commitRow, error) {
	if err := l.check(); err != nil {
		return commitRow{}, fmt.Errorf("commit %s: %w", ref(rec.Ref), err)
	}
	if rec.ExpiresAt.IsZero() {
		return commitRow{}, fmt.Errorf("commit %s: record has no ExpiresAt", ref(rec.Ref))
	}
	state := idempotency.StateDone
	if rec.State == idempotency.StateHeld {
		state = idempotency.StateHeld
	}
	headers, err := encodeHeaders(rec.Headers)
	if err != nil {
		return commitRow{}, fmt.Errorf("commit %s: %w", ref(rec.Ref), err)
	}
	shift, err := l.clock.shift(ctx)
	if err != nil {
		return commitRow{}, fmt.Errorf("commit %s: %w", ref(rec.Ref), l.fail("clock", err))
	}
	now = toDB(now, shift)
	created := now
	if !rec.CreatedAt.IsZero() {
		created = toDB(rec.CreatedAt, shift)
	}
	row := commitRow{ref: rec.Ref, state: string(state), fp: rec.Fingerprint, status: int64(rec.Status), headers: headers,
		body: rec.Body, omitted: rec.BodyOmitted, traceID: rec.TraceID, spanID: rec.SpanID, source: rec.Source,
		created: created, completed: now, expires: toDB(rec.ExpiresAt, shift), owner: owner, now: now}
	if rec.BodyOmitted {
		row.body = nil
	}
	if row.req, err = encodeRequest(rec.Request); err != nil {
		return commitRow{}, fmt.Errorf("commit %s: %w", ref(rec.Ref), err)
	}
	row.att = attemptArgsOf(rec.Attempt, shift)
	return row, nil
}

// execCommit runs one commit statement on its own.
func (l *Ledger) execCommit(ctx context.Context, row *commitRow) error {
	return l.writeCommit(ctx, row, commitSQL, row.args())
}

// writeCommit runs query, a commit statement for row, with its attempt in
// the same transaction when it has one; ErrNotOwner when query wrote no
// row.
func (l *Ledger) writeCommit(ctx context.Context, row *commitRow, query string, args []any) error {
	written := false
	var err error
	if row.att == nil {
		res := l.w.WithContext(ctx).Exec(query, args...)
		err, written = res.Error, res.RowsAffected > 0
	} else {
		err = l.inTx(ctx, func(tx *sql.Tx) error {
			var werr error
			written, werr = l.commitWithAttempt(ctx, tx, l.d.rebind(query), args, row)
			return werr
		})
	}
	if err != nil {
		return l.fail(fmt.Sprintf("commit %s", ref(row.ref)), err)
	}
	if !written {
		return fmt.Errorf("commit %s: %w", ref(row.ref), idempotency.ErrNotOwner)
	}
	return nil
}

// commitWithAttempt runs a commit statement in tx and, when it wrote the
// record, adds row's attempt.
func (l *Ledger) commitWithAttempt(ctx context.Context, tx *sql.Tx, query string, args []any, row *commitRow) (bool, error) {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 || row.att == nil {
		return n > 0, err
	}
	return true, l.addAttemptArgs(ctx, tx, row.ref, row.att)
}

// Release deletes the pending row owned by owner. ErrNotOwner when there is
// no such row: taken over, already settled (done or held), or gone.
func (l *Ledger) Release(ctx context.Context, r idempotency.Ref, owner string) error {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return fmt.Errorf("release %s: %w", ref(r), err)
	}
	res := l.w.WithContext(ctx).Exec(releaseSQL, r.Route, r.Key, owner)
	if res.Error != nil {
		return l.fail(fmt.Sprintf("release %s", ref(r)), res.Error)
	}
	if res.RowsAffected == 0 {
		return fmt.Errorf("release %s: %w", ref(r), idempotency.ErrNotOwner)
	}
	return nil
}

// scanRecord reads one row in selectColumns order.
func scanRecord(rows *sql.Rows) (*idempotency.Record, error) {
	var (
		rec              idempotency.Record
		state, headers   string
		owner            sql.NullString
		lease, completed sql.NullTime
		fp, body         []byte
		status           int64
		omitted          bool
		created, expires time.Time
		acked            sql.NullBool
	)
	err := rows.Scan(&rec.Route, &rec.Key, &state, &owner, &lease, &fp, &status, &headers, &body, &omitted,
		&rec.TraceID, &rec.SpanID, &rec.Source, &created, &completed, &expires, &acked)
	if err != nil {
		return nil, err
	}
	rec.Acked, rec.AckUnknown = acked.Bool, !acked.Valid
	rec.State = idempotency.State(state)
	rec.Owner = owner.String
	if lease.Valid {
		rec.LeaseUntil = lease.Time.UTC()
	}
	rec.Fingerprint = nonEmpty(fp)
	rec.Status = int(status)
	if rec.Headers, err = decodeHeaders(headers); err != nil {
		return nil, err
	}
	rec.Body = nonEmpty(body)
	rec.BodyOmitted = omitted
	rec.CreatedAt = created.UTC()
	if completed.Valid {
		rec.CompletedAt = completed.Time.UTC()
	}
	rec.ExpiresAt = expires.UTC()
	return &rec, nil
}

// encodeHeaders stores kept headers as a JSON object (keys sorted). A value
// that is not UTF-8 (obs-text) would become U+FFFD in JSON, so such a map
// is stored as binaryHeaders and a JSON object of base64 values.
func encodeHeaders(h map[string]string) (string, error) {
	if len(h) == 0 {
		return "{}", nil
	}
	var v any = h
	prefix := ""
	for name, val := range h {
		if !utf8.ValidString(name) || !utf8.ValidString(val) {
			b := make(map[string][]byte, len(h))
			for name, val := range h {
				b[name] = []byte(val)
			}
			// Names are HTTP tokens (ASCII); a name that is not is stored
			// as JSON would store it.
			v, prefix = b, binaryHeaders
			break
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode headers: %w", err)
	}
	return prefix + string(b), nil
}

// binaryHeaders marks headers stored with base64 values (encodeHeaders).
const binaryHeaders = "b64:"

// decodeHeaders returns nil for an empty object.
func decodeHeaders(s string) (map[string]string, error) {
	if s == "" || s == "{}" {
		return nil, nil
	}
	if rest, ok := strings.CutPrefix(s, binaryHeaders); ok {
		var b map[string][]byte
		if err := json.Unmarshal([]byte(rest), &b); err != nil {
			return nil, fmt.Errorf("decode headers: %w", err)
		}
		h := make(map[string]string, len(b))
		for name, val := range b {
			h[name] = string(val)
		}
		return h, nil
	}
	var h map[string]string
	if err := json.Unmarshal([]byte(s), &h); err != nil {
		return nil, fmt.Errorf("decode headers: %w", err)
	}
	return h, nil
}

// dbTime is how every time is bound: UTC (SQLite compares times as text),
// at PostgreSQL's microsecond precision, without a monotonic reading.
func dbTime(t time.Time) time.Time {
	return t.UTC().Truncate(time.Microsecond)
}

// nullBytes binds empty bytes as NULL (drivers differ on empty blobs).
func nullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// nonEmpty reads NULL and empty bytes alike as nil.
func nonEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}
