package idempotency_test

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
)

// countedJobs counts the delivery jobs the ledger inserts.
type countedJobs struct{ n atomic.Int64 }

func (j *countedJobs) InsertTx(_ context.Context, _ *sql.Tx, ds []sqlledger.Delivery) error {
	j.n.Add(int64(len(ds)))
	return nil
}

func (*countedJobs) PendingTx(context.Context, *sql.Tx, idempotency.Ref) (bool, error) {
	return false, nil
}

// claimStealingQueue runs steal once, before the first Enqueue of a claim
// (owner not ""): another delivery of the key takes that claim over.
type claimStealingQueue struct {
	*sqlledger.Ledger
	steal func()
	once  sync.Once
}

func (q *claimStealingQueue) Enqueue(ctx context.Context, rec *idempotency.Record, owner string, now time.Time) (bool, error) {
	if owner != "" {
		q.once.Do(q.steal)
	}
	return q.Ledger.Enqueue(ctx, rec, owner, now)
}

// An async delivery whose claim expired before its store, and was taken
// over by another delivery of the key, is not acknowledged: the other one
// holds only a claim, which can still fail, and an acknowledged event is
// never sent again. It waits for the holder and gets 409; the provider's
// retry after the holder's lease is stored, once.
func TestAsyncClaimLostBeforeTheStoreIsNotAcknowledged(t *testing.T) {
	ctx := context.Background()
	l := sqliteLedger(t)
	jobs := &countedJobs{}
	l.UseJobs(jobs)
	var offset atomic.Int64 // added to the engine's clock
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }

	ref := idempotency.Ref{Route: "r", Key: "evt_lost_claim"}
	fp := []byte("fp")
	claimAs := func(owner string, lease time.Duration, at time.Time) {
		t.Helper()
		c, err := l.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: owner, Fingerprint: fp, Lease: lease, Retention: time.Hour}, at)
		if err != nil || (c.Status != idempotency.Acquired && c.Status != idempotency.TakenOver) {
			t.Fatalf("claim as %s: %v %v", owner, c.Status, err)
		}
	}
	// A copy that crashed holding the key: the intake finds its claim
	// live, and the claim loop takes it over once it expires.
	claimAs("crashed", 300*time.Millisecond, now())
	q := &claimStealingQueue{Ledger: l, steal: func() {
		// Past this delivery's lease; this holder never stores it.
		claimAs("holder", time.Hour, now().Add(time.Minute))
	}}
	e := newEngine(t, idempotency.Options{Ledger: l, Queue: q, Lease: time.Second, Now: now})
	t.Cleanup(e.Close)
	p := *racePolicy
	p.Ack = &idempotency.Response{Status: 202}
	p.WaitTimeout = 2 * time.Second
	d := idempotency.Delivery{Ref: ref, Fingerprint: fp,
		Request: &idempotency.Request{Method: "POST", Path: "/hooks", Body: []byte(`{}`)}}
	var forwards atomic.Int64

	r := e.Handle(ctx, &p, d, fwdCount(&forwards))
	if r.Outcome != idempotency.Conflict || r.Status != 409 {
		t.Fatalf("first delivery: %s %d (%v); want 409 in flight, not an acknowledgement of an event no one stored", r.Outcome, r.Status, r.Err)
	}
	rec, err := l.Lookup(ctx, ref)
	if err != nil || rec.State != idempotency.StatePending || jobs.n.Load() != 0 {
		t.Fatalf("after the first delivery: record %+v (%v), %d jobs; want the holder's pending claim and no job", rec, err, jobs.n.Load())
	}

	offset.Store(int64(2 * time.Hour)) // the holder's lease has passed
	r = e.Handle(ctx, &p, d, fwdCount(&forwards))
	if r.Outcome != idempotency.Accepted {
		t.Fatalf("the provider's retry: %s %d (%v), want accepted", r.Outcome, r.Status, r.Err)
	}
	if rec, err := l.Lookup(ctx, ref); err != nil || rec.State != idempotency.StateQueued || jobs.n.Load() != 1 || forwards.Load() != 0 {
		t.Fatalf("after the retry: record %+v (%v), %d jobs, %d forwards; want queued, one job, nothing forwarded at intake", rec, err, jobs.n.Load(), forwards.Load())
	}
}

// When the delivery that took the claim over stored the event, the one
// that lost it gets the acknowledgement, as any repeat does.
func TestAsyncClaimLostToAStoreIsAcknowledged(t *testing.T) {
	ctx := context.Background()
	l := sqliteLedger(t)
	jobs := &countedJobs{}
	l.UseJobs(jobs)
	ref := idempotency.Ref{Route: "r", Key: "evt_stored_by_another"}
	fp := []byte("fp")
	d := idempotency.Delivery{Ref: ref, Fingerprint: fp,
		Request: &idempotency.Request{Method: "POST", Path: "/hooks", Body: []byte(`{}`)}}
	if c, err := l.Claim(ctx, idempotency.ClaimRequest{Ref: ref, Owner: "crashed", Fingerprint: fp, Lease: 300 * time.Millisecond, Retention: time.Hour}, time.Now()); err != nil || c.Status != idempotency.Acquired {
		t.Fatalf("claim: %v %v", c.Status, err)
	}
	q := &claimStealingQueue{Ledger: l, steal: func() {
		rec := &idempotency.Record{Ref: ref, State: idempotency.StateQueued, Fingerprint: fp, Request: d.Request,
			CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}
		if _, err := l.Enqueue(ctx, rec, "", time.Now().Add(time.Minute)); err != nil {
			t.Errorf("the other delivery's store: %v", err)
		}
	}}
	e := newEngine(t, idempotency.Options{Ledger: l, Queue: q, Lease: time.Second})
	t.Cleanup(e.Close)
	p := *racePolicy
	p.Ack = &idempotency.Response{Status: 202, Body: []byte("ok")}
	p.WaitTimeout = 2 * time.Second
	var forwards atomic.Int64
	r := e.Handle(ctx, &p, d, fwdCount(&forwards))
	if r.Outcome != idempotency.Replayed || r.Replay == nil || string(r.Replay.Body) != "ok" {
		t.Fatalf("delivery: %s %d (%v), want the acknowledgement replayed", r.Outcome, r.Status, r.Err)
	}
	if n := jobs.n.Load(); n != 1 || forwards.Load() != 0 {
		t.Fatalf("%d jobs, %d forwards; want the other delivery's one job", n, forwards.Load())
	}
}
