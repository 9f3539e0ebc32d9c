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
		settled := func(key string, st idempotency.State) idempotency.Ref { return settledDelivery(t, l, key, st, now) }
		held := settled("held", idempotency.StateHeld)
		before := len(jobs.refs)
		if queued, err := l.Requeue(ctx, held, true, now.Add(time.Hour)); err != nil || !queued {
			t.Fatalf("release of a held delivery: %v, %v; want queued", queued, err)
		}
		if _, err := l.Requeue(ctx, held, true, now.Add(time.Hour)); !errors.Is(err, idempotency.ErrNotOwner) {
			t.Fatalf("a second release: %v, want ErrNotOwner", err)
		}
		for _, st := range []idempotency.State{idempotency.StateDone, idempotency.StateDead, idempotency.StateQueued} {
			r := settled(string(st), st)
			before = len(jobs.refs)
			if _, err := l.Requeue(ctx, r, true, now.Add(time.Hour)); !errors.Is(err, idempotency.ErrNotOwner) {
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

// settledDelivery stores key as an async intake does (acknowledged) at
// now, and settles it st unless st is queued.
func settledDelivery(t *testing.T, l *Ledger, key string, st idempotency.State, now time.Time) idempotency.Ref {
	t.Helper()
	ctx := context.Background()
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
	if _, err := l.Settle(ctx, s, now, nil); err != nil {
		t.Fatal(err)
	}
	return r
}

// A done record redelivered after its expiry, before the sweeper took it,
// stays until its job has run: swept in between, the job would find no
// record and end without sending what the operator was told is queued.
func TestRedeliveryOfAnExpiredRecordOutlivesTheSweep(t *testing.T) {
	onBothWithJobs(t, func(t *testing.T, l *Ledger, jobs *insertedJobs) {
		ctx := context.Background()
		now := time.Now()
		r := idempotency.Ref{Route: "r", Key: "expired"}
		if _, err := l.Enqueue(ctx, &idempotency.Record{Ref: r, State: idempotency.StateQueued, ExpiresAt: now.Add(-time.Minute),
			Request: &idempotency.Request{Method: "POST", Path: "/hooks", Body: []byte("{}")}}, "", now.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Settle(ctx, &Settlement{Ref: r, State: idempotency.StateDone, Response: idempotency.Response{Status: http.StatusOK},
			Attempt: idempotency.Attempt{Ref: r, StartedAt: now.Add(-time.Hour), Status: http.StatusOK, Replica: "a"}}, now.Add(-time.Hour), nil); err != nil {
			t.Fatal(err)
		}
		before := len(jobs.refs)
		if queued, err := l.Requeue(ctx, r, false, now.Add(time.Hour)); err != nil || !queued {
			t.Fatalf("redeliver: %v, %v; want queued", queued, err)
		}
		if n := len(jobs.refs) - before; n != 1 {
			t.Fatalf("%d jobs inserted, want 1", n)
		}
		if n, err := l.Sweep(ctx, now, 100); err != nil || n != 0 {
			t.Fatalf("the sweep took %d records (%v), want none: the redelivery's job has yet to run", n, err)
		}
		if rec, err := l.Lookup(ctx, r); err != nil || rec.State != idempotency.StateDone {
			t.Fatalf("the redelivered record: %+v, %v; want it done, kept", rec, err)
		}
	})
}

// A dead record redriven with little of its retention left is kept its
// route's retention from the redrive, as a redelivered one is: swept at
// its old expiry once delivered, its answer and attempts would go, and
// the provider's next copy would be delivered again.
func TestRedriveKeepsTheRecordRetentionFromThen(t *testing.T) {
	onBothWithJobs(t, func(t *testing.T, l *Ledger, jobs *insertedJobs) {
		ctx := context.Background()
		now := time.Now()
		r := idempotency.Ref{Route: "r", Key: "dead"}
		if _, err := l.Enqueue(ctx, &idempotency.Record{Ref: r, State: idempotency.StateQueued, ExpiresAt: now.Add(time.Minute),
			Request: &idempotency.Request{Method: "POST", Path: "/hooks", Body: []byte("{}")}}, "", now.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Settle(ctx, &Settlement{Ref: r, State: idempotency.StateDead, KeepUntil: now.Add(time.Minute),
			Attempt: idempotency.Attempt{Ref: r, StartedAt: now.Add(-time.Hour), Status: http.StatusBadGateway, Replica: "a"}}, now.Add(-time.Hour), nil); err != nil {
			t.Fatal(err)
		}
		if n, err := l.Redrive(ctx, "r", nil, now.Add(time.Hour)); err != nil || n != 1 || len(jobs.refs) != 2 {
			t.Fatalf("redrive = %d, %v with %d jobs inserted; want 1 with 2", n, err, len(jobs.refs))
		}
		if _, err := l.Settle(ctx, &Settlement{Ref: r, State: idempotency.StateDone, Response: idempotency.Response{Status: http.StatusOK, Body: []byte("ok")},
			Attempt: idempotency.Attempt{Ref: r, StartedAt: now, Status: http.StatusOK, Replica: "a"}}, now, nil); err != nil {
			t.Fatal(err)
		}
		if n, err := l.Sweep(ctx, now.Add(2*time.Minute), 100); err != nil || n != 0 {
			t.Fatalf("a sweep past the old expiry took %d records (%v), want none", n, err)
		}
		rec, err := l.Lookup(ctx, r)
		if err != nil || rec.State != idempotency.StateDone || string(rec.Body) != "ok" || rec.ExpiresAt.Before(now.Add(time.Hour-time.Second)) {
			t.Fatalf("the redriven record: %+v, %v; want it done with its answer, kept an hour", rec, err)
		}
		if as, err := l.Attempts(ctx, r); err != nil || len(as) != 2 {
			t.Fatalf("the redriven record's attempts: %d, %v; want both", len(as), err)
		}
	})
}

// A release that deletes (Resolve without a record) takes only a held row
// whose provider was not acknowledged: an acknowledged one, deleted, would
// be lost, as its provider never sends it again. Such a row, there in the
// admin API's place of one it read unacknowledged (that row resolved and
// the key taken again meanwhile), is left held, for Requeue.
func TestReleaseDeletesNoAcknowledgedHeldRow(t *testing.T) {
	onBothWithJobs(t, func(t *testing.T, l *Ledger, _ *insertedJobs) {
		ctx := context.Background()
		r := settledDelivery(t, l, "acked", idempotency.StateHeld, time.Now())
		if err := l.Resolve(ctx, r, nil); !errors.Is(err, idempotency.ErrNotFound) {
			t.Fatalf("release by delete of an acknowledged held row: %v, want ErrNotFound", err)
		}
		if rec, err := l.Lookup(ctx, r); err != nil || rec.State != idempotency.StateHeld || !rec.Acked {
			t.Fatalf("the acknowledged held row after it: %+v, %v; want it held, acknowledged", rec, err)
		}
		if atts, err := l.Attempts(ctx, r); err != nil || len(atts) != 1 {
			t.Fatalf("its attempts: %d, %v; want the one kept", len(atts), err)
		}
	})
}
