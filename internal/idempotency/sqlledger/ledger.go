// Package sqlledger is hookstamp's durable ledger: the hookstamp_records
// table in SQLite (embedded, pure Go) or PostgreSQL, through GORM.
//
// Every state change is one conditional SQL statement (INSERT ... ON
// CONFLICT), so exactly-once holds across replicas without explicit
// transactions or row locks held across round trips. Every call is bounded by
// Options.OpTimeout, and failures to reach the database are wrapped with
// idempotency.ErrUnavailable so that the state machine can apply
// store.on_unavailable.
package sqlledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// Drivers accepted in Options.Driver.
const (
	DriverSQLite   = "sqlite"
	DriverPostgres = "postgres"
)

// TableName is the ledger table (SPEC §5).
const TableName = "hookstamp_records"

// AttemptsTable holds the attempts of stored requests (SPEC §11).
const AttemptsTable = "hookstamp_attempts"

// Defaults applied by Open to zero Options fields.
const (
	DefaultMaxOpenConns = 16
	DefaultOpTimeout    = 5 * time.Second
	// DefaultSweepBatch is used by Sweep and SweepAll when batch <= 0.
	DefaultSweepBatch = 1000
	// DefaultHeldLimit is used by Held when limit <= 0.
	DefaultHeldLimit = 1000
	// DefaultRedriveBatch is Options.RedriveBatch's default.
	DefaultRedriveBatch = 1000
)

// Options configure Open.
type Options struct {
	// Driver is DriverSQLite or DriverPostgres.
	Driver string
	// DSN is a file path for SQLite ("data/hookstamp.db", parent directories
	// are created; "file:" URIs and ":memory:" work too) or a PostgreSQL URL
	// or key=value string.
	DSN string
	// MaxOpenConns caps the PostgreSQL pool, or SQLite's read-only pool
	// (SQLite writes go through a single connection). Default 16.
	MaxOpenConns int
	// OpTimeout bounds every ledger call, so that a hung database fails a
	// delivery with ErrUnavailable instead of hanging it. It is also SQLite's
	// busy_timeout. Default 5s.
	OpTimeout time.Duration
	// Logger receives slow statements (over 200ms, at warn level, without
	// argument values: they hold keys and bodies) and GORM's own messages.
	// Errors are returned, not logged. nil = silent.
	Logger *slog.Logger
	// Plugins are installed on every GORM handle the ledger opens (SQLite
	// has two: writer and readers), e.g. OpenTelemetry tracing. A plugin must
	// not record argument values: they carry keys, headers and bodies
	// (gorm.io/plugin/opentelemetry/tracing: WithoutQueryVariables).
	Plugins []gorm.Plugin
	// Now is the clock of the times callers pass and of Resolve's; on
	// PostgreSQL they are stored on the server's clock (clock.go). nil =
	// time.Now.
	Now func() time.Time
	// CommitBatch is the most commits group-committed in one statement
	// (PostgreSQL) or transaction (SQLite), and on PostgreSQL the most
	// ledger claims made in one statement (DefaultCommitBatch); 1 turns
	// group commit off.
	CommitBatch int
	// CommitWorkers is how many commit (and claim) batches may run at once
	// (DefaultCommitWorkers): with one, the next batch gathers while a
	// batch waits for its WAL flush.
	CommitWorkers int
	// LookupBatch is the most lookups read in one statement on PostgreSQL
	// (DefaultLookupBatch); 1 turns lookup batching off. SQLite reads are
	// in-process: they are never batched.
	LookupBatch int
	// LookupWorkers is how many lookup batches may run at once
	// (DefaultLookupWorkers).
	LookupWorkers int
	// RedriveBatch is the most dead rows a redrive of a whole route
	// queues again in one transaction (DefaultRedriveBatch).
	RedriveBatch int
}

// Group commit defaults: batches form only under concurrency, so these
// cost a lone delivery nothing.
const (
	DefaultCommitBatch   = 64
	DefaultCommitWorkers = 1
	DefaultLookupBatch   = 64
	DefaultLookupWorkers = 2
)

// Ledger is the GORM ledger. It is safe for concurrent use.
type Ledger struct {
	// w takes every write; r takes reads. They are the same handle on
	// PostgreSQL and on in-memory SQLite.
	w, r      *gorm.DB
	d         dialect
	opTimeout time.Duration
	now       func() time.Time
	log       *slog.Logger // nil: slog.Default
	closed    atomic.Bool
	// rest is SweepAll's pause between batches (tests observe it).
	rest func(ctx context.Context, d time.Duration)
	// redriveBatch is Options.RedriveBatch.
	redriveBatch int
	// Batchers (batch.go); nil when off.
	commits *batcher[*commitJob]
	claims  *batcher[*claimJob] // PostgreSQL only
	lookups *batcher[*lookupJob]
	intakes *batcher[*intakeJob]
	// jobs inserts the delivery jobs of Enqueue (UseJobs); nil: none.
	jobs Jobs
	// clock maps Options.Now onto the database's clock; nil on SQLite.
	clock *dbClock
	// lockFile serialises migrations of a SQLite file; "" on PostgreSQL
	// and in memory.
	lockFile string
	// commitStmt is commitSQL prepared on the SQLite writer at first use.
	commitStmtMu sync.Mutex
	commitStmt   *sql.Stmt
}

var (
	_ idempotency.Ledger      = (*Ledger)(nil)
	_ idempotency.Recommitter = (*Ledger)(nil)
)

// errClosed is returned (wrapped in ErrUnavailable) after Close.
var errClosed = errors.New("ledger closed")

// Open opens the ledger. It does not create the table (see Migrate). SQLite
// files are opened (and created) at once; PostgreSQL is not contacted until
// the first call, so a gateway can start while its database is down and
// report itself not ready (Ping). ctx is reserved: Open does no network I/O.
func Open(ctx context.Context, o Options) (*Ledger, error) {
	o.setDefaults()
	if o.DSN == "" {
		return nil, errors.New("sqlledger: empty DSN")
	}
	l := &Ledger{opTimeout: o.OpTimeout, redriveBatch: o.RedriveBatch, now: o.Now, log: o.Logger, rest: sleepCtx}
	if err := l.openPools(o); err != nil {
		return nil, err
	}
	if o.CommitBatch > 1 {
		l.commits = l.newCommitter(o.CommitWorkers, o.CommitBatch)
		l.intakes = l.newIntaker(o.CommitWorkers, o.CommitBatch)
		if o.Driver == DriverPostgres {
			l.claims = l.newClaimer(o.CommitWorkers, o.CommitBatch)
		}
	}
	if o.LookupBatch > 1 && o.Driver == DriverPostgres {
		l.lookups = l.newLookups(o.LookupWorkers, o.LookupBatch)
	}
	for _, p := range o.Plugins {
		for _, db := range l.handles() {
			if err := db.Use(p); err != nil {
				_ = l.Close()
				return nil, fmt.Errorf("sqlledger: plugin %s: %w", p.Name(), err)
			}
		}
	}
	return l, nil
}

// setDefaults gives the zero fields of o their defaults.
func (o *Options) setDefaults() {
	if o.MaxOpenConns <= 0 {
		o.MaxOpenConns = DefaultMaxOpenConns
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = DefaultOpTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.CommitBatch == 0 {
		o.CommitBatch = DefaultCommitBatch
	}
	if o.CommitWorkers <= 0 {
		o.CommitWorkers = DefaultCommitWorkers
	}
	if o.LookupBatch == 0 {
		o.LookupBatch = DefaultLookupBatch
	}
	if o.LookupWorkers <= 0 {
		o.LookupWorkers = DefaultLookupWorkers
	}
	if o.RedriveBatch <= 0 {
		o.RedriveBatch = DefaultRedriveBatch
	}
}

// openPools opens l's connection pools for o.Driver.
func (l *Ledger) openPools(o Options) error {
	cfg := func() *gorm.Config {
		return &gorm.Config{
			Logger:                 newGormLogger(o.Logger),
			SkipDefaultTransaction: true,
		}
	}
	var err error
	switch o.Driver {
	case DriverSQLite:
		l.d = sqliteDialect
		l.w, l.r, err = sqlitePools(o, cfg)
		if _, file, _, memory := splitSQLiteDSN(o.DSN); !memory {
			l.lockFile = file + ".migrate.lock"
		}
	case DriverPostgres:
		l.d = postgresDialect
		l.w, err = postgresPool(o, cfg)
		l.r = l.w
		if err == nil {
			var sdb *sql.DB
			if sdb, err = l.w.DB(); err == nil {
				l.clock = newDBClock(sdb, o.Now, o.OpTimeout)
			}
		}
	default:
		return fmt.Errorf("sqlledger: unknown driver %q (want %s or %s)", o.Driver, DriverSQLite, DriverPostgres)
	}
	if err != nil {
		return l.fail(fmt.Sprintf("open %s", o.Driver), err)
	}
	return nil
}

// handles returns the distinct GORM handles.
func (l *Ledger) handles() []*gorm.DB {
	if l.r == l.w {
		return []*gorm.DB{l.w}
	}
	return []*gorm.DB{l.w, l.r}
}

// Writer returns the pool every write goes through (on SQLite its one
// connection), for a caller that puts the ledger's *Tx statements in a
// transaction of its own.
func (l *Ledger) Writer() (*sql.DB, error) { return l.w.DB() }

// Driver returns the driver name the ledger was opened with.
func (l *Ledger) Driver() string { return l.d.name }

// Migrate creates or upgrades the hookstamp_records and hookstamp_attempts
// tables and their indexes, and hookstamp_meta with the ledger's
// deployment identity (Deployment).
// It is idempotent, and safe to run from several replicas at once (they are
// serialised by a lock). On PostgreSQL the indexes of tables that exist are
// built without holding off writes (buildIndexes). Reaching the database
// is bounded by OpTimeout; the migration itself only by ctx, since building
// an index on a large table can take longer than any delivery would wait.
func (l *Ledger) Migrate(ctx context.Context) error {
	if err := l.Ping(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if l.d.concurrentIndexes {
		if err := l.migrateLocked(ctx, addColumns); err != nil {
			return l.fail("migrate", err)
		}
		if err := l.buildIndexes(ctx); err != nil {
			return l.fail("migrate", err)
		}
	}
	err := l.migrateLocked(ctx, func(tx *gorm.DB) error {
		if err := relaxAcked(tx, l.d.name); err != nil {
			return err
		}
		if err := tx.AutoMigrate(models...); err != nil {
			return err
		}
		if err := writeDeployment(tx); err != nil {
			return err
		}
		for _, name := range retiredIndexes {
			if m := tx.Migrator(); m.HasIndex(&recordRow{}, name) {
				if err := m.DropIndex(&recordRow{}, name); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return l.fail("migrate", err)
	}
	return nil
}

// migrateLocked runs f in a transaction that other processes' migrations
// wait for.
func (l *Ledger) migrateLocked(ctx context.Context, f func(tx *gorm.DB) error) error {
	return l.w.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if l.d.migrateLockSQL != "" {
			waited := l.NoteWait("ledger")
			err := tx.Exec(l.d.migrateLockSQL).Error
			waited()
			if err != nil {
				return err
			}
		}
		return f(tx)
	})
}

// retiredIndexes are indexes of hookstamp_records an earlier build made
// and none reads now: each write would keep them up to date for nothing.
var retiredIndexes = []string{"idx_hookstamp_records_queue", "idx_hookstamp_records_expires_at"}

// Ping checks that the database answers within OpTimeout.
func (l *Ledger) Ping(ctx context.Context) error {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	for _, db := range l.handles() {
		sdb, err := db.DB()
		if err != nil {
			return l.fail("ping", err)
		}
		if err := sdb.PingContext(ctx); err != nil {
			return l.fail("ping", err)
		}
	}
	return nil
}

// Ready is Ping, and checks that the ledger table can be read (/readyz),
// with the columns every delivery's lookup reads (selectColumns): a database that answers
// without the schema, or with an earlier release's (store.auto_migrate
// false and `gateway migrate` not run), refuses deliveries. The statement
// goes through database/sql, not GORM, so that readiness probes make no
// spans.
func (l *Ledger) Ready(ctx context.Context) error {
	if err := l.Ping(ctx); err != nil {
		return err
	}
	ctx, cancel := l.op(ctx)
	defer cancel()
	for _, db := range l.handles() {
		sdb, err := db.DB()
		if err != nil {
			return l.fail("ready", err)
		}
		if _, err := sdb.ExecContext(ctx, selectColumns+"WHERE 1 = 0"); err != nil {
			if l.unavailable(err) {
				return l.fail("ready", err)
			}
			return fmt.Errorf("ready: %w", unreadableTable{err})
		}
	}
	return nil
}

// Close closes the connection pools. Calls after Close fail with
// ErrUnavailable.
func (l *Ledger) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	if l.commits != nil {
		l.commits.close()
	}
	if l.claims != nil {
		l.claims.close()
	}
	if l.lookups != nil {
		l.lookups.close()
	}
	if l.intakes != nil {
		l.intakes.close()
	}
	l.clock.close()
	var errs []error
	l.commitStmtMu.Lock()
	if l.commitStmt != nil {
		errs = append(errs, l.commitStmt.Close())
	}
	l.commitStmtMu.Unlock()
	for _, db := range l.handles() {
		if db == nil {
			continue
		}
		if sdb, err := db.DB(); err == nil {
			errs = append(errs, sdb.Close())
		}
	}
	return errors.Join(errs...)
}

// op bounds one ledger call by OpTimeout, unless ctx already ends sooner.
func (l *Ledger) op(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= l.opTimeout {
		return ctx, noCancel
	}
	return context.WithTimeout(ctx, l.opTimeout)
}

func noCancel() {}

// check fails fast after Close.
func (l *Ledger) check() error {
	if l.closed.Load() {
		return fmt.Errorf("%w: %w", idempotency.ErrUnavailable, errClosed)
	}
	return nil
}

// ref formats a record identity for error messages.
func ref(r idempotency.Ref) string {
	return fmt.Sprintf("%q %q", r.Route, r.Key)
}
