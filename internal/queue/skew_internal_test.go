package queue

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/forward"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// skewedTime is a replica's wall clock, off by skew, as River reads it;
// River's statements still take the database's now().
type skewedTime struct{ skew time.Duration }

func (s skewedTime) Now() time.Time          { return time.Now().Add(s.skew) }
func (s skewedTime) NowOrNil() *time.Time    { return nil }
func (s skewedTime) clock() func() time.Time { return s.Now }

// busyUpstream answers every attempt 503 with Retry-After: 120.
type busyUpstream struct{ n atomic.Int32 }

func (u *busyUpstream) Do(context.Context, *forward.Request) (*forward.Response, error) {
	u.n.Add(1)
	return &forward.Response{Status: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"120"}}}, nil
}

// A retry waits as long as the upstream asked on the database's clock,
// which River fetches jobs by, whatever the clock of the replica that
// snoozed it: on the clock of a replica five minutes behind, a wait of
// two minutes would be over before it began, and the delivery would run
// through its attempts while the upstream is still down. A replica ahead
// cannot snooze less than nothing: it waits its lead, never less than
// asked.
func TestRetryWaitsOnTheDatabasesClock(t *testing.T) {
	for _, tc := range []struct {
		name     string
		skew     time.Duration
		min, max time.Duration // the job's scheduled_at less the database's now()
	}{
		{"right", 0, 110 * time.Second, 121 * time.Second},
		{"behind", -5 * time.Minute, 110 * time.Second, 121 * time.Second},
		{"ahead", 5 * time.Minute, 110 * time.Second, 301 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := skewedTime{tc.skew}
			ctx := context.Background()
			l, err := sqlledger.Open(ctx, sqlledger.Options{Driver: DriverPostgres, DSN: testenv.Postgres(t), Now: clock.clock()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			if err := l.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			if err := Migrate(ctx, l); err != nil {
				t.Fatal(err)
			}
			up := &busyUpstream{}
			q, err := New(Options{Driver: DriverPostgres, Ledger: l, Forwarder: up, Replica: "skewed",
				Logger: slog.New(slog.DiscardHandler), Now: clock.clock(),
				Routes: []Route{{Name: "hooks", UpstreamURL: "http://upstream.invalid",
					Policy:  &idempotency.Policy{Route: "hooks", Final: idempotency.DefaultFinal, Retention: time.Hour},
					Timeout: 30 * time.Second, MaxAttempts: 25, MaxAge: time.Hour,
					Backoff: Backoff{Initial: time.Second, Max: time.Hour}, Concurrency: 1, PollInterval: 20 * time.Millisecond}}})
			if err != nil {
				t.Fatal(err)
			}
			q.cfg.Test.Time = clock
			l.UseJobs(q)
			if err := q.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = q.Stop(ctx)
			})

			r := idempotency.Ref{Route: "hooks", Key: "evt_busy"}
			now := clock.Now()
			rec := &idempotency.Record{Ref: r, State: idempotency.StateQueued, ExpiresAt: now.Add(time.Hour),
				Request: &idempotency.Request{Method: http.MethodPost, Path: "/hooks", Headers: http.Header{}, Body: []byte(`{"id":"evt_busy"}`)}}
			if _, err := l.Enqueue(ctx, rec, "", now); err != nil {
				t.Fatal(err)
			}
			db, err := l.DB()
			if err != nil {
				t.Fatal(err)
			}
			var wait float64
			testenv.Eventually(t, 10*time.Second, "the first attempt's retry to be snoozed", func() bool {
				err := db.QueryRow(`SELECT EXTRACT(EPOCH FROM scheduled_at - now()) FROM river_job ` +
					`WHERE COALESCE((metadata->>'snoozes')::int, 0) > 0`).Scan(&wait)
				return err == nil
			})
			if got := time.Duration(wait * float64(time.Second)); got < tc.min || got > tc.max {
				t.Errorf("the next attempt is due %v after the database's now, want %v to %v (Retry-After: 120)", got, tc.min, tc.max)
			}
			if n := up.n.Load(); n != 1 {
				t.Errorf("the upstream got %d attempts, want 1", n)
			}
			if rec, err := l.Lookup(ctx, r); err != nil || rec.State != idempotency.StateQueued {
				t.Errorf("the delivery: %+v, %v; want it queued", rec, err)
			}
		})
	}
}
