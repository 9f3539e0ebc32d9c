package queue_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/queue"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A former route (one storing no requests) is not served until adopted;
// FormerJobs finds its waiting jobs, and once adopted they are worked,
// whether the queue already ran for another route (its River queue added
// live) or was idle until then (started by the next Start).
func TestAdoptServesAFormerRoute(t *testing.T) {
	for _, driver := range []string{queue.DriverSQLite, queue.DriverPostgres} {
		for _, running := range []bool{true, false} {
			name := driver + "/idle"
			if running {
				name = driver + "/running"
			}
			t.Run(name, func(t *testing.T) {
				ctx := context.Background()
				l := migratedLedger(t, driver, "")
				up := newHeldUpstream()
				o := queue.Options{Driver: driver, Ledger: l, Forwarder: up, Replica: "replica-a",
					Logger: slog.New(slog.DiscardHandler), Former: []queue.Route{slowRetryRoute()}}
				if running {
					served := slowRetryRoute()
					served.Name = "served"
					o.Routes = []queue.Route{served}
				}
				q := newQueue(t, o)
				if err := q.Start(ctx); err != nil {
					t.Fatal(err)
				}
				if q.Running() != running {
					t.Fatalf("Running = %v after Start, want %v", q.Running(), running)
				}
				if jobs, err := q.FormerJobs(ctx); err != nil || len(jobs) != 0 {
					t.Fatalf("FormerJobs before any delivery = %v, %v; want none", jobs, err)
				}

				ref := idempotency.Ref{Route: "hooks", Key: "evt_former"}
				enqueue(t, l, ref)
				if jobs, err := q.FormerJobs(ctx); err != nil || jobs["hooks"] != 1 || len(jobs) != 1 {
					t.Fatalf("FormerJobs = %v, %v; want hooks: 1", jobs, err)
				}
				time.Sleep(200 * time.Millisecond) // ten polls of a served route
				if n := up.requests(); n != 0 {
					t.Fatalf("a job of a route not adopted was attempted %d times", n)
				}

				if err := q.Adopt(ctx, "hooks"); err != nil {
					t.Fatal(err)
				}
				if got := q.Former(); len(got) != 0 {
					t.Fatalf("Former after Adopt = %v, want none", got)
				}
				if !running {
					if err := q.Start(ctx); err != nil || !q.Running() {
						t.Fatalf("Start after Adopt: %v, running %v", err, q.Running())
					}
				}
				if n := up.attempt(t); n != 1 {
					t.Fatalf("attempt %d, want 1", n)
				}
				up.answers <- http.StatusOK
				testenv.Eventually(t, 10*time.Second, "the delivery done", func() bool {
					rec, err := l.Lookup(ctx, ref)
					return err == nil && rec.State == idempotency.StateDone
				})
			})
		}
	}
}
