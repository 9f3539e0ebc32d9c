package sqlledger

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// insertedJobs keeps the keys whose delivery jobs the ledger inserted,
// and the record each job names.
type insertedJobs struct {
	mu      sync.Mutex
	refs    []string
	created map[string]time.Time
}

func (j *insertedJobs) InsertTx(_ context.Context, _ *sql.Tx, ds []Delivery) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.created == nil {
		j.created = map[string]time.Time{}
	}
	for _, d := range ds {
		j.refs = append(j.refs, d.Key)
		j.created[d.Key] = d.Created
	}
	return nil
}

func (*insertedJobs) PendingTx(context.Context, *sql.Tx, idempotency.Ref) (bool, error) {
	return false, nil
}

// onBothWithJobs runs fn on a PostgreSQL and a SQLite ledger, in
// parallel, each inserting its delivery jobs into its own insertedJobs.
func onBothWithJobs(t *testing.T, fn func(t *testing.T, l *Ledger, jobs *insertedJobs)) {
	for name, open := range map[string]func(t *testing.T) *Ledger{
		"postgres": func(t *testing.T) *Ledger { return openPGWith(t, Options{}) },
		"sqlite": func(t *testing.T) *Ledger {
			return openMigrated(t, Options{Driver: DriverSQLite, DSN: t.TempDir() + "/l.db"})
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l, jobs := open(t), &insertedJobs{}
			l.UseJobs(jobs)
			fn(t, l, jobs)
		})
	}
}

// One intake batch (PostgreSQL's multi-row statement, SQLite's statement
// a row) tells a new row from one written over an expired claim, which
// the engine counts as a takeover, and writes over neither a live claim
// nor a settled record.
func TestIntakeTellsTakeoversFromNewRows(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) *Ledger
	}{
		{"postgres", func(t *testing.T) *Ledger { return openPGWith(t, Options{CommitBatch: 1, LookupBatch: 1}) }},
		{"sqlite", func(t *testing.T) *Ledger {
			return openMigrated(t, Options{Driver: DriverSQLite, DSN: t.TempDir() + "/l.db", CommitBatch: 1})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := tc.open(t)
			jobs := &insertedJobs{}
			l.UseJobs(jobs)
			ctx := context.Background()
			now := time.Now()
			ref := func(k string) idempotency.Ref { return idempotency.Ref{Route: "r", Key: k} }
			rec := func(k string) *idempotency.Record {
				return &idempotency.Record{Ref: ref(k), State: idempotency.StateQueued, ExpiresAt: now.Add(time.Hour),
					Request: &idempotency.Request{Method: "POST", Path: "/hooks", Body: []byte(k)}}
			}
			// Claimed a minute ago: an expired claim's row is older than its lease.
			claim := func(k string, lease time.Duration) {
				t.Helper()
				c, err := l.Claim(ctx, idempotency.ClaimRequest{Ref: ref(k), Owner: "o-" + k, Lease: lease, Retention: time.Hour}, now.Add(-time.Minute))
				if err != nil || c.Status != idempotency.Acquired {
					t.Fatalf("claim %s: %v %v", k, c.Status, err)
				}
			}
			claim("expired", time.Second)
			claim("live", time.Hour)
			claim("expired-alone", time.Second)
			if err := l.Commit(ctx, &idempotency.Record{Ref: ref("done"), State: idempotency.StateDone, Response: idempotency.Response{Status: 201},
				ExpiresAt: now.Add(time.Hour)}, "o-first", now); err != nil {
				t.Fatal(err)
			}

			want := map[string]intakeWrite{"fresh": inserted, "expired": replaced, "live": notWritten, "done": notWritten, "fresh-2": inserted}
			var batch []*intakeJob
			done := map[string]chan error{} // runIntake clears each job's
			for _, k := range []string{"fresh", "expired", "live", "done", "fresh-2"} {
				j, err := newIntakeJob(ctx, rec(k), "", now, 0)
				if err != nil {
					t.Fatal(err)
				}
				batch = append(batch, j)
				done[k] = j.done
			}
			if err := l.runIntake(ctx, batch); err != nil {
				t.Fatalf("the batch's transaction: %v", err)
			}
			for _, j := range batch {
				err := <-done[j.ref.Key]
				if j.wrote != want[j.ref.Key] {
					t.Errorf("%s: wrote %d, want %d", j.ref.Key, j.wrote, want[j.ref.Key])
				}
				if stored := want[j.ref.Key] != notWritten; stored != (err == nil) || (!stored && !errors.Is(err, idempotency.ErrNotOwner)) {
					t.Errorf("%s: %v", j.ref.Key, err)
				}
			}

			for k, wantReplaced := range map[string]bool{"expired-alone": true, "fresh-alone": false} {
				got, err := l.Enqueue(ctx, rec(k), "", now)
				if err != nil || got != wantReplaced {
					t.Errorf("Enqueue(%s) = %v, %v, want replaced %v", k, got, err, wantReplaced)
				}
			}
			slices.Sort(jobs.refs)
			if want := []string{"expired", "expired-alone", "fresh", "fresh-2", "fresh-alone"}; !slices.Equal(jobs.refs, want) {
				t.Errorf("jobs inserted for %v, want %v", jobs.refs, want)
			}
			if r, err := l.Lookup(ctx, ref("live")); err != nil || r.State != idempotency.StatePending || r.Owner != "o-live" {
				t.Errorf("live: %+v %v, want still pending for o-live", r, err)
			}
			// Each job names its record as stored: a row written over a
			// claim keeps the claim's created_at.
			for k, created := range jobs.created {
				st, err := l.Stored(ctx, ref(k))
				if err != nil || !st.Is(created) {
					t.Errorf("%s: the job names the record created at %v; stored %+v, %v", k, created, st, err)
				}
				if replaced := k == "expired" || k == "expired-alone"; replaced != created.Before(now.Add(-30*time.Second)) {
					t.Errorf("%s: the job names the record created at %v, the intake ran at %v", k, created, now)
				}
			}
		})
	}
}

// The intake's own store (no claim of its own) writes over an expired
// claim only when the claim holds the same fingerprint, or none, as a
// claim takes one over (ClaimRequest.MayTakeOver): another body stored
// there would be delivered under the first event's key. A caller holding
// a claim has been through that check and writes over it. Both the
// statement a row and PostgreSQL's multi-row one.
func TestIntakeTakesOverOnlyTheSameEventsExpiredClaim(t *testing.T) {
	onBothWithJobs(t, func(t *testing.T, l *Ledger, _ *insertedJobs) {
		ctx := context.Background()
		now := time.Now()
		f1, f2 := []byte("fp-1"), []byte("fp-2")
		ref := func(k string) idempotency.Ref { return idempotency.Ref{Route: "r", Key: k} }
		cases := []struct {
			key          string
			claimed, fp  []byte
			owner        string
			wantReplaced bool
		}{
			{"other", f1, f2, "", false},
			{"same", f1, f1, "", true},
			{"unfingerprinted-claim", nil, f2, "", true},
			{"unfingerprinted-intake", f1, nil, "", true},
			{"taken-over-by-a-claim", f1, f2, "taker", true},
		}
		for _, how := range []string{"alone", "batch"} {
			var batch []*intakeJob
			done := map[string]chan error{}
			for _, c := range cases {
				k := how + "-" + c.key
				cl, err := l.Claim(ctx, idempotency.ClaimRequest{Ref: ref(k), Owner: "dead", Fingerprint: c.claimed,
					Lease: time.Second, Retention: time.Hour}, now.Add(-time.Minute))
				if err != nil || cl.Status != idempotency.Acquired {
					t.Fatalf("claim %s: %v %v", k, cl.Status, err)
				}
				rec := &idempotency.Record{Ref: ref(k), State: idempotency.StateQueued, Fingerprint: c.fp, ExpiresAt: now.Add(time.Hour),
					Request: &idempotency.Request{Method: "POST", Path: "/hooks", Body: []byte(k)}}
				if how == "alone" {
					replaced, err := l.Enqueue(ctx, rec, c.owner, now)
					if replaced != c.wantReplaced || (c.wantReplaced && err != nil) || (!c.wantReplaced && !errors.Is(err, idempotency.ErrNotOwner)) {
						t.Errorf("Enqueue(%s) = %v, %v; want replaced %v", k, replaced, err, c.wantReplaced)
					}
					continue
				}
				j, err := newIntakeJob(ctx, rec, c.owner, now, 0)
				if err != nil {
					t.Fatal(err)
				}
				batch = append(batch, j)
				done[k] = j.done
			}
			if how == "batch" {
				if err := l.runIntake(ctx, batch); err != nil {
					t.Fatalf("the batch's transaction: %v", err)
				}
				for _, j := range batch {
					err := <-done[j.ref.Key]
					want := notWritten
					for _, c := range cases {
						if how+"-"+c.key == j.ref.Key && c.wantReplaced {
							want = replaced
						}
					}
					if j.wrote != want || (want == notWritten) != errors.Is(err, idempotency.ErrNotOwner) {
						t.Errorf("%s: wrote %d (%v), want %d", j.ref.Key, j.wrote, err, want)
					}
				}
			}
			for _, c := range cases {
				k := how + "-" + c.key
				r, err := l.Lookup(ctx, ref(k))
				switch {
				case err != nil:
					t.Errorf("%s: %v", k, err)
				case c.wantReplaced && (r.State != idempotency.StateQueued || string(r.Fingerprint) != string(c.fp)):
					t.Errorf("%s: %s with %q, want queued with %q", k, r.State, r.Fingerprint, c.fp)
				case !c.wantReplaced && (r.State != idempotency.StatePending || r.Owner != "dead" || string(r.Fingerprint) != string(c.claimed)):
					t.Errorf("%s: %s of %q with %q, want the dead owner's claim with %q", k, r.State, r.Owner, r.Fingerprint, c.claimed)
				}
			}
		}
	})
}

// An acknowledged delivery is never swept while queued: its retention may
// end while the upstream is down and attempts wait out their backoff. Once
// dead it is kept until Settlement.KeepUntil, for an operator to redrive;
// a done record past its retention is swept as before.
func TestQueuedDeliveryOutlivesItsRetention(t *testing.T) {
	onBothWithJobs(t, func(t *testing.T, l *Ledger, _ *insertedJobs) {
		ctx := context.Background()
		now := time.Now()
		ref := func(k string) idempotency.Ref { return idempotency.Ref{Route: "r", Key: k} }
		for _, k := range []string{"evt_waiting", "evt_dies"} {
			rec := &idempotency.Record{Ref: ref(k), State: idempotency.StateQueued, ExpiresAt: now.Add(time.Minute),
				Request: &idempotency.Request{Method: "POST", Path: "/hooks", Body: []byte(k)}}
			if _, err := l.Enqueue(ctx, rec, "", now); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Commit(ctx, &idempotency.Record{Ref: ref("evt_done"), State: idempotency.StateDone,
			Response: idempotency.Response{Status: 200}, ExpiresAt: now.Add(time.Minute)}, "o", now); err != nil {
			t.Fatal(err)
		}
		later := now.Add(time.Hour)
		s := &Settlement{Ref: ref("evt_dies"), State: idempotency.StateDead, KeepUntil: later.Add(time.Hour),
			Attempt: idempotency.Attempt{Ref: ref("evt_dies"), StartedAt: later, Status: 503}}
		if _, err := l.Settle(ctx, s, later, nil); err != nil {
			t.Fatal(err)
		}
		if n, err := l.SweepAll(ctx, later.Add(time.Minute), 10); err != nil || n != 1 {
			t.Fatalf("SweepAll an hour past retention: %d rows, %v; want only the done record", n, err)
		}
		for k, want := range map[string]idempotency.State{"evt_waiting": idempotency.StateQueued, "evt_dies": idempotency.StateDead} {
			if r, err := l.Lookup(ctx, ref(k)); err != nil || r.State != want {
				t.Errorf("%s: %+v, %v; want it kept, %s", k, r, err, want)
			}
		}
	})
}
