package sqlledger

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// A commit's attempt is the forward that produced the recorded answer
// (SPEC §11). Another writer numbering the same record at that moment (a
// stale owner's AddAttempt after a takeover) may take the number the
// commit computed; the commit then numbers its attempt again instead of
// leaving the record without it. The other writer here holds attempt 1 of
// every record in an open transaction until the commits wait for it, then
// commits it. Commits a transaction each, group-committed in one
// statement, and that through PgBouncer.
func TestCommitKeepsItsAttemptWhenAnotherTakesItsNumber(t *testing.T) {
	const records = 40
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (l *Ledger, pg string)
		// waiters is how many commits wait for the other writer at once.
		waiters int
	}{
		{"alone", func(t *testing.T) (*Ledger, string) {
			pg := testenv.Postgres(t)
			return openMigrated(t, Options{Driver: DriverPostgres, DSN: pg, MaxOpenConns: records + 1, CommitBatch: 1}), pg
		}, records},
		{"group-committed", func(t *testing.T) (*Ledger, string) {
			pg := testenv.Postgres(t)
			return openMigrated(t, Options{Driver: DriverPostgres, DSN: pg, MaxOpenConns: 4}), pg
		}, 1},
		{"group-committed through PgBouncer", func(t *testing.T) (*Ledger, string) {
			pg := testenv.Postgres(t)
			b := testenv.StartPgBouncer(t, pg, 4)
			return openMigrated(t, Options{Driver: DriverPostgres, DSN: b.DSN + "&default_query_exec_mode=cache_describe", MaxOpenConns: 4}), pg
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, pg := tc.open(t)
			ctx := context.Background()
			now := time.Now()
			ref := func(i int) idempotency.Ref { return idempotency.Ref{Route: "r", Key: fmt.Sprintf("k%03d", i)} }
			for i := range records {
				c, err := l.Claim(ctx, idempotency.ClaimRequest{Ref: ref(i), Owner: "o", Lease: time.Hour, Retention: time.Hour}, now)
				if err != nil || c.Status != idempotency.Acquired {
					t.Fatalf("claim %d: %v %v", i, c.Status, err)
				}
			}

			db, err := l.Writer()
			if err != nil {
				t.Fatal(err)
			}
			other, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Rollback()
			var pid int
			if err := other.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				t.Fatal(err)
			}
			for i := range records {
				a := idempotency.Attempt{Ref: ref(i), StartedAt: now, Status: 200, Replica: "stale", ExpiresAt: now.Add(time.Hour)}
				if err := l.AddAttemptTx(ctx, other, a); err != nil {
					t.Fatal(err)
				}
			}

			direct, err := sql.Open("pgx", pg)
			if err != nil {
				t.Fatal(err)
			}
			defer direct.Close()
			waitFor := func(pid, waiters int) {
				t.Helper()
				testenv.Eventually(t, 10*time.Second, "commits to wait for the other writer", func() bool {
					var n int
					err := direct.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks w JOIN pg_locks h ON h.transactionid = w.transactionid `+
						`AND h.granted AND h.pid = $1 WHERE NOT w.granted`, pid).Scan(&n)
					return err == nil && n >= waiters
				})
			}

			errs := make(chan error, records+1)
			var wg sync.WaitGroup
			commit := func(i int) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rec := &idempotency.Record{Ref: ref(i), State: idempotency.StateDone, Response: idempotency.Response{Status: 200},
						ExpiresAt: now.Add(time.Hour), Request: &idempotency.Request{Method: "POST", Path: "/hooks"},
						Attempt: &idempotency.Attempt{Ref: ref(i), StartedAt: now, Status: 200, Replica: "committer"}}
					if err := l.Commit(ctx, rec, "o", now); err != nil {
						errs <- fmt.Errorf("commit %d: %w", i, err)
					}
				}()
			}
			if l.commits != nil {
				// The first commit of an idle batcher runs alone: one held
				// by a writer of its own keeps the batcher busy until the
				// others are queued, to be written in one statement.
				blocker, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer blocker.Rollback()
				var bpid int
				if err := blocker.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&bpid); err != nil {
					t.Fatal(err)
				}
				if err := l.AddAttemptTx(ctx, blocker, idempotency.Attempt{Ref: ref(records), StartedAt: now, Replica: "stale"}); err != nil {
					t.Fatal(err)
				}
				c, err := l.Claim(ctx, idempotency.ClaimRequest{Ref: ref(records), Owner: "o", Lease: time.Hour, Retention: time.Hour}, now)
				if err != nil || c.Status != idempotency.Acquired {
					t.Fatalf("claim: %v %v", c.Status, err)
				}
				commit(records)
				waitFor(bpid, 1)
				for i := range records {
					commit(i)
				}
				testenv.Eventually(t, 10*time.Second, "the commits to be queued", func() bool { return len(l.commits.jobs) == records })
				if err := blocker.Commit(); err != nil {
					t.Fatal(err)
				}
			} else {
				for i := range records {
					commit(i)
				}
			}
			waitFor(pid, tc.waiters)
			if err := other.Commit(); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}

			missing := 0
			for i := range records {
				as, err := l.Attempts(ctx, ref(i))
				if err != nil {
					t.Fatal(err)
				}
				var replicas []string
				for _, a := range as {
					replicas = append(replicas, a.Replica)
				}
				if fmt.Sprint(replicas) != "[stale committer]" {
					if missing++; missing <= 5 {
						t.Errorf("%s: attempts by %v, want the other writer's and then the commit's", ref(i).Key, replicas)
					}
				}
			}
			if missing > 5 {
				t.Errorf("… %d records of %d in all", missing, records)
			}
		})
	}
}
