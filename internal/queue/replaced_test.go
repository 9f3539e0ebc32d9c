package queue_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/queue"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// Hooks.Replaced is called when a redelivery's final answer replaces the
// one a done record held: not for a first delivery, nor for a redelivery
// whose record was deleted during its attempt (it recorded nothing).
func TestReplacedAnswerIsReported(t *testing.T) {
	for _, driver := range []string{queue.DriverSQLite, queue.DriverPostgres} {
		t.Run(driver, func(t *testing.T) {
			var mu sync.Mutex
			var replaced []idempotency.Ref
			reported := func() []idempotency.Ref {
				mu.Lock()
				defer mu.Unlock()
				return slices.Clone(replaced)
			}
			up := newHeldUpstream()
			l := startQueueWith(t, driver, up, queue.Hooks{Replaced: func(_ context.Context, ref idempotency.Ref) {
				mu.Lock()
				replaced = append(replaced, ref)
				mu.Unlock()
			}})
			ctx := context.Background()
			r := idempotency.Ref{Route: "hooks", Key: "evt_replaced"}
			redeliver := func() {
				t.Helper()
				if queued, err := l.Requeue(ctx, r, false, time.Now().Add(time.Hour)); err != nil || !queued {
					t.Fatalf("redeliver: %v, %v", queued, err)
				}
				up.attempt(t)
			}

			storeAgain(t, up, l, r)
			redeliver()
			if err := l.Delete(ctx, r); err != nil {
				t.Fatal(err)
			}
			up.answers <- http.StatusOK
			testenv.Eventually(t, 10*time.Second, "the deleted redelivery's job to end", func() bool {
				waiting, _ := jobsLeft(t, l)
				return waiting == 0
			})

			storeAgain(t, up, l, r)
			// The route runs one job at a time: the jobs before this
			// attempt have returned, hooks called.
			redeliver()
			if got := reported(); len(got) != 0 {
				t.Fatalf("reported %v before any answer was replaced", got)
			}
			up.answers <- http.StatusCreated
			testenv.Eventually(t, 10*time.Second, "the replaced answer reported", func() bool { return len(reported()) > 0 })
			if got := reported(); !slices.Equal(got, []idempotency.Ref{r}) {
				t.Fatalf("reported %v, want %v once", got, r)
			}
			if rec, err := l.Lookup(ctx, r); err != nil || rec.Response.Status != http.StatusCreated {
				t.Fatalf("the redelivered record: %+v, %v; want the new answer, 201", rec, err)
			}
		})
	}
}
