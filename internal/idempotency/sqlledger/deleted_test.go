package sqlledger_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// enqueue stores r as a queued async delivery (its job left out).
func enqueue(tb testing.TB, l *sqlledger.Ledger, r idempotency.Ref) {
	tb.Helper()
	rec := &idempotency.Record{Ref: r, State: idempotency.StateQueued, ExpiresAt: t0.Add(time.Hour), Request: storedRequest()}
	if _, err := l.Enqueue(context.Background(), rec, "", t0); err != nil {
		tb.Fatalf("Enqueue(%q): %v", r.Key, err)
	}
}

// retry is the settlement of an attempt that leaves r queued.
func retry(r idempotency.Ref) *sqlledger.Settlement {
	return &sqlledger.Settlement{Ref: r, Attempt: attempt(r, 0, 503, "")}
}

// An operator may delete an async delivery while an attempt is out. The
// retry that attempt ends in then writes nothing, its note on the job
// included, and says the record is gone: an attempt without its record
// would never be swept, and the key's next delivery would take it for
// its own.
func TestRetryOfADeletedDeliveryRecordsNoAttempt(t *testing.T) {
	onEachDriver(t, func(t *testing.T, l *sqlledger.Ledger) {
		ctx := t.Context()
		l.UseJobs(noJobs{})
		r := ref("evt_deleted")
		enqueue(t, l, r)
		if _, err := l.Settle(ctx, retry(r), t0, nil); err != nil {
			t.Fatalf("Settle a retry: %v", err)
		}
		if err := l.Delete(ctx, r); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		noted := false
		note := func(context.Context, *sql.Tx) error { noted = true; return nil }
		if _, err := l.Settle(ctx, retry(r), t0, note); !errors.Is(err, idempotency.ErrNotFound) {
			t.Fatalf("Settle a retry of a deleted delivery: err = %v, want ErrNotFound", err)
		}
		if got := mustAttempts(t, l, r); len(got) != 0 || noted {
			t.Fatalf("after the deleted delivery's retry: attempts %+v, job noted %v; want neither", got, noted)
		}
		enqueue(t, l, r)
		if _, err := l.Settle(ctx, retry(r), t0, nil); err != nil {
			t.Fatalf("Settle the new delivery's retry: %v", err)
		}
		if got := mustAttempts(t, l, r); len(got) != 1 || got[0].Attempt != 1 {
			t.Fatalf("the new delivery's attempts = %+v, want attempt 1 alone", got)
		}
	})
}

// A rescued job's lost attempt (AddDeliveryAttempt) is recorded for its
// record only.
func TestDeliveryAttemptNeedsItsRecord(t *testing.T) {
	onEachDriver(t, func(t *testing.T, l *sqlledger.Ledger) {
		ctx := t.Context()
		l.UseJobs(noJobs{})
		r := ref("evt_lost")
		if err := l.AddDeliveryAttempt(ctx, attempt(r, 0, 0, "interrupted"), time.Time{}); !errors.Is(err, idempotency.ErrNotFound) {
			t.Fatalf("AddDeliveryAttempt without a record: err = %v, want ErrNotFound", err)
		}
		if got := mustAttempts(t, l, r); len(got) != 0 {
			t.Fatalf("attempts without a record = %+v, want none", got)
		}
		enqueue(t, l, r)
		for range 2 {
			if err := l.AddDeliveryAttempt(ctx, attempt(r, 0, 0, "interrupted"), time.Time{}); err != nil {
				t.Fatalf("AddDeliveryAttempt: %v", err)
			}
		}
		if got := mustAttempts(t, l, r); len(got) != 2 || got[1].Attempt != 2 {
			t.Fatalf("attempts = %+v, want 1 and 2", got)
		}
	})
}

// Retries racing an operator's delete: each is recorded before the
// delete and deleted with the record, or finds the record gone. None is
// left behind, and none fails for its number.
func TestRetriesRacingADeleteLeaveNoAttempt(t *testing.T) {
	onEachDriver(t, func(t *testing.T, l *sqlledger.Ledger) {
		l.UseJobs(noJobs{})
		const rounds, retries = 25, 6
		for i := range rounds {
			r := ref(fmt.Sprintf("evt_race_%d", i))
			enqueue(t, l, r)
			errs := make(chan error, retries+1)
			for range retries {
				go func() {
					_, err := l.Settle(context.Background(), retry(r), t0, nil)
					errs <- err
				}()
			}
			go func() { errs <- l.Delete(context.Background(), r) }()
			for range retries + 1 {
				if err := <-errs; err != nil && !errors.Is(err, idempotency.ErrNotFound) {
					t.Fatalf("round %d: %v", i, err)
				}
			}
			if got := mustAttempts(t, l, r); len(got) != 0 {
				t.Fatalf("round %d: %d attempts outlived their record", i, len(got))
			}
		}
	})
}
