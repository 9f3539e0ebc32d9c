package queue

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// noJobs inserts no delivery job: the test runs its job by hand.
type noJobs struct{}

func (noJobs) InsertTx(context.Context, *sql.Tx, []sqlledger.Delivery) error     { return nil }
func (noJobs) PendingTx(context.Context, *sql.Tx, idempotency.Ref) (bool, error) { return false, nil }

// A rescued job's lost attempt is recorded for its record only. An
// operator may delete the delivery between the run's read of it and that
// write: recordLost then records nothing, and reports the record gone
// (the run ends there).
func TestRecordLostLeavesADeletedDeliveryAlone(t *testing.T) {
	for _, driver := range []string{DriverSQLite, DriverPostgres} {
		t.Run(driver, func(t *testing.T) {
			ctx := context.Background()
			dsn := t.TempDir() + "/ledger.db"
			if driver == DriverPostgres {
				dsn = testenv.Postgres(t)
			}
			l, err := sqlledger.Open(ctx, sqlledger.Options{Driver: driver, DSN: dsn})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			if err := l.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			l.UseJobs(noJobs{})
			q := &Queue{o: Options{Ledger: l, Now: time.Now, Logger: slog.New(slog.DiscardHandler)}}
			rescued := rivertype.AttemptError{At: time.Now(), Attempt: 1, Error: "Stuck job rescued by JobRescuer"}
			kept, deleted := idempotency.Ref{Route: "hooks", Key: "evt_kept"}, idempotency.Ref{Route: "hooks", Key: "evt_deleted"}
			for _, r := range []idempotency.Ref{kept, deleted} {
				rec := &idempotency.Record{Ref: r, State: idempotency.StateQueued, ExpiresAt: time.Now().Add(time.Hour),
					Request: &idempotency.Request{Method: "POST", Path: "/hooks", Body: []byte(`{}`)}}
				if _, err := l.Enqueue(ctx, rec, "", time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Delete(ctx, deleted); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				ref     idempotency.Ref
				want    int
				wantErr error
			}{{kept, 1, nil}, {deleted, 0, idempotency.ErrNotFound}} {
				job := &river.Job[Args]{Args: Args{Route: tc.ref.Route, Key: tc.ref.Key}, JobRow: &rivertype.JobRow{Attempt: 2,
					Errors: []rivertype.AttemptError{rescued}, AttemptedBy: []string{"replica-a", "replica-b"}}}
				n, err := q.recordLost(ctx, job, tc.ref)
				if n != tc.want || !errors.Is(err, tc.wantErr) {
					t.Fatalf("recordLost(%s) = %d, %v; want %d, %v", tc.ref.Key, n, err, tc.want, tc.wantErr)
				}
				if atts, err := l.Attempts(ctx, tc.ref); err != nil || len(atts) != tc.want {
					t.Fatalf("attempts of %s: %+v, %v; want %d", tc.ref.Key, atts, err, tc.want)
				}
			}
		})
	}
}
