// Package queue delivers the stored deliveries of async routes (SPEC §10)
// with River, the job queue kept in the ledger's own database: jobs are
// inserted in the ledger's intake transactions (sqlledger.Jobs), and each
// job run is one attempt, recorded with the job's deletion when it ends
// the delivery, or with a note on the job when it is retried, in one
// transaction.
package queue

import (
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// Drivers accepted in Options.Driver (the ledger's).
const (
	DriverSQLite   = sqlledger.DriverSQLite
	DriverPostgres = sqlledger.DriverPostgres
)

// Defaults applied by New to zero fields of Options and Route.
const (
	// DefaultPollInterval is how often a route's queue looks for jobs that
	// became available when Route.PollInterval is zero (River:
	// FetchPollInterval).
	DefaultPollInterval = 250 * time.Millisecond
	// DefaultRescueMargin is added to a route's upstream.timeout before a
	// running job is presumed lost with its replica and delivered again.
	DefaultRescueMargin = 10 * time.Second
	// DefaultStartTimeout bounds Start. It makes a few queries per route
	// one after another, each of which River bounds at 10s when it bounds
	// it at all.
	DefaultStartTimeout = 10 * time.Second
)

// Options configure a Queue.
type Options struct {
	// Driver is the ledger's, DriverSQLite or DriverPostgres.
	Driver string
	// Ledger stores the deliveries; its writer pool carries the jobs.
	Ledger *sqlledger.Ledger
	// Forwarder sends each attempt.
	Forwarder Forwarder
	Routes    []Route
	// Replica names this process in hookstamp_attempts.
	Replica string
	// RescueMargin (DefaultRescueMargin).
	RescueMargin time.Duration
	// StartTimeout bounds Start (DefaultStartTimeout).
	StartTimeout time.Duration
	Hooks        Hooks
	// Tracer makes the attempt spans; TracerProvider River's own (no-op
	// by default).
	Tracer         trace.Tracer
	TracerProvider trace.TracerProvider
	Logger         *slog.Logger
	Now            func() time.Time
}

// Hooks receive what metrics count; nil fields are ignored.
type Hooks struct {
	// Attempt: one attempt ended: "delivered", "retried", "dead" or "held".
	Attempt func(route, result string)
	// Lag: an acknowledged delivery reached the upstream with a final
	// answer, lag after its intake.
	Lag func(route string, lag time.Duration)
	// Takeover: a job whose previous run ended unrecorded (its replica
	// died mid-attempt) is run again: the upstream may get a second copy.
	Takeover    func(route string)
	HeldChanged func(route string, delta int)
	// Upstream: an attempt's forward took d, answered or not.
	Upstream func(ctx context.Context, route string, d time.Duration)
	// Replaced: a redelivery's final answer replaced the one ref's done
	// record held, which repeats were replayed until then.
	Replaced func(ctx context.Context, ref idempotency.Ref)
}

// Queue delivers the jobs of async routes with River. It is safe for
// concurrent use.
type Queue struct {
	o      Options
	routes map[string]*Route
	driver riverdriver.Driver[*sql.Tx]
	// jobs inserts and updates jobs in the ledger's transactions; it never
	// runs any.
	jobs *river.Client[*sql.Tx]
	// cfg is the runner's, which Start makes: it works the jobs, and its
	// leader maintains River's tables.
	cfg    *river.Config
	runner *river.Client[*sql.Tx]
}

var _ sqlledger.Jobs = (*Queue)(nil)

// New builds the River client for o.Routes, one River queue per route so
// that a slow route's attempts never take another's workers; nothing runs
// until Start.
func New(o Options) (*Queue, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Tracer == nil {
		o.Tracer = tracenoop.NewTracerProvider().Tracer("hookstamp")
	}
	if o.TracerProvider == nil {
		o.TracerProvider = tracenoop.NewTracerProvider()
	}
	if o.RescueMargin <= 0 {
		o.RescueMargin = DefaultRescueMargin
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	q := &Queue{o: o, routes: make(map[string]*Route, len(o.Routes))}
	db, err := o.Ledger.DB()
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	driver, err := driverFor(o.Driver, db)
	if err != nil {
		return nil, err
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &worker{q: q}); err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	q.driver = driver
	q.cfg = &river.Config{
		ID:                   o.Replica,
		Queues:               make(map[string]river.QueueConfig, len(o.Routes)),
		Workers:              workers,
		FetchCooldown:        fetchCooldown,
		JobTimeout:           o.RescueMargin / 2,
		RescueStuckJobsAfter: o.RescueMargin,
		Logger:               o.Logger.With("component", "river"),
		Middleware: []rivertype.Middleware{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
			EnableTracePropagation: true,
			TracerProvider:         o.TracerProvider,
			MeterProvider:          noop.NewMeterProvider(), // hookstamp's own metrics (SPEC §11) count deliveries
		})},
		// Without PostgreSQL's LISTEN (database/sql has none), every
		// replica polls.
		PollOnly: true,
	}
	for i := range o.Routes {
		q.addRoute(&o.Routes[i])
	}
	jobs := *q.cfg
	jobs.Queues, jobs.Workers = nil, nil
	if q.jobs, err = river.NewClient(driver, &jobs); err != nil {
		return nil, fmt.Errorf("queue: river client: %w", err)
	}
	return q, nil
}

// addRoute gives r a River queue of its own in the runner's
// configuration, whose job timeout and rescue cover r's upstream.timeout.
func (q *Queue) addRoute(r *Route) {
	q.routes[r.Name] = r
	poll := cmp.Or(r.PollInterval, DefaultPollInterval)
	q.cfg.Queues[QueueName(r.Name)] = river.QueueConfig{MaxWorkers: r.Concurrency, FetchPollInterval: poll,
		// River fetches at most a queue's free slots per cooldown: its
		// default (100ms) caps a route at ten times its concurrency per
		// second, far below what the upstream can take.
		FetchCooldown: min(poll, fetchCooldown)}
	q.cfg.JobTimeout = max(q.cfg.JobTimeout, r.Timeout+q.o.RescueMargin/2)
	q.cfg.RescueStuckJobsAfter = max(q.cfg.RescueStuckJobsAfter, r.Timeout+q.o.RescueMargin)
}

// Adopt adds, before Start, routes that store no requests now but have
// deliveries queued from when they did (a route switched from async to
// sync): their jobs are worked by the route's own settings, so that what
// was acknowledged still reaches the upstream. A route served already is
// left as it is.
func (q *Queue) Adopt(routes ...Route) error {
	if q.runner != nil {
		return errors.New("queue: routes are adopted before Start")
	}
	for i := range routes {
		if q.routes[routes[i].Name] == nil {
			r := routes[i]
			q.addRoute(&r)
		}
	}
	return nil
}

// driverFor is River's driver for the ledger's database.
func driverFor(name string, db *sql.DB) (riverdriver.Driver[*sql.Tx], error) {
	switch name {
	case DriverSQLite:
		return riversqlite.New(db), nil
	case DriverPostgres:
		return riverdatabasesql.New(db), nil
	}
	return nil, fmt.Errorf("queue: unknown driver %q", name)
}

// Migrate creates or upgrades River's tables beside the ledger's. River
// runs each migration in a transaction of its own (one adds an enum value
// and uses it); replicas starting together on PostgreSQL take turns under
// a lock held by a transaction beside them (lockMigrations).
func Migrate(ctx context.Context, l *sqlledger.Ledger) error {
	db, err := l.DB()
	if err != nil {
		return fmt.Errorf("migrate queue: %w", err)
	}
	driver, err := driverFor(l.Driver(), db)
	if err != nil {
		return err
	}
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("migrate queue: %w", err)
	}
	if l.Driver() == DriverPostgres {
		unlock, err := lockMigrations(ctx, l, db)
		if err != nil {
			return fmt.Errorf("migrate queue: lock: %w", err)
		}
		defer unlock()
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate queue: %w", err)
	}
	return nil
}

// lockMigrations takes the queue's migration lock in a transaction that
// holds it until unlock ends it, while the migrations run on the pool's
// other connections. Not a session lock: behind PgBouncer in transaction
// pooling mode the server connection that took it goes back to the pool
// at once, an unlock sent later may run on another one, and the lock then
// stays until the pooler closes that connection. A pool of one connection
// is widened to two meanwhile, or the migrations would wait for the
// transaction that waits for them.
func lockMigrations(ctx context.Context, l *sqlledger.Ledger, db *sql.DB) (unlock func(), err error) {
	restore := func() {}
	if n := db.Stats().MaxOpenConnections; n == 1 {
		db.SetMaxOpenConns(2)
		restore = func() { db.SetMaxOpenConns(n) }
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		restore()
		return nil, err
	}
	waited := l.NoteWait("queue")
	_, err = tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.river_migration'))")
	waited()
	if err != nil {
		_ = tx.Rollback()
		restore()
		return nil, err
	}
	return func() { _ = tx.Rollback(); restore() }, nil
}

// fetchCooldown is the shortest pause between two fetches of one queue.
const fetchCooldown = 5 * time.Millisecond

// Start begins fetching and working jobs. It fails when the database does
// not answer within Options.StartTimeout, or when ctx ends first; the jobs
// are then worked until Stop, whatever becomes of ctx. Call it again after
// an error; not after a Stop.
func (q *Queue) Start(ctx context.Context) error {
	if len(q.routes) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, q.o.StartTimeout)
	defer cancel()
	if q.runner == nil {
		reindex, err := q.mayReindex(ctx)
		if err != nil {
			return fmt.Errorf("queue: start: %w", err)
		}
		cfg := *q.cfg
		if !reindex {
			// River's leader rebuilds river_job's indexes daily, which
			// takes the table's owner: a replica under the documented
			// grants would log an error per index every night.
			cfg.ReindexerIndexNames = []string{}
			q.o.Logger.InfoContext(ctx, "River's daily reindex of river_job is off on this replica: its database role neither owns the table nor has MAINTAIN on it")
		}
		runner, err := river.NewClient(q.driver, &cfg)
		if err != nil {
			return fmt.Errorf("queue: river client: %w", err)
		}
		q.runner = runner
	}
	// River works the jobs under the context it starts with, and its
	// start-up queries (a ping first) have no deadline of their own: ctx
	// may end that context only until Start returns.
	run, abort := context.WithCancelCause(context.WithoutCancel(ctx))
	keep := context.AfterFunc(ctx, func() { abort(context.Cause(ctx)) })
	err := q.runner.Start(run)
	if keep() {
		if err != nil {
			return fmt.Errorf("queue: start: %w", err)
		}
		return nil
	}
	if err == nil {
		// Started all the same, on a context now ended: River stops
		// itself. A runner not stopped in time is left to finish alone,
		// as a restart of it would do nothing while it stops.
		stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if q.Stop(stop) != nil {
			q.runner = nil
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("queue: start: the database did not answer within %s", q.o.StartTimeout)
	}
	return fmt.Errorf("queue: start: %w", context.Cause(ctx))
}

// mayReindexSQL reports whether the role may rebuild river_job's indexes
// (REINDEX): it owns the table, or, from PostgreSQL 17, has MAINTAIN on
// it. A CASE, so that the privilege PostgreSQL 15 does not know is never
// asked of it.
const mayReindexSQL = `SELECT CASE ` +
	`WHEN to_regclass('river_job') IS NULL THEN false ` +
	`WHEN pg_has_role((SELECT relowner FROM pg_class WHERE oid = to_regclass('river_job')), 'USAGE') THEN true ` +
	`WHEN current_setting('server_version_num')::int >= 170000 THEN has_table_privilege('river_job', 'MAINTAIN') ` +
	`ELSE false END`

// mayReindex reports whether River's reindex can run on the ledger's
// database: always on SQLite.
func (q *Queue) mayReindex(ctx context.Context) (bool, error) {
	if q.o.Driver != DriverPostgres {
		return true, nil
	}
	db, err := q.o.Ledger.DB()
	if err != nil {
		return false, err
	}
	var ok bool
	if err := db.QueryRowContext(ctx, mayReindexSQL).Scan(&ok); err != nil {
		return false, fmt.Errorf("privileges on river_job: %w", err)
	}
	return ok, nil
}

// Stop stops fetching jobs and waits for the attempts in flight until ctx
// is done; then it cuts them (each records its attempt and is retried
// later, by any replica).
func (q *Queue) Stop(ctx context.Context) error {
	if q.runner == nil {
		return nil
	}
	err := q.runner.Stop(ctx)
	if err == nil || !errors.Is(err, ctx.Err()) {
		return err
	}
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return q.runner.StopAndCancel(cctx)
}

// InsertTx queues a delivery job for each record in tx (sqlledger.Jobs).
func (q *Queue) InsertTx(ctx context.Context, tx *sql.Tx, ds []sqlledger.Delivery) error {
	params := make([]river.InsertManyParams, len(ds))
	for i, r := range ds {
		params[i] = river.InsertManyParams{Args: Args{Route: r.Route, Key: r.Key, Created: r.Created, Requeued: r.Requeued},
			InsertOpts: &river.InsertOpts{Queue: QueueName(r.Route), MaxAttempts: riverMaxAttempts}}
	}
	// The fast insert returns no rows to decode: nothing here reads them,
	// and delivery jobs are never unique jobs (the ledger's key is).
	if _, err := q.jobs.InsertManyFastTx(ctx, tx, params); err != nil {
		return fmt.Errorf("insert delivery jobs: %w", err)
	}
	return nil
}

// riverMaxAttempts bounds River's own retries of a run that failed to
// record its outcome (the ledger unreachable); the route's max_attempts
// counts the upstream attempts, which are snoozes to River.
const riverMaxAttempts = 1000

// queueNameOK is what River accepts as a queue name.
var queueNameOK = regexp.MustCompile(`^[a-z0-9]+(?:[_-][a-z0-9]+)*$`)

// queueNameMax is the longest queue name River accepts.
const queueNameMax = 64

// QueueName is route's River queue: "route_" and its name when River
// accepts that, a digest of the name otherwise. A name River refuses for
// its characters (route names may hold "__" or lead with "-") keeps the
// "route_" digest it always had, so that its queued jobs are still run
// after an upgrade. A name only too long gets "route-": no route's queue
// name can be that, whereas a route may be named like a digest.
func QueueName(route string) string {
	switch {
	case !queueNameOK.MatchString(route):
		return "route_" + nameDigest(route, 8)
	case len("route_")+len(route) > queueNameMax:
		return "route-" + nameDigest(route, 16)
	}
	return "route_" + route
}

// nameDigest is the first n bytes of route's SHA-256, in hex.
func nameDigest(route string, n int) string {
	sum := sha256.Sum256([]byte(route))
	return hex.EncodeToString(sum[:n])
}

// recordJobsSQL selects a record's delivery jobs whose state is in the
// list that follows, by driver (River keeps a job's args as JSON; on
// PostgreSQL containment is what its GIN index on them answers).
var recordJobsSQL = map[string]string{
	DriverPostgres: `FROM river_job WHERE kind = $1 AND args @> jsonb_build_object('route', $2::text, 'key', $3::text) AND state IN `,
	DriverSQLite:   `FROM river_job WHERE kind = ? AND json_extract(args, '$.route') = ? AND json_extract(args, '$.key') = ? AND state IN `,
}

// waitingStates are those of a job whose next run has not started;
// pendingStates add a running job's.
const (
	waitingStates = `('available', 'scheduled', 'retryable')`
	pendingStates = `('available', 'scheduled', 'retryable', 'running', 'pending')`
)

// PendingTx reports whether a delivery job of r waits or runs, in tx.
func (q *Queue) PendingTx(ctx context.Context, tx *sql.Tx, r idempotency.Ref) (bool, error) {
	var pending bool
	if err := tx.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 "+recordJobsSQL[q.o.Driver]+pendingStates+")", Args{}.Kind(), r.Route, r.Key).Scan(&pending); err != nil {
		return false, fmt.Errorf("pending delivery jobs of %q: %w", r.Key, err)
	}
	return pending, nil
}

// NextAttempt returns when ref's delivery is next attempted, and false
// when no job of it is waiting: none, or its attempt is running (the admin
// API's next_attempt_at).
func (q *Queue) NextAttempt(ctx context.Context, ref idempotency.Ref) (time.Time, bool, error) {
	db, err := q.o.Ledger.DB()
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next attempt of %q: %w", ref.Key, err)
	}
	var at sql.NullString
	err = db.QueryRowContext(ctx, "SELECT MIN(scheduled_at) "+recordJobsSQL[q.o.Driver]+waitingStates, Args{}.Kind(), ref.Route, ref.Key).Scan(&at)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next attempt of %q: %w", ref.Key, err)
	}
	if !at.Valid {
		return time.Time{}, false, nil
	}
	t, err := parseDBTime(at.String)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next attempt of %q: %w", ref.Key, err)
	}
	return t, true, nil
}

// parseDBTime reads a timestamp as PostgreSQL or SQLite return it.
func parseDBTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05.999999999Z07:00",
		"2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("unreadable time %q", s)
}
