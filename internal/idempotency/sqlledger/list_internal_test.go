package sqlledger

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// listT0 is the newest created_at of a prefilled ledger; row i is i
// seconds older.
var listT0 = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

// prefillSQL writes n rows in one statement: three routes, about one in a
// thousand dead and one in a thousand held, 200-byte bodies; then the
// planner's statistics are brought up to date, as autovacuum would.
const prefillSQL = `INSERT INTO hookstamp_records ` +
	`(route, "key", state, status, headers, body, body_omitted, trace_id, span_id, source, created_at, completed_at, expires_at) ` +
	`SELECT (ARRAY['stripe', 'github', 'shopify'])[i % 3 + 1], 'evt_' || lpad(i::text, 9, '0'), ` +
	`CASE WHEN i % 1000 = 7 THEN 'dead' WHEN i % 1000 = 8 THEN 'held' ELSE 'done' END, ` +
	`200, '{}', convert_to(repeat('x', 200), 'UTF8'), false, '', '', '', ` +
	`$1::timestamptz - make_interval(secs => i), $1::timestamptz - make_interval(secs => i), $1::timestamptz + interval '30 days' ` +
	`FROM generate_series(1, $2::int) AS i`

func prefillPG(tb testing.TB, l *Ledger, n int) {
	tb.Helper()
	db, err := l.Writer()
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, prefillSQL, listT0, n); err != nil {
		tb.Fatalf("prefill %d rows: %v", n, err)
	}
	if _, err := db.ExecContext(ctx, "ANALYZE "+TableName); err != nil {
		tb.Fatal(err)
	}
}

// listShapes are the queries the event log runs, one per filter.
func listShapes(rows int) map[string]idempotency.ListQuery {
	mid := listT0.Add(-time.Duration(rows/2) * time.Second)
	return map[string]idempotency.ListQuery{
		"first_page": {Route: "stripe", Limit: 50},
		"deep_page":  {Route: "stripe", Limit: 50, Cursor: encodeCursor(mid, fmt.Sprintf("evt_%09d", rows/2))},
		"state_dead": {Route: "stripe", Limit: 50, State: idempotency.StateDead},
		"state_done": {Route: "stripe", Limit: 50, State: idempotency.StateDone},
		"key_prefix": {Route: "stripe", Limit: 50, KeyPrefix: "evt_0000"},
		"window":     {Route: "stripe", Limit: 50, Since: mid.Add(-time.Hour), Until: mid},
	}
}

// Every list query walks an index in its order and stops at the page's
// end: no sequential scan, no sort of the route's rows.
func TestListPlansUseTheLogIndexes(t *testing.T) {
	const rows = 30000
	l := openPGWith(t, Options{})
	prefillPG(t, l, rows)
	for name, q := range listShapes(rows) {
		t.Run(name, func(t *testing.T) {
			query, args, err := listSQL(l.d, q, 0)
			if err != nil {
				t.Fatal(err)
			}
			dbRows, err := l.r.Raw("EXPLAIN "+query, args...).Rows()
			if err != nil {
				t.Fatal(err)
			}
			defer dbRows.Close()
			var plan []string
			for dbRows.Next() {
				var line string
				if err := dbRows.Scan(&line); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, line)
			}
			text := strings.Join(plan, "\n")
			if !strings.Contains(text, "idx_hookstamp_records_log") && !strings.Contains(text, "idx_hookstamp_records_unsettled") {
				t.Errorf("plan uses neither log index:\n%s", text)
			}
			if strings.Contains(text, "Seq Scan") || strings.Contains(text, "Sort") {
				t.Errorf("plan scans or sorts the table:\n%s", text)
			}
		})
	}
}

// BenchmarkListPostgres pages the event log of a prefilled ledger:
// HOOKSTAMP_BENCH_LIST_ROWS rows (200 000 by default; 5000000 for the
// production-sized run, which takes minutes to prefill).
func BenchmarkListPostgres(b *testing.B) {
	rows := 200_000
	if s := os.Getenv("HOOKSTAMP_BENCH_LIST_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1000 {
			b.Fatalf("HOOKSTAMP_BENCH_LIST_ROWS=%q: want a number of rows, at least 1000", s)
		}
		rows = n
	}
	l := openPGWith(b, Options{})
	prefillPG(b, l, rows)
	for name, q := range listShapes(rows) {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				page, err := l.List(ctx, q)
				if err != nil {
					b.Fatal(err)
				}
				if len(page.Records) == 0 {
					b.Fatal("empty page")
				}
			}
		})
	}
}

// A whole batch of commits carrying attempts: each row written gets its
// attempt (numbered after those before, or as given), a row that loses
// gets none. On PostgreSQL the batch is one statement, on SQLite one
// transaction.
func TestCommitBatchWritesTheAttemptsOfTheRowsWritten(t *testing.T) {
	opens := map[string]func(t *testing.T) *Ledger{
		DriverPostgres: func(t *testing.T) *Ledger { return openPGWith(t, Options{CommitBatch: 1, LookupBatch: 1}) },
		DriverSQLite: func(t *testing.T) *Ledger {
			return openMigrated(t, Options{Driver: DriverSQLite, DSN: t.TempDir() + "/l.db", CommitBatch: 1})
		},
	}
	for name, open := range opens {
		t.Run(name, func(t *testing.T) {
			l := open(t)
			ctx := context.Background()
			now := time.Now()
			ref := func(k string) idempotency.Ref { return idempotency.Ref{Route: "r", Key: k} }
			if err := l.Commit(ctx, &idempotency.Record{Ref: ref("done"), State: idempotency.StateDone,
				Response: idempotency.Response{Status: 201}, ExpiresAt: now.Add(time.Hour)}, "o-first", now); err != nil {
				t.Fatal(err)
			}
			if err := l.AddAttempt(ctx, idempotency.Attempt{Ref: ref("retried"), StartedAt: now, Status: 502}); err != nil {
				t.Fatal(err)
			}
			withAttempt := func(j *commitJob, number int) *commitJob {
				j.row.att = attemptArgsOf(&idempotency.Attempt{Attempt: number, StartedAt: now, Duration: time.Second, Status: 200, Replica: j.row.owner}, 0)
				return j
			}
			batch := []*commitJob{
				withAttempt(commitJobFor(ref("fresh"), "a", now), 0),
				withAttempt(commitJobFor(ref("twice"), "b1", now), 0),
				withAttempt(commitJobFor(ref("twice"), "b2", now), 0),
				withAttempt(commitJobFor(ref("done"), "c", now), 0),
				withAttempt(commitJobFor(ref("retried"), "d", now), 0),
				withAttempt(commitJobFor(ref("numbered"), "e", now), 7),
				commitJobFor(ref("plain"), "f", now),
			}
			l.runCommits(batch)
			for _, j := range batch {
				<-j.done
			}
			want := map[string][]string{
				"fresh": {"1:a"}, "twice": {"1:b1"}, "done": nil, "retried": {"1:", "2:d"}, "numbered": {"7:e"}, "plain": nil,
			}
			for k, w := range want {
				atts, err := l.Attempts(ctx, ref(k))
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, a := range atts {
					got = append(got, fmt.Sprintf("%d:%s", a.Attempt, a.Replica))
				}
				if strings.Join(got, ",") != strings.Join(w, ",") {
					t.Errorf("%s: attempts %v, want %v", k, got, w)
				}
			}
		})
	}
}
