package queue

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// River's leader rebuilds river_job's indexes (here every 200ms instead
// of daily) when its role owns the table, and a replica whose role only
// has the documented grants never tries: it would log an error per index
// each time.
func TestReindexRunsOnlyWhereTheRoleMay(t *testing.T) {
	ctx := context.Background()
	owner := testenv.PostgresRole(t, "hs_owner_")
	replica := testenv.PostgresRole(t, "hs_replica_")
	dsn := testenv.PostgresDatabase(t, owner)
	ownerLedger := openLedger(t, testenv.AsRole(t, dsn, owner))
	if err := ownerLedger.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, ownerLedger); err != nil {
		t.Fatal(err)
	}
	ownerDB, err := ownerLedger.DB()
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		"GRANT USAGE ON SCHEMA public TO " + replica,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO " + replica,
		"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO " + replica,
	} {
		if _, err := ownerDB.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	pkey := func() (oid int64) {
		t.Helper()
		if err := ownerDB.QueryRow("SELECT 'river_job_pkey'::regclass::oid::bigint").Scan(&oid); err != nil {
			t.Fatal(err)
		}
		return oid
	}

	run := func(role string) (logs *testenv.Buffer, stop func()) {
		l := openLedger(t, testenv.AsRole(t, dsn, role))
		logs = &testenv.Buffer{}
		q, err := New(Options{Driver: DriverPostgres, Ledger: l, Replica: role,
			Routes: []Route{{Name: "hooks", Policy: &idempotency.Policy{}, Timeout: time.Second, MaxAttempts: 1, MaxAge: time.Hour,
				Backoff: Backoff{Initial: time.Second, Max: time.Second}, Concurrency: 1}},
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
		if err != nil {
			t.Fatal(err)
		}
		q.cfg.ReindexerSchedule = river.PeriodicInterval(200 * time.Millisecond)
		if err := q.Start(ctx); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 15*time.Second, role+" elected River's leader", func() bool {
			var leader string
			err := ownerDB.QueryRow("SELECT leader_id FROM river_leader").Scan(&leader)
			return err == nil && leader == role
		})
		return logs, func() {
			if err := q.Stop(ctx); err != nil {
				t.Error(err)
			}
		}
	}

	before := pkey()
	logs, stop := run(owner)
	testenv.Eventually(t, 15*time.Second, "the owner's replica to rebuild river_job_pkey", func() bool { return pkey() != before })
	stop()
	if strings.Contains(logs.String(), "reindex of river_job is off") {
		t.Errorf("the owner's replica turned the reindex off:\n%s", logs)
	}

	testenv.Eventually(t, 15*time.Second, "the owner's leadership to end", func() bool {
		var n int
		return ownerDB.QueryRow("SELECT COUNT(*) FROM river_leader").Scan(&n) == nil && n == 0
	})
	logs, stop = run(replica)
	// Five schedules after the maintenance's start, which River staggers
	// by up to a second.
	time.Sleep(2 * time.Second)
	stop()
	if s := logs.String(); strings.Contains(s, "level=ERROR") || !strings.Contains(s, "reindex of river_job is off") {
		t.Errorf("the replica under the grants: want the reindex off and nothing failing, got:\n%s", s)
	}
}

func openLedger(tb testing.TB, dsn string) *sqlledger.Ledger {
	tb.Helper()
	l, err := sqlledger.Open(context.Background(), sqlledger.Options{Driver: DriverPostgres, DSN: dsn, MaxOpenConns: 4})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = l.Close() })
	return l
}
