package sqlledger

import (
	"context"
	"database/sql"
	"fmt"
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
// call after clockStale of idleness or once the replica's clock stepped,
// and shifts the times it binds and reads. SQLite is one host's file:
// times are bound as given.

// clockSyncEvery is how often a ledger measures the database's clock again
// (one statement), and clockRetry how soon after a failed background
// measurement (the offset measured before stays meanwhile).
const (
	clockSyncEvery = 15 * time.Second
	clockStale     = time.Minute
	clockRetry     = time.Second
	clockSamples   = 3
)

// clockStep is how far the replica's wall clock may move apart from its
// monotonic clock after a measurement before it counts as stepped: slewing
// (NTP: at most 500 ppm) moves them apart by under 8 ms in clockSyncEvery.
const clockStep = 100 * time.Millisecond

// dbClock maps a replica's clock onto the database server's.
type dbClock struct {
	db      *sql.DB
	now     func() time.Time
	every   time.Duration // clockSyncEvery; shorter in tests
	stale   time.Duration // clockStale; shorter in tests
	timeout time.Duration // bounds a background measurement (OpTimeout)

	// reading is the last measurement; nil until one succeeded.
	reading atomic.Pointer[clockReading]
	step    func(from, to time.Time) time.Duration // wallStep but in tests
	// due is when the next measurement is due, in nanoseconds of the
	// monotonic clock since start.
	start time.Time
	due   atomic.Int64
	last  atomic.Int64 // when the last measurement succeeded, likewise

	nowMu   sync.Mutex
	nowRun  chan struct{} // closed when the measurement a call waits for ends; nil when none is under way (nowMu)
	running atomic.Bool   // a background measurement is running

	bgMu   sync.Mutex // guards closed and bg.Add
	closed bool
	bg     sync.WaitGroup
	ctx    context.Context // cancelled by close
	cancel context.CancelFunc
}

// clockReading is a measured offset, database − replica, in whole
// microseconds (times are stored at microsecond precision, so a shift
// keeps exact comparisons exact), with the replica's time it was measured
// against, monotonic reading included.
type clockReading struct {
	offset time.Duration
	at     time.Time
}

func newDBClock(db *sql.DB, now func() time.Time, timeout time.Duration) *dbClock {
	ctx, cancel := context.WithCancel(context.Background())
	return &dbClock{db: db, now: now, step: wallStep, every: clockSyncEvery, stale: clockStale, timeout: timeout,
		start: time.Now(), ctx: ctx, cancel: cancel}
}

// wallStep is how much further the wall clock moved than the monotonic
// clock from one reading of time.Now to another: zero but for a step, and
// for a time without a monotonic reading.
func wallStep(from, to time.Time) time.Duration {
	return to.Round(0).Sub(from.Round(0)) - to.Sub(from)
}

// shift returns the offset to add to a replica time to get the database's.
// The first call measures it, and so does a call that finds the replica's
// clock stepped since the last measurement; later ones start a background
// measurement when due. Until one succeeded, or when the one after a step
// failed, a call gets the error, never an offset known to be wrong.
// A nil clock (SQLite) shifts nothing.
func (c *dbClock) shift(ctx context.Context) (time.Duration, error) {
	if c == nil {
		return 0, nil
	}
	r := c.reading.Load()
	if r == nil || c.stepped(r) {
		var err error
		if r, err = c.measureNow(ctx); err != nil {
			return 0, err
		}
	} else if c.isDue() && c.running.CompareAndSwap(false, true) {
		if time.Since(c.start)-time.Duration(c.last.Load()) >= c.stale {
			// Idle for a while: measure before this call binds anything
			// (under its ctx); if that fails, the offset measured before
			// stays, as after a failed background measurement.
			if m, err := c.sync(ctx); err == nil {
				r = m
			}
			c.running.Store(false)
		} else {
			c.background()
		}
	}
	return r.offset, nil
}

func (c *dbClock) stepped(r *clockReading) bool {
	s := c.step(r.at, c.now())
	return s > clockStep || -s > clockStep
}

func (c *dbClock) isDue() bool {
	return time.Since(c.start) >= time.Duration(c.due.Load())
}

// measureNow measures the offset before a call binds anything, when there
// is none yet or the clock stepped since; concurrent callers share it,
// each waiting no longer than its ctx, and after a failure the next caller
// measures again.
func (c *dbClock) measureNow(ctx context.Context) (*clockReading, error) {
	for {
		c.nowMu.Lock()
		if r := c.reading.Load(); r != nil && !c.stepped(r) {
			c.nowMu.Unlock()
			return r, nil
		}
		if run := c.nowRun; run != nil {
			c.nowMu.Unlock()
			select {
			case <-run:
				continue // measured, or failed: look again
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		run := make(chan struct{})
		c.nowRun = run
		c.nowMu.Unlock()
		r, err := c.sync(ctx)
		c.nowMu.Lock()
		c.nowRun = nil
		c.nowMu.Unlock()
		close(run)
		return r, err
	}
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
		_, _ = c.sync(ctx)
	}()
}

// sync measures the offset, stores the reading and schedules the next
// measurement. It keeps the offset before (zero at first) when the new one
// differs by no more than its uncertainty (half the round trip, and two
// microseconds), so that an unchanged offset stays exact and lease
// comparisons on either side of a measurement agree.
func (c *dbClock) sync(ctx context.Context) (*clockReading, error) {
	r, rtt, err := c.measure(ctx)
	elapsed := time.Since(c.start)
	if err != nil {
		c.due.Store(int64(elapsed + clockRetry))
		return nil, err
	}
	var before time.Duration
	if old := c.reading.Load(); old != nil {
		before = old.offset
	}
	bound := rtt/2 + 2*time.Microsecond
	if d := r.offset - before; d <= bound && -d <= bound {
		r.offset = before
	}
	c.last.Store(int64(elapsed))
	c.due.Store(int64(elapsed + c.every)) // before the reading: no caller sees a due measurement
	c.reading.Store(r)
	return r, nil
}

// measure reads the database's clock clockSamples times and keeps the
// reading with the shortest round trip, against the replica's time at its
// midpoint.
func (c *dbClock) measure(ctx context.Context) (r *clockReading, rtt time.Duration, err error) {
	r, rtt = &clockReading{}, -1
	for range clockSamples {
		var db time.Time
		t0 := c.now()
		if err := c.db.QueryRowContext(ctx, "SELECT clock_timestamp()").Scan(&db); err != nil {
			return nil, 0, err
		}
		t1 := c.now()
		if d := t1.Sub(t0); rtt < 0 || d < rtt {
			rtt = d
			r.at = t0.Add(d / 2)
			r.offset = db.Sub(r.at).Round(time.Microsecond)
		}
	}
	return r, rtt, nil
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

// Offset is the database's clock less Options.Now: what the ledger adds
// to the times it binds (zero on SQLite). It is for times that the
// database compares and that the ledger does not bind, as River's
// scheduled_at, which River takes from the replica's own clock. Like any
// ledger call, it measures the offset first when the clock stepped.
func (l *Ledger) Offset(ctx context.Context) (time.Duration, error) {
	ctx, cancel := l.op(ctx)
	defer cancel()
	if err := l.check(); err != nil {
		return 0, fmt.Errorf("clock offset: %w", err)
	}
	shift, err := l.clock.shift(ctx)
	if err != nil {
		return 0, fmt.Errorf("clock offset: %w", l.fail("clock", err))
	}
	return shift, nil
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
