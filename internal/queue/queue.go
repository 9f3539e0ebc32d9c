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
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
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
	// Routes are served from the start: those storing requests.
	Routes []Route
	// Former are the routes storing no requests: served only once
	// adopted (Adopt), when deliveries of theirs wait.
	Former []Route
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
	driver riverdriver.Driver[*sql.Tx]
	// jobs inserts and updates jobs in the ledger's transactions; it never
	// runs any.
	jobs *river.Client[*sql.Tx]
	// jobTimeout is the runner's JobTimeout, which covers every route's
	// upstream.timeout, former ones included.
	jobTimeout time.Duration

	mu     sync.RWMutex      // guards the fields below; never held across a call to the database
	routes map[string]*Route // served
	former map[string]*Route // not served (yet)
	// cfg is the runner's, which Start makes: it works the jobs, and its
	// leader maintains River's tables.
	cfg     *river.Config
	runner  *river.Client[*sql.Tx]
	running bool

	kept keptAnswers
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
	q := &Queue{o: o, routes: make(map[string]*Route, len(o.Routes)), former: make(map[string]*Route, len(o.Former))}
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
		Logger:               riverLogger(o.Logger),
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
		r := &o.Routes[i]
		q.routes[r.Name] = r
		q.cfg.Queues[QueueName(r.Name)] = queueConfig(r)
		q.cover(r)
	}
	for i := range o.Former {
		if r := &o.Former[i]; q.routes[r.Name] == nil {
			q.former[r.Name] = r
			q.cover(r)
		}
	}
	q.jobTimeout = q.cfg.JobTimeout
	jobs := *q.cfg
	jobs.Queues, jobs.Workers = nil, nil
	if q.jobs, err = river.NewClient(driver, &jobs); err != nil {
		return nil, fmt.Errorf("queue: river client: %w", err)
	}
	return q, nil
}

// queueConfig is r's own River queue.
func queueConfig(r *Route) river.QueueConfig {
	poll := cmp.Or(r.PollInterval, DefaultPollInterval)
	return river.QueueConfig{MaxWorkers: r.Concurrency, FetchPollInterval: poll,
		// River fetches at most a queue's free slots per cooldown: its
		// default (100ms) caps a route at ten times its concurrency per
		// second, far below what the upstream can take.
		FetchCooldown: min(poll, fetchCooldown)}
}

// cover makes the runner's job timeout and rescue cover r's
// upstream.timeout: River reads them only when the runner is made.
func (q *Queue) cover(r *Route) {
	q.cfg.JobTimeout = max(q.cfg.JobTimeout, r.Timeout+q.o.RescueMargin/2)
	q.cfg.RescueStuckJobsAfter = max(q.cfg.RescueStuckJobsAfter, r.Timeout+q.o.RescueMargin)
}

// route is the served route of that name, or nil.
func (q *Queue) route(name string) *Route {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return q.routes[name]
}

// known is the route of that name, served or former, or nil.
func (q *Queue) known(name string) *Route {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return cmp.Or(q.routes[name], q.former[name])
}

// Former names the routes of Options.Former not adopted yet, sorted.
func (q *Queue) Former() []string {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return slices.Sorted(maps.Keys(q.former))
}

// Running reports whether jobs are worked: Start has started River, and
// Stop has not been called. Start does not while no route is served.
func (q *Queue) Running() bool {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return q.running
}

// FormerJobs counts the delivery jobs waiting or running of each route
// Former names, leaving out those with none: deliveries a route queued
// while it stored requests, or that a replica still running its former
// configuration queues, or an operator's redelivery of a done record.
func (q *Queue) FormerJobs(ctx context.Context) (map[string]int, error) {
	byQueue := map[string]string{}
	for _, name := range q.Former() {
		byQueue[QueueName(name)] = name
	}
	if len(byQueue) == 0 {
		return nil, nil
	}
	args := []any{Args{}.Kind()}
	marks := make([]string, 0, len(byQueue))
	for queue := range byQueue {
		args = append(args, queue)
		if q.o.Driver == DriverPostgres {
			marks = append(marks, fmt.Sprintf("$%d", len(args)))
		} else {
			marks = append(marks, "?")
		}
	}
	kind := "?"
	if q.o.Driver == DriverPostgres {
		kind = "$1"
	}
	db, err := q.o.Ledger.DB()
	if err != nil {
		return nil, fmt.Errorf("count the jobs of routes not served: %w", err)
	}
	rows, err := db.QueryContext(ctx, "SELECT queue, COUNT(*) FROM river_job WHERE kind = "+kind+" AND state IN "+pendingStates+
		" AND queue IN ("+strings.Join(marks, ", ")+") GROUP BY queue", args...)
	if err != nil {
		return nil, fmt.Errorf("count the jobs of routes not served: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var queue string
		var n int
		if err := rows.Scan(&queue, &n); err != nil {
			return nil, fmt.Errorf("count the jobs of routes not served: %w", err)
		}
		out[byQueue[queue]] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count the jobs of routes not served: %w", err)
	}
	return out, nil
}

// Adopt serves the routes of Options.Former named: their jobs are worked
// by the route's own settings, so that what was acknowledged still
// reaches the upstream. Before Start they join the runner's
// configuration; after, their River queues are added to the runner,
// running or not. A name not among the former routes is ignored.
func (q *Queue) Adopt(ctx context.Context, names ...string) error {
	for _, name := range names {
		if err := q.adopt(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

func (q *Queue) adopt(ctx context.Context, name string) error {
	q.mu.Lock()
	r := q.former[name]
	if r == nil {
		q.mu.Unlock()
		return nil
	}
	// Served before its River queue exists: the worker must know the
	// route of every job that queue fetches.
	delete(q.former, name)
	q.routes[name] = r
	runner := q.runner
	if runner == nil {
		q.cfg.Queues[QueueName(name)] = queueConfig(r)
	}
	q.mu.Unlock()
	if runner == nil {
		return nil
	}
	err := runner.Queues().Add(QueueName(name), queueConfig(r))
	if err == nil {
		return nil
	}
	// Added but not started (the database did not answer): removed, so
	// that a next Adopt adds it again.
	if rerr := runner.Queues().Remove(ctx, QueueName(name)); rerr != nil && !errors.As(rerr, new(*river.QueueNotFoundError)) {
		q.o.Logger.WarnContext(ctx, "remove a River queue not started", "route", name, "err", rerr)
	}
	q.mu.Lock()
	delete(q.routes, name)
	q.former[name] = r
	q.mu.Unlock()
	return fmt.Errorf("queue: adopt route %q: %w", name, err)
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
// are then worked until Stop, whatever becomes of ctx. It does nothing
// while no route is served. Call it again after an error, or once a
// route is adopted into an idle queue; not after a Stop.
func (q *Queue) Start(ctx context.Context) error {
	q.mu.RLock()
	idle, runner := len(q.routes) == 0, q.runner
	q.mu.RUnlock()
	if idle {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, q.o.StartTimeout)
	defer cancel()
	if runner == nil {
		var err error
		if runner, err = q.newRunner(ctx); err != nil {
			return err
		}
	}
	// River works the jobs under the context it starts with, and its
	// start-up queries (a ping first) have no deadline of their own: ctx
	// may end that context only until Start returns.
	run, abort := context.WithCancelCause(context.WithoutCancel(ctx))
	keep := context.AfterFunc(ctx, func() { abort(context.Cause(ctx)) })
	err := runner.Start(run)
	if keep() {
		if err != nil {
			return fmt.Errorf("queue: start: %w", err)
		}
		q.mu.Lock()
		q.running = true
		q.mu.Unlock()
		return nil
	}
	if err == nil {
		// Started all the same, on a context now ended: River stops
		// itself. A runner not stopped in time is left to finish alone,
		// as a restart of it would do nothing while it stops.
		stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if q.Stop(stop) != nil {
			q.mu.Lock()
			q.runner = nil
			q.mu.Unlock()
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("queue: start: the database did not answer within %s", q.o.StartTimeout)
	}
	return fmt.Errorf("queue: start: %w", context.Cause(ctx))
}

// newRunner makes the runner from the routes served now; those adopted
// later are added to it (Adopt).
func (q *Queue) newRunner(ctx context.Context) (*river.Client[*sql.Tx], error) {
	reindex, err := q.mayReindex(ctx)
	if err != nil {
		return nil, fmt.Errorf("queue: start: %w", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.runner != nil {
		return q.runner, nil
	}
	cfg := *q.cfg
	cfg.Queues = maps.Clone(q.cfg.Queues)
	if !reindex {
		// River's leader rebuilds river_job's indexes daily, which
		// takes the table's owner: a replica under the documented
		// grants would log an error per index every night.
		cfg.ReindexerIndexNames = []string{}
		q.o.Logger.InfoContext(ctx, "River's daily reindex of river_job is off on this replica: its database role neither owns the table nor has MAINTAIN on it")
	}
	runner, err := river.NewClient(q.driver, &cfg)
	if err != nil {
		return nil, fmt.Errorf("queue: river client: %w", err)
	}
	q.runner = runner
	return runner, nil
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
	q.mu.Lock()
	runner := q.runner
	q.running = false
	q.mu.Unlock()
	if runner == nil {
		return nil
	}
	err := runner.Stop(ctx)
	if err == nil || !errors.Is(err, ctx.Err()) {
		return err
	}
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return runner.StopAndCancel(cctx)
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

// recordJobsSQL selects, by driver, the args and scheduled_at of the
// delivery jobs of a route and key whose state is in the list that
// follows, each with the created_at of the key's record, for the caller to
// keep the record's own (Args.of): a job left by a deleted record of the
// key waits out its backoff, then ends itself (attempt). None without a
// record. River keeps a job's args as JSON. On PostgreSQL containment is
// what its GIN index on them answers (a condition on the queue would have
// the planner walk the route's whole queue instead). SQLite has no index
// on them: the route's queue and the states narrow the scan to the
// route's jobs not finished (River's fetching index, on state and queue),
// and "+" keeps its planner off the index on kind, which every job has.
var recordJobsSQL = map[string]string{
	DriverPostgres: `SELECT j.args::text, j.scheduled_at, r.created_at FROM hookstamp_records r JOIN river_job j ON j.kind = $1 ` +
		`AND j.args @> jsonb_build_object('route', $2::text, 'key', $3::text) WHERE r.route = $2 AND r."key" = $3 AND j.state IN `,
	DriverSQLite: `SELECT json(j.args), j.scheduled_at, r.created_at FROM hookstamp_records r JOIN river_job j ON +j.kind = ? ` +
		`AND json_extract(j.args, '$.route') = r.route AND json_extract(j.args, '$.key') = r."key" WHERE r.route = ? AND r."key" = ? AND j.queue = ? AND j.state IN `,
}

// waitingSQL selects, by driver, the route, state, created_at and job
// args of every delivery job that waits or runs (the states follow) for
// a queued or done record of its key, for QueueStats.
var waitingSQL = map[string]string{
	DriverPostgres: `SELECT r.route, r."key", r.state, r.created_at, j.args::text FROM river_job j JOIN hookstamp_records r ` +
		`ON r.route = j.args->>'route' AND r."key" = j.args->>'key' WHERE j.kind = $1 AND r.state IN ('queued', 'done') AND j.state IN `,
	DriverSQLite: `SELECT r.route, r."key", r.state, r.created_at, json(j.args) FROM river_job j JOIN hookstamp_records r ` +
		`ON r.route = json_extract(j.args, '$.route') AND r."key" = json_extract(j.args, '$.key') ` +
		`WHERE j.kind = ? AND r.state IN ('queued', 'done') AND j.state IN `,
}

var _ sqlledger.WaitingJobs = (*Queue)(nil)

// Waiting returns the delivery jobs that wait or run for a queued or
// done record, those left by a deleted record of the key aside
// (sqlledger.WaitingJobs).
func (q *Queue) Waiting(ctx context.Context, db *sql.DB) ([]sqlledger.WaitingJob, error) {
	rows, err := db.QueryContext(ctx, waitingSQL[q.o.Driver]+pendingStates, Args{}.Kind())
	if err != nil {
		return nil, fmt.Errorf("waiting delivery jobs: %w", err)
	}
	defer rows.Close()
	var out []sqlledger.WaitingJob
	for rows.Next() {
		var (
			w     sqlledger.WaitingJob
			state string
			raw   []byte
			job   Args
		)
		if err := rows.Scan(&w.Route, &w.Key, &state, &w.Created, &raw); err != nil {
			return nil, fmt.Errorf("waiting delivery jobs: %w", err)
		}
		if err := json.Unmarshal(raw, &job); err != nil {
			return nil, fmt.Errorf("waiting delivery jobs: job args: %w", err)
		}
		if job.of(w.Created) {
			w.State, w.Requeued = idempotency.State(state), job.Requeued
			out = append(out, w)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("waiting delivery jobs: %w", err)
	}
	return out, nil
}

// waitingStates are those of a job whose next run has not started;
// pendingStates add a running job's.
const (
	waitingStates = `('available', 'scheduled', 'retryable')`
	pendingStates = `('available', 'scheduled', 'retryable', 'running', 'pending')`
)

// querier is a pool or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// recordJobs returns the scheduled_at of each delivery job of r's record
// whose state is in states, as the database returns it.
func (q *Queue) recordJobs(ctx context.Context, db querier, r idempotency.Ref, states string) ([]string, error) {
	args := []any{Args{}.Kind(), r.Route, r.Key}
	if q.o.Driver == DriverSQLite {
		args = append(args, QueueName(r.Route))
	}
	rows, err := db.QueryContext(ctx, recordJobsSQL[q.o.Driver]+states, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var (
			raw       []byte
			scheduled sql.NullString
			created   time.Time
			job       Args
		)
		if err := rows.Scan(&raw, &scheduled, &created); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &job); err != nil {
			return nil, fmt.Errorf("job args: %w", err)
		}
		if job.of(created) {
			out = append(out, scheduled.String)
		}
	}
	return out, rows.Err()
}

// PendingTx reports whether a delivery job of r's record waits or runs,
// in tx.
func (q *Queue) PendingTx(ctx context.Context, tx *sql.Tx, r idempotency.Ref) (bool, error) {
	jobs, err := q.recordJobs(ctx, tx, r, pendingStates)
	if err != nil {
		return false, fmt.Errorf("pending delivery jobs of %q: %w", r.Key, err)
	}
	return len(jobs) > 0, nil
}

// NextAttempt returns when ref's delivery is next attempted, and false
// when no job of its record is waiting: none, or its attempt is running
// (the admin API's next_attempt_at).
func (q *Queue) NextAttempt(ctx context.Context, ref idempotency.Ref) (time.Time, bool, error) {
	db, err := q.o.Ledger.DB()
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next attempt of %q: %w", ref.Key, err)
	}
	jobs, err := q.recordJobs(ctx, db, ref, waitingStates)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next attempt of %q: %w", ref.Key, err)
	}
	var next time.Time
	for _, at := range jobs {
		t, err := parseDBTime(at)
		if err != nil {
			return time.Time{}, false, fmt.Errorf("next attempt of %q: %w", ref.Key, err)
		}
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next, !next.IsZero(), nil
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

// riverLogger is log for River, which says at INFO what hookstamp's own
// metrics and logs say better ("Producer job counts" every 5 s per
// queue, each maintenance run): its lines below WARN are logged at
// DEBUG, shown only when telemetry.log.level asks for them.
func riverLogger(log *slog.Logger) *slog.Logger {
	return slog.New(quietInfo{log.Handler()}).With("component", "river")
}

// quietInfo logs its handler's records below WARN at DEBUG.
type quietInfo struct{ slog.Handler }

func (h quietInfo) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, quieted(l))
}

func (h quietInfo) Handle(ctx context.Context, r slog.Record) error {
	r.Level = quieted(r.Level)
	return h.Handler.Handle(ctx, r)
}

func (h quietInfo) WithAttrs(attrs []slog.Attr) slog.Handler {
	return quietInfo{h.Handler.WithAttrs(attrs)}
}

func (h quietInfo) WithGroup(name string) slog.Handler {
	return quietInfo{h.Handler.WithGroup(name)}
}

func quieted(l slog.Level) slog.Level {
	if l < slog.LevelWarn {
		return min(l, slog.LevelDebug)
	}
	return l
}
