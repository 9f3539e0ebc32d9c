package sqlledger

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// Leases and expiry are compared across replicas, and on their own clocks
// a replica running ahead would take over deliveries still being forwarded
// (a second copy) or sweep records early. So on PostgreSQL the ledger keeps
// every time on the server's clock: it measures the offset between
// Options.Now and clock_timestamp() (best of three round trips) at its
// first call, again in the background every clockSyncEvery, and before a
// call after clockStale of idleness, and shifts the times it binds and
// reads. SQLite is one host's file: times are bound as given.

// clockSyncEvery is how often a ledger measures the database's clock again
// (one statement), and clockRetry how soon after a failed background
// measurement (the offset measured before stays meanwhile).
const (
	clockSyncEvery = 15 * time.Second
	clockStale     = time.Minute
	clockRetry     = time.Second
	clockSamples   = 3
)

// dbClock maps a replica's clock onto the database server's.
type dbClock struct {
	db      *sql.DB
	now     func() time.Time
	every   time.Duration // clockSyncEvery; shorter in tests
	stale   time.Duration // clockStale; shorter in tests
	timeout time.Duration // bounds a background measurement (OpTimeout)

	// offset is database − replica, in whole microseconds (times are stored
	// at microsecond precision, so a shift keeps exact comparisons exact).
	offset atomic.Int64
	synced atomic.Bool
	// due is when the next measurement is due, in nanoseconds of the
	// monotonic clock since start.
	start time.Time
	due   atomic.Int64
	last  atomic.Int64 // when the last measurement succeeded, likewise

	firstMu  sync.Mutex
	firstRun chan struct{} // closed when the first measurement under way ends; nil when none is (firstMu)
	running  atomic.Bool   // a background measurement is running

	bgMu   sync.Mutex // guards closed and bg.Add
	closed bool
	bg     sync.WaitGroup
	ctx    context.Context // cancelled by close
	cancel context.CancelFunc
}

func newDBClock(db *sql.DB, now func() time.Time, timeout time.Duration) *dbClock {
	ctx, cancel := context.WithCancel(context.Background())
	return &dbClock{db: db, now: now, every: clockSyncEvery, stale: clockStale, timeout: timeout, start: time.Now(), ctx: ctx, cancel: cancel}
}

// shift returns the offset to add to a replica time to get the database's.
// The first call measures it; later ones start a background measurement
// when due. Until one succeeded, a call gets the error, never a zero
// offset. A nil clock (SQLite) shifts nothing.
func (c *dbClock) shift(ctx context.Context) (time.Duration, error) {
	if c == nil {
		return 0, nil
	}
	if !c.synced.Load() {
		if err := c.first(ctx); err != nil {
			return 0, err
		}
	} else if c.isDue() && c.running.CompareAndSwap(false, true) {
		if time.Since(c.start)-time.Duration(c.last.Load()) >= c.stale {
			// Idle for a while: measure before this call binds anything
			// (under its ctx); if that fails, the offset measured before
			// stays, as after a failed background measurement.
			_ = c.sync(ctx)
			c.running.Store(false)
		} else {
			c.background()
		}
	}
	return time.Duration(c.offset.Load()), nil
}

func (c *dbClock) isDue() bool {
	return time.Since(c.start) >= time.Duration(c.due.Load())
}

// first measures the offset for the first time; concurrent callers share
// it, each waiting no longer than its ctx, and after a failure the next
// caller measures again.
func (c *dbClock) first(ctx context.Context) error {
	for !c.synced.Load() {
		c.firstMu.Lock()
		if c.synced.Load() {
			c.firstMu.Unlock()
			return nil
		}
		if run := c.firstRun; run != nil {
			c.firstMu.Unlock()
			select {
			case <-run:
				continue // measured, or failed: look again
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		run := make(chan struct{})
		c.firstRun = run
		c.firstMu.Unlock()
		err := c.sync(ctx)
		c.firstMu.Lock()
		c.firstRun = nil
		c.firstMu.Unlock()
		close(run)
		return err
	}
	return nil
}

// background measures the offset again in a goroutine that close waits for.
func (c *dbClock) background() {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.closed {
		c.running.Store(false)
		return
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		defer c.running.Store(false)
		ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
		defer cancel()
		_ = c.sync(ctx)
	}()
}

// sync measures the offset and schedules the next measurement. It replaces
// the offset only when it differs by more than its uncertainty (half the
// round trip, and two microseconds), so that an unchanged offset stays
// exact and lease comparisons on either side of a measurement agree.
func (c *dbClock) sync(ctx context.Context) error {
	off, rtt, err := c.measure(ctx)
	elapsed := time.Since(c.start)
	if err != nil {
		c.due.Store(int64(elapsed + clockRetry))
		return err
	}
	bound := rtt/2 + 2*time.Microsecond
	if d := off - time.Duration(c.offset.Load()); d > bound || -d > bound {
		c.offset.Store(int64(off))
	}
	c.last.Store(int64(elapsed))
	c.due.Store(int64(elapsed + c.every)) // before synced: no caller sees a due measurement
	c.synced.Store(true)
	return nil
}

// measure reads the database's clock clockSamples times and keeps the
// reading with the shortest round trip.
func (c *dbClock) measure(ctx context.Context) (off, rtt time.Duration, err error) {
	rtt = -1
	for range clockSamples {
		var db time.Time
		t0 := c.now()
		if err := c.db.QueryRowContext(ctx, "SELECT clock_timestamp()").Scan(&db); err != nil {
			return 0, 0, err
		}
		t1 := c.now()
		if r := t1.Sub(t0); rtt < 0 || r < rtt {
			rtt = r
			off = db.Sub(t0.Add(r / 2)).Round(time.Microsecond)
		}
	}
	return off, rtt, nil
}

// close stops a background measurement and waits for it.
func (c *dbClock) close() {
	if c == nil {
		return
	}
	c.bgMu.Lock()
	c.closed = true
	c.bgMu.Unlock()
	c.cancel()
	c.bg.Wait()
}

// Times on the replica's clock in, and out.

// toDB maps t onto the database's clock, as bound (dbTime).
func toDB(t time.Time, shift time.Duration) time.Time {
	return dbTime(t).Add(shift)
}

// fromDB maps the times of a record read from the database back onto the
// replica's clock.
func fromDB(rec *idempotency.Record, shift time.Duration) {
	if shift == 0 {
		return
	}
	for _, t := range []*time.Time{&rec.LeaseUntil, &rec.CreatedAt, &rec.CompletedAt, &rec.ExpiresAt} {
		if !t.IsZero() {
			*t = t.Add(-shift)
		}
	}
}
