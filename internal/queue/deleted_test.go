package queue_test

import (
	"context"
	"database/sql"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/forward"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/queue"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// heldUpstream tells the test of each attempt (its Hookstamp-Attempt) and
// answers it with the status the test sends.
type heldUpstream struct {
	arrived chan int
	answers chan int
	mu      sync.Mutex
	n       int
}

func newHeldUpstream() *heldUpstream {
	return &heldUpstream{arrived: make(chan int), answers: make(chan int)}
}

func (u *heldUpstream) Do(ctx context.Context, r *forward.Request) (*forward.Response, error) {
	u.mu.Lock()
	u.n++
	u.mu.Unlock()
	n, _ := strconv.Atoi(r.Header.Get(queue.HeaderAttempt))
	select {
	case u.arrived <- n:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case status := <-u.answers:
		// A retry waits an hour: a job that snoozes does not run again
		// within the test.
		return &forward.Response{Status: status, Header: http.Header{"Retry-After": {"3600"}}}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (u *heldUpstream) requests() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.n
}

// attempt waits for the next attempt to reach the upstream and returns
// its number.
func (u *heldUpstream) attempt(tb testing.TB) int {
	tb.Helper()
	select {
	case n := <-u.arrived:
		return n
	case <-time.After(20 * time.Second):
		tb.Fatal("timed out waiting for an attempt")
		return 0
	}
}

// startQueue runs the async route "hooks" on a fresh ledger of driver,
// delivering to up.
func startQueue(t *testing.T, driver string, up queue.Forwarder) *sqlledger.Ledger {
	t.Helper()
	return startQueueWith(t, driver, up, queue.Hooks{})
}

// startQueueWith is startQueue with hooks.
func startQueueWith(t *testing.T, driver string, up queue.Forwarder, hooks queue.Hooks) *sqlledger.Ledger {
	t.Helper()
	l := migratedLedger(t, driver, "")
	q := newQueue(t, queue.Options{Driver: driver, Ledger: l, Forwarder: up, Replica: "replica-a",
		Logger: slog.New(slog.DiscardHandler), Hooks: hooks,
		Routes: []queue.Route{slowRetryRoute()},
	})
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return l
}

// newQueue is queue.New(o), inserting o.Ledger's jobs and stopped when
// the test ends.
func newQueue(t *testing.T, o queue.Options) *queue.Queue {
	t.Helper()
	q, err := queue.New(o)
	if err != nil {
		t.Fatal(err)
	}
	o.Ledger.UseJobs(q)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = q.Stop(ctx)
	})
	return q
}

func enqueue(t *testing.T, l *sqlledger.Ledger, r idempotency.Ref) {
	t.Helper()
	now := time.Now()
	rec := &idempotency.Record{Ref: r, State: idempotency.StateQueued, ExpiresAt: now.Add(time.Hour),
		Request: &idempotency.Request{Method: http.MethodPost, Path: "/hooks", Headers: http.Header{}, Body: []byte(`{"id":"` + r.Key + `"}`)}}
	if _, err := l.Enqueue(context.Background(), rec, "", now); err != nil {
		t.Fatal(err)
	}
}

// migratedLedger opens a ledger of driver on dsn ("": a fresh one) with
// the queue's tables.
func migratedLedger(t *testing.T, driver, dsn string) *sqlledger.Ledger {
	t.Helper()
	ctx := context.Background()
	switch {
	case dsn != "":
	case driver == queue.DriverPostgres:
		dsn = testenv.Postgres(t)
	default:
		dsn = t.TempDir() + "/ledger.db"
	}
	l, err := sqlledger.Open(ctx, sqlledger.Options{Driver: driver, DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if err := l.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := queue.Migrate(ctx, l); err != nil {
		t.Fatal(err)
	}
	return l
}

// jobsLeft counts the ledger's jobs that may still run, and those that
// ran more than once.
func jobsLeft(t *testing.T, l *sqlledger.Ledger) (waiting, rerun int) {
	t.Helper()
	db, err := l.DB()
	if err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT COUNT(*) FROM river_job WHERE state NOT IN ('completed', 'cancelled', 'discarded')`).Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(`SELECT COUNT(*) FROM river_job WHERE attempt > 1`).Scan(&rerun); err != nil {
		t.Fatal(err)
	}
	return waiting, rerun
}

// waitBackoff waits until the one job on db is waiting out a backoff.
func waitBackoff(t *testing.T, db *sql.DB) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "the job to wait out its backoff", func() bool {
		var n int
		err := db.QueryRow(`SELECT COUNT(*) FROM river_job WHERE state = 'scheduled'`).Scan(&n)
		return err == nil && n == 1
	})
}

// makeDue makes the one job waiting out a backoff on db due now.
func makeDue(t *testing.T, db *sql.DB, driver string) {
	t.Helper()
	due := `UPDATE river_job SET state = 'available', scheduled_at = now() WHERE state = 'scheduled'`
	if driver == queue.DriverSQLite {
		due = `UPDATE river_job SET state = 'available', scheduled_at = datetime('now', 'subsec') WHERE state = 'scheduled'`
	}
	if res, err := db.Exec(due); err != nil {
		t.Fatal(err)
	} else if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("%d jobs made due, want the one waiting out its backoff", n)
	}
}

// wantOneSendEach checks that the upstream got two requests, one per
// delivery of r, and that r's record holds only the new delivery's
// attempt: attempt 1, answered 200.
func wantOneSendEach(t *testing.T, up *heldUpstream, l *sqlledger.Ledger, r idempotency.Ref) {
	t.Helper()
	if n := up.requests(); n != 2 {
		t.Fatalf("upstream got %d requests, want 2: one per delivery", n)
	}
	atts, err := l.Attempts(context.Background(), r)
	if err != nil || len(atts) != 1 || atts[0].Attempt != 1 || atts[0].Status != http.StatusOK {
		t.Fatalf("the new delivery's attempts: %+v, %v; want attempt 1, 200", atts, err)
	}
}

// storeAgain stores r, deleted, once more and sees it delivered: its
// first attempt numbered 1, answered 200.
func storeAgain(t *testing.T, up *heldUpstream, l *sqlledger.Ledger, r idempotency.Ref) {
	t.Helper()
	enqueue(t, l, r)
	if n := up.attempt(t); n != 1 {
		t.Fatalf("the new delivery's attempt is numbered %d, want 1", n)
	}
	up.answers <- http.StatusOK
	testenv.Eventually(t, 10*time.Second, "the new delivery to be done", func() bool {
		rec, err := l.Lookup(context.Background(), r)
		return err == nil && rec.State == idempotency.StateDone
	})
}

// deletedDuringAttempt starts a queue on driver, stores a delivery and
// deletes it while the upstream holds its first attempt.
func deletedDuringAttempt(t *testing.T, driver string) (*heldUpstream, *sqlledger.Ledger, idempotency.Ref) {
	t.Helper()
	up := newHeldUpstream()
	l := startQueue(t, driver, up)
	r := idempotency.Ref{Route: "hooks", Key: "evt_deleted"}
	enqueue(t, l, r)
	if n := up.attempt(t); n != 1 {
		t.Fatalf("first delivery's attempt is numbered %d, want 1", n)
	}
	if err := l.Delete(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return up, l, r
}

// An operator deletes an async delivery (admin API) while its attempt is
// out. Whatever the upstream answers, the attempt is not recorded (it
// would belong to no record, and no sweep would ever delete it), the job
// ends with that run instead of running again, and a new delivery of the
// key starts its timeline at attempt 1.
func TestDeliveryDeletedDuringItsAttemptEndsThere(t *testing.T) {
	for _, driver := range []string{queue.DriverSQLite, queue.DriverPostgres} {
		for _, answer := range []int{http.StatusServiceUnavailable, http.StatusOK} {
			t.Run(driver+"/"+strconv.Itoa(answer), func(t *testing.T) {
				up, l, r := deletedDuringAttempt(t, driver)
				ctx := context.Background()
				up.answers <- answer
				testenv.Eventually(t, 10*time.Second, "the deleted delivery's job to end", func() bool {
					waiting, _ := jobsLeft(t, l)
					return waiting == 0
				})
				if _, rerun := jobsLeft(t, l); rerun != 0 {
					t.Fatal("the deleted delivery's job ran again")
				}
				if atts, err := l.Attempts(ctx, r); err != nil || len(atts) != 0 {
					t.Fatalf("attempts of the deleted delivery: %+v, %v; want none", atts, err)
				}

				storeAgain(t, up, l, r)
				wantOneSendEach(t, up, l, r)
			})
		}
	}
}

// An operator deletes an async delivery while its attempt is out, and the
// provider's retry stores the key again, with a job of its own, before
// the upstream answers. The old job's answer belongs to the deleted
// record: it is not recorded on the new one, and the old job ends, so the
// new delivery is sent once, as attempt 1 (the old job had snoozed and
// sent it again).
func TestDeliveryStoredAgainDuringItsAttemptIsItsOwn(t *testing.T) {
	for _, driver := range []string{queue.DriverSQLite, queue.DriverPostgres} {
		for _, answer := range []int{http.StatusServiceUnavailable, http.StatusOK} {
			t.Run(driver+"/"+strconv.Itoa(answer), func(t *testing.T) {
				up, l, r := deletedDuringAttempt(t, driver)
				ctx := context.Background()
				enqueue(t, l, r)
				up.answers <- answer // the old attempt's; the route runs one at a time

				if n := up.attempt(t); n != 1 {
					t.Fatalf("the new delivery's attempt is numbered %d, want 1", n)
				}
				if atts, err := l.Attempts(ctx, r); err != nil || len(atts) != 0 {
					t.Fatalf("attempts of the new delivery before its first answer: %+v, %v; want none", atts, err)
				}
				up.answers <- http.StatusOK
				testenv.Eventually(t, 10*time.Second, "every job to end", func() bool {
					waiting, _ := jobsLeft(t, l)
					return waiting == 0
				})
				rec, err := l.Lookup(ctx, r)
				if err != nil || rec.State != idempotency.StateDone || rec.Response.Status != http.StatusOK {
					t.Fatalf("the new delivery: %+v, %v; want done with its own 200", rec, err)
				}
				wantOneSendEach(t, up, l, r)
			})
		}
	}
}

// A delivery waits out its backoff after a 503, is deleted meanwhile, and
// the provider's retry stores the key again and is delivered. When the old
// job's turn comes it finds a record of its key, done, but not its own: it
// ends without sending the new delivery's request a second time.
func TestOldJobOfADeletedDeliveryLeavesItsSuccessorAlone(t *testing.T) {
	for _, driver := range []string{queue.DriverSQLite, queue.DriverPostgres} {
		t.Run(driver, func(t *testing.T) {
			up := newHeldUpstream()
			l := startQueue(t, driver, up)
			ctx := context.Background()
			r := idempotency.Ref{Route: "hooks", Key: "evt_successor"}
			enqueue(t, l, r)
			up.attempt(t)
			up.answers <- http.StatusServiceUnavailable // retried in an hour
			db, err := l.DB()
			if err != nil {
				t.Fatal(err)
			}
			waitBackoff(t, db)
			if err := l.Delete(ctx, r); err != nil {
				t.Fatal(err)
			}
			storeAgain(t, up, l, r)

			makeDue(t, db, driver)
			testenv.Eventually(t, 10*time.Second, "the old job to end", func() bool {
				waiting, _ := jobsLeft(t, l)
				return waiting == 0
			})
			wantOneSendEach(t, up, l, r)
		})
	}
}

// A redelivery of a done record waits out a backoff after a 503. Its
// record is not queued, so the sweeper may take it at its expiry: it is
// kept past the next attempt, which comes and records its answer.
func TestRedeliveryOutlivesItsRecordsExpiry(t *testing.T) {
	for _, driver := range []string{queue.DriverSQLite, queue.DriverPostgres} {
		t.Run(driver, func(t *testing.T) {
			up := newHeldUpstream()
			l := startQueue(t, driver, up)
			ctx := context.Background()
			r := idempotency.Ref{Route: "hooks", Key: "evt_redelivered"}
			storeAgain(t, up, l, r) // stored and delivered: done
			if queued, err := l.Requeue(ctx, r, false, time.Now().Add(time.Hour)); err != nil || !queued {
				t.Fatalf("redeliver: %v, %v", queued, err)
			}
			up.attempt(t)
			up.answers <- http.StatusServiceUnavailable // Retry-After: an hour
			db, err := l.DB()
			if err != nil {
				t.Fatal(err)
			}
			waitBackoff(t, db)
			// The sweeper runs when the next attempt is due, past the
			// record's retention (an hour from its store).
			if n, err := l.Sweep(ctx, time.Now().Add(time.Hour+time.Minute), 100); err != nil || n != 0 {
				t.Fatalf("the sweep took %d records (%v), want none: the redelivery's record is kept", n, err)
			}
			makeDue(t, db, driver)
			up.attempt(t)
			up.answers <- http.StatusCreated
			testenv.Eventually(t, 10*time.Second, "the redelivery's answer recorded", func() bool {
				rec, err := l.Lookup(ctx, r)
				return err == nil && rec.Response.Status == http.StatusCreated
			})
		})
	}
}

// slowRetryRoute is route hooks with one worker, polling often, whose
// failed attempts are retried only an hour later.
func slowRetryRoute() queue.Route {
	return queue.Route{Name: "hooks", UpstreamURL: "http://upstream.invalid",
		Policy:  &idempotency.Policy{Route: "hooks", Final: idempotency.DefaultFinal, Retention: time.Hour},
		Timeout: 30 * time.Second, MaxAttempts: 25, MaxAge: time.Hour,
		Backoff: queue.Backoff{Initial: time.Hour, Max: time.Hour}, Concurrency: 1, PollInterval: 20 * time.Millisecond}
}
