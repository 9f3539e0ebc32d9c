package sqlledger_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// skewedReplicas opens one PostgreSQL ledger per clock skew, all on the
// test's own schema, and returns them with their clocks.
func skewedReplicas(t *testing.T, skews ...time.Duration) ([]*sqlledger.Ledger, []func() time.Time) {
	t.Helper()
	dsn := testenv.Postgres(t)
	ls, clocks := make([]*sqlledger.Ledger, len(skews)), make([]func() time.Time, len(skews))
	for i, skew := range skews {
		clocks[i] = func() time.Time { return time.Now().Add(skew) }
		l, err := sqlledger.Open(context.Background(), sqlledger.Options{Driver: sqlledger.DriverPostgres, DSN: dsn,
			MaxOpenConns: 2, Now: clocks[i]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		if err := l.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	return ls, clocks
}

// A replica whose clock runs ten minutes ahead finds a claim made by a
// replica with the right time a second ago still live, cannot commit over
// it, reads its lease on its own clock, and cannot sweep a record with five
// minutes of retention left; a replica running ten minutes behind claims
// with a lease that the others see last as long as it asked, no less.
func TestLeasesAndExpiryAreOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	ls, now := skewedReplicas(t, 0, 10*time.Minute, -10*time.Minute)
	right, ahead, behind := ls[0], ls[1], ls[2]
	ctx := t.Context()

	held := ref("held-by-right")
	mustClaim(t, right, idempotency.ClaimRequest{Ref: held, Owner: "right", Lease: 30 * time.Second, Retention: time.Hour},
		now[0](), idempotency.Acquired)
	mustClaim(t, ahead, idempotency.ClaimRequest{Ref: held, Owner: "ahead", Lease: 30 * time.Second, Retention: time.Hour},
		now[1](), idempotency.InFlight)
	err := ahead.Commit(ctx, doneRecord(held, now[1](), now[1]().Add(time.Hour)), "ahead", now[1]())
	if !errors.Is(err, idempotency.ErrNotOwner) {
		t.Fatalf("commit over a live claim by the replica ahead: %v, want ErrNotOwner", err)
	}
	rec := wantState(t, ahead, held, idempotency.StatePending)
	if d := rec.LeaseUntil.Sub(now[1]()); d < 28*time.Second || d > 30*time.Second {
		t.Errorf("the lease read by the replica ahead ends in %v on its clock, want about 30s", d)
	}
	mustCommit(t, right, doneRecord(held, now[0](), now[0]().Add(5*time.Minute)), "right", now[0]())
	if n, err := ahead.Sweep(ctx, now[1](), 0); err != nil || n != 0 {
		t.Fatalf("sweep by the replica ahead: %d deleted, %v; want none (five minutes of retention left)", n, err)
	}
	wantState(t, right, held, idempotency.StateDone)

	short := ref("leased-by-behind")
	mustClaim(t, behind, idempotency.ClaimRequest{Ref: short, Owner: "behind", Lease: 300 * time.Millisecond, Retention: time.Hour},
		now[2](), idempotency.Acquired)
	mustClaim(t, right, idempotency.ClaimRequest{Ref: short, Owner: "right", Lease: 30 * time.Second, Retention: time.Hour},
		now[0](), idempotency.InFlight)
	time.Sleep(400 * time.Millisecond)
	mustClaim(t, right, idempotency.ClaimRequest{Ref: short, Owner: "right", Lease: 30 * time.Second, Retention: time.Hour},
		now[0](), idempotency.TakenOver)
}

// A stored delivery's created_at is read back on the replica's clock, as
// its attempts are: max_age and the delivery lag compare it with the
// replica's now. An hour-fast replica reads a delivery enqueued a moment
// ago by a replica with the right time as a moment old, not an hour.
func TestStoredCreatedAtIsOnTheReplicasClock(t *testing.T) {
	ls, clocks := skewedReplicas(t, 0, time.Hour)
	ls[0].UseJobs(noJobs{})
	r := idempotency.Ref{Route: "r", Key: "evt_skewed"}
	rec := &idempotency.Record{Ref: r, State: idempotency.StateQueued, ExpiresAt: clocks[0]().Add(time.Hour),
		Request: &idempotency.Request{Method: "POST", Path: "/hooks", Body: []byte("{}")}}
	if _, err := ls[0].Enqueue(context.Background(), rec, "", clocks[0]()); err != nil {
		t.Fatal(err)
	}
	st, err := ls[1].Stored(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if age := clocks[1]().Sub(st.CreatedAt); age < 0 || age > time.Minute {
		t.Fatalf("the fast replica reads the delivery as %v old, want a moment", age)
	}
}

// noJobs inserts no delivery job: the tests read the ledger's rows only.
type noJobs struct{}

func (noJobs) InsertTx(context.Context, *sql.Tx, []sqlledger.Delivery) error     { return nil }
func (noJobs) PendingTx(context.Context, *sql.Tx, idempotency.Ref) (bool, error) { return false, nil }

// A redelivery's time is stored on the database's clock, as created_at
// is, and read back on the reader's: a done record an hour-slow replica
// redelivers reads, on an hour-fast replica, as queued a moment ago, for
// its worker's max_age and for the queue's oldest-waiting gauge, not two
// hours ago.
func TestRequeuedIsOnTheDatabaseClock(t *testing.T) {
	ls, clocks := skewedReplicas(t, -time.Hour, time.Hour)
	behind, ahead := ls[0], ls[1]
	behind.UseJobs(noJobs{})
	ctx := context.Background()
	r := idempotency.Ref{Route: "r", Key: "evt_redelivered"}
	long := clocks[0]().Add(-2 * time.Hour)
	rec := &idempotency.Record{Ref: r, State: idempotency.StateQueued, ExpiresAt: long.Add(3 * time.Hour),
		Request: &idempotency.Request{Method: "POST", Path: "/hooks", Body: []byte("{}")}}
	if _, err := behind.Enqueue(ctx, rec, "", long); err != nil {
		t.Fatal(err)
	}
	if _, err := behind.Settle(ctx, &sqlledger.Settlement{Ref: r, State: idempotency.StateDone, Response: idempotency.Response{Status: 200},
		Attempt: idempotency.Attempt{Ref: r, StartedAt: long, Status: 200, Replica: "behind"}}, long, nil); err != nil {
		t.Fatal(err)
	}
	jobs := &waitingJobs{}
	behind.UseJobs(jobs)
	if queued, err := behind.Requeue(ctx, r, false, clocks[0]().Add(time.Hour)); err != nil || !queued {
		t.Fatalf("redeliver: %v, %v", queued, err)
	}
	if len(jobs.ds) != 1 {
		t.Fatalf("%d jobs inserted, want the redelivery's", len(jobs.ds))
	}

	st, err := ahead.Stored(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if age := clocks[1]().Sub(st.QueuedAt(jobs.ds[0].Requeued)); age < 0 || age > time.Minute {
		t.Errorf("the fast replica reads the redelivery as queued %v ago, want a moment", age)
	}
	ahead.UseJobs(jobs)
	stats, err := ahead.QueueStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if age := clocks[1]().Sub(stats["r"].OldestQueued); stats["r"].Queued != 1 || age < 0 || age > time.Minute {
		t.Errorf("the fast replica's queue stats: %+v, the oldest queued %v ago; want one, a moment ago", stats["r"], age)
	}
}

// waitingJobs keeps the delivery jobs inserted, and answers them all as
// waiting.
type waitingJobs struct{ ds []sqlledger.Delivery }

func (j *waitingJobs) InsertTx(_ context.Context, _ *sql.Tx, ds []sqlledger.Delivery) error {
	j.ds = append(j.ds, ds...)
	return nil
}

func (*waitingJobs) PendingTx(context.Context, *sql.Tx, idempotency.Ref) (bool, error) {
	return false, nil
}

func (j *waitingJobs) Waiting(context.Context, *sql.DB) ([]sqlledger.WaitingJob, error) {
	out := make([]sqlledger.WaitingJob, len(j.ds))
	for i, d := range j.ds {
		out[i] = sqlledger.WaitingJob{Ref: d.Ref, State: idempotency.StateDone, Created: d.Created, Requeued: d.Requeued}
	}
	return out, nil
}
