package sqlledger

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// An async route's release (Requeue with held) queues a held delivery
// once. A release of a record resolved meanwhile (done, dead) or released
// already (queued) inserts no job: it would send the event again.
func TestReleaseQueuesOnlyAHeldDelivery(t *testing.T) {
	onBothWithJobs(t, func(t *testing.T, l *Ledger, jobs *insertedJobs) {
		ctx := context.Background()
		now := time.Now()
		settled := func(key string, st idempotency.State) idempotency.Ref {
			t.Helper()
			r := idempotency.Ref{Route: "r", Key: key}
			if _, err := l.Enqueue(ctx, &idempotency.Record{Ref: r, State: idempotency.StateQueued, ExpiresAt: now.Add(time.Hour),
				Request: &idempotency.Request{Method: "POST", Path: "/hooks", Body: []byte(key)}}, "", now); err != nil {
				t.Fatal(err)
			}
			if st == idempotency.StateQueued {
				return r
			}
			s := &Settlement{Ref: r, State: st, KeepUntil: now.Add(time.Hour),
				Attempt: idempotency.Attempt{Ref: r, StartedAt: now, Status: http.StatusBadGateway, Replica: "a"}}
			if st == idempotency.StateDone {
				s.Response = idempotency.Response{Status: http.StatusOK}
			}
			if err := l.Settle(ctx, s, now, nil); err != nil {
				t.Fatal(err)
			}
			return r
		}
		held := settled("held", idempotency.StateHeld)
		before := len(jobs.refs)
		if queued, err := l.Requeue(ctx, held, true); err != nil || !queued {
			t.Fatalf("release of a held delivery: %v, %v; want queued", queued, err)
		}
		if _, err := l.Requeue(ctx, held, true); !errors.Is(err, idempotency.ErrNotOwner) {
			t.Fatalf("a second release: %v, want ErrNotOwner", err)
		}
		for _, st := range []idempotency.State{idempotency.StateDone, idempotency.StateDead, idempotency.StateQueued} {
			r := settled(string(st), st)
			before = len(jobs.refs)
			if _, err := l.Requeue(ctx, r, true); !errors.Is(err, idempotency.ErrNotOwner) {
				t.Fatalf("release of a %s delivery: %v, want ErrNotOwner", st, err)
			}
			if rec, err := l.Lookup(ctx, r); err != nil || rec.State != st {
				t.Fatalf("the %s delivery after a release: %+v, %v; want unchanged", st, rec, err)
			}
		}
		if n := len(jobs.refs) - before; n != 0 {
			t.Fatalf("%d jobs inserted by refused releases", n)
		}
	})
}
