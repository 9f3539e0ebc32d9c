package sqlledger

import (
	"context"
	"strconv"
	"testing"
	"time"
)

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

// BenchmarkSweep is a sweep batch that finds nothing to delete, on a
// ledger without expired rows and on one holding 200 000 expired queued
// rows.
func BenchmarkSweep(b *testing.B) {
	opens := map[string]func(b *testing.B) *Ledger{
		DriverPostgres: func(b *testing.B) *Ledger { return openPGWith(b, Options{}) },
		DriverSQLite: func(b *testing.B) *Ledger {
			return openMigrated(b, Options{Driver: DriverSQLite, DSN: b.TempDir() + "/l.db"})
		},
	}
	for _, driver := range []string{DriverSQLite, DriverPostgres} {
		for _, backlog := range []int{0, 200_000} {
			b.Run(driver+"/queued-"+strconv.Itoa(backlog), func(b *testing.B) {
				l := opens[driver](b)
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
