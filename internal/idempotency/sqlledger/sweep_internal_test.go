package sqlledger

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"
	"time"
)

const sweepIndex = "idx_hookstamp_records_sweep"

// queuedBacklogSQL writes n queued rows, created at and expired at the
// given times, in one statement: the deliveries of an async route whose
// outage outlasted its retention, which the sweeper must leave alone.
// Arguments: created, expires, n.
var queuedBacklogSQL = map[string]string{
	DriverPostgres: `INSERT INTO hookstamp_records ` +
		`(route, "key", state, status, headers, body_omitted, trace_id, span_id, source, created_at, expires_at) ` +
		`SELECT 'stripe', 'queued_' || i, 'queued', 0, '{}', false, '', '', '', ?, ? FROM generate_series(1, ?) AS i`,
	DriverSQLite: `INSERT INTO hookstamp_records ` +
		`(route, "key", state, status, headers, body_omitted, trace_id, span_id, source, created_at, expires_at) ` +
		`SELECT 'stripe', 'queued_' || i, 'queued', 0, '{}', false, '', '', '', ?, ? ` +
		`FROM (WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?) SELECT i FROM s)`,
}

// addQueuedBacklog writes n queued rows that expired an hour before now;
// on PostgreSQL the planner's statistics are then brought up to date, as
// autovacuum would.
func addQueuedBacklog(tb testing.TB, l *Ledger, n int, now time.Time) {
	tb.Helper()
	if n == 0 {
		return
	}
	if err := l.w.Exec(queuedBacklogSQL[l.d.name], dbTime(now.Add(-2*time.Hour)), dbTime(now.Add(-time.Hour)), n).Error; err != nil {
		tb.Fatalf("write %d queued rows: %v", n, err)
	}
	if l.d.name == DriverPostgres {
		if err := l.w.Exec("ANALYZE " + TableName).Error; err != nil {
			tb.Fatal(err)
		}
	}
}

// openers open a migrated ledger of the test's own on each backend.
var openers = map[string]func(tb testing.TB) *Ledger{
	DriverPostgres: func(tb testing.TB) *Ledger { return openPGWith(tb, Options{}) },
	DriverSQLite: func(tb testing.TB) *Ledger {
		return openMigrated(tb, Options{Driver: DriverSQLite, DSN: tb.TempDir() + "/l.db"})
	},
}

// BenchmarkSweep is a sweep batch that finds nothing to delete, on a
// ledger without expired rows and on one holding 200 000 expired queued
// rows.
func BenchmarkSweep(b *testing.B) {
	for _, driver := range []string{DriverSQLite, DriverPostgres} {
		for _, backlog := range []int{0, 200_000} {
			b.Run(driver+"/queued-"+strconv.Itoa(backlog), func(b *testing.B) {
				l := openers[driver](b)
				now := time.Now()
				addQueuedBacklog(b, l, backlog, now)
				ctx := context.Background()
				for b.Loop() {
					if n, err := l.Sweep(ctx, now, 0); err != nil || n != 0 {
						b.Fatalf("sweep: %d deleted, %v", n, err)
					}
				}
			})
		}
	}
}

// A sweep batch on a ledger holding many expired queued rows walks an
// index that holds none of them, whichever plan PostgreSQL settles on for
// the prepared statement.
func TestSweepLeavesQueuedRowsOutOfItsWalk(t *testing.T) {
	for name, open := range openers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := open(t)
			now := time.Now()
			addQueuedBacklog(t, l, 50_000, now)
			for mode, plan := range sweepPlans(t, l, now) {
				if !strings.Contains(plan, sweepIndex) {
					t.Errorf("%s plan does not use %s:\n%s", mode, sweepIndex, plan)
				}
			}
			if n, err := l.Sweep(context.Background(), now, 0); err != nil || n != 0 {
				t.Fatalf("sweep: %d deleted, %v; want the queued rows kept", n, err)
			}
		})
	}
}

// sweepPlans explains the sweep statement at now: on PostgreSQL the plan
// made for the values and the generic one, on SQLite its query plan.
func sweepPlans(t *testing.T, l *Ledger, now time.Time) map[string]string {
	t.Helper()
	ctx := context.Background()
	if l.d.name == DriverSQLite {
		return map[string]string{"query": explain(t, l.w.Raw("EXPLAIN QUERY PLAN "+l.d.sweepSQL, dbTime(now), DefaultSweepBatch, dbTime(now)).Rows, 3)}
	}
	conn := ownConn(t, l)
	if _, err := conn.ExecContext(ctx, "PREPARE sweep AS "+l.d.rebind(l.d.sweepSQL)); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range []string{"DEALLOCATE sweep", "RESET plan_cache_mode"} {
			if _, err := conn.ExecContext(ctx, s); err != nil {
				t.Error(err)
			}
		}
	}()
	at := "'" + dbTime(now).Format(time.RFC3339Nano) + "'"
	execute := "EXPLAIN EXECUTE sweep(" + at + ", " + strconv.Itoa(DefaultSweepBatch) + ", " + at + ")"
	plans := map[string]string{}
	for _, mode := range []string{"custom", "generic"} {
		if _, err := conn.ExecContext(ctx, "SET plan_cache_mode = force_"+mode+"_plan"); err != nil {
			t.Fatal(err)
		}
		plans[mode] = explain(t, func() (*sql.Rows, error) {
			return conn.QueryContext(ctx, execute)
		}, 0)
	}
	return plans
}

// explain reads the plan's lines, from column col of query's rows.
func explain(t *testing.T, query func() (*sql.Rows, error), col int) string {
	t.Helper()
	rows, err := query()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for rows.Next() {
		vals := make([]any, len(cols))
		var line string
		for i := range vals {
			vals[i] = new(any)
		}
		vals[col] = &line
		if err := rows.Scan(vals...); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}
